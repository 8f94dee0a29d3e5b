package partition_test

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
)

// TestOldestReady: a queue's oldest ready task is found whatever its
// priority (the ready index is ordered by priority first), a claimed one
// no longer counts, and an empty queue is not reported.
func TestOldestReady(t *testing.T) {
	r := leader(t, newStore(t))
	// Priorities 5, 0, -3 and 9; the oldest id (t0-50_000) has priority 0.
	enqueue(t, r, t0,
		spec(task.MakeID(t0-10_000, 1, 1), "q", 5, 3),
		spec(task.MakeID(t0-50_000, 1, 2), "q", 0, 3),
		spec(task.MakeID(t0-20_000, 1, 3), "q", -3, 3),
		spec(task.MakeID(t0-1_000, 1, 4), "q", 9, 3),
		spec(task.MakeID(t0-5_000, 1, 5), "other", 0, 3),
	)
	oldest := func() map[string]int64 {
		got := map[string]int64{}
		r.OldestReady(func(q string, at int64) { got[q] = at })
		return got
	}
	if got := oldest(); got["q"] != t0-50_000 || got["other"] != t0-5_000 || len(got) != 2 {
		t.Fatalf("oldest ready: %v; want q at t0-50000, other at t0-5000", got)
	}
	// Claims take the best priority first: 9, 5, 0 (the oldest), -3.
	for range 3 {
		mustClaim(t, r, "q", t0)
	}
	if got := oldest(); got["q"] != t0-20_000 {
		t.Fatalf("oldest ready after the oldest was claimed: %v; want q at t0-20000", got)
	}
	mustClaim(t, r, "q", t0)
	mustClaim(t, r, "other", t0)
	if got := oldest(); len(got) != 0 {
		t.Fatalf("oldest ready with nothing ready: %v", got)
	}
}

// TestMovesCounted: a leading replica reports each task's move from one
// status to another (OnMove; the node counts claims, completions, deaths
// and cancellations among them), and each claim
// ended by a fail or by its lease running out (OnClaimEnd); a replica
// that does not lead reports nothing of the records merged into it.
func TestMovesCounted(t *testing.T) {
	var moves []string
	var ends []bool
	cfg := config(newStore(t))
	cfg.OnMove = func(q string, to task.Status) { moves = append(moves, q+":"+to.String()) }
	cfg.OnClaimEnd = func(q string, expired bool) { ends = append(ends, expired) }
	r := leaderCfg(t, cfg)
	a, b, c := task.MakeID(t0, 1, 1), task.MakeID(t0, 1, 2), task.MakeID(t0, 1, 3)
	enqueue(t, r, t0, spec(a, "q", 0, 1), spec(b, "q", 0, 3), spec(c, "q", 0, 3))

	ga := mustClaim(t, r, "q", t0) // a
	if _, err := r.Complete(ga.Spec.ID, ga.Claim.Index, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	gb := mustClaim(t, r, "q", t0+2) // b
	if err := r.Fail(gb.Spec.ID, gb.Claim.Index, "boom", nil, t0+3); err != nil {
		t.Fatal(err)
	}
	gc := mustClaim(t, r, "q", t0+4) // c: its lease runs out
	r.Tick(gc.Claim.End + skew + 1)
	if _, err := r.CancelApply(b, "obsolete", t0+5); err != nil {
		t.Fatal(err)
	}
	// b's fail delays it for its retry; the tick that ends c's lease is
	// past b's retry too.
	want := []string{"q:claimed", "q:completed", "q:claimed", "q:delayed", "q:claimed", "q:ready", "q:ready", "q:cancelled"}
	if !slices.Equal(moves, want) {
		t.Errorf("moves %q; want %q", moves, want)
	}
	if !slices.Equal(ends, []bool{false, true}) {
		t.Errorf("claim ends %v; want a fail, then an expiry", ends)
	}

	// A follower merging the leader's records reports nothing.
	moves, ends = nil, nil
	fcfg := config(newStore(t))
	fcfg.OnMove = cfg.OnMove
	fcfg.OnClaimEnd = cfg.OnClaimEnd
	f := loaded(t, fcfg, t0)
	for _, id := range []task.ID{a, b, c} {
		rec, err := r.Record(id, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, errs, err := f.Merge(partition.Source{Epoch: 1, Authority: 1}, []task.Record{rec}, t0+6); err != nil || len(errs) > 0 && errs[0] != nil {
			t.Fatalf("merge %s: %v %v", id, err, errs)
		}
	}
	f.Tick(t0 + 1_000_000)
	var held int64
	f.Stats(func(_ string, counts [task.NumStatus]int64) {
		for _, n := range counts {
			held += n
		}
	})
	if held != 3 {
		t.Fatalf("the follower holds %d tasks after the merges; want 3", held)
	}
	if len(moves) != 0 || len(ends) != 0 {
		t.Errorf("a follower reported moves %q, ends %v", moves, ends)
	}
}

// TestInStatus: the ids in a status come from memory, sorted: ready ones
// untouched (only in the ready index) and touched (an entry) alike, each
// once; claimed and dead ones from their entries; by queue or all.
func TestInStatus(t *testing.T) {
	r := leader(t, newStore(t))
	a, b, c, d, e := task.MakeID(t0, 1, 1), task.MakeID(t0, 1, 2), task.MakeID(t0, 1, 3), task.MakeID(t0, 1, 4), task.MakeID(t0, 1, 5)
	enqueue(t, r, t0, spec(e, "q", 0, 1), spec(d, "q", 0, 1), spec(c, "q", 5, 1), spec(b, "q", 0, 1), spec(a, "other", 0, 1))
	g := mustClaim(t, r, "q", t0) // c: priority 5
	if err := r.Fail(g.Spec.ID, g.Claim.Index, "no", nil, t0+1); err != nil {
		t.Fatal(err)
	}
	g = mustClaim(t, r, "q", t0+2) // b
	// d's entry is materialised by a reservation put back: ready, touched.
	if id, ok, err := r.Reserve("q"); err != nil || !ok || id != d {
		t.Fatalf("reserve: %v %v %v; want d", id, ok, err)
	}
	for _, tc := range []struct {
		status task.Status
		queue  string
		want   []task.ID
	}{
		{task.Ready, "q", []task.ID{d, e}},
		{task.Ready, "", []task.ID{a, d, e}},
		{task.Claimed, "q", []task.ID{g.Spec.ID}},
		{task.Dead, "", []task.ID{c}},
		{task.Dead, "other", nil},
		{task.Blocked, "", nil},
	} {
		if got := r.InStatus(tc.status, tc.queue); !slices.Equal(got, tc.want) {
			t.Errorf("InStatus(%v, %q) = %v; want %v", tc.status, tc.queue, got, tc.want)
		}
	}
}
