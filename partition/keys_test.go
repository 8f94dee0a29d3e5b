package partition_test

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
)

// TestUniqueKeys: an enqueue whose key a kept task of the queue holds
// writes nothing and names the holder; a completed task holds its key, a
// cancelled one does not, nor one past its unique_for window; the key is
// per queue; within one enqueue the first task takes the key; a merged
// duplicate (two leaders took the key) leaves the lowest id the holder;
// a collected task releases its key.
func TestUniqueKeys(t *testing.T) {
	s := newStore(t)
	l := leader(t, s)
	keyed := func(n uint32, queue, key string, uniqueFor int64) *task.Spec {
		sp := spec(task.MakeID(t0, 1, n), queue, 0, 3)
		sp.Key, sp.UniqueFor = key, uniqueFor
		return sp
	}
	put := func(now int64, sps ...*task.Spec) []task.ID {
		t.Helper()
		nts := make([]partition.NewTask, len(sps))
		for i, sp := range sps {
			nts[i] = partition.NewTask{Spec: sp}
		}
		if err := l.Enqueue(nts, now); err != nil {
			t.Fatal(err)
		}
		dups := make([]task.ID, len(nts))
		for i := range nts {
			dups[i] = nts[i].DupOf
		}
		return dups
	}
	stored := func(id task.ID) bool {
		_, err := s.Spec(0, id)
		return err == nil
	}
	a, b, c := keyed(1, "q", "order-7", 0), keyed(2, "q", "order-7", 0), keyed(3, "other", "order-7", 0)
	if d := put(t0, a); !d[0].IsZero() {
		t.Fatalf("first of a key: dup of %v", d[0])
	}
	if d := put(t0, b, c); d[0] != a.ID || !d[1].IsZero() {
		t.Fatalf("same key: dup of %v (want %v); other queue: dup of %v (want none)", d[0], a.ID, d[1])
	}
	if stored(b.ID) || !stored(c.ID) {
		t.Fatalf("stored: the duplicate %v, the other queue's %v", stored(b.ID), stored(c.ID))
	}
	// A retry of the holder's own enqueue is a retry, not a duplicate.
	if d := put(t0, a); !d[0].IsZero() {
		t.Errorf("retry of the holder: dup of %v", d[0])
	}

	// Completed, it holds the key still.
	g := mustClaim(t, l, "q", t0)
	if _, err := l.Complete(g.Spec.ID, g.Claim.Index, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	if d := put(t0+2, keyed(4, "q", "order-7", 0)); d[0] != a.ID {
		t.Errorf("key of a completed task: dup of %v; want %v", d[0], a.ID)
	}
	// Cancelled, it does not: the next one takes the key.
	if w, err := l.CancelApply(c.ID, "", t0+3); err != nil || w.Wait() != nil {
		t.Fatal(err)
	}
	e := keyed(5, "other", "order-7", 0)
	if d := put(t0+4, e); !d[0].IsZero() {
		t.Errorf("key of a cancelled task: dup of %v; want a new task", d[0])
	}

	// A window: held for unique_for, then free.
	w1 := keyed(6, "q", "window", 100)
	put(t0, w1)
	if d := put(t0+99, keyed(7, "q", "window", 100)); d[0] != w1.ID {
		t.Errorf("inside the window: dup of %v; want %v", d[0], w1.ID)
	}
	if d := put(t0+100, keyed(8, "q", "window", 100)); !d[0].IsZero() {
		t.Errorf("past the window: dup of %v; want a new task", d[0])
	}

	// One enqueue, two tasks of one key: the first takes it.
	x, y := keyed(9, "q", "batch", 0), keyed(10, "q", "batch", 0)
	if d := put(t0, x, y); !d[0].IsZero() || d[1] != x.ID {
		t.Errorf("one batch: dups %v; want none, then %v", d, x.ID)
	}
	checkTree(t, "after the enqueues", l, s)

	// A duplicate merged in (another leader took the key): the lower id
	// holds it.
	sf := newStore(t)
	f := follower(t, sf)
	late := keyed(11, "q", "split", 0)
	early := keyed(0, "q", "split", 0)
	merge(t, f, 1, t0, task.Record{ID: late.ID, Spec: late, State: &task.State{}})
	merge(t, f, 1, t0, task.Record{ID: early.ID, Spec: early, State: &task.State{}})
	checkTree(t, "the follower", f, sf)
	third := []partition.NewTask{{Spec: keyed(13, "q", "split", 0)}}
	if err := f.Enqueue(third, t0); err != nil || third[0].DupOf != early.ID {
		t.Fatalf("a key two tasks hold: dup of %v, %v; want the lower id %v", third[0].DupOf, err, early.ID)
	}

	// Collected, a task releases its key.
	collect(t, l, t0+10, a.ID)
	if d := put(t0+11, keyed(12, "q", "order-7", 0)); !d[0].IsZero() {
		t.Errorf("key of a collected task: dup of %v; want a new task", d[0])
	}
	checkTree(t, "after the collect", l, s)
}

// TestDuplicateKeys: when two tasks hold one key (another leader took
// it; merged in here), the leader retires the one not worked on, else the
// higher id, once its cancel is written the key is settled; a follower
// settles nothing.
func TestDuplicateKeys(t *testing.T) {
	s := newStore(t)
	l := leader(t, s)
	keyed := func(n uint32, key string) *task.Spec {
		sp := spec(task.MakeID(t0, 1, n), "q", 0, 3)
		sp.Key, sp.Group, sp.Subtopic = key, "", ""
		return sp
	}
	// Key "a": the lower id claimed here, the higher merged in: the
	// higher is retired. Key "b": the higher claimed here, the lower
	// merged in: the claimed one is kept. Key "c": both fresh: the lower
	// is kept.
	a1, a2 := keyed(1, "a"), keyed(2, "a")
	b1, b2 := keyed(3, "b"), keyed(4, "b")
	c1, c2 := keyed(5, "c"), keyed(6, "c")
	enqueue(t, l, t0, a1, b2, c2)
	ga := mustClaim(t, l, "q", t0)
	gb := mustClaim(t, l, "q", t0)
	if ga.Spec.ID != a1.ID || gb.Spec.ID != b2.ID {
		t.Fatalf("claimed %v, %v; want %v, %v", ga.Spec.ID, gb.Spec.ID, a1.ID, b2.ID)
	}
	for _, sp := range []*task.Spec{a2, b1, c1} {
		merge(t, l, 1, t0, task.Record{ID: sp.ID, Spec: sp, State: &task.State{}})
	}
	rs, err := l.DuplicateKeys(t0 + 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []partition.Retire{{ID: b1.ID, Keeper: b2.ID}, {ID: a2.ID, Keeper: a1.ID}, {ID: c2.ID, Keeper: c1.ID}}
	if len(rs) != len(want) {
		t.Fatalf("retire %v; want %v", rs, want)
	}
	for _, w := range want {
		if !slices.Contains(rs, w) {
			t.Errorf("retire %v; want %v among them", rs, w)
		}
	}
	sf := newStore(t)
	f := follower(t, sf)
	merge(t, f, 1, t0, task.Record{ID: c1.ID, Spec: c1, State: &task.State{}}, task.Record{ID: c2.ID, Spec: c2, State: &task.State{}})
	if rs, err := f.DuplicateKeys(t0 + 1); err != nil || rs != nil {
		t.Errorf("a follower's retirements = %v, %v; want none", rs, err)
	}
	for _, x := range rs {
		if w, err := l.CancelApply(x.ID, "retired", t0+2); err != nil || w.Wait() != nil {
			t.Fatal(err)
		}
	}
	if rs, err := l.DuplicateKeys(t0 + 3); err != nil || len(rs) != 0 {
		t.Errorf("after the cancels: retire %v, %v; want none", rs, err)
	}
	checkTree(t, "after the retirements", l, s)
}

// TestRepeatOfARetiredKey: a leader that took a task from another
// replica (a stale leader's, by anti-entropy) while another task held its
// key holds two tasks of the key. A repeat of the taken task's enqueue
// (the client retrying at this leader) finds its task stored; it must
// answer duplicate of the task that keeps the key, not "new": found by
// the simulation, where the repeat was acknowledged as new and the task
// then retired.
func TestRepeatOfARetiredKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		takenFirst bool // the taken task has the lower id: it keeps the key
	}{{"the taken task is retired", false}, {"the taken task keeps the key", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			l := leader(t, s)
			held, taken := spec(task.MakeID(t0, 1, 1), "q", 0, 3), spec(task.MakeID(t0, 1, 2), "q", 0, 3)
			if tc.takenFirst {
				held, taken = taken, held
			}
			held.Key, taken.Key = "k", "k"
			if err := l.Enqueue([]partition.NewTask{{Spec: held}}, t0); err != nil {
				t.Fatal(err)
			}
			mergeSrc(t, l, partition.Source{Epoch: 1, Floor: 1, From: 2}, t0, task.Record{ID: taken.ID, Spec: taken})
			repeat := []partition.NewTask{{Spec: taken, CheckExisting: true}}
			if err := l.Enqueue(repeat, t0+1); err != nil {
				t.Fatal(err)
			}
			var want task.ID
			if !tc.takenFirst {
				want = held.ID
			}
			if repeat[0].DupOf != want {
				t.Fatalf("repeat answered duplicate of %v; want %v", repeat[0].DupOf, want)
			}
		})
	}
}

// TestHintedKeyRetiredAtWrite: a hinted keyed task handed over after its
// key was taken is written, so the enqueue acknowledged as hinted has its
// task, but retired at once, naming the holder: never claimable, and the
// key stays the holder's. Without a holder it is an ordinary new task.
func TestHintedKeyRetiredAtWrite(t *testing.T) {
	s := newStore(t)
	l := leader(t, s)
	holder, hinted, free := spec(task.MakeID(t0, 1, 2), "q", 0, 3), spec(task.MakeID(t0, 1, 1), "q", 0, 3), spec(task.MakeID(t0, 1, 3), "q", 0, 3)
	holder.Key, hinted.Key, free.Key = "k", "k", "other"
	if err := l.Enqueue([]partition.NewTask{{Spec: holder}}, t0); err != nil {
		t.Fatal(err)
	}
	nts := []partition.NewTask{{Spec: hinted, Hinted: true}, {Spec: free, Hinted: true}}
	if err := l.Enqueue(nts, t0+1); err != nil {
		t.Fatal(err)
	}
	if !nts[0].DupOf.IsZero() || !nts[1].DupOf.IsZero() {
		t.Fatalf("hinted tasks answered duplicates: %v %v", nts[0].DupOf, nts[1].DupOf)
	}
	c := nts[0].State.Completion
	if c == nil || !c.Cancelled || c.Reason != task.RetiredKeyReason+holder.ID.String() || nts[0].State.Stamp != 1 {
		t.Fatalf("hinted task's first state %+v; want retired naming %s, stamped 1", nts[0].State, holder.ID)
	}
	if !nts[1].State.IsZero() {
		t.Fatalf("hinted task of a free key: state %+v; want none", nts[1].State)
	}
	st, _, err := s.State(0, hinted.ID)
	if err != nil || st.Completion == nil || !st.Completion.Cancelled {
		t.Fatalf("stored state of the retired task: %+v, %v", st, err)
	}
	for range 3 {
		g := claim(t, l, "q", t0+2)
		if g != nil && g.Spec.ID == hinted.ID {
			t.Fatal("the retired hinted task was claimed")
		}
	}
	if rs, err := l.DuplicateKeys(t0 + 3); err != nil || len(rs) != 0 {
		t.Fatalf("duplicate keys after the retire: %+v, %v; want none", rs, err)
	}
	checkTree(t, "after hinted keyed tasks", l, s)
	if err := l.CheckCounts(); err != nil {
		t.Fatal(err)
	}
}
