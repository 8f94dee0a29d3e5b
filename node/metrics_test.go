package node_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

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
		`skuldd_raft_leader 1`,
		`skuldd_clock_drifting 0`,
	} {
		if !got[want] {
			t.Errorf("missing sample %q", want)
		}
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
