package node

import (
	"testing"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
)

// TestHeadIndexFence: a fenced partition's heads are kept but neither
// claimed from (best) nor advertised (heads); lifting the fence brings
// them back and wakes the queue's long polls.
func TestHeadIndexFence(t *testing.T) {
	head := func(prio int32, ms int64) partition.Head {
		return partition.Head{Priority: prio, ID: task.MakeID(ms, 1, 0)}
	}
	x := newHeadIndex()
	x.set(1, "q", head(0, 100), true) // oldest: the best of q
	x.set(2, "q", head(0, 200), true)
	x.set(3, "q", head(0, 300), true)
	x.set(1, "only1", head(5, 100), true)

	best := func(q string) (uint16, bool) {
		p, _, ok := x.best(q)
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
			if got := x.fence(p, on); got != st.changed {
				t.Errorf("%s: fence(%d, %v) changed = %v; want %v", st.name, p, on, got, st.changed)
			}
		}
		if p, ok := best("q"); !ok || p != st.bestQ {
			t.Errorf("%s: best(q) = %d, %v; want partition %d", st.name, p, ok, st.bestQ)
		}
		_, ok := best("only1")
		_, adv := x.heads()["only1"]
		if ok != st.only1Seen || adv != st.only1Seen {
			t.Errorf("%s: queue only1 claimable %v, advertised %v; want %v", st.name, ok, adv, st.only1Seen)
		}
	}

	// Every partition of a queue fenced: nothing to claim or advertise.
	for p := range uint16(4) {
		x.fence(p, true)
	}
	if _, ok := best("q"); ok {
		t.Error("best(q) with every partition fenced found a head")
	}
	if h := x.heads(); len(h) != 0 {
		t.Errorf("heads with every partition fenced: %v; want none", h)
	}
	// Heads set while fenced are kept and come back with the lift, which
	// wakes a claim long-polling the queue.
	x.set(2, "q", head(9, 500), true)
	wake := x.readyChan("q")
	x.fence(2, false)
	select {
	case <-wake:
	default:
		t.Error("lifting the fence of a partition with a head in q did not wake q's long polls")
	}
	if p, h, ok := x.best("q"); !ok || p != 2 || h.Priority != 9 {
		t.Errorf("best(q) after the lift: %d %+v %v; want partition 2's priority-9 head", p, h, ok)
	}
}

// TestSummariesIdle: only a fresh summary without the queue says a leader
// has nothing to claim there.
func TestSummariesIdle(t *testing.T) {
	var s summaries
	s.put(1, map[string]partition.Head{"busy": {Priority: 1}})
	s.put(2, map[string]partition.Head{"busy": {Priority: 1}})
	s.nodes[2].at = time.Now().Add(-2 * summaryStale) // stale
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
		if got := s.idle(tc.node, tc.queue); got != tc.want {
			t.Errorf("idle(node %d, %q) = %v; want %v", tc.node, tc.queue, got, tc.want)
		}
	}
}
