package partition_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Storage" and "Data model": garbage collection
// deletes completed tasks and leaves tombstones, so anti-entropy never
// brings them back; the tombstones expire after a horizon.

// gcIDs are the tasks of gcLeader: a and c completed (c with an update and
// a dependent), b ready.
var (
	gcA   = task.MakeID(t0, 1, 0)
	gcB   = task.MakeID(t0, 1, 1)
	gcC   = task.MakeID(t0, 1, 2)
	gcDep = task.MakeID(t0, 2, 7) // a task waiting on c, in another partition
)

// gcLeader returns a leader holding gcA and gcC completed at t0 and gcB
// ready, and a follower over sf that merged all of it.
func gcLeader(t *testing.T) (l *partition.Replica, sl *store.Store, f *partition.Replica, sf *store.Store) {
	t.Helper()
	sl, sf = newStore(t), newStore(t)
	l, f = leader(t, sl), follower(t, sf)
	enqueue(t, l, t0, spec(gcA, "q", 9, 3), spec(gcC, "q", 8, 3), spec(gcB, "q", 1, 3))
	if _, d, err := l.AddDependents(gcC, []task.ID{gcDep}); err != nil || d.Wait() != nil {
		t.Fatalf("add dependents: %v", err)
	}
	for _, id := range []task.ID{gcA, gcC} {
		g := mustClaim(t, l, "q", t0)
		if g.Spec.ID != id {
			t.Fatalf("claimed %s; want %s", g.Spec.ID, id)
		}
		if err := l.Update(id, g.Claim.Index, 0, []byte("progress"), t0); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Complete(id, g.Claim.Index, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	merge(t, f, 1, t0, wholeRecords(t, l, gcA, gcB, gcC)...)
	if !l.TreeSnapshot().Equal(f.TreeSnapshot()) {
		t.Fatal("leader and follower differ before collection")
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Completed: 2, task.Ready: 1})
	return l, sl, f, sf
}

func collect(t *testing.T, r *partition.Replica, now int64, ids ...task.ID) {
	t.Helper()
	d, err := r.Collect(ids, nil, now)
	if err != nil {
		t.Fatalf("collect %v: %v", ids, err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("collect: wait: %v", err)
	}
}

// wantCollected checks that s holds nothing of id but its tombstone at at.
func wantCollected(t *testing.T, s *store.Store, id task.ID, at int64) {
	t.Helper()
	if _, err := s.FullSpec(0, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: full spec: %v; want not found", id, err)
	}
	if _, err := s.Spec(0, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: spec: %v; want not found", id, err)
	}
	if _, found, _ := s.State(0, id); found {
		t.Errorf("%s: state still stored", id)
	}
	if _, err := s.Update(0, id, 0, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: update: %v; want not found", id, err)
	}
	n := 0
	_ = s.Dependents(0, id, func(task.ID) bool { n++; return true })
	if n != 0 {
		t.Errorf("%s: %d reverse edges still stored", id, n)
	}
	if got, found, err := s.Tomb(0, id); err != nil || !found || got != at {
		t.Errorf("%s: tombstone %d found=%v err=%v; want at %d", id, got, found, err, at)
	}
}

// TestCollect: Collect deletes completed tasks whole and leaves
// tombstones; it refuses open and unknown tasks without writing anything,
// and a repeat writes nothing.
func TestCollect(t *testing.T) {
	refusals := []struct {
		name string
		ids  []task.ID
		want error
	}{
		{"open task", []task.ID{gcB}, partition.ErrNotCollectable},
		{"completed and open", []task.ID{gcA, gcB}, partition.ErrNotCollectable},
		{"unknown task", []task.ID{task.MakeID(t0, 9, 9)}, task.ErrNotFound},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			l, sl, _, _ := gcLeader(t)
			before := l.TreeSnapshot()
			if _, err := l.Collect(tc.ids, nil, t0+1); !errors.Is(err, tc.want) {
				t.Fatalf("collect: %v; want %v", err, tc.want)
			}
			if !l.TreeSnapshot().Equal(before) {
				t.Error("refused collect changed the tree")
			}
			for _, id := range []task.ID{gcA, gcB, gcC} {
				if _, err := sl.FullSpec(0, id); err != nil {
					t.Errorf("%s after refused collect: %v", id, err)
				}
			}
			wantCounts(t, l, "q", map[task.Status]int64{task.Completed: 2, task.Ready: 1})
		})
	}

	l, sl, _, _ := gcLeader(t)
	const at = t0 + 7
	collect(t, l, at, gcA, gcC, gcA)
	wantCollected(t, sl, gcA, at)
	wantCollected(t, sl, gcC, at)
	if _, err := sl.FullSpec(0, gcB); err != nil {
		t.Errorf("open task: %v", err)
	}
	if _, err := l.Record(gcA, true); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("record of collected task: %v; want not found", err)
	}
	if _, err := l.Record(gcC, false); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("record (no spec) of collected task: %v; want not found", err)
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1})
	checkTree(t, "after collect", l, sl)

	root := l.TreeSnapshot().Root()
	collect(t, l, at+1, gcA, gcC) // a retry
	if l.TreeSnapshot().Root() != root {
		t.Error("repeated collect changed the tree")
	}
	wantCollected(t, sl, gcA, at)
	// The id of a collected task is never written again.
	if err := l.Enqueue([]partition.NewTask{{Spec: spec(gcA, "q", 9, 3)}}, at); !errors.Is(err, task.ErrConflict) {
		t.Errorf("enqueue of a collected id: %v; want conflict", err)
	}
	// The open task still serves.
	if g := mustClaim(t, l, "q", at); g.Spec.ID != gcB {
		t.Errorf("claimed %s; want %s", g.Spec.ID, gcB)
	}
}

// TestCollectTreeAndAAE: two replicas that collected the same tasks have
// equal trees; a replica still holding them differs, and one anti-entropy
// round, whichever side starts it, makes it collect them too: the
// collector never takes them back.
func TestCollectTreeAndAAE(t *testing.T) {
	unlimited := antientropy.Limits{BucketsPerRound: antientropy.BucketsMax, IDsPerRound: antientropy.IDsPerRoundMax}
	tests := []struct {
		name              string
		collectorInitiate bool
	}{
		{"holder initiates: pulls the tombstones", false},
		{"collector initiates: pushes the tombstones, ignores the records it pulls", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, sl, f, sf := gcLeader(t)
			collect(t, l, t0+5, gcA, gcC)
			if l.TreeSnapshot().Equal(f.TreeSnapshot()) {
				t.Fatal("collector and holder have equal trees")
			}
			var res antientropy.Result
			if tc.collectorInitiate {
				res = aaeRound(t, l, f, unlimited, antientropy.Cursor{}, t0+6)
			} else {
				res = aaeRound(t, f, l, unlimited, antientropy.Cursor{}, t0+6)
			}
			diff := sortedIDs(taskIDs(append(res.Pull, res.Push...)))
			if want := sortedIDs([]task.ID{gcA, gcC}); !slices.Equal(slices.Compact(diff), want) {
				t.Errorf("round found %v; want %v", diff, want)
			}
			if lt, ft := l.TreeSnapshot(), f.TreeSnapshot(); !lt.Equal(ft) {
				t.Fatalf("after the round: collector %v, holder %v", lt.Root(), ft.Root())
			}
			for _, s := range []*store.Store{sl, sf} {
				wantCollected(t, s, gcA, t0+5)
				wantCollected(t, s, gcC, t0+5)
			}
			wantCounts(t, f, "q", map[task.Status]int64{task.Ready: 1})
			wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1})
			checkTree(t, "collector", l, sl)
			checkTree(t, "holder", f, sf)
			if res := aaeRound(t, f, l, unlimited, antientropy.Cursor{}, t0+7); !res.InSync {
				t.Errorf("next round: %+v; want in sync", res)
			}
		})
	}
	// Only the leader collects; a follower's tombstones of other times
	// give equal trees.
	l, _, f, _ := gcLeader(t)
	collect(t, l, t0+5, gcA, gcC)
	if _, err := f.Collect([]task.ID{gcA}, nil, t0+9); !errors.Is(err, partition.ErrNotLeader) {
		t.Errorf("collect at a follower: %v; want %v", err, partition.ErrNotLeader)
	}
	merge(t, f, 1, t0+9, task.Record{ID: gcC, Tomb: t0 + 9}, task.Record{ID: gcA, Tomb: t0 + 9})
	if lt, ft := l.TreeSnapshot(), f.TreeSnapshot(); !lt.Equal(ft) {
		t.Fatalf("both collected: %v and %v", lt.Root(), ft.Root())
	}
}

// TestMergeAfterCollect: records of a collected task (whole, state only,
// or repeated) are acknowledged and not written; tombstones merge to the
// earliest deletion time without changing the tree; a tombstone deletes a
// task its receiver holds, even open; a tombstone carrying data is refused.
func TestMergeAfterCollect(t *testing.T) {
	l, sl, f, sf := gcLeader(t)
	old := wholeRecords(t, l, gcA, gcC)
	collect(t, l, t0+50, gcA, gcC)
	root := l.TreeSnapshot().Root()

	stateOnly := task.Record{ID: gcA, State: old[0].State}
	merge(t, l, 1, t0+60, append(old, stateOnly)...)
	if l.TreeSnapshot().Root() != root {
		t.Error("merging a collected task's records changed the tree")
	}
	wantCollected(t, sl, gcA, t0+50)
	wantCollected(t, sl, gcC, t0+50)
	wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1})

	// Tombstone times merge to the minimum.
	tombTests := []struct {
		name string
		at   int64
		want int64
	}{
		{"later: kept", t0 + 80, t0 + 50},
		{"earlier: taken", t0 + 40, t0 + 40},
		{"same", t0 + 40, t0 + 40},
	}
	for _, tc := range tombTests {
		merge(t, l, 1, t0+60, task.Record{ID: gcA, Tomb: tc.at})
		if at, _, _ := sl.Tomb(0, gcA); at != tc.want {
			t.Errorf("%s: tombstone at %d; want %d", tc.name, at, tc.want)
		}
		if l.TreeSnapshot().Root() != root {
			t.Errorf("%s: tree changed", tc.name)
		}
	}

	// A tombstone and the old record in one call, in any order: the
	// tombstone wins.
	merge(t, f, 1, t0+60, old[0], task.Record{ID: gcA, Tomb: t0 + 50}, old[1], task.Record{ID: gcC, Tomb: t0 + 50})
	wantCollected(t, sf, gcA, t0+50)
	wantCollected(t, sf, gcC, t0+50)
	if !l.TreeSnapshot().Equal(f.TreeSnapshot()) {
		t.Error("follower that merged the tombstones differs from the collector")
	}
	checkTree(t, "follower", f, sf)

	// A tombstone of an open task held: deleted anyway (logged).
	merge(t, f, 1, t0+60, task.Record{ID: gcB, Tomb: t0 + 61})
	wantCollected(t, sf, gcB, t0+61)
	wantCounts(t, f, "q", map[task.Status]int64{})
	checkTree(t, "follower after open tombstone", f, sf)

	// A tombstone of an unknown id is kept, so the task never arrives.
	unknown := task.MakeID(t0, 1, 40)
	merge(t, f, 1, t0+60, task.Record{ID: unknown, Tomb: t0 + 62})
	merge(t, f, 1, t0+60, task.Record{ID: unknown, Spec: spec(unknown, "q", 0, 1)})
	wantCollected(t, sf, unknown, t0+62)
	checkTree(t, "follower after unknown tombstone", f, sf)

	invalid := []task.Record{
		{ID: gcB, Tomb: t0, State: &task.State{}},
		{ID: gcB, Tomb: t0, Spec: spec(gcB, "q", 1, 3)},
		{ID: gcB, Tomb: t0, Dependents: []task.ID{gcDep}},
	}
	for i, err := range mergeErrs(t, l, 1, t0+60, invalid...) {
		if !errors.Is(err, task.ErrInvalid) {
			t.Errorf("invalid tombstone %d: %v; want invalid", i, err)
		}
	}
	if _, err := sl.FullSpec(0, gcB); err != nil {
		t.Errorf("open task after refused tombstones: %v", err)
	}
}

// TestLoadAfterCollect: a replica reloaded from the store keeps the
// tombstones in its tree (the same root) and does not index them.
func TestLoadAfterCollect(t *testing.T) {
	l, sl, _, _ := gcLeader(t)
	collect(t, l, t0+5, gcA, gcC)
	r := loaded(t, config(sl), t0+10)
	if got, want := r.TreeSnapshot().Root(), l.TreeSnapshot().Root(); got != want {
		t.Errorf("reloaded root %v; want %v", got, want)
	}
	wantCounts(t, r, "q", map[task.Status]int64{task.Ready: 1})
	recs := wholeRecords(t, r, gcA, gcB, gcC)
	if len(recs) != 3 || recs[0].Tomb != t0+5 || recs[0].Spec != nil || recs[1].Spec == nil || recs[2].Tomb != t0+5 {
		t.Errorf("records after reload: %+v", recs)
	}
	if cs, err := r.Collectable(t0+100, 10); err != nil || len(cs) != 0 {
		t.Errorf("collectable after collect: %v, %v; want none", cs, err)
	}
}

// TestListBucketsTombstones: a tombstoned id is listed with the
// tombstone item as its digest, in id order among the tasks.
func TestListBucketsTombstones(t *testing.T) {
	l, _, _, _ := gcLeader(t)
	collect(t, l, t0+5, gcC)
	shape := l.TreeSnapshot().Shape()
	buckets := make([]int, shape.Buckets)
	for i := range buckets {
		buckets[i] = i
	}
	lists, err := l.ListBuckets(buckets)
	if err != nil {
		t.Fatal(err)
	}
	got := map[task.ID]antientropy.Digest{}
	for _, es := range lists {
		for i, e := range es {
			if i > 0 && task.ID(es[i-1].ID).Compare(e.ID) >= 0 {
				t.Errorf("bucket not sorted by id")
			}
			got[e.ID] = e.Digest
		}
	}
	if len(got) != 3 || got[gcC] != antientropy.TombItem(gcC) {
		t.Errorf("listing %v; want 3 entries, %s with its tombstone item", got, gcC)
	}
}

// TestExpireTombs: only tombstones older than the horizon go, with their
// tree items; an expired tombstone merged again is not written back.
func TestExpireTombs(t *testing.T) {
	l, sl, f, sf := gcLeader(t)
	collect(t, l, t0+100, gcA)
	collect(t, l, t0+500, gcC)
	merge(t, f, 1, t0, task.Record{ID: gcA, Tomb: t0 + 100}, task.Record{ID: gcC, Tomb: t0 + 500})

	tests := []struct {
		before    int64
		wantN     int
		wantTombs []task.ID
	}{
		{t0 + 100, 0, []task.ID{gcA, gcC}}, // strictly older only
		{t0 + 101, 1, []task.ID{gcC}},
		{t0 + 101, 0, []task.ID{gcC}},
		{t0 + 1000, 1, nil},
	}
	for i, tc := range tests {
		for _, r := range []struct {
			r *partition.Replica
			s *store.Store
		}{{l, sl}, {f, sf}} {
			n, err := r.r.ExpireTombs(tc.before)
			if err != nil || n != tc.wantN {
				t.Errorf("step %d: expired %d, %v; want %d", i, n, err, tc.wantN)
			}
			var tombs []task.ID
			_ = r.s.Tombs(0, task.ID{}, func(id task.ID, _ int64) (bool, error) {
				tombs = append(tombs, id)
				return true, nil
			})
			if !slices.Equal(tombs, tc.wantTombs) {
				t.Errorf("step %d: tombstones %v; want %v", i, tombs, tc.wantTombs)
			}
			checkTree(t, "after expiry", r.r, r.s)
		}
		if !l.TreeSnapshot().Equal(f.TreeSnapshot()) {
			t.Errorf("step %d: replicas differ", i)
		}
	}
	// Past the horizon, a tombstone is not written back.
	merge(t, f, 1, t0, task.Record{ID: gcA, Tomb: t0 + 100})
	if _, found, _ := sf.Tomb(0, gcA); found {
		t.Error("expired tombstone written back")
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1})
}

// TestCollectable: completed tasks older than the cutoff, with deps and
// dependents, bounded and resumable.
func TestCollectable(t *testing.T) {
	l, _, _, _ := gcLeader(t)
	cs, err := l.Collectable(t0+1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != gcA || cs[1].ID != gcC {
		t.Fatalf("collectable: %+v; want %s, %s", cs, gcA, gcC)
	}
	if c := cs[1]; c.CompletedAt != t0 || c.Queue != "q" || !slices.Equal(c.Dependents, []task.ID{gcDep}) || len(c.Deps) != 0 {
		t.Errorf("candidate %+v", c)
	}
	if cs, _ := l.Collectable(t0, 10); len(cs) != 0 {
		t.Errorf("cutoff at the completion: %+v; want none", cs)
	}
	first, next, more, err := l.CollectableFrom(task.ID{}, t0+1, 1, 0)
	if err != nil || len(first) != 1 || first[0].ID != gcA || !more {
		t.Fatalf("first page: %+v more=%v %v", first, more, err)
	}
	rest, _, more, err := l.CollectableFrom(next, t0+1, 1, 0)
	if err != nil || len(rest) != 1 || rest[0].ID != gcC {
		t.Fatalf("second page: %+v more=%v %v", rest, more, err)
	}
	if last, _, more, _ := l.CollectableFrom(task.ID{}, t0+1, 2, 0); len(last) != 2 || more {
		t.Errorf("exact page: %d candidates, more=%v; want 2, false", len(last), more)
	}
}

// A tombstone and a newer record of the same task in one merge (a claim
// and an update the replica had not seen): the tombstone wins, nothing of
// the record is staged after the deletion, and the tree matches the store.
func TestMergeTombWithNewerRecord(t *testing.T) {
	_, _, f, sf := gcLeader(t)
	st := task.State{Claims: []task.Claim{{Index: 0, Start: t0 + 1, End: t0 + ttl, Epoch: 1}}}
	newer := task.Record{ID: gcB, State: &st, Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("late")}},
		Dependents: []task.ID{gcDep}}
	for _, order := range [][]task.Record{
		{{ID: gcB, Tomb: t0 + 50}, newer},
		{newer, {ID: gcB, Tomb: t0 + 50}},
	} {
		merge(t, f, 1, t0+60, order...)
		wantCollected(t, sf, gcB, t0+50)
		checkTree(t, "after a tombstone with a newer record", f, sf)
	}
}
