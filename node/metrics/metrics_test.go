package metrics

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// fakePart is a partition with fixed queue counts.
type fakePart struct {
	part   uint16
	epoch  uint64
	queues map[string][task.NumStatus]int64
	// oldest is each queue's oldest ready enqueue time (Unix ms).
	oldest map[string]int64
}

func (p fakePart) OldestReady(fn func(string, int64)) {
	for q, at := range p.oldest {
		fn(q, at)
	}
}

func (p fakePart) Part() uint16  { return p.part }
func (p fakePart) Epoch() uint64 { return p.epoch }
func (p fakePart) Stats(fn func(string, [task.NumStatus]int64)) {
	for q, c := range p.queues {
		fn(q, c)
	}
}

// fakeStore is a store's counters.
type fakeStore struct{ syncs, held, lookups uint64 }

func (s fakeStore) WALSyncs() (uint64, uint64) { return s.syncs, s.held }
func (s fakeStore) Lookups() uint64            { return s.lookups }
func (s fakeStore) Scanned() uint64            { return 0 }

// fakeSource is a node whose every value is distinct, so that a family
// reading the wrong one shows.
type fakeSource struct {
	parts    []fakePart
	repl     *replication.Stats
	raft     *Raft
	clock    *wire.ClockView
	hold     bool
	meanWait time.Duration
}

func (s *fakeSource) Partitions(f func(Partition)) {
	for _, p := range s.parts {
		f(p)
	}
}
func (s *fakeSource) Fenced() int                     { return 1 }
func (s *fakeSource) Replication() *replication.Stats { return s.repl }
func (s *fakeSource) AAETreeBytes() int64             { return 4096 }
func (s *fakeSource) Store() Store                    { return fakeStore{syncs: 31, held: 32, lookups: 33} }
func (s *fakeSource) SyncHold() (bool, time.Duration) { return s.hold, s.meanWait }
func (s *fakeSource) ClaimCacheBytes() int64          { return 2048 }
func (s *fakeSource) Clock() *wire.ClockView          { return s.clock }
func (s *fakeSource) Hints() (int64, int64, time.Duration) {
	return 41, 42, 43 * time.Second
}
func (s *fakeSource) Raft() (Raft, bool) {
	if s.raft == nil {
		return Raft{}, false
	}
	return *s.raft, true
}

// counts returns queue counts with n tasks in state st.
func counts(st task.Status, n int64) [task.NumStatus]int64 {
	var c [task.NumStatus]int64
	c[st] = n
	return c
}

// newFake returns a node that leads partitions 0 and 2 of three, with
// every replication counter, the metadata group and the clock set.
func newFake() *fakeSource {
	st := new(replication.Stats)
	for i, c := range []interface{ Store(int64) }{
		&st.AAERounds, &st.AAEInSync, &st.AAEPulled, &st.AAEPushed, &st.AAEBytes,
		&st.Requests, &st.Items, &st.Records, &st.Failed, &st.Served,
		&st.GCPasses, &st.GCCollected, &st.GCHeld, &st.GCExpired,
	} {
		c.Store(int64(101 + i))
	}
	st.InFlightNanos.Store(int64(1500 * time.Millisecond))
	st.MergeNanos.Store(int64(250 * time.Millisecond))
	st.SyncNanos.Store(int64(2 * time.Second))
	return &fakeSource{
		parts: []fakePart{
			{part: 0, epoch: 7, queues: map[string][task.NumStatus]int64{"a": counts(task.Ready, 3), "b": counts(task.Claimed, 1)}},
			{part: 1, epoch: 0, queues: map[string][task.NumStatus]int64{"a": counts(task.Ready, 100)}},
			{part: 2, epoch: 9, queues: map[string][task.NumStatus]int64{"a": counts(task.Ready, 2)}},
		},
		repl:     st,
		raft:     &Raft{Leader: true, Voters: 3, Learners: 2, Applied: 77, SnapshotsInstalled: 4},
		clock:    &wire.ClockView{AheadMs: -250, Drifting: true, Peers: []wire.PeerClock{{ID: 5, OffsetMs: 1500}}},
		hold:     true,
		meanWait: 3 * time.Millisecond,
	}
}

// scrape serves one scrape of m and parses it by family name.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d\n%s", rec.Code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, body)
	}
	return fams
}

// sample returns the value of the metric of family name with exactly
// labels, and its type; NaN if there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, dto.MetricType) {
	f := fams[name]
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		matched := true
		for _, lp := range m.GetLabel() {
			matched = matched && labels[lp.GetName()] == lp.GetValue()
		}
		if !matched {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), f.GetType()
		case m.Gauge != nil:
			return m.Gauge.GetValue(), f.GetType()
		}
	}
	return math.NaN(), f.GetType()
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestSourceFamilies: each of the Source's values appears under its
// family's name, labels and type.
func TestSourceFamilies(t *testing.T) {
	fams := scrape(t, New(newFake(), discard()))
	gauge, counter := dto.MetricType_GAUGE, dto.MetricType_COUNTER
	for _, w := range []struct {
		name   string
		labels map[string]string
		typ    dto.MetricType
		want   float64
	}{
		{"skuldd_partitions_led", nil, gauge, 2},
		{"skuldd_partitions_fenced", nil, gauge, 1},
		{"skuldd_partition_leader_epoch", map[string]string{"partition": "0"}, gauge, 7},
		{"skuldd_partition_leader_epoch", map[string]string{"partition": "1"}, gauge, 0},
		{"skuldd_partition_leader_epoch", map[string]string{"partition": "2"}, gauge, 9},
		// Summed over the led partitions only (partition 1's 100 ready
		// tasks are not this node's), every state of a queue present.
		{"skuldd_queue_tasks", map[string]string{"queue": "a", "state": "ready"}, gauge, 5},
		{"skuldd_queue_tasks", map[string]string{"queue": "a", "state": "claimed"}, gauge, 0},
		{"skuldd_queue_tasks", map[string]string{"queue": "b", "state": "claimed"}, gauge, 1},
		{"skuldd_hints_pending", nil, gauge, 41},
		{"skuldd_hints_handed_total", nil, counter, 42},
		{"skuldd_hints_oldest_seconds", nil, gauge, 43},
		{"skuldd_aae_rounds_total", nil, counter, 101},
		{"skuldd_aae_in_sync_total", nil, counter, 102},
		{"skuldd_aae_records_pulled_total", nil, counter, 103},
		{"skuldd_aae_records_pushed_total", nil, counter, 104},
		{"skuldd_aae_bytes_total", nil, counter, 105},
		{"skuldd_aae_tree_bytes", nil, gauge, 4096},
		{"skuldd_replication_requests_total", nil, counter, 106},
		{"skuldd_replication_items_total", nil, counter, 107},
		{"skuldd_replication_records_total", nil, counter, 108},
		{"skuldd_replication_failed_total", nil, counter, 109},
		{"skuldd_replica_requests_total", nil, counter, 110},
		{"skuldd_replication_seconds_total", nil, counter, 1.5},
		{"skuldd_replica_merge_seconds_total", nil, counter, 0.25},
		{"skuldd_replica_sync_wait_seconds_total", nil, counter, 2},
		{"skuldd_gc_passes_total", nil, counter, 111},
		{"skuldd_gc_collected_total", nil, counter, 112},
		{"skuldd_gc_held_total", nil, counter, 113},
		{"skuldd_gc_tombstones_expired_total", nil, counter, 114},
		{"skuldd_wal_syncs_total", nil, counter, 31},
		{"skuldd_wal_syncs_held_total", nil, counter, 32},
		{"skuldd_store_lookups_total", nil, counter, 33},
		{"skuldd_wal_sync_hold_active", nil, gauge, 1},
		{"skuldd_sched_wait_mean_seconds", nil, gauge, 0.003},
		{"skuldd_claim_cache_bytes", nil, gauge, 2048},
		{"skuldd_raft_leader", nil, gauge, 1},
		{"skuldd_raft_voters", nil, gauge, 3},
		{"skuldd_raft_learners", nil, gauge, 2},
		{"skuldd_raft_applied_index", nil, gauge, 77},
		{"skuldd_raft_snapshots_installed_total", nil, counter, 4},
		{"skuldd_clock_ahead_seconds", nil, gauge, -0.25},
		{"skuldd_clock_drifting", nil, gauge, 1},
		{"skuldd_clock_peer_offset_seconds", map[string]string{"peer": "5"}, gauge, 1.5},
	} {
		got, typ := sample(fams, w.name, w.labels)
		if got != w.want || typ != w.typ {
			t.Errorf("%s%v = %v (%v); want %v (%v)", w.name, w.labels, got, typ, w.want, w.typ)
		}
	}
}

// TestSourceAbsent: before the replication plane, the metadata group and
// the clock exist, the node's families read 0 and the group's and the
// clock's are absent; the rest of the exposition is there.
func TestSourceAbsent(t *testing.T) {
	fams := scrape(t, New(&fakeSource{}, discard()))
	for _, name := range []string{"skuldd_replication_requests_total", "skuldd_gc_passes_total", "skuldd_partitions_led"} {
		if got, _ := sample(fams, name, nil); got != 0 {
			t.Errorf("%s = %v; want 0", name, got)
		}
	}
	for _, name := range []string{"skuldd_raft_leader", "skuldd_clock_drifting", "skuldd_clock_peer_offset_seconds", "skuldd_queue_tasks", "skuldd_partition_leader_epoch"} {
		if fams[name] != nil {
			t.Errorf("family %s present; want it absent", name)
		}
	}
	for _, name := range []string{"skuldd_build_info", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}
}

// fakeService answers Enqueue and, with task.ErrNotFound, Get; its other
// methods are not called.
type fakeService struct{ wire.Service }

func (fakeService) Enqueue(context.Context, *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	return &wire.EnqueueResponse{}, nil
}

func (fakeService) Get(context.Context, *wire.GetRequest) (*wire.TaskView, error) {
	return nil, task.ErrNotFound
}

// TestMeter: a metered service counts each request by op and outcome
// code and times it by op, and passes its answer through.
func TestMeter(t *testing.T) {
	m := New(&fakeSource{}, discard())
	svc := m.Meter(fakeService{})
	ctx := context.Background()
	for range 2 {
		if _, err := svc.Enqueue(ctx, &wire.EnqueueRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Get(ctx, &wire.GetRequest{}); err != task.ErrNotFound {
		t.Fatalf("get: %v; want %v", err, task.ErrNotFound)
	}
	fams := scrape(t, m)
	for _, w := range []struct {
		op, code string
		n        float64
	}{{"enqueue", "ok", 2}, {"get", "not_found", 1}} {
		if got, _ := sample(fams, "skuldd_requests_total", map[string]string{"op": w.op, "code": w.code}); got != w.n {
			t.Errorf("skuldd_requests_total{op=%s,code=%s} = %v; want %v", w.op, w.code, got, w.n)
		}
		var count uint64
		for _, mt := range fams["skuldd_request_duration_seconds"].GetMetric() {
			if mt.GetLabel()[0].GetValue() == w.op {
				count = mt.GetHistogram().GetSampleCount()
			}
		}
		if float64(count) != w.n {
			t.Errorf("skuldd_request_duration_seconds{op=%s} counted %d; want %v", w.op, count, w.n)
		}
	}
}

// claimService answers claims and completions with fixed tasks, after a
// long-poll wait it reports as its own.
type claimService struct {
	wire.Service
	tasks  []wire.TaskView
	waited time.Duration
}

func (s claimService) Claim(context.Context, *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	time.Sleep(s.waited)
	return &wire.ClaimResponse{Tasks: s.tasks, Waited: s.waited}, nil
}

func (s claimService) Complete(context.Context, *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return &wire.CompleteResponse{Acks: 1, Next: s.tasks}, nil
}

func (s claimService) Enqueue(_ context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	resp := &wire.EnqueueResponse{}
	for i := range req.Tasks {
		resp.Results = append(resp.Results, wire.EnqueueResult{Acks: 1, Duplicate: i == 1})
	}
	return resp, nil
}

// TestQueueFamilies: the per-queue counters count enqueues acknowledged
// (not a key's duplicates) and the moves the partitions report; a claim's
// latency leaves out its long-poll wait, which has a histogram of its
// own; a first claim observes the time since its enqueue, a later one
// does not; and the oldest ready task's age is the oldest over the led
// partitions.
func TestQueueFamilies(t *testing.T) {
	now := time.Now().UnixMilli()
	src := &fakeSource{parts: []fakePart{
		{part: 0, epoch: 3, oldest: map[string]int64{"mail": now - 90_000, "sms": now - 5_000}},
		{part: 1, epoch: 4, oldest: map[string]int64{"mail": now - 30_000}},
		{part: 2, epoch: 0, oldest: map[string]int64{"mail": now - 999_000}}, // not led here
	}}
	m := New(src, discard())
	zero, one := uint32(0), uint32(1)
	tasks := []wire.TaskView{
		{Queue: "mail", Claim: &zero, EnqueuedAt: now - 2_000},
		{Queue: "mail", Claim: &one, EnqueuedAt: now - 60_000}, // a retry: not a first claim
	}
	const waited = 30 * time.Millisecond
	svc := m.Meter(claimService{tasks: tasks, waited: waited})
	ctx := context.Background()
	if _, err := svc.Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "mail"}, {Queue: "mail"}, {Queue: "sms"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Claim(ctx, &wire.ClaimRequest{Queue: "mail", WaitMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Complete(ctx, &wire.CompleteRequest{}); err != nil {
		t.Fatal(err)
	}
	m.CountMove("mail", task.Claimed)
	m.CountMove("mail", task.Claimed)
	m.CountMove("mail", task.Completed)
	m.CountMove("mail", task.Ready) // not counted
	m.CountMove("mail", task.Dead)
	m.CountMove("sms", task.Cancelled)
	m.Count("mail", Failed)
	m.Count("mail", Expired)

	fams := scrape(t, m)
	for _, w := range []struct {
		name, queue string
		want        float64
	}{
		{"skuldd_queue_enqueued_total", "mail", 1},
		{"skuldd_queue_enqueued_total", "sms", 1},
		{"skuldd_queue_claimed_total", "mail", 2},
		{"skuldd_queue_completed_total", "mail", 1},
		{"skuldd_queue_dead_total", "mail", 1},
		{"skuldd_queue_failed_total", "mail", 1},
		{"skuldd_queue_expired_total", "mail", 1},
		{"skuldd_queue_cancelled_total", "sms", 1},
		{"skuldd_queue_cancelled_total", "mail", 0},
	} {
		if got, typ := sample(fams, w.name, map[string]string{"queue": w.queue}); got != w.want || typ != dto.MetricType_COUNTER {
			t.Errorf("%s{queue=%s} = %v (%v); want %v", w.name, w.queue, got, typ, w.want)
		}
	}
	if got, _ := sample(fams, "skuldd_queue_oldest_ready_seconds", map[string]string{"queue": "mail"}); got < 89 || got > 95 {
		t.Errorf("oldest ready of mail: %v s; want about 90 (the led partitions' oldest)", got)
	}
	if got, _ := sample(fams, "skuldd_queue_oldest_ready_seconds", map[string]string{"queue": "sms"}); got < 4 || got > 10 {
		t.Errorf("oldest ready of sms: %v s; want about 5", got)
	}
	// First claims: the claim's and the completion's next, each 2 s
	// after the enqueue; the later claims are not observed.
	h := fams["skuldd_queue_first_claim_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 3.9 || h.GetSampleSum() > 6 {
		t.Errorf("first claim: %d samples, sum %v; want 2, about 4 s", h.GetSampleCount(), h.GetSampleSum())
	}
	wait := fams["skuldd_claim_wait_seconds"].GetMetric()[0].GetHistogram()
	if wait.GetSampleCount() != 1 || wait.GetSampleSum() < waited.Seconds() {
		t.Errorf("claim wait: %d samples, sum %v; want 1 of %v", wait.GetSampleCount(), wait.GetSampleSum(), waited)
	}
	for _, mt := range fams["skuldd_request_duration_seconds"].GetMetric() {
		if mt.GetLabel()[0].GetValue() == "claim" && mt.GetHistogram().GetSampleSum() >= waited.Seconds() {
			t.Errorf("claim latency %v s includes the %v wait", mt.GetHistogram().GetSampleSum(), waited)
		}
	}
}
