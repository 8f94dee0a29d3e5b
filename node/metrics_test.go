package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// sampleLine is one sample of Prometheus' text format: a name, optional
// labels, a value.
var sampleLine = regexp.MustCompile(`^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eInf]+$`)

// TestMetrics: GET /metrics serves Prometheus' text format with the
// request counts and latencies, queue depths by state, anti-entropy,
// clock and metadata-group families.
func TestMetrics(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	ctx := context.Background()
	for range 3 {
		if _, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "m"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client(0).Claim(ctx, &wire.ClaimRequest{Queue: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: [20]byte{1}}); err == nil {
		t.Fatal("get of an unknown id succeeded")
	}
	resp, err := http.Get(c.HTTP(0) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q", resp.StatusCode, ct)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !sampleLine.MatchString(line) {
			t.Errorf("not a sample line: %q", line)
		}
		got[line] = true
	}
	for _, want := range []string{
		`skuldd_requests_total{op="enqueue",code="ok"} 3`,
		`skuldd_requests_total{op="claim",code="ok"} 1`,
		`skuldd_requests_total{op="get",code="not_found"} 1`,
		`skuldd_request_duration_seconds_count{op="enqueue"} 3`,
		`skuldd_request_duration_seconds_bucket{op="enqueue",le="+Inf"} 3`,
		`skuldd_queue_tasks{queue="m",state="ready"} 2`,
		`skuldd_queue_tasks{queue="m",state="claimed"} 1`,
		`skuldd_partitions_led 8`,
		`skuldd_partitions_fenced 0`,
		`skuldd_raft_leader 1`,
		`skuldd_raft_snapshots_installed_total 0`,
		`skuldd_clock_drifting 0`,
	} {
		if !got[want] {
			t.Errorf("missing sample %q", want)
		}
	}
	// Two of the three tasks are unclaimed, so their specs are cached.
	if v := metricValues(t, c, 0)["skuldd_claim_cache_bytes"]; v <= 0 {
		t.Errorf("skuldd_claim_cache_bytes = %v with two fresh tasks; want > 0", v)
	}
	for _, family := range []string{"skuldd_aae_rounds_total", "skuldd_aae_tree_bytes", "skuldd_clock_ahead_seconds", "skuldd_partition_leader_epoch"} {
		if !strings.Contains(string(body), "# TYPE "+family+" ") {
			t.Errorf("missing family %s", family)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// metricValues reads node i's /metrics and returns its unlabelled samples
// by name.
func metricValues(t *testing.T, c *nodetest.Cluster, i int) map[string]float64 {
	t.Helper()
	resp, err := http.Get(c.HTTP(i) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("sample %q: %v", sc.Text(), err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestClusterReplicationMetrics: every acknowledged write of a 3-node
// cluster reaches both followers as one item each, and under concurrent
// writers a replication request carries several of them (one request in
// flight per follower: the next one takes what queued meanwhile).
func TestClusterReplicationMetrics(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	placed(t, c, 0, ids(c, 0, 1, 2), 3)
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	before := make([]map[string]float64, 3)
	for i := range before {
		before[i] = metricValues(t, c, i)
	}
	const writers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for range each {
				r, err := c.Client(w%3).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "rm", Data: []byte("x")}}})
				if err == nil && r.Results[0].Acks < 2 {
					err = fmt.Errorf("enqueue acknowledged with %d acks", r.Results[0].Acks)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Each enqueue ships its task to the two followers; anti-entropy and
	// dependency notices may add a few items, never fewer. A write is
	// acknowledged once one follower has it (W=2), so the last items to
	// the other follower may still be on their way: wait for them.
	var requests, items, records, failed, served, inFlight, merging, syncs float64
	for deadline := time.Now().Add(clusterWait); ; {
		requests, items, records, failed, served, inFlight, merging, syncs = 0, 0, 0, 0, 0, 0, 0, 0
		for i := range 3 {
			after := metricValues(t, c, i)
			d := func(name string) float64 { return after[name] - before[i][name] }
			requests += d("skuldd_replication_requests_total")
			items += d("skuldd_replication_items_total")
			records += d("skuldd_replication_records_total")
			failed += d("skuldd_replication_failed_total")
			served += d("skuldd_replica_requests_total")
			inFlight += d("skuldd_replication_seconds_total")
			merging += d("skuldd_replica_merge_seconds_total")
			syncs += d("skuldd_wal_syncs_total")
		}
		if items >= 2*writers*each || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if items < 2*writers*each {
		t.Errorf("replication items %v, want at least %d (two per write)", items, 2*writers*each)
	}
	if records < items {
		t.Errorf("replication records %v below items %v", records, items)
	}
	if failed != 0 {
		t.Errorf("%v replication requests failed", failed)
	}
	// One request in flight per follower: writers that arrive while it is
	// out share the next one. Fewer than two items per request means the
	// links send write by write.
	if 2*requests > items {
		t.Errorf("%v replication requests carried %v items: under two per request with %d concurrent writers", requests, items, writers)
	}
	// Where the time went: the followers served requests (anti-entropy
	// sends some too, and the last may still be in flight, so the counts
	// need not match), merging took time, the leaders waited for
	// answers, and the writes were synced.
	if served <= 0 {
		t.Errorf("followers served %v replication requests of %v sent", served, requests)
	}
	if inFlight <= 0 || merging <= 0 || syncs <= 0 {
		t.Errorf("replication waited %vs, followers merged for %vs, %v log syncs: want all above 0", inFlight, merging, syncs)
	}
	t.Logf("%v items in %v requests (%.1f per request)", items, requests, items/requests)
}
