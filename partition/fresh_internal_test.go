package partition

import (
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
		if sum != f.bytes || f.bytes > f.max {
			t.Fatalf("bytes %d, sum of costs %d, max %d", f.bytes, sum, f.max)
		}
	}
	a, b, c := mk(1, 100), mk(2, 100), mk(3, 1000)
	f := freshSpecs{max: specCost(a) + specCost(b)}
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
