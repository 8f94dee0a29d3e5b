package schedules

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

const (
	sec  = int64(1000)
	min_ = 60 * sec
	hour = 60 * min_
)

func every(startMs, everyMs, doneMs int64, c raftgroup.CatchUp) raftgroup.Schedule {
	return raftgroup.Schedule{ScheduleSpec: raftgroup.ScheduleSpec{Name: "s", Queue: "q", EveryMs: everyMs, CatchUp: c},
		Version: 1, StartMs: startMs, DoneMs: doneMs}
}

func hourly(t0 int64, from, to int) []int64 {
	var out []int64
	for h := from; h <= to; h++ {
		out = append(out, t0+int64(h)*hour)
	}
	return out
}

func ones(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func TestPlan(t *testing.T) {
	const t0 = int64(1_765_000_000_000)
	for _, tc := range []struct {
		name string
		s    raftgroup.Schedule
		now  int64
		want Step
	}{
		{"nothing due yet", every(t0, sec, t0, raftgroup.CatchUpSkip), t0 + 999,
			Step{DoneMs: t0, NextMs: t0 + sec}},
		{"one due, on the dot", every(t0, sec, t0, raftgroup.CatchUpSkip), t0 + sec,
			Step{Enqueue: []int64{t0 + sec}, SkippedBefore: []uint64{0}, DoneMs: t0 + sec, NextMs: t0 + 2*sec}},
		{"a failover's few late seconds are not missed", every(t0, sec, t0+sec, raftgroup.CatchUpSkip), t0 + 4*sec + 500,
			Step{Enqueue: []int64{t0 + 2*sec, t0 + 3*sec, t0 + 4*sec}, SkippedBefore: []uint64{0, 0, 0}, DoneMs: t0 + 4*sec, NextMs: t0 + 5*sec}},
		{"skip drops what is a minute late", every(t0, 20*sec, t0, raftgroup.CatchUpSkip), t0 + 2*min_,
			// 20 s, 40 s are more than a minute late; 60 s to 120 s are not.
			Step{Enqueue: []int64{t0 + min_, t0 + min_ + 20*sec, t0 + min_ + 40*sec, t0 + 2*min_}, SkippedBefore: []uint64{2, 2, 2, 2},
				Skipped: 2, DoneMs: t0 + 2*min_, NextMs: t0 + 2*min_ + 20*sec}},
		{"all enqueues the missed", every(t0, 20*sec, t0, raftgroup.CatchUpAll), t0 + 2*min_,
			Step{Enqueue: []int64{t0 + 20*sec, t0 + 40*sec, t0 + min_, t0 + min_ + 20*sec, t0 + min_ + 40*sec, t0 + 2*min_},
				SkippedBefore: []uint64{0, 0, 0, 0, 0, 0}, DoneMs: t0 + 2*min_, NextMs: t0 + 2*min_ + 20*sec}},
		{"all skips past the horizon", every(t0, hour, t0, raftgroup.CatchUpAll), t0 + 26*hour,
			// 1 h is 25 h late; 2 h is 24 h late, the horizon itself.
			Step{Enqueue: hourly(t0, 2, 26), SkippedBefore: ones(25), Skipped: 1, DoneMs: t0 + 26*hour, NextMs: t0 + 27*hour}},
		{"a pass enqueues at most EnqueuePerPass", every(t0, sec, t0, raftgroup.CatchUpAll), t0 + 100*sec,
			Step{DoneMs: t0 + EnqueuePerPass*sec, NextMs: t0 + (EnqueuePerPass+1)*sec}},
		{"a pass scans at most ScanPerPass", every(t0, sec, t0, raftgroup.CatchUpSkip), t0 + 1_000_000*sec,
			Step{Skipped: ScanPerPass, DoneMs: t0 + ScanPerPass*sec, NextMs: t0 + (ScanPerPass+1)*sec}},
		{"progress off the grid (a failed enqueue) resumes on it", every(t0, sec, t0+2*sec-1, raftgroup.CatchUpSkip), t0 + 2*sec,
			Step{Enqueue: []int64{t0 + 2*sec}, SkippedBefore: []uint64{0}, DoneMs: t0 + 2*sec, NextMs: t0 + 3*sec}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := GridOf(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			got := Plan(tc.s, g, tc.now)
			if tc.want.Enqueue == nil && len(got.Enqueue) == EnqueuePerPass {
				got.Enqueue, got.SkippedBefore = nil, nil // checked by count
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Plan =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestCronGrid(t *testing.T) {
	start := time.Date(2026, 12, 7, 10, 15, 30, 0, time.UTC).UnixMilli()
	s := raftgroup.Schedule{ScheduleSpec: raftgroup.ScheduleSpec{Name: "c", Queue: "q", Cron: "*/30 * * * *"}, Version: 1, StartMs: start, DoneMs: start}
	g, err := GridOf(s)
	if err != nil {
		t.Fatal(err)
	}
	half := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC).UnixMilli()
	st := Plan(s, g, half+5*sec)
	if !reflect.DeepEqual(st.Enqueue, []int64{half}) || st.NextMs != half+30*min_ {
		t.Fatalf("Plan = %+v", st)
	}
	if !g.On(half) || g.On(half+sec) || g.On(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixMilli()) {
		t.Fatal("On: 10:30 is an occurrence, 10:30:01 is not, 10:00 is before the start")
	}
}

// fakeHost is a metadata group of one schedule and a queue that fails
// the enqueues it is told to.
type fakeHost struct {
	mu       sync.Mutex
	s        raftgroup.Schedule
	enqueued []string
	failKey  string
	changed  chan struct{}
}

func (h *fakeHost) Leads() bool { return true }
func (h *fakeHost) Schedules() (map[string]raftgroup.Schedule, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return map[string]raftgroup.Schedule{h.s.Name: h.s}, h.changed
}
func (h *fakeHost) Enqueue(_ context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := req.Tasks[0].Key
	if k == h.failKey {
		return nil, wire.ErrUnavailable
	}
	h.enqueued = append(h.enqueued, k)
	return &wire.EnqueueResponse{}, nil
}
func (h *fakeHost) Advance(_ context.Context, a raftgroup.ScheduleAdvance) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.Version != h.s.Version || a.PrevDoneMs != h.s.DoneMs || a.DoneMs <= h.s.DoneMs {
		return raftgroup.ErrStaleSchedule
	}
	h.s.DoneMs, h.s.Enqueued, h.s.Skipped = a.DoneMs, h.s.Enqueued+a.Enqueued, h.s.Skipped+a.Skipped
	return nil
}

func (h *fakeHost) Set(context.Context, raftgroup.ScheduleSpec, int64) (raftgroup.Schedule, error) {
	return raftgroup.Schedule{}, errors.New("not in this test")
}
func (h *fakeHost) Delete(context.Context, string) (bool, error) {
	return false, errors.New("not in this test")
}

// TestPassRecordsUpToAFailure: an enqueue that fails stops the pass; the
// occurrences before it are recorded, and the next pass enqueues from it.
func TestPassRecordsUpToAFailure(t *testing.T) {
	const t0 = int64(1_765_000_000_000)
	clk := clock.NewManual(time.UnixMilli(t0 + 5*sec))
	h := &fakeHost{s: every(t0, sec, t0, raftgroup.CatchUpSkip), failKey: wire.OccurrenceKey("s", 1, t0+3*sec)}
	p, err := New(Config{Self: 1, Interval: time.Second, EnqueueTimeout: time.Second, Clock: clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := h.Schedules()
	p.Pass(context.Background(), ss)
	if h.s.DoneMs != t0+3*sec-1 || h.s.Enqueued != 2 || len(h.enqueued) != 2 {
		t.Fatalf("after a failure at the third: %+v, enqueued %v", h.s, h.enqueued)
	}
	h.failKey = ""
	ss, _ = h.Schedules()
	p.Pass(context.Background(), ss)
	want := []string{wire.OccurrenceKey("s", 1, t0+sec), wire.OccurrenceKey("s", 1, t0+2*sec), wire.OccurrenceKey("s", 1, t0+3*sec),
		wire.OccurrenceKey("s", 1, t0+4*sec), wire.OccurrenceKey("s", 1, t0+5*sec)}
	if !reflect.DeepEqual(h.enqueued, want) || h.s.DoneMs != t0+5*sec || h.s.Enqueued != 5 {
		t.Fatalf("after the retry: %+v, enqueued %v", h.s, h.enqueued)
	}
	// A pass from a stale read enqueues again (the key makes it the same
	// task) but its progress is refused, so nothing is counted twice.
	stale := every(t0, sec, t0+3*sec-1, raftgroup.CatchUpSkip)
	p.Pass(context.Background(), map[string]raftgroup.Schedule{"s": stale})
	if h.s.Enqueued != 5 || !errors.Is(h.Advance(context.Background(), raftgroup.ScheduleAdvance{Name: "s", Version: 1, PrevDoneMs: t0 + 3*sec - 1, DoneMs: t0 + 5*sec}), raftgroup.ErrStaleSchedule) {
		t.Fatalf("a stale pass counted: %+v", h.s)
	}
}
