package node_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/skuldd/skuldd/wire"
)

// dashboardFile is the example Grafana dashboard shipped in the
// repository.
const dashboardFile = "../docs/grafana/skuldd.json"

// TestDashboardMetrics: every metric the example Grafana dashboard
// queries is one a node exposes, and every label its queries group or
// select by is one that metric has. A node serves a queue's families
// once the queue has been used, so the test uses one first: an enqueue, a
// claim that is a task's first, a completion, a fail, a cancel, a
// long-poll claim that waits, and a task left ready.
func TestDashboardMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}

	x := newH(t)
	ids := x.enqueue(wire.EnqueueTask{Queue: "dash"}, wire.EnqueueTask{Queue: "dash", MaxAttempts: 1}, wire.EnqueueTask{Queue: "dash"})
	for i, end := range []string{"complete", "fail"} {
		r, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "dash"})
		if err != nil || len(r.Tasks) != 1 {
			t.Fatalf("claim %d: %+v, %v", i, r, err)
		}
		tv := r.Tasks[0]
		if end == "complete" {
			_, err = x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: tv.ID, Claim: *tv.Claim})
		} else {
			_, err = x.cl().Fail(x.ctx, &wire.FailRequest{ID: tv.ID, Claim: *tv.Claim, Reason: "boom"})
		}
		if err != nil {
			t.Fatalf("%s: %v", end, err)
		}
	}
	if _, err := x.cl().Cancel(x.ctx, &wire.CancelRequest{ID: ids[2]}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "dash", WaitMs: 50}); err != nil {
		t.Fatal(err)
	}
	ready := x.enqueue(wire.EnqueueTask{Queue: "dash"}) // ready: the oldest ready age has a queue
	fams, body := scrape(t, x.c, 0)
	// The queues' listing says when the oldest ready task was enqueued.
	qs, err := x.cl().Queues(x.ctx, &wire.QueuesRequest{})
	if err != nil || len(qs.Queues) != 1 || qs.Queues[0].OldestReadyAt != ready[0].Millis() {
		t.Errorf("queues: %+v, %v; want dash's oldest ready at %d", qs, err, ready[0].Millis())
	}

	// The queue's counters, on one node: each move counted once.
	for name, want := range map[string]float64{
		"skuldd_queue_enqueued_total": 4, "skuldd_queue_claimed_total": 2, "skuldd_queue_completed_total": 1,
		"skuldd_queue_failed_total": 1, "skuldd_queue_dead_total": 1, "skuldd_queue_cancelled_total": 1,
		"skuldd_queue_expired_total": 0,
	} {
		if got := value(find(fams, name, map[string]string{"queue": "dash"})); got != want {
			t.Errorf("%s{queue=dash} = %v; want %v", name, got, want)
		}
	}

	metricName := regexp.MustCompile(`\b((?:skuldd|go|process)_[a-z0-9_]+)`)
	byLabels := regexp.MustCompile(`\bby \(([^)]*)\)`)
	selLabels := regexp.MustCompile(`\{([^}]*)\}`)
	// Labels Prometheus adds or a histogram has: not the node's to serve.
	external := []string{"le", "instance", "job"}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			var fam []*dto.MetricFamily
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				f := family(fams, m)
				if f == nil {
					t.Errorf("panel %q: %s is not a metric a node serves", p.Title, m)
					continue
				}
				fam = append(fam, f)
			}
			var labels []string
			for _, m := range byLabels.FindAllStringSubmatch(tg.Expr, -1) {
				for l := range strings.SplitSeq(m[1], ",") {
					labels = append(labels, strings.TrimSpace(l))
				}
			}
			for _, m := range selLabels.FindAllStringSubmatch(tg.Expr, -1) {
				for sel := range strings.SplitSeq(m[1], ",") {
					if name, _, ok := strings.Cut(sel, "="); ok {
						labels = append(labels, strings.TrimRight(strings.TrimSpace(name), "!~"))
					}
				}
			}
			for _, l := range labels {
				if l == "" || slices.Contains(external, l) {
					continue
				}
				if !slices.ContainsFunc(fam, func(f *dto.MetricFamily) bool { return hasLabel(f, l) }) {
					t.Errorf("panel %q: no metric of %q has the label %q", p.Title, tg.Expr, l)
				}
			}
		}
	}
	if exprs < 10 {
		t.Errorf("the dashboard has %d queries; want the panels it documents", exprs)
	}
	if t.Failed() {
		t.Logf("the node's exposition:\n%s", body)
	}
}

// family returns the family a query's metric name belongs to: its own,
// or the histogram's a _bucket, _sum or _count series is part of.
func family(fams map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if f := fams[name]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := fams[base]; f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) {
				return f
			}
		}
	}
	return nil
}

func hasLabel(f *dto.MetricFamily, label string) bool {
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				return true
			}
		}
	}
	return false
}
