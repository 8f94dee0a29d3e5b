package partition_test

import (
	"errors"
	"testing"

	"github.com/skuldd/skuldd/task"
)

// TestEnqueueDirect: a replica takes an enqueue's new tasks from their
// coordinator whatever epoch it promised (a spec is a grow-only fact),
// as Enqueue would: a repeat writes nothing, an id held with other
// content refuses the whole call, and a record that is more than a spec,
// or a task whose key or deps need the leader, is refused.
func TestEnqueueDirect(t *testing.T) {
	s := newStore(t)
	r := follower(t, s)
	if err := r.Promise(5, 3); err != nil {
		t.Fatal(err)
	}
	ready := func() int64 {
		var n int64
		r.Stats(func(q string, counts [task.NumStatus]int64) {
			if q == "q" {
				n = counts[task.Ready]
			}
		})
		return n
	}
	direct := func(recs ...task.Record) error {
		t.Helper()
		d, err := r.EnqueueDirect(recs, t0)
		if err != nil {
			return err
		}
		return d.Wait()
	}
	a, b := spec(task.MakeID(t0, 1, 1), "q", 0, 3), spec(task.MakeID(t0, 1, 2), "q", 0, 3)
	if err := direct(task.Record{ID: a.ID, Spec: a}, task.Record{ID: b.ID, Spec: b}); err != nil {
		t.Fatalf("direct enqueue on a replica that promised epoch 5: %v", err)
	}
	if n := ready(); n != 2 {
		t.Fatalf("ready %d; want 2", n)
	}
	// A repeat (a retry: another enqueue time) is taken without a write.
	again := *a
	again.EnqueuedAt++
	if err := direct(task.Record{ID: a.ID, Spec: &again}); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	other := *a
	other.Data = []byte("other")
	c := spec(task.MakeID(t0, 1, 3), "q", 0, 3)
	if err := direct(task.Record{ID: c.ID, Spec: c}, task.Record{ID: a.ID, Spec: &other}); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("another task under a held id: %v; want a conflict", err)
	}
	if _, err := s.Spec(0, c.ID); err == nil {
		t.Fatal("a refused call wrote a task of its batch")
	}

	keyed := spec(task.MakeID(t0, 1, 4), "q", 0, 3)
	keyed.Key = "k"
	dependent := spec(task.MakeID(t0, 1, 5), "q", 0, 3)
	dependent.Deps = []task.ID{a.ID}
	d := spec(task.MakeID(t0, 1, 6), "q", 0, 3)
	for name, rec := range map[string]task.Record{
		"no spec":    {ID: d.ID},
		"a state":    {ID: d.ID, Spec: d, State: &task.State{}},
		"edges":      {ID: d.ID, Spec: d, Dependents: []task.ID{a.ID}},
		"a key":      {ID: keyed.ID, Spec: keyed},
		"deps":       {ID: dependent.ID, Spec: dependent},
		"another id": {ID: b.ID, Spec: d},
	} {
		if err := direct(rec); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%s: %v; want invalid", name, err)
		}
	}
	if n := ready(); n != 2 {
		t.Fatalf("ready %d after refusals; want 2", n)
	}
	if prom, _ := r.Promised(); prom != 5 {
		t.Fatalf("promise %d; a direct write must leave it at 5", prom)
	}
	checkTree(t, "after direct enqueues", r, s)
	if err := r.CheckCounts(); err != nil {
		t.Fatal(err)
	}
}
