package partition_test

import (
	"errors"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// TestCancel: a cancel supersedes the live claim (its renewal and its
// completion are refused with task.ErrCancelled), takes the task out of
// every index for good (counted cancelled, never claimed again), repeats
// as a no-op, and is counted the same on a follower that merges it and
// on the leader after a reload.
func TestCancel(t *testing.T) {
	s, sf := newStore(t), newStore(t)
	l := leader(t, s)
	claimed, fresh, done := task.MakeID(t0, 1, 0), task.MakeID(t0, 2, 0), task.MakeID(t0, 3, 0)
	enqueue(t, l, t0, spec(claimed, "q", 9, 3), spec(fresh, "q", 0, 3), spec(done, "q", 5, 3))
	if g := mustClaim(t, l, "q", t0); g.Spec.ID != claimed {
		t.Fatalf("claimed %v; want %v", g.Spec.ID, claimed)
	}
	g := mustClaim(t, l, "q", t0)
	if err := func() error { _, err := l.Complete(done, g.Claim.Index, nil, t0+1); return err }(); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Claimed: 1, task.Ready: 1, task.Completed: 1})

	for _, id := range []task.ID{claimed, fresh} {
		w, err := l.CancelApply(id, "not needed", t0+2)
		if err != nil || w.Wait() != nil {
			t.Fatalf("cancel %v: %v", id, err)
		}
		if c := w.Rec.State.Completion; c == nil || !c.Cancelled || c.Reason != "not needed" {
			t.Errorf("cancel %v shipped %+v", id, c)
		}
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Cancelled: 2, task.Completed: 1})
	noClaim(t, l, "q", t0+ttl*10) // the claim's expiry brings nothing back

	if _, err := l.Renew(claimed, 0, t0+3, ttl); !errors.Is(err, task.ErrCancelled) {
		t.Errorf("renew of the superseded claim = %v; want ErrCancelled", err)
	}
	if _, err := l.Complete(claimed, 0, nil, t0+3); !errors.Is(err, task.ErrCancelled) {
		t.Errorf("complete of the superseded claim = %v; want ErrCancelled", err)
	}
	if _, _, err := l.AddDependents(claimed, []task.ID{task.MakeID(t0, 9, 0)}); !errors.Is(err, task.ErrConflict) {
		t.Errorf("a new dependent of a cancelled task = %v; want ErrConflict", err)
	}
	if _, err := l.CancelApply(done, "", t0+3); !errors.Is(err, task.ErrCompleted) {
		t.Errorf("cancel of a completed task = %v; want ErrCompleted", err)
	}
	before := storedState(t, s, claimed)
	if w, err := l.CancelApply(claimed, "again", t0+4); err != nil || w.Wait() != nil {
		t.Fatalf("repeated cancel: %v", err)
	}
	if after := storedState(t, s, claimed); !after.Equal(&before) {
		t.Errorf("a repeated cancel changed the state: %+v -> %+v", before, after)
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Cancelled: 2, task.Completed: 1})

	cfgF := config(sf)
	cfgF.Self = 2
	f := loaded(t, cfgF, t0)
	merge(t, f, 1, t0+5, record(t, l, claimed, true), record(t, l, fresh, true), record(t, l, done, true))
	wantCounts(t, f, "q", map[task.Status]int64{task.Cancelled: 2, task.Completed: 1})

	re := loaded(t, config(s), t0+6)
	wantCounts(t, re, "q", map[task.Status]int64{task.Cancelled: 2, task.Completed: 1})
}

// TestCancelledCollectable: a cancelled task is garbage once past the
// cutoff, as a completed one is.
func TestCancelledCollectable(t *testing.T) {
	l := leader(t, newStore(t))
	id := task.MakeID(t0, 1, 0)
	enqueue(t, l, t0, spec(id, "q", 0, 3))
	if w, err := l.CancelApply(id, "", t0+1); err != nil || w.Wait() != nil {
		t.Fatal(err)
	}
	cs, err := l.Collectable(t0+2, 10)
	if err != nil || len(cs) != 1 || cs[0].ID != id || cs[0].CompletedAt != t0+1 {
		t.Fatalf("collectable = %+v, %v; want the cancelled task, ended at %d", cs, err, t0+1)
	}
	d, err := l.Collect([]task.ID{id}, nil, t0+3)
	if err != nil || d.Wait() != nil {
		t.Fatal(err)
	}
	wantCounts(t, l, "q", nil)
}

// TestDelete: an operator's delete marks the task cancelled (a stamped
// state write, superseding a live claim), then collects it; the mark and
// the tombstone reach a follower as records and the trees agree. An open
// task with dependents is refused and left as it was; a completed one is
// deleted without a mark. Dead lists what a bulk requeue or purge acts
// on.
func TestDelete(t *testing.T) {
	s, fs := newStore(t), newStore(t)
	l := leader(t, s)
	f := follower(t, fs)
	ready, claimed, dep, dead, done := task.MakeID(t0, 1, 0), task.MakeID(t0, 2, 0), task.MakeID(t0, 3, 0), task.MakeID(t0, 4, 0), task.MakeID(t0, 5, 0)
	enqueue(t, l, t0, spec(claimed, "q", 9, 3), spec(ready, "q", 0, 3), spec(dep, "q", 0, 3), spec(dead, "d", 0, 1), spec(done, "c", 0, 1))
	waiter := task.MakeID(t0, 9, 0)
	for _, d := range []task.ID{dep, done} {
		if _, w, err := l.AddDependents(d, []task.ID{waiter}); err != nil || w.Wait() != nil {
			t.Fatalf("add dependents: %v", err)
		}
	}
	mustClaim(t, l, "q", t0)
	g := mustClaim(t, l, "d", t0)
	if err := l.Fail(dead, g.Claim.Index, "boom", nil, t0+1); err != nil {
		t.Fatal(err)
	}
	g = mustClaim(t, l, "c", t0)
	if _, err := l.Complete(done, g.Claim.Index, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	if got := l.Dead("d"); len(got) != 1 || got[0] != dead {
		t.Errorf("Dead(d) = %v; want [%v]", got, dead)
	}
	if got := l.Dead("q"); len(got) != 0 {
		t.Errorf("Dead(q) = %v; want none", got)
	}
	var recs []task.Record
	for _, id := range []task.ID{ready, claimed, dep, dead, done} {
		rec := record(t, l, id, true)
		if id == dep || id == done {
			rec.Dependents = []task.ID{waiter} // the leader ships the edges it wrote with the record
		}
		recs = append(recs, rec)
	}
	merge(t, f, 1, t0+1, recs...)

	before := storedState(t, s, dep)
	if _, _, err := l.DeleteMarkApply(dep, t0+2); !errors.Is(err, task.ErrConflict) {
		t.Errorf("delete of an open task with dependents = %v; want ErrConflict", err)
	}
	if after := storedState(t, s, dep); !after.Equal(&before) {
		t.Errorf("a refused delete changed the state: %+v -> %+v", before, after)
	}
	for _, id := range []task.ID{ready, claimed, dead, done} {
		w, edges, err := l.DeleteMarkApply(id, t0+3)
		if err != nil || w.Wait() != nil {
			t.Fatalf("delete mark %v: %v", id, err)
		}
		if c := w.Rec.State.Completion; id != done && (c == nil || !c.Cancelled || c.Reason != partition.DeleteReason) {
			t.Errorf("delete mark %v shipped %+v; want a cancel", id, c)
		}
		merge(t, f, 1, t0+3, w.Rec)
		d, err := l.Collect([]task.ID{id}, map[task.ID]int{id: edges}, t0+4)
		if err != nil || d.Wait() != nil {
			t.Fatalf("collect %v after its delete mark: %v", id, err)
		}
		tombs, err := l.Records([]task.ID{id})
		if err != nil || len(tombs) != 1 || task.TombTime(tombs[0].Tomb) != t0+4 || task.TombCancelled(tombs[0].Tomb) != (id != done) {
			t.Fatalf("tombstone of %v = %+v, %v; want deleted at %d, cancelled unless completed", id, tombs, err, t0+4)
		}
		merge(t, f, 1, t0+4, tombs[0])
		if _, err := s.Spec(0, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("deleted %v still stored: %v", id, err)
		}
	}
	if _, _, err := l.DeleteMarkApply(ready, t0+5); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("delete mark of a deleted task = %v; want ErrNotFound", err)
	}
	// The tombstones say how each task ended: a deleted open task was
	// cancelled, and satisfies no new dependent; a deleted completed one
	// does, as a collected one always has.
	for _, r := range []*partition.Replica{l, f} {
		infos, err := r.GCInfo([]task.ID{ready, done})
		if err != nil || infos[0].Status != partition.GCCollectedCancelled || infos[1].Status != partition.GCCollected {
			t.Errorf("GCInfo after the deletes = %+v, %v; want collected cancelled, collected", infos, err)
		}
	}
	if _, _, err := l.AddDependents(ready, []task.ID{waiter}); !errors.Is(err, task.ErrConflict) {
		t.Errorf("a new dependent of a deleted open task = %v; want ErrConflict", err)
	}
	if done, _, err := l.AddDependents(done, []task.ID{waiter}); !errors.Is(err, partition.ErrCollected) || !done {
		t.Errorf("a new dependent of a deleted completed task = %v, %v; want done, ErrCollected", done, err)
	}
	for _, r := range []*partition.Replica{l, f} {
		wantCounts(t, r, "q", map[task.Status]int64{task.Ready: 1})
		wantCounts(t, r, "d", nil)
		wantCounts(t, r, "c", nil)
	}
	checkTree(t, "leader", l, s)
	checkTree(t, "follower", f, fs)
	if !l.TreeSnapshot().Equal(f.TreeSnapshot()) {
		t.Error("leader and follower trees differ after the deletes")
	}
	if g := mustClaim(t, l, "q", t0+ttl*10); g.Spec.ID != dep {
		t.Errorf("claimed %v after the deletes; want %v, the one left", g.Spec.ID, dep)
	}
}
