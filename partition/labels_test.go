package partition_test

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
)

func groupCounts(r *partition.Replica, g string) (counts, []task.ID) { return r.GroupCounts(g, 10) }

func subtopics(r *partition.Replica) map[[2]string]counts {
	m := map[[2]string]counts{}
	r.SubtopicStats(func(q, sub string, c counts) { m[[2]string{q, sub}] = c })
	return m
}

// TestGroupAndSubtopicCounts: a group's counts by state, its open tasks
// and its dead ones follow every kind of write; a subtopic's counts
// follow its queue's; both survive a reload and are forgotten once their
// last task is collected.
func TestGroupAndSubtopicCounts(t *testing.T) {
	s := newStore(t)
	l := leader(t, s)
	label := func(id task.ID, queue, group, sub string) *task.Spec {
		sp := spec(id, queue, 0, 1)
		sp.Group, sp.Subtopic = group, sub
		return sp
	}
	done, dead, cancelled, ready, other := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1), task.MakeID(t0, 1, 2), task.MakeID(t0, 1, 3), task.MakeID(t0, 1, 4)
	plain := task.MakeID(t0, 1, 5)
	enqueue(t, l, t0,
		label(done, "q", "batch", "eu"), label(dead, "q", "batch", "eu"), label(cancelled, "q", "batch", ""),
		label(ready, "r", "batch", "eu"), label(other, "q", "other", "us"), label(plain, "q", "", ""))

	g := mustClaim(t, l, "q", t0)
	if _, err := l.Complete(g.Spec.ID, g.Claim.Index, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	g = mustClaim(t, l, "q", t0+1)
	if err := l.Fail(g.Spec.ID, g.Claim.Index, "boom", nil, t0+2); err != nil { // max attempts 1: dead
		t.Fatal(err)
	}
	if w, err := l.CancelApply(cancelled, "not needed", t0+3); err != nil || w.Wait() != nil {
		t.Fatalf("cancel: %v", err)
	}
	checkTree(t, "after the writes", l, s)

	check := func(what string, r *partition.Replica) {
		t.Helper()
		c, deadIDs := groupCounts(r, "batch")
		want := counts{}
		want[task.Completed], want[task.Dead], want[task.Cancelled], want[task.Ready] = 1, 1, 1, 1
		if c != want {
			t.Errorf("%s: group counts %s; want %s", what, fmtCounts(c), fmtCounts(want))
		}
		if !slices.Equal(deadIDs, []task.ID{dead}) {
			t.Errorf("%s: dead %v; want %v", what, deadIDs, dead)
		}
		if open := r.GroupOpen("batch"); !slices.Equal(open, []task.ID{dead, ready}) {
			t.Errorf("%s: open %v; want %v", what, open, []task.ID{dead, ready})
		}
		subs := subtopics(r)
		var eu, euR counts
		eu[task.Completed], eu[task.Dead], euR[task.Ready] = 1, 1, 1
		if subs[[2]string{"q", "eu"}] != eu || subs[[2]string{"r", "eu"}] != euR || len(subs) != 3 {
			t.Errorf("%s: subtopics %v", what, subs)
		}
	}
	check("leader", l)
	check("reloaded", loaded(t, config(s), t0+4))

	if c, ids := l.GroupCounts("batch", 0); ids != nil || c[task.Dead] != 1 {
		t.Errorf("no dead asked: %v, %v", ids, c)
	}
	if c, ids := groupCounts(l, "nope"); c != (counts{}) || ids != nil || l.GroupOpen("nope") != nil {
		t.Errorf("unknown group: %v %v", c, ids)
	}

	// Collected, the ended tasks leave the counts; the group stays while
	// it holds a task, and is forgotten with its last.
	collect(t, l, t0+5, done, cancelled)
	var want counts
	want[task.Dead], want[task.Ready] = 1, 1
	if c, _ := groupCounts(l, "batch"); c != want {
		t.Errorf("after collect: %s; want %s", fmtCounts(c), fmtCounts(want))
	}
	if w, err := l.CancelApply(dead, "", t0+6); err != nil || w.Wait() != nil {
		t.Fatal(err)
	}
	if w, err := l.CancelApply(ready, "", t0+6); err != nil || w.Wait() != nil {
		t.Fatal(err)
	}
	if open := l.GroupOpen("batch"); len(open) != 0 {
		t.Errorf("open after cancelling all: %v", open)
	}
	collect(t, l, t0+7, dead, ready)
	if c, _ := groupCounts(l, "batch"); c != (counts{}) {
		t.Errorf("after collecting all: %s", fmtCounts(c))
	}
	if subs := subtopics(l); len(subs) != 1 || subs[[2]string{"q", "us"}][task.Ready] != 1 {
		t.Errorf("subtopics after collecting: %v", subs)
	}
	checkTree(t, "after collecting", l, s)
}
