package partition

import (
	"runtime"
	"testing"

	"github.com/skuldd/skuldd/task"
)

// TestFreshSpecsRoom checks freshSpecs' invariant (bytes is the sum of
// the held specs' costs and never exceeds max) through adds, repeats,
// takes and a reset.
func TestFreshSpecsRoom(t *testing.T) {
	mk := func(i uint32, data int) *task.Spec {
		return &task.Spec{ID: task.MakeID(1, 1, i), Queue: "q", Data: make([]byte, data)}
	}
	check := func(f *freshSpecs) {
		t.Helper()
		var sum int64
		for _, sp := range f.specs {
			sum += specCost(sp)
		}
		if sum != f.bytes || f.bytes != f.budget.Used() || f.bytes > f.budget.max {
			t.Fatalf("bytes %d, sum of costs %d, budget used %d of %d", f.bytes, sum, f.budget.Used(), f.budget.max)
		}
	}
	a, b, c := mk(1, 100), mk(2, 100), mk(3, 1000)
	f := freshSpecs{budget: NewFreshBudget(specCost(a) + specCost(b))}
	f.add(a)
	f.add(a) // a repeat is held once
	f.add(b)
	f.add(c) // no room
	check(&f)
	if f.len() != 2 || f.specs[c.ID] != nil {
		t.Fatalf("holds %d specs (c: %v); want a and b", f.len(), f.specs[c.ID] != nil)
	}
	if got := f.take(a.ID); got != a {
		t.Fatalf("take(a) = %v", got)
	}
	if got := f.take(a.ID); got != nil {
		t.Fatalf("second take(a) = %v; want nil", got)
	}
	check(&f)
	f.add(c) // still too big next to b
	check(&f)
	if f.specs[c.ID] != nil {
		t.Fatal("admitted c past the room")
	}
	f.reset()
	check(&f)
	if f.len() != 0 || f.take(b.ID) != nil {
		t.Fatal("reset kept specs")
	}
	f.add(b)
	check(&f)
	if f.len() != 1 {
		t.Fatal("an empty cache refused a spec that fits")
	}
}

// TestFreshSpecsCostIsTheirMemory checks that specCost charges about what
// the held specs take on the heap, so --claim-cache-mb means what it says
// (the node's RSS then grows by about twice it, for Go's GC headroom).
// Specs decoded from a request own their payload and strings, as here.
func TestFreshSpecsCostIsTheirMemory(t *testing.T) {
	const room = 8 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := &freshSpecs{budget: NewFreshBudget(room)}
	for i := uint32(0); ; i++ {
		n := f.len()
		f.add(&task.Spec{ID: task.MakeID(1, 1, i), Queue: string([]byte("queue")), MaxAttempts: 3, EnqueuedAt: 1, Data: make([]byte, 100)})
		if f.len() == n {
			break
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	ratio := heap / float64(f.bytes)
	t.Logf("%d specs charged %d bytes, hold %.0f on the heap (%.2fx)", f.len(), f.bytes, heap, ratio)
	// Wide enough for the runtime's map and size classes to change.
	if ratio < 0.7 || ratio > 1.5 {
		t.Errorf("the specs take %.2fx what they are charged; want within 0.7-1.5x", ratio)
	}
	runtime.KeepAlive(f)
}

// TestFreshBudgetShared checks that caches sharing a budget hold at most
// the budget between them, and that what one gives back (a take, a reset)
// the other can use.
func TestFreshBudgetShared(t *testing.T) {
	mk := func(i uint32) *task.Spec {
		return &task.Spec{ID: task.MakeID(1, 1, i), Queue: "q", Data: make([]byte, 100)}
	}
	b := NewFreshBudget(3 * specCost(mk(0)))
	x, y := &freshSpecs{budget: b}, &freshSpecs{budget: b}
	check := func(wantX, wantY int) {
		t.Helper()
		if x.len() != wantX || y.len() != wantY || b.Used() != x.bytes+y.bytes || b.Used() > b.max {
			t.Fatalf("x holds %d, y %d (want %d, %d); budget used %d, caches %d+%d, max %d",
				x.len(), y.len(), wantX, wantY, b.Used(), x.bytes, y.bytes, b.max)
		}
	}
	x.add(mk(1))
	x.add(mk(2))
	y.add(mk(3))
	y.add(mk(4)) // the budget is spent
	check(2, 1)
	x.take(mk(1).ID)
	y.add(mk(4))
	check(1, 2)
	y.reset()
	x.add(mk(5))
	x.add(mk(6))
	check(3, 0)
	if NewFreshBudget(0) != nil || (*FreshBudget)(nil).Used() != 0 {
		t.Error("a budget of 0 bytes is not the nil budget")
	}
}
