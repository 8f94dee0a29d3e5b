package heads

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// TestHeadIndexFence: a fenced partition's heads are kept but neither
// claimed from (best) nor advertised (heads); lifting the fence brings
// them back and wakes the queue's long polls.
func TestHeadIndexFence(t *testing.T) {
	head := func(prio int32, ms int64) partition.Head {
		return partition.Head{Priority: prio, ID: task.MakeID(ms, 1, 0)}
	}
	x := NewIndex()
	x.Set(1, "q", head(0, 100), true) // oldest: the best of q
	x.Set(2, "q", head(0, 200), true)
	x.Set(3, "q", head(0, 300), true)
	x.Set(1, "only1", head(5, 100), true)

	best := func(q string) (uint16, bool) {
		p, _, ok := x.Best(q)
		return p, ok
	}
	steps := []struct {
		name      string
		fence     map[uint16]bool // fence(part, on) in this step
		changed   bool
		bestQ     uint16
		only1Seen bool // partition 1's queue is offered
	}{
		{"no fence", nil, false, 1, true},
		{"fence 1", map[uint16]bool{1: true}, true, 2, false},
		{"fence 1 again", map[uint16]bool{1: true}, false, 2, false},
		{"fence 2 too", map[uint16]bool{2: true}, true, 3, false},
		{"lift 1", map[uint16]bool{1: false}, true, 1, true},
		{"lift 2", map[uint16]bool{2: false}, true, 1, true},
		{"lift what is not fenced", map[uint16]bool{3: false}, false, 1, true},
	}
	for _, st := range steps {
		for p, on := range st.fence {
			if got := x.Fence(p, on); got != st.changed {
				t.Errorf("%s: fence(%d, %v) changed = %v; want %v", st.name, p, on, got, st.changed)
			}
		}
		if p, ok := best("q"); !ok || p != st.bestQ {
			t.Errorf("%s: best(q) = %d, %v; want partition %d", st.name, p, ok, st.bestQ)
		}
		_, ok := best("only1")
		_, adv := x.Heads()["only1"]
		if ok != st.only1Seen || adv != st.only1Seen {
			t.Errorf("%s: queue only1 claimable %v, advertised %v; want %v", st.name, ok, adv, st.only1Seen)
		}
	}

	// Every partition of a queue fenced: nothing to claim or advertise.
	for p := range uint16(4) {
		x.Fence(p, true)
	}
	if _, ok := best("q"); ok {
		t.Error("best(q) with every partition fenced found a head")
	}
	if h := x.Heads(); len(h) != 0 {
		t.Errorf("heads with every partition fenced: %v; want none", h)
	}
	// Heads set while fenced are kept and come back with the lift, which
	// wakes a claim long-polling the queue.
	x.Set(2, "q", head(9, 500), true)
	wake := x.ReadyChan("q")
	x.Fence(2, false)
	select {
	case <-wake:
	default:
		t.Error("lifting the fence of a partition with a head in q did not wake q's long polls")
	}
	if p, h, ok := x.Best("q"); !ok || p != 2 || h.Priority != 9 {
		t.Errorf("best(q) after the lift: %d %+v %v; want partition 2's priority-9 head", p, h, ok)
	}
}

// TestSummariesIdle: only a fresh summary without the queue says a leader
// has nothing to claim there.
func TestSummariesIdle(t *testing.T) {
	var s Summaries
	busy := &wire.Summary{Heads: []wire.QueueHead{{Queue: "busy", Priority: 1}}}
	s.Put(1, busy)
	s.Put(2, busy)
	s.nodes[2].at = time.Now().Add(-2 * SummaryStale) // stale
	tests := []struct {
		node  uint64
		queue string
		want  bool
	}{
		{1, "busy", false},  // shows work
		{1, "empty", true},  // fresh, without the queue
		{2, "empty", false}, // stale: unknown
		{3, "empty", false}, // no summary: unknown
	}
	for _, tc := range tests {
		if got := s.Idle(tc.node, tc.queue); got != tc.want {
			t.Errorf("idle(node %d, %q) = %v; want %v", tc.node, tc.queue, got, tc.want)
		}
	}
}

// TestSummary: a summary lists best heads first, then by queue name,
// whatever the map's order, and stops at maxSummaryQueues.
func TestSummary(t *testing.T) {
	id := func(ms int64) task.ID { return task.MakeID(ms, 1, 0) }
	got := Summary(map[string]partition.Head{
		"b": {Priority: 0, ID: id(100)}, "a": {Priority: 0, ID: id(100)},
		"urgent": {Priority: 9, ID: id(500)}, "old": {Priority: 0, ID: id(50)},
	})
	want := []wire.QueueHead{
		{Queue: "urgent", Priority: 9, ID: id(500)}, {Queue: "old", Priority: 0, ID: id(50)},
		{Queue: "a", Priority: 0, ID: id(100)}, {Queue: "b", Priority: 0, ID: id(100)},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Summary = %+v; want %+v", got, want)
	}
	many := map[string]partition.Head{}
	for i := range maxSummaryQueues + 5 {
		many[fmt.Sprint(i)] = partition.Head{ID: id(int64(i + 1))}
	}
	if got := Summary(many); len(got) != maxSummaryQueues || got[0].ID != id(1) {
		t.Fatalf("Summary of %d queues: %d heads, first %v; want %d, the oldest first", len(many), len(got), got[0].ID, maxSummaryQueues)
	}
}

func TestClaimHere(t *testing.T) {
	head := func(prio int32, ms int64) partition.Head {
		return partition.Head{Priority: prio, ID: task.MakeID(ms, 1, 0)}
	}
	const slack = 50 * time.Millisecond
	for _, tc := range []struct {
		name          string
		local, remote partition.Head
		want          bool
	}{
		{"local older", head(0, 100), head(0, 200), true},
		{"equal", head(0, 100), head(0, 100), true},
		{"local of higher priority", head(5, 900), head(0, 100), true},
		{"remote older within the slack", head(0, 150), head(0, 100), true},
		{"remote older past the slack", head(0, 151), head(0, 100), false},
		{"remote of higher priority", head(0, 100), head(5, 900), false},
	} {
		if got := ClaimHere(tc.local, tc.remote, slack); got != tc.want {
			t.Errorf("%s: ClaimHere = %v; want %v", tc.name, got, tc.want)
		}
	}
}
