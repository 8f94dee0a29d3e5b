package partition_test

import (
	"errors"
	"github.com/skuldd/skuldd/antientropy"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: the package doc's "Epochs and orphans", and issue 20's first
// defect: a paused ex-leader's refused writes survived and spread. A
// refused operation changes nothing, anywhere.

// replicaOf returns a loaded replica of node self over a new store.
func replicaOf(t *testing.T, self uint64) (*partition.Replica, *store.Store) {
	t.Helper()
	s := newStore(t)
	cfg := config(s)
	cfg.Self = self
	return loaded(t, cfg, t0), s
}

// promiseAll has each replica promise ep to candidate.
func promiseAll(t *testing.T, ep, candidate uint64, rs ...*partition.Replica) {
	t.Helper()
	for _, r := range rs {
		if err := r.Promise(ep, candidate); err != nil {
			t.Fatalf("promise %d to %d: %v", ep, candidate, err)
		}
	}
}

// updatesOf returns task id's stored updates, as "claim/seq=data".
func updatesOf(t *testing.T, s *store.Store, id task.ID) []string {
	t.Helper()
	var out []string
	if err := s.Updates(0, id, func(u task.Update) bool {
		out = append(out, string(rune('0'+u.Claim))+"/"+string(rune('0'+u.Seq))+"="+string(u.Data))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOrphanOfPausedLeaderNeverTaken: leader 1 is paused after granting
// claim 0; node 2 takes over at epoch 2, lets claim 0 expire, grants
// claim 1 and completes it. Leader 1 thaws and, still believing it leads
// at epoch 1, writes an update and a completion under claim 0 to its own
// store (orphans: no majority accepted them). Node 2's anti-entropy with
// it must neither take them nor keep them: it pulls nothing of them
// (stamped below its epoch), and its push replaces them on node 1, which
// steps down. The update and completion of claim 0 exist nowhere after.
func TestOrphanOfPausedLeaderNeverTaken(t *testing.T) {
	a, sa := replicaOf(t, 1)
	b, sb := replicaOf(t, 2)
	promiseAll(t, 1, 1, a, b)
	if err := a.Lead(1); err != nil {
		t.Fatal(err)
	}
	id := task.MakeID(t0, 1, 0)
	enqueue(t, a, t0, spec(id, "q", 0, 3))
	g := mustClaim(t, a, "q", t0)
	merge(t, b, 1, t0, wholeRecords(t, a, id)...)

	// a is paused; b wins epoch 2 (b's own promise and a third member's,
	// not modelled here) holding a's writes, and leads.
	promiseAll(t, 2, 2, b)
	if err := b.Lead(2); err != nil {
		t.Fatal(err)
	}

	// a thaws: orphans under claim 0, at epoch 1, in its own store.
	if err := a.Update(id, g.Claim.Index, 0, []byte("orphan"), t0+1); err != nil {
		t.Fatalf("orphan update on the paused leader: %v", err)
	}
	if _, err := a.Complete(id, g.Claim.Index, nil, t0+2); err != nil {
		t.Fatalf("orphan completion on the paused leader: %v", err)
	}
	// Shipped, they are refused whole: b promised epoch 2.
	if _, _, err := b.Merge(partition.Source{Epoch: 1, Authority: 1, From: 1}, wholeRecords(t, a, id), t0+2); !errors.Is(err, task.ErrEpoch) {
		t.Fatalf("shipment of the orphans = %v; want ErrEpoch", err)
	}

	// b lets claim 0 expire, grants claim 1 and completes it.
	now := g.Claim.End + skew
	b.Tick(now)
	g1 := mustClaim(t, b, "q", now)
	if g1.Claim.Index != 1 {
		t.Fatalf("claim on the new leader: index %d; want 1", g1.Claim.Index)
	}
	if err := b.Update(id, 1, 0, []byte("acknowledged"), now); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Complete(id, 1, nil, now+1); err != nil {
		t.Fatal(err)
	}
	want := storedState(t, sb, id)

	// b's anti-entropy round with a: it pulls a's record (below its floor:
	// left out), then pushes its own (its authority: taken in place of
	// a's, updates included).
	mergeSrc(t, b, partition.Source{Epoch: 2, Floor: 2, From: 1}, now+2, wholeRecords(t, a, id)...)
	if got := storedState(t, sb, id); !got.Equal(&want) {
		t.Fatalf("the leader took the orphans: %+v; want %+v", got, want)
	}
	if got := updatesOf(t, sb, id); len(got) != 1 || got[0] != "1/0=acknowledged" {
		t.Fatalf("the leader's updates after the pull: %v", got)
	}
	mergeSrc(t, a, partition.Source{Epoch: 2, Authority: 2, From: 2}, now+2, wholeRecords(t, b, id)...)
	if a.Epoch() != 0 {
		t.Errorf("the paused leader still leads at %d after records of epoch 2", a.Epoch())
	}
	if ep, to := a.Promised(); ep != 2 || to != 2 {
		t.Errorf("the paused leader's promise: %d to %d; want 2 to 2", ep, to)
	}
	if ep, to, err := sa.Promise(0); err != nil || ep != 2 || to != 2 {
		t.Errorf("its persisted promise: %d to %d, %v; want 2 to 2", ep, to, err)
	}
	converged(t, "after the round", b, sb, a, sa)
	checkTree(t, "the old leader", a, sa)
	if got := storedState(t, sa, id); got.Completion == nil || got.Completion.Claim != 1 {
		t.Errorf("the old leader's completion: %+v; want claim 1's", got.Completion)
	}
	// And it writes nothing more at epoch 1.
	if err := a.Update(id, 0, 1, []byte("late"), now+3); !errors.Is(err, partition.ErrNotLeader) {
		t.Errorf("a write of the stepped-down leader = %v; want ErrNotLeader", err)
	}
}

// TestOrphanOnUnsealedReplicaNotCarried: an orphan can outlive the epoch
// that refused it on a replica nobody repaired yet. Node 1 leads epoch 1
// and claims a task; node 2 wins epoch 2 from promises of 2 and 3 and
// seals them (it never writes the task). Node 1, paused through that,
// completes the task at epoch 1 in its store. Node 2 dies; node 3 runs the
// handoff to epoch 3 with promises from 1 and 3. Node 1's state of the
// task carries the stamp node 3's does (1): joined, the orphan would come
// in. The rule of the handoff takes from node 1, which epoch 2 did not
// seal, only states stamped 2 (the epoch it seals): the orphan stays out,
// and node 3's push then replaces it on node 1.
func TestOrphanOnUnsealedReplicaNotCarried(t *testing.T) {
	a, sa := replicaOf(t, 1)
	b, _ := replicaOf(t, 2)
	c, sc := replicaOf(t, 3)
	promiseAll(t, 1, 1, a, b, c)
	if err := a.Lead(1); err != nil {
		t.Fatal(err)
	}
	id := task.MakeID(t0, 1, 0)
	enqueue(t, a, t0, spec(id, "q", 0, 3))
	g := mustClaim(t, a, "q", t0)
	merge(t, b, 1, t0, wholeRecords(t, a, id)...)
	merge(t, c, 1, t0, wholeRecords(t, a, id)...)

	// Epoch 2: node 2, sealed {2, 3}; node 1 paused.
	promiseAll(t, 2, 2, b, c)
	if err := b.Lead(2); err != nil {
		t.Fatal(err)
	}
	// The orphan.
	if _, err := a.Complete(id, g.Claim.Index, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	// Epoch 3: node 3, from promisers 1 and 3; sealed(2) = {2, 3}.
	promiseAll(t, 3, 3, a, c)
	if a.Epoch() != 0 {
		t.Fatalf("node 1 leads at %d after promising 3 to node 3", a.Epoch())
	}
	// Node 3 is sealed: what it holds is taken (it is its own replica);
	// node 1 is not: floor 2.
	mergeSrc(t, c, partition.Source{Epoch: 3, Floor: 2, From: 1}, t0+2, wholeRecords(t, a, id)...)
	if st := storedState(t, sc, id); st.Completion != nil {
		t.Fatalf("the handoff carried node 1's orphan completion: %+v", st)
	}
	// Without the rule (node 1 trusted), the same stamps would join it:
	// what the rule is for.
	if st, orphan := storedState(t, sc, id), storedState(t, sa, id); st.Stamp != orphan.Stamp {
		t.Fatalf("stamps %d and %d: the test no longer shows the case", st.Stamp, orphan.Stamp)
	}
	if err := c.Lead(3); err != nil {
		t.Fatal(err)
	}
	mergeSrc(t, a, partition.Source{Epoch: 3, Authority: 3, From: 3}, t0+2, wholeRecords(t, c, id)...)
	converged(t, "after node 3's push", c, sc, a, sa)
	// The claim expires; node 3 grants claim 1.
	now := g.Claim.End + skew
	c.Tick(now)
	if g1 := mustClaim(t, c, "q", now); g1.Claim.Index != 1 || g1.State.Stamp != 3 {
		t.Errorf("claim on node 3: index %d stamped %d; want 1 stamped 3", g1.Claim.Index, g1.State.Stamp)
	}
}

// TestMergeWholeRecordToReplace: a state that replaces another replaces
// its updates too, so a shipment that carries only the write's updates is
// refused (task.ErrNotFound: resend whole) where the replica holds a
// non-zero state of an older line; the whole record then makes the
// replica's updates the sender's, an orphan update dropped.
func TestMergeWholeRecordToReplace(t *testing.T) {
	a, sa := replicaOf(t, 1)
	b, sb := replicaOf(t, 2)
	promiseAll(t, 1, 2, a, b)
	if err := b.Lead(1); err != nil { // b leads epoch 1 and holds an orphan
		t.Fatal(err)
	}
	id := task.MakeID(t0, 1, 0)
	enqueue(t, b, t0, spec(id, "q", 0, 3))
	g := mustClaim(t, b, "q", t0)
	if err := b.Update(id, g.Claim.Index, 0, []byte("u0"), t0); err != nil {
		t.Fatal(err)
	}
	merge(t, a, 1, t0, wholeRecords(t, b, id)...)
	if err := b.Update(id, g.Claim.Index, 1, []byte("orphan"), t0+1); err != nil {
		t.Fatal(err)
	}
	// a wins epoch 2 and renews claim 0 (its first write of the task).
	promiseAll(t, 2, 1, a)
	if err := a.Lead(2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(id, 0, t0+2, ttl); err != nil {
		t.Fatal(err)
	}
	partial := record(t, a, id, false)
	if partial.State.Stamp != 2 {
		t.Fatalf("renewed state stamped %d; want 2", partial.State.Stamp)
	}
	errs := mergeSrcErrs(t, b, partition.Source{Epoch: 2, Authority: 2, From: 1}, t0+2, partial)
	if errs == nil || !errors.Is(errs[0], task.ErrNotFound) {
		t.Fatalf("partial record replacing a state of an older line: %v; want ErrNotFound (send whole)", errs)
	}
	mergeSrc(t, b, partition.Source{Epoch: 2, Authority: 2, From: 1}, t0+2, wholeRecords(t, a, id)...)
	if got := updatesOf(t, sb, id); len(got) != 1 || got[0] != "0/0=u0" {
		t.Errorf("updates after the whole record: %v; want [0/0=u0]", got)
	}
	converged(t, "after the whole record", a, sa, b, sb)
	checkTree(t, "b", b, sb)
}

// TestMergePartialRecordIntoUnclaimed: a replica that holds a task
// unclaimed (a zero state) and missed its claims and updates refuses a
// partial record of a later write (task.ErrNotFound: send whole): taken,
// it would hold the line's state with only that write's updates, and a
// handoff that takes the state from it drops the others everywhere (the
// simulation's seed 300649 lost two claims' acknowledged updates so).
// A first claim's record is Full and taken at once; the whole record
// brings every update.
func TestMergePartialRecordIntoUnclaimed(t *testing.T) {
	a, sa := replicaOf(t, 1)
	b, sb := replicaOf(t, 2)
	promiseAll(t, 1, 1, a, b)
	if err := a.Lead(1); err != nil {
		t.Fatal(err)
	}
	id, other := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1)
	enqueue(t, a, t0, spec(id, "q", 5, 3), spec(other, "q", 0, 3))
	merge(t, b, 1, t0, wholeRecords(t, a, id, other)...) // b holds both unclaimed
	g := mustClaim(t, a, "q", t0)
	if g.Spec.ID != id {
		t.Fatalf("claimed %v; want %v", g.Spec.ID, id)
	}
	if err := a.Update(id, g.Claim.Index, 0, []byte("u0"), t0); err != nil {
		t.Fatal(err)
	}
	// b missed the claim and the update. a wins epoch 2 and renews:
	// the renew's record carries the state and none of the updates.
	promiseAll(t, 2, 1, a)
	if err := a.Lead(2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(id, g.Claim.Index, t0+2, ttl); err != nil {
		t.Fatal(err)
	}
	src := partition.Source{Epoch: 2, Authority: 2, From: 1}
	errs := mergeSrcErrs(t, b, src, t0+2, record(t, a, id, false))
	if errs == nil || !errors.Is(errs[0], task.ErrNotFound) {
		t.Fatalf("partial record with claims into an unclaimed task: %v; want ErrNotFound (send whole)", errs)
	}
	mergeSrc(t, b, src, t0+2, wholeRecords(t, a, id)...)
	if got := updatesOf(t, sb, id); len(got) != 1 || got[0] != "0/0=u0" {
		t.Errorf("updates after the whole record: %v; want [0/0=u0]", got)
	}
	// A first claim's record is whole: taken as shipped.
	g2 := mustClaim(t, a, "q", t0+3)
	if g2.Spec.ID != other || !g2.Record().Full {
		t.Fatalf("first claim of %v: record full %v; want %v, full", g2.Spec.ID, g2.Record().Full, other)
	}
	mergeSrc(t, b, src, t0+3, g2.Record())
	converged(t, "after the first claim's record", a, sa, b, sb)
	checkTree(t, "b", b, sb)
}

// TestMergeStampAboveSender: a record stamped above the epoch it is
// merged at comes from behind a newer leader: refused, nothing written.
func TestMergeStampAboveSender(t *testing.T) {
	a, _ := replicaOf(t, 1)
	b, sb := replicaOf(t, 2)
	promiseAll(t, 3, 1, a)
	if err := a.Lead(3); err != nil {
		t.Fatal(err)
	}
	id := task.MakeID(t0, 1, 0)
	enqueue(t, a, t0, spec(id, "q", 0, 3))
	mustClaim(t, a, "q", t0)
	errs := mergeSrcErrs(t, b, partition.Source{Epoch: 2, Floor: 2}, t0, wholeRecords(t, a, id)...)
	if errs == nil || !errors.Is(errs[0], task.ErrEpoch) {
		t.Fatalf("record stamped 3 at epoch 2: %v; want ErrEpoch", errs)
	}
	if _, err := sb.Spec(0, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused record was written: %v", err)
	}
}

// TestLeaderWritesStamp: every write a leader makes to a task stamps its
// state with the leader's epoch, an update included (which otherwise
// writes no state); a task stamped above the leader's epoch is a newer
// leader's, and the leader steps down rather than write it.
func TestLeaderWritesStamp(t *testing.T) {
	a, sa := replicaOf(t, 1)
	promiseAll(t, 4, 1, a)
	if err := a.Lead(4); err != nil {
		t.Fatal(err)
	}
	id, other := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1)
	enqueue(t, a, t0, spec(id, "q", 1, 3), spec(other, "q", 0, 3))
	g := mustClaim(t, a, "q", t0)
	if st := storedState(t, sa, id); st.Stamp != 4 {
		t.Fatalf("claimed: stamp %d; want 4", st.Stamp)
	}
	// An older line's state (as a carry leaves it), then an update: the
	// update restamps it.
	old := storedState(t, sa, id)
	old.Stamp = 2
	mergeSrc(t, a, partition.Source{Epoch: 4, Authority: 4}, t0, task.Record{ID: id, State: &old, Full: true})
	if err := a.Update(id, g.Claim.Index, 0, []byte("u"), t0+1); err != nil {
		t.Fatal(err)
	}
	if st := storedState(t, sa, id); st.Stamp != 4 {
		t.Errorf("after an update: stamp %d; want 4", st.Stamp)
	}
	checkTree(t, "after the restamping update", a, sa)
	// A newer leader's state of the other task (merged as its records
	// would be, through a higher epoch) makes this one stop.
	newer := task.State{Claims: []task.Claim{{Index: 0, Start: t0, End: t0 + ttl, Epoch: 5}}, Stamp: 5}
	mergeSrc(t, a, partition.Source{Epoch: 5, Authority: 5, From: 1}, t0+1, task.Record{ID: other, State: &newer, Full: true})
	if _, err := a.Renew(other, 0, t0+2, ttl); !errors.Is(err, partition.ErrNotLeader) {
		t.Errorf("renew of a task a newer leader wrote = %v; want ErrNotLeader", err)
	}
	if a.Epoch() != 0 {
		t.Errorf("still leading at %d", a.Epoch())
	}
}

// Found by the fault suite: an enqueue's first attempt reached one
// replica and its retry (after a failover) was written at another leader,
// with the enqueue time and not-before of the retry's node: replicas held
// one task under two specs, and reads of them disagreed for good. Each
// keeps the spec that comes first, and anti-entropy, which now tells the
// two apart, brings both to it.
func TestMergeRetriedEnqueueConverges(t *testing.T) {
	a, sa := replicaOf(t, 1)
	b, sb := replicaOf(t, 2)
	promiseAll(t, 1, 2, b) // b took the first attempt at epoch 1
	id := task.MakeID(t0, 1, 0)
	first := spec(id, "q", 0, 3)
	first.EnqueuedAt, first.NotBefore = t0, t0+100
	retry := *first
	retry.EnqueuedAt, retry.NotBefore = t0+5000, t0+5100
	mergeSrc(t, b, partition.Source{Epoch: 1, Authority: 1, From: 2}, t0, task.Record{ID: id, Spec: first})
	promiseAll(t, 2, 1, a, b)
	if err := a.Lead(2); err != nil {
		t.Fatal(err)
	}
	enqueue(t, a, t0+5000, &retry) // the retry, at the new leader
	// The leader ships the retry's spec: b keeps its earlier one.
	mergeSrc(t, b, partition.Source{Epoch: 2, Authority: 2, From: 1}, t0+5000, wholeRecords(t, a, id)...)
	if sp, err := sb.FullSpec(0, id); err != nil || sp.EnqueuedAt != t0 {
		t.Fatalf("b's spec after the retry's: %+v, %v; want enqueued at %d", sp, err, t0)
	}
	if a.TreeSnapshot().Equal(b.TreeSnapshot()) {
		t.Fatal("replicas holding other specs have equal trees: anti-entropy would never reconcile them")
	}
	// Anti-entropy: the leader pulls b's (earlier: taken) and pushes.
	aaeRound(t, a, b, antientropy.DefaultConfig().Limits, antientropy.Cursor{}, t0+5000)
	for name, s := range map[string]*store.Store{"a": sa, "b": sb} {
		if sp, err := s.FullSpec(0, id); err != nil || sp.EnqueuedAt != t0 || sp.NotBefore != t0+100 {
			t.Errorf("%s's spec: %+v, %v; want the first attempt's times", name, sp, err)
		}
	}
	b.Tick(t0 + 5000) // b's timers at the leader's time
	converged(t, "after anti-entropy", a, sa, b, sb)
	checkTree(t, "a", a, sa)
	checkTree(t, "b", b, sb)
}
