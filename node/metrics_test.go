package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// textFormat is the content type a scrape that asks for nothing gets:
// Prometheus' text format, as before the registry served it.
const textFormat = "text/plain; version=0.0.4"

// get reads node i's /metrics as it asks for nothing in particular.
func get(t testing.TB, c *nodetest.Cluster, i int) []byte {
	t.Helper()
	resp, err := http.Get(c.HTTP(i) + "/metrics")
	if err != nil {
		t.Fatalf("node %d metrics: %v", i, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, textFormat) {
		t.Fatalf("GET /metrics: %d %q; want 200 %q", resp.StatusCode, ct, textFormat)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("node %d metrics: %v", i, err)
	}
	return body
}

// scrape reads node i's /metrics and parses it by family name; it also
// returns the text, for failure logs.
func scrape(t testing.TB, c *nodetest.Cluster, i int) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	body := get(t, c, i)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("node %d metrics: %v\n%s", i, err, body)
	}
	return fams, body
}

// find returns the metric of family name whose labels include labels.
func find(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		matched := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				matched++
			}
		}
		if matched == len(labels) {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value; NaN for a missing metric.
func value(m *dto.Metric) float64 {
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// TestMetrics: GET /metrics serves Prometheus' text format with every
// family of the hand-written exposition it replaced, each of its type;
// an op's request count and latency histogram move with its requests;
// the queue depths by state, the partition and metadata-group gauges read
// the node's state; and the Go runtime's, the process's and
// skuldd_build_info are there.
func TestMetrics(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	ctx := context.Background()
	before, _ := scrape(t, c, 0)
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
	after, body := scrape(t, c, 0)
	defer func() {
		if t.Failed() {
			t.Logf("metrics:\n%s", body)
		}
	}()

	// The families users' dashboards read, each of its type. (The clock's
	// peer offsets need a peer: the cluster test has them.)
	gauge, counter, histogram := dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM
	for name, typ := range map[string]dto.MetricType{
		"skuldd_requests_total": counter, "skuldd_request_duration_seconds": histogram,
		"skuldd_queue_tasks": gauge, "skuldd_partitions_led": gauge, "skuldd_partitions_fenced": gauge,
		"skuldd_partition_leader_epoch": gauge,
		"skuldd_raft_leader":            gauge, "skuldd_raft_voters": gauge, "skuldd_raft_learners": gauge,
		"skuldd_raft_applied_index": gauge, "skuldd_raft_snapshots_installed_total": counter,
		"skuldd_aae_rounds_total": counter, "skuldd_aae_in_sync_total": counter,
		"skuldd_aae_records_pulled_total": counter, "skuldd_aae_records_pushed_total": counter,
		"skuldd_aae_bytes_total": counter, "skuldd_aae_tree_bytes": gauge,
		"skuldd_replication_requests_total": counter, "skuldd_replication_items_total": counter,
		"skuldd_replication_records_total": counter, "skuldd_replication_failed_total": counter,
		"skuldd_replica_requests_total": counter, "skuldd_replication_seconds_total": counter,
		"skuldd_replica_merge_seconds_total": counter, "skuldd_replica_sync_wait_seconds_total": counter,
		"skuldd_wal_syncs_total": counter, "skuldd_wal_syncs_held_total": counter,
		"skuldd_wal_sync_hold_active": gauge, "skuldd_sched_wait_mean_seconds": gauge,
		"skuldd_claim_cache_bytes": gauge, "skuldd_store_lookups_total": counter,
		"skuldd_gc_passes_total": counter, "skuldd_gc_collected_total": counter,
		"skuldd_gc_held_total": counter, "skuldd_gc_tombstones_expired_total": counter,
		"skuldd_clock_ahead_seconds": gauge, "skuldd_clock_drifting": gauge,
		"skuldd_build_info": gauge, "go_goroutines": gauge, "go_info": gauge,
		"go_gc_duration_seconds": dto.MetricType_SUMMARY,
	} {
		if f := after[name]; f == nil {
			t.Errorf("missing family %s", name)
		} else if f.GetType() != typ {
			t.Errorf("family %s is a %v; want %v", name, f.GetType(), typ)
		}
	}
	// The process collector reads /proc.
	if runtime.GOOS == "linux" && value(find(after, "process_start_time_seconds", nil)) <= 0 {
		t.Errorf("process_start_time_seconds = %v; want a time", value(find(after, "process_start_time_seconds", nil)))
	}

	// Requests: counted by op and code, the count and latency histogram
	// moved by exactly the requests made.
	for _, r := range []struct {
		op, code string
		n        float64
	}{{"enqueue", "ok", 3}, {"claim", "ok", 1}, {"get", "not_found", 1}} {
		l := map[string]string{"op": r.op, "code": r.code}
		was := value(find(before, "skuldd_requests_total", l))
		if math.IsNaN(was) {
			was = 0
		}
		if got := value(find(after, "skuldd_requests_total", l)); got-was != r.n {
			t.Errorf("skuldd_requests_total%v went from %v to %v; want +%v", l, was, got, r.n)
		}
	}
	checkLatency(t, before, after, "enqueue", 3)
	checkLatency(t, before, after, "get", 1)

	// State read at scrape time.
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"skuldd_queue_tasks", map[string]string{"queue": "m", "state": "ready"}, 2},
		{"skuldd_queue_tasks", map[string]string{"queue": "m", "state": "claimed"}, 1},
		{"skuldd_partitions_led", nil, 8},
		{"skuldd_partitions_fenced", nil, 0},
		{"skuldd_raft_leader", nil, 1},
		{"skuldd_raft_voters", nil, 1},
		{"skuldd_raft_snapshots_installed_total", nil, 0},
		{"skuldd_clock_drifting", nil, 0},
		{"skuldd_build_info", nil, 1},
	} {
		if got := value(find(after, w.name, w.labels)); got != w.want {
			t.Errorf("%s%v = %v; want %v", w.name, w.labels, got, w.want)
		}
	}
	if n := len(after["skuldd_partition_leader_epoch"].GetMetric()); n != 8 {
		t.Errorf("skuldd_partition_leader_epoch has %d partitions; want 8", n)
	}
	// Two of the three tasks are unclaimed, so their specs are cached.
	if v := value(find(after, "skuldd_claim_cache_bytes", nil)); v <= 0 {
		t.Errorf("skuldd_claim_cache_bytes = %v with two fresh tasks; want > 0", v)
	}

	// The build: a test binary has a module version ("(devel)") but no
	// VCS revision, which reads "unknown".
	labels := map[string]string{}
	for _, lp := range find(after, "skuldd_build_info", nil).GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["revision"] == "" {
		t.Errorf("skuldd_build_info labels %v; want goversion %s and a version and revision", labels, runtime.Version())
	}
}

// checkLatency checks that op's latency histogram counted n more requests
// between the two scrapes, with a sum that grew and cumulative buckets
// that end in +Inf at the count.
func checkLatency(t *testing.T, before, after map[string]*dto.MetricFamily, op string, n uint64) {
	t.Helper()
	l := map[string]string{"op": op}
	h := find(after, "skuldd_request_duration_seconds", l).GetHistogram()
	was := find(before, "skuldd_request_duration_seconds", l).GetHistogram() // nil before the op's first request
	if h.GetSampleCount()-was.GetSampleCount() != n || h.GetSampleSum() <= was.GetSampleSum() {
		t.Errorf("%s latency: count %d -> %d, sum %v -> %v; want +%d and a larger sum", op, was.GetSampleCount(), h.GetSampleCount(), was.GetSampleSum(), h.GetSampleSum(), n)
	}
	b := h.GetBucket()
	if len(b) == 0 || !math.IsInf(b[len(b)-1].GetUpperBound(), 1) || b[len(b)-1].GetCumulativeCount() != h.GetSampleCount() {
		t.Errorf("%s latency buckets %v do not end in +Inf at the count %d", op, b, h.GetSampleCount())
		return
	}
	for i := 1; i < len(b); i++ {
		if b[i].GetUpperBound() <= b[i-1].GetUpperBound() || b[i].GetCumulativeCount() < b[i-1].GetCumulativeCount() {
			t.Errorf("%s latency buckets %v are not cumulative", op, b)
			return
		}
	}
}

// metricValues reads node i's /metrics and returns its unlabelled samples
// by name.
func metricValues(t *testing.T, c *nodetest.Cluster, i int) map[string]float64 {
	t.Helper()
	fams, _ := scrape(t, c, i)
	out := map[string]float64{}
	for name, f := range fams {
		if ms := f.GetMetric(); len(ms) == 1 && len(ms[0].GetLabel()) == 0 {
			out[name] = value(ms[0])
		}
	}
	return out
}

// BenchmarkMetricsScrape times a whole GET /metrics of a node with a few
// queues and ops (the hand-written exposition took about 0.3 ms a scrape
// on the 2-core test machine).
func BenchmarkMetricsScrape(b *testing.B) {
	c := nodetest.NewCluster(b, 1)
	ctx := context.Background()
	for _, q := range []string{"a", "b", "c", "d"} {
		if _, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: q}}}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Client(0).Claim(ctx, &wire.ClaimRequest{Queue: q}); err != nil {
			b.Fatal(err)
		}
	}
	var size int
	for b.Loop() {
		size = len(get(b, c, 0))
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}

// TestClusterReplicationMetrics: every acknowledged write of a 3-node
// cluster reaches both followers as one item each, and under concurrent
// writers a replication request carries several of them (one request in
// flight per follower: the next one takes what queued meanwhile).
func TestClusterReplicationMetrics(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.Placed(t, 0, c.IDs(0, 1, 2), 3)
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
