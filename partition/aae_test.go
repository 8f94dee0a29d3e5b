package partition_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Anti-entropy": each replica keeps a hash tree of
// its records, updated on every write; replicas holding the same records
// have equal trees, and a comparison names the tasks that differ, which
// whole records then repair.

// storeTree returns the tree of shape a replica loaded from s (partition
// 0) builds: what the tree of every replica over s must equal, whatever
// writes made it (INVARIANT: the XOR of the items of the stored records).
func storeTree(t *testing.T, s *store.Store, shape antientropy.Shape) *antientropy.Tree {
	t.Helper()
	cfg := config(s)
	cfg.TreeShape = shape
	return loaded(t, cfg, t0).TreeSnapshot()
}

// checkTree checks r's tree against the one its store rebuilds.
func checkTree(t *testing.T, what string, r *partition.Replica, s *store.Store) {
	t.Helper()
	got := r.TreeSnapshot()
	if want := storeTree(t, s, got.Shape()); !got.Equal(want) {
		t.Fatalf("%s: tree root %v; the store rebuilds %v", what, got.Root(), want.Root())
	}
	if err := r.CheckCounts(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wholeRecords reads the whole records of ids from r, as anti-entropy
// ships them.
func wholeRecords(t *testing.T, r *partition.Replica, ids ...task.ID) []task.Record {
	t.Helper()
	recs, err := r.Records(ids)
	if err != nil {
		t.Fatalf("records: %v", err)
	}
	return recs
}

// workLeader runs every kind of write on l, over tasks of its own: new
// tasks (one with an initial state), edges, claims, updates, completion,
// failure, snooze, renew, deps done and a requeue. After each write it
// appends the whole records of the tasks written to *shipped, as
// anti-entropy would read them at that moment. It returns the time
// reached.
func workLeader(t *testing.T, l *partition.Replica, shipped *[]task.Record) int64 {
	t.Helper()
	now := t0
	ids := make([]task.ID, 6)
	for i := range ids {
		ids[i] = task.MakeID(t0, 1, uint32(i))
	}
	a, b, c, d, e, f := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	ship := func(ids ...task.ID) { *shipped = append(*shipped, wholeRecords(t, l, ids...)...) }
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sf := spec(f, "q", 0, 1)
	sf.Deps = []task.ID{a, b}
	must("enqueue", l.Enqueue([]partition.NewTask{
		{Spec: spec(a, "q", 9, 3)}, {Spec: spec(b, "q", 8, 1)}, {Spec: spec(c, "q", 7, 3)},
		{Spec: spec(d, "q", 6, 3)}, {Spec: spec(e, "q", 5, 3)},
		{Spec: sf, State: task.State{DepsDone: []task.ID{b}}},
	}, now))
	ship(ids...)
	_, dur, err := l.AddDependents(a, []task.ID{f, task.MakeID(t0, 2, 0)})
	must("add dependents", err)
	must("add dependents: wait", dur.Wait())
	ship(a)

	ga := mustClaim(t, l, "q", now)
	must("update", l.Update(a, ga.Claim.Index, 0, []byte("half"), now))
	ship(a)
	must("update", l.Update(a, ga.Claim.Index, 1, nil, now))
	_, err = l.Complete(a, ga.Claim.Index, nil, now)
	must("complete", err)
	ship(a)
	must("dep done", l.DepDone(f, a, now))
	ship(f)

	// Claims go by priority: b, then c, then d.
	gb := mustClaim(t, l, "q", now)
	must("fail", l.Fail(b, gb.Claim.Index, "boom", nil, now)) // max attempts 1: dead
	ship(b)
	gc := mustClaim(t, l, "q", now)
	must("snooze", l.Snooze(c, gc.Claim.Index, 600_000, now))
	ship(c)
	gd := mustClaim(t, l, "q", now)
	_, err = l.Renew(d, gd.Claim.Index, now+1, ttl)
	must("renew", err)
	ship(d)
	must("requeue", l.Requeue(b, now))
	ship(b)
	return now
}

// TestTreeSameRecordsAnyOrder: replicas that merge the same whole records,
// in any order, in one call or many, repeated or not, hold equal trees,
// equal to the leader's that wrote them through its own operations and
// to the one their stores rebuild; merging them again changes nothing.
func TestTreeSameRecordsAnyOrder(t *testing.T) {
	sl := newStore(t)
	l := leader(t, sl)
	var shipped []task.Record
	now := workLeader(t, l, &shipped)
	want := l.TreeSnapshot()
	checkTree(t, "leader", l, sl)

	reversed := slices.Clone(shipped)
	slices.Reverse(reversed)
	shuffled := slices.Clone(shipped)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	one := func(recs []task.Record) [][]task.Record {
		out := make([][]task.Record, len(recs))
		for i := range recs {
			out[i] = recs[i : i+1]
		}
		return out
	}
	tests := []struct {
		name  string
		calls [][]task.Record
	}{
		{"in order, one per call", one(shipped)},
		{"reversed, one per call", one(reversed)},
		{"shuffled, in one call", [][]task.Record{shuffled}},
		{"twice in one call", [][]task.Record{append(slices.Clone(shipped), reversed...)}},
		{"latest only", [][]task.Record{wholeRecords(t, l, shipped[0].ID, shipped[1].ID, shipped[2].ID, shipped[3].ID, shipped[4].ID, shipped[5].ID)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sf := newStore(t)
			f := follower(t, sf)
			for _, recs := range tc.calls {
				merge(t, f, 1, now, recs...)
			}
			if got := f.TreeSnapshot(); !got.Equal(want) {
				t.Fatalf("follower root %v; leader %v", got.Root(), want.Root())
			}
			checkTree(t, "follower", f, sf)
			for _, recs := range tc.calls {
				merge(t, f, 1, now, recs...)
			}
			if got := f.TreeSnapshot(); !got.Equal(want) {
				t.Fatalf("after merging again: root %v; want %v", got.Root(), want.Root())
			}
		})
	}
	// The leader merging its own records back writes nothing.
	merge(t, l, 1, now, shipped...)
	if got := l.TreeSnapshot(); !got.Equal(want) {
		t.Fatalf("leader after merging its own records: root %v; want %v", got.Root(), want.Root())
	}
}

// peer is the remote side of a comparison, as the node drives it: every
// request and answer goes through antientropy's byte formats, and the
// remote replica answers with AnswerNodes and AnswerBuckets.
type peer struct {
	r     *partition.Replica
	shape antientropy.Shape // the asker's
}

var _ antientropy.Remote = peer{}

func (p peer) Nodes(_ context.Context, level int, idx []int) ([]antientropy.Digest, error) {
	req, err := antientropy.DecodeNodesRequest(antientropy.NodesRequest{Shape: p.shape, Level: level, Idx: idx}.Append(nil))
	if err != nil {
		return nil, err
	}
	ds, err := p.r.AnswerNodes(req)
	if err != nil {
		return nil, err
	}
	return antientropy.DecodeDigests(antientropy.AppendDigests(nil, ds), len(idx))
}

func (p peer) Buckets(_ context.Context, buckets []int) ([][]antientropy.Entry, error) {
	req, err := antientropy.DecodeBucketsRequest(antientropy.BucketsRequest{Shape: p.shape, Buckets: buckets}.Append(nil))
	if err != nil {
		return nil, err
	}
	lists, err := p.r.AnswerBuckets(req)
	if err != nil {
		return nil, err
	}
	out := make([][]antientropy.Entry, len(lists))
	for i, es := range lists {
		if out[i], err = antientropy.DecodeEntries(antientropy.AppendEntries(nil, es), antientropy.IDsPerRoundMax); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// aaeRound runs one anti-entropy round of local against remote, as the
// node does: Diff a snapshot of local's tree, then merge remote's records
// of Pull into local and local's records of Push into remote, each at the
// receiver's own fence.
func aaeRound(t *testing.T, local, remote *partition.Replica, lim antientropy.Limits, from antientropy.Cursor, now int64) antientropy.Result {
	t.Helper()
	snap := local.TreeSnapshot()
	list := func(_ context.Context, buckets []int) ([][]antientropy.Entry, error) {
		return local.ListBuckets(buckets)
	}
	res, err := antientropy.Diff(context.Background(), snap, peer{remote, snap.Shape()}, list, lim, from)
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	// Whichever side leads is the authority (node's anti-entropy): its
	// records replace the follower's; the follower's reach it above its
	// floor only.
	ep := max(local.Epoch(), remote.Epoch())
	mergeFrom := func(to, from *partition.Replica, ids []task.ID) {
		src := partition.Source{Epoch: ep, Floor: ep}
		if from.Epoch() == ep {
			src = partition.Source{Epoch: ep, Authority: ep}
		}
		mergeSrc(t, to, src, now, wholeRecords(t, from, ids...)...)
	}
	if len(res.Pull) > 0 {
		mergeFrom(local, remote, taskIDs(res.Pull))
	}
	if len(res.Push) > 0 {
		mergeFrom(remote, local, taskIDs(res.Push))
	}
	return res
}

// taskIDs converts ids from antientropy's type (the same array).
func taskIDs(ids []antientropy.ID) []task.ID {
	out := make([]task.ID, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// TestAAERepairsMissedRecords: a follower that missed k records of its
// leader (new tasks, and writes to tasks it holds) finds exactly those
// through Diff: it pulls every one and pushes the ones it holds in an
// older version. After one repair round the trees are equal, and the
// replicas converged. With small limits, rounds from the returned cursor
// sweep the whole tree until the replicas are in sync.
func TestAAERepairsMissedRecords(t *testing.T) {
	const base = 1500
	unlimited := antientropy.Limits{BucketsPerRound: antientropy.BucketsMax, IDsPerRound: antientropy.IDsPerRoundMax}
	tests := []struct {
		name   string
		missed int
		shape  antientropy.Shape
		lim    antientropy.Limits
	}{
		{"one missed", 1, antientropy.DefaultConfig().Shape, unlimited},
		{"1000 missed", 1000, antientropy.DefaultConfig().Shape, unlimited},
		{"1000 missed, bounded rounds", 1000, antientropy.DefaultLocalConfig().Shape, antientropy.DefaultLocalConfig().Limits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sl, sf := newStore(t), newStore(t)
			lcfg, fcfg := config(sl), followerCfg(t, sf)
			lcfg.TreeShape, fcfg.TreeShape = tc.shape, tc.shape
			l, f := leaderCfg(t, lcfg), loaded(t, fcfg, t0)
			now := fillLeader(t, l, base, rand.New(rand.NewPCG(5, 6)))
			merge(t, f, 1, now, wholeRecords(t, l, allIDs(t, l)...)...)
			converged(t, "initial copy", l, sl, f, sf)

			pull, push := missWrites(t, l, tc.missed, now)
			if l.TreeSnapshot().Equal(f.TreeSnapshot()) {
				t.Fatal("trees equal after missed writes")
			}
			if tc.lim == unlimited {
				res := aaeRound(t, f, l, tc.lim, antientropy.Cursor{}, now)
				if got := sortedIDs(taskIDs(res.Pull)); !slices.Equal(got, pull) {
					t.Errorf("pull %d ids; want the %d missed (%d extra or lacking)", len(got), len(pull), len(symmetricDiff(got, pull)))
				}
				if got := sortedIDs(taskIDs(res.Push)); !slices.Equal(got, push) {
					t.Errorf("push %d ids; want the %d held in an older version", len(got), len(push))
				}
				if res.Truncated {
					t.Errorf("unlimited round truncated")
				}
			} else {
				var cur antientropy.Cursor
				rounds := 0
				// Each round repairs up to BucketsPerRound buckets: the
				// tree's buckets bound the rounds needed, twice over.
				for maxRounds := 2 * tc.shape.Buckets; ; rounds++ {
					if rounds == maxRounds {
						t.Fatalf("not in sync after %d rounds", rounds)
					}
					res := aaeRound(t, f, l, tc.lim, cur, now)
					if res.InSync {
						break
					}
					cur = res.Next
				}
				t.Logf("in sync after %d rounds", rounds)
			}
			if lt, ft := l.TreeSnapshot(), f.TreeSnapshot(); !lt.Equal(ft) {
				t.Fatalf("after repair: leader root %v, follower %v", lt.Root(), ft.Root())
			}
			converged(t, "after repair", l, sl, f, sf)
			if res := aaeRound(t, f, l, tc.lim, antientropy.Cursor{}, now); !res.InSync {
				t.Errorf("next round: %+v; want in sync", res)
			}
		})
	}
}

// TestAAEConcurrentWrites: rounds run while the leader keeps writing (the
// listings and record reads run outside the replica's lock); once the
// writes stop, rounds bring the follower in sync.
func TestAAEConcurrentWrites(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	lim := antientropy.DefaultConfig().Limits
	now := fillLeader(t, l, 300, rand.New(rand.NewPCG(11, 12)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			id := task.MakeID(now, 1, uint32(2_000_000+i))
			if err := l.Enqueue([]partition.NewTask{{Spec: spec(id, "q0", 0, 3)}}, now); err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			g, err := l.ClaimBest("q1", now, ttl, nil)
			if err != nil {
				t.Errorf("claim: %v", err)
				return
			}
			if g != nil {
				if err := l.Update(g.Spec.ID, g.Claim.Index, 0, []byte("u"), now); err != nil {
					t.Errorf("update: %v", err)
					return
				}
			}
		}
	}()
	var cur antientropy.Cursor
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		cur = aaeRound(t, f, l, lim, cur, now).Next
	}
	// Writes stopped: a bounded number of rounds converges.
	for rounds := 0; ; rounds++ {
		if rounds == antientropy.DefaultConfig().Shape.Buckets {
			t.Fatalf("not in sync after %d rounds", rounds)
		}
		res := aaeRound(t, f, l, lim, cur, now)
		if res.InSync {
			break
		}
		cur = res.Next
	}
	converged(t, "after concurrent rounds", l, sl, f, sf)
}

// allIDs returns every id r holds, in id order.
func allIDs(t *testing.T, r *partition.Replica) []task.ID {
	t.Helper()
	var ids []task.ID
	if err := r.Export(task.ID{}, func(rec task.Record) (bool, error) { ids = append(ids, rec.ID); return true, nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// missWrites makes n writes on l that no follower is told of: about half
// new tasks, the rest claims (with an update on every other) and new
// edges of tasks already held. It returns, sorted, the ids written (what
// a follower must pull) and those of them that were held before (what it
// must also push: it holds another version).
func missWrites(t *testing.T, l *partition.Replica, n int, now int64) (pull, push []task.ID) {
	t.Helper()
	held := allIDs(t, l)
	written := map[task.ID]bool{}
	for i := range n {
		switch i % 4 {
		case 0, 2:
			id := task.MakeID(now, 1, uint32(1_000_000+i))
			enqueue(t, l, now, spec(id, fmt.Sprintf("q%d", i%3), 0, 3))
			pull = append(pull, id)
		case 1:
			g := mustClaim(t, l, fmt.Sprintf("q%d", i%3), now)
			if i%8 == 1 {
				if err := l.Update(g.Spec.ID, g.Claim.Index, 0, []byte("missed"), now); err != nil {
					t.Fatal(err)
				}
			}
			written[g.Spec.ID] = true
		case 3:
			dep := held[(i*7919)%len(held)]
			if _, d, err := l.AddDependents(dep, []task.ID{task.MakeID(now, 9, uint32(i))}); errors.Is(err, task.ErrConflict) {
				continue // a cancelled dep takes no dependents
			} else if err != nil {
				t.Fatal(err)
			} else if err := d.Wait(); err != nil {
				t.Fatal(err)
			}
			written[dep] = true
		}
	}
	for id := range written {
		push = append(push, id)
	}
	pull = append(pull, push...)
	return sortedIDs(pull), sortedIDs(push)
}

func symmetricDiff(a, b []task.ID) []task.ID {
	var out []task.ID
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	for _, id := range b {
		if !slices.Contains(a, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestListBuckets: the entries of every bucket XOR to its leaf, each task
// is in its own bucket, and a request out of shape is refused.
func TestListBuckets(t *testing.T) {
	s := newStore(t)
	cfg := config(s)
	cfg.TreeShape = antientropy.DefaultLocalConfig().Shape
	l := leaderCfg(t, cfg)
	fillLeader(t, l, 300, rand.New(rand.NewPCG(9, 9)))
	tree := l.TreeSnapshot()
	shape := tree.Shape()
	all := make([]int, shape.Buckets)
	for b := range all {
		all[b] = b
	}
	lists, err := l.ListBuckets(all)
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for b, es := range lists {
		var sum antientropy.Digest
		for i, e := range es {
			if shape.BucketOf(e.ID) != b {
				t.Errorf("bucket %d lists %v of bucket %d", b, e.ID, shape.BucketOf(e.ID))
			}
			if i > 0 && task.ID(es[i-1].ID).Compare(e.ID) >= 0 {
				t.Errorf("bucket %d: entries not in id order", b)
			}
			sum = sum.Xor(e.Digest)
		}
		if sum != tree.Leaf(b) {
			t.Errorf("bucket %d: entries XOR to %v; leaf %v", b, sum, tree.Leaf(b))
		}
		listed += len(es)
	}
	if listed != 300 {
		t.Errorf("%d entries listed; want 300", listed)
	}
	// A subset lists the same entries.
	sub, err := l.ListBuckets([]int{3, 17})
	if err != nil || !slices.Equal(sub[0], lists[3]) || !slices.Equal(sub[1], lists[17]) {
		t.Errorf("ListBuckets([3 17]) = %v, %v; want the same lists as of all buckets", sub, err)
	}

	bad := []struct {
		name    string
		buckets []int
		want    error
	}{
		{"out of range", []int{shape.Buckets}, antientropy.ErrShape},
		{"negative", []int{-1}, antientropy.ErrShape},
		{"not increasing", []int{4, 4}, antientropy.ErrMalformed},
	}
	for _, tc := range bad {
		if _, err := l.ListBuckets(tc.buckets); !errors.Is(err, tc.want) {
			t.Errorf("%s: ListBuckets(%v) = %v; want %v", tc.name, tc.buckets, err, tc.want)
		}
	}
	other := antientropy.DefaultConfig().Shape
	if _, err := l.AnswerBuckets(antientropy.BucketsRequest{Shape: other, Buckets: []int{0}}); !errors.Is(err, antientropy.ErrShape) {
		t.Errorf("AnswerBuckets of another shape = %v; want ErrShape", err)
	}
	if _, err := l.AnswerNodes(antientropy.NodesRequest{Shape: other, Level: 0, Idx: []int{0}}); !errors.Is(err, antientropy.ErrShape) {
		t.Errorf("AnswerNodes of another shape = %v; want ErrShape", err)
	}
	// Records skips unknown ids and repeats, in id order.
	ids := allIDs(t, l)
	recs := wholeRecords(t, l, ids[5], task.MakeID(1, 1, 1), ids[2], ids[5])
	if len(recs) != 2 || recs[0].ID != ids[2] || recs[1].ID != ids[5] || recs[0].Spec == nil || recs[0].State == nil {
		t.Errorf("Records = %+v; want the whole records of %v and %v", recs, ids[2], ids[5])
	}
}

// TestTreeReload: a replica reopened on the same database (closed and
// opened again) rebuilds the tree it had.
func TestTreeReload(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *store.Store {
		s, err := store.Open(store.Config{Dir: "/db", FS: fs, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	l := leader(t, s)
	var shipped []task.Record
	workLeader(t, l, &shipped)
	fillLeader(t, l, 200, rand.New(rand.NewPCG(3, 3)))
	before := l.TreeSnapshot()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	if after := loaded(t, config(s), t0).TreeSnapshot(); !after.Equal(before) {
		t.Errorf("root after reopening %v; before %v", after.Root(), before.Root())
	}
}

// TestTreeRelease: Release empties the tree; taking the partition back
// rebuilds it as the records come.
func TestTreeRelease(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	var shipped []task.Record
	now := workLeader(t, l, &shipped)
	merge(t, f, 1, now, shipped...)
	if err := f.ReleaseAt(1, f.Root()); err != nil {
		t.Fatal(err)
	}
	if root := f.TreeSnapshot().Root(); !root.IsZero() {
		t.Errorf("root after release %v; want zero", root)
	}
	checkTree(t, "released", f, sf)
	merge(t, f, 1, now, wholeRecords(t, l, allIDs(t, l)...)...)
	converged(t, "taken back", l, sl, f, sf)
}

// TestTreeMemoryConstant: the tree's memory depends on its shape, not on
// the number of tasks.
func TestTreeMemoryConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("enqueues 1e5 tasks")
	}
	const small, large, batch = 1_000, 100_000, 1_000
	s := newStore(t)
	r := leader(t, s)
	empty := r.TreeBytes()
	var at []int
	for n := 0; n < large; n += batch {
		nts := make([]partition.NewTask, batch)
		for i := range nts {
			nts[i] = partition.NewTask{Spec: spec(task.MakeID(t0, 1, uint32(n+i)), "q", 0, 3)}
		}
		if err := r.Enqueue(nts, t0); err != nil {
			t.Fatal(err)
		}
		if n+batch == small || n+batch == large {
			at = append(at, r.TreeBytes())
		}
	}
	if at[0] != empty || at[1] != empty {
		t.Errorf("tree bytes %d empty, %d at %d tasks, %d at %d tasks; want equal", empty, at[0], small, at[1], large)
	}
	if want := antientropy.DefaultConfig().Shape.Buckets * antientropy.DigestLen; empty < want {
		t.Errorf("tree bytes %d; want at least the leaves' %d", empty, want)
	}
	if r.TreeSnapshot().Root().IsZero() {
		t.Errorf("tree of %d tasks is empty", large)
	}
}

// TestTreeUnchangedByRefusals: a write refused in whole or in part, or
// that adds nothing (a retry), leaves the tree as it was: refused
// records, merges fenced off, conflicting enqueues and updates, fenced
// claims, invalid edges and repeated ones.
func TestTreeUnchangedByRefusals(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	var shipped []task.Record
	now := workLeader(t, l, &shipped)
	a, fresh := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 100)
	ge := mustClaim(t, l, "q", now)
	e := ge.Spec.ID
	if err := l.Update(e, ge.Claim.Index, 0, []byte("x"), now); err != nil {
		t.Fatal(err)
	}
	merge(t, f, 1, now, wholeRecords(t, l, allIDs(t, l)...)...)
	converged(t, "setup", l, sl, f, sf)

	other := spec(a, "q", 0, 3)
	other.Data = []byte("other payload")
	completedClaim := wholeRecords(t, l, a)[0]
	completedClaim.Spec, completedClaim.Updates, completedClaim.Dependents = nil, nil, nil
	completedClaim.State = &task.State{Claims: append(slices.Clone(completedClaim.State.Claims), task.Claim{Index: 9, Start: now, End: now + ttl}), Stamp: completedClaim.State.Stamp}
	eState := wholeRecords(t, l, e)[0].State // an update comes with its task's state
	refused := func(r *partition.Replica, recs ...task.Record) error {
		d, errs, err := r.Merge(partition.Source{Epoch: 1, Authority: 1}, recs, now)
		if err != nil {
			return err
		}
		if err := d.Wait(); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	tests := []struct {
		name string
		on   *partition.Replica
		do   func(r *partition.Replica) error
		want error // nil: accepted without a change
	}{
		{"merge: another spec under a held id", f, func(r *partition.Replica) error {
			return refused(r, task.Record{ID: a, Spec: other})
		}, task.ErrConflict},
		{"merge: unknown task without spec", f, func(r *partition.Replica) error {
			return refused(r, task.Record{ID: fresh, State: &task.State{}})
		}, task.ErrNotFound},
		{"merge: other data under a held update key", f, func(r *partition.Replica) error {
			return refused(r, task.Record{ID: e, State: eState, Updates: []task.Update{{Claim: ge.Claim.Index, Seq: 0, Data: []byte("y")}}})
		}, task.ErrConflict},
		{"merge: a new claim on a completed task", f, func(r *partition.Replica) error {
			return refused(r, completedClaim)
		}, task.ErrCompleted},
		{"merge: malformed state", f, func(r *partition.Replica) error {
			return refused(r, task.Record{ID: e, State: &task.State{DepsDone: []task.ID{fresh, a}}})
		}, task.ErrInvalid},
		{"merge below the fence", l, func(r *partition.Replica) error {
			_, _, err := r.Merge(partition.Source{}, wholeRecords(t, l, allIDs(t, l)...), now)
			return err
		}, task.ErrEpoch},
		{"merge of whole records held", f, func(r *partition.Replica) error {
			return refused(r, wholeRecords(t, l, allIDs(t, l)...)...)
		}, nil},
		{"enqueue: a fresh task and a conflicting one", l, func(r *partition.Replica) error {
			return r.Enqueue([]partition.NewTask{{Spec: spec(fresh, "q", 0, 3)}, {Spec: other, CheckExisting: true}}, now)
		}, task.ErrConflict},
		{"enqueue: one id twice with other content", l, func(r *partition.Replica) error {
			twin := spec(fresh, "q", 1, 3)
			return r.Enqueue([]partition.NewTask{{Spec: spec(fresh, "q", 0, 3)}, {Spec: twin}}, now)
		}, task.ErrConflict},
		{"enqueue: a node-issued id that is held", l, func(r *partition.Replica) error {
			return r.Enqueue([]partition.NewTask{{Spec: other}}, now)
		}, task.ErrConflict},
		{"enqueue retry", l, func(r *partition.Replica) error {
			return r.Enqueue([]partition.NewTask{{Spec: spec(a, "q", 9, 3), CheckExisting: true}}, now)
		}, nil},
		{"update: other data under a held key", l, func(r *partition.Replica) error {
			return r.Update(e, ge.Claim.Index, 0, []byte("y"), now)
		}, task.ErrConflict},
		{"update retry", l, func(r *partition.Replica) error {
			return r.Update(e, ge.Claim.Index, 0, []byte("x"), now)
		}, nil},
		{"complete retry", l, func(r *partition.Replica) error {
			_, err := r.Complete(a, 0, nil, now)
			return err
		}, nil},
		{"complete at another seq", l, func(r *partition.Replica) error {
			_, err := r.Complete(a, 0, ptr(uint64(0)), now)
			return err
		}, task.ErrConflict},
		{"complete at a seq ahead of the history", l, func(r *partition.Replica) error {
			_, err := r.Complete(e, ge.Claim.Index, ptr(uint64(5)), now)
			return err
		}, task.ErrSeq},
		{"renew of an unknown claim", l, func(r *partition.Replica) error {
			_, err := r.Renew(e, ge.Claim.Index+7, now, ttl)
			return err
		}, task.ErrNoSuchClaim},
		{"add dependents: one invalid", l, func(r *partition.Replica) error {
			_, _, err := r.AddDependents(a, []task.ID{task.MakeID(t0, 3, 3), a})
			return err
		}, task.ErrInvalid},
		{"add dependents: held edges", l, func(r *partition.Replica) error {
			_, d, err := r.AddDependents(a, []task.ID{task.MakeID(t0, 2, 0), task.MakeID(t0, 1, 5), task.MakeID(t0, 2, 0)})
			if err != nil {
				return err
			}
			return d.Wait()
		}, nil},
	}
	for _, tc := range tests {
		before := tc.on.TreeSnapshot()
		err := tc.do(tc.on)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v; want no error", tc.name, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
		if after := tc.on.TreeSnapshot(); !after.Equal(before) {
			t.Errorf("%s: root %v; want it unchanged at %v", tc.name, after.Root(), before.Root())
		}
	}
	converged(t, "after refusals", l, sl, f, sf)
}

// TestUpdateAfterGap: a leader whose claimed task got an update key past
// a gap of its history by a merge never writes that key again, even once
// the gap is filled and its cached count of the history lags: the key
// keeps its value and its tree item is counted once.
func TestUpdateAfterGap(t *testing.T) {
	s := newStore(t)
	l := leader(t, s)
	id := task.MakeID(t0, 1, 0)
	enqueue(t, l, t0, spec(id, "q", 0, 3))
	g := mustClaim(t, l, "q", t0)
	idx := g.Claim.Index
	if err := l.Update(id, idx, 0, []byte("zero"), t0); err != nil {
		t.Fatal(err)
	}
	merge(t, l, 1, t0, task.Record{ID: id, State: record(t, l, id, false).State, Updates: []task.Update{{Claim: idx, Seq: 2, Data: []byte("two")}}})
	checkTree(t, "merged past a gap", l, s)
	steps := []struct {
		seq  uint64
		data string
		want error
	}{
		{1, "one", nil},
		{2, "other", task.ErrConflict},
		{2, "two", nil}, // a repeat of the merged key
		{3, "three", nil},
		{5, "five", task.ErrSeq},
	}
	for _, st := range steps {
		if err := l.Update(id, idx, st.seq, []byte(st.data), t0); !errors.Is(err, st.want) {
			t.Errorf("update seq %d %q = %v; want %v", st.seq, st.data, err, st.want)
		}
		checkTree(t, fmt.Sprintf("after update seq %d", st.seq), l, s)
	}
	if v, err := s.Update(0, id, idx, 2); err != nil || string(v) != "two" {
		t.Errorf("update seq 2 holds %q, %v; want the merged value", v, err)
	}
}

// BenchmarkReplicaEnqueue measures one enqueue of a task with a 1 KiB
// payload on a replica, hash tree included (BenchmarkDigests in
// digest_test.go measures the digests alone).
func BenchmarkReplicaEnqueue(b *testing.B) {
	const payload = 1 << 10
	s, err := store.Open(store.Config{Dir: "/db", FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := partition.New(config(s))
	if err := r.Load(t0); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, payload)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sp := &task.Spec{ID: task.MakeID(t0, 1, uint32(i)), Queue: "q", MaxAttempts: 3, EnqueuedAt: t0, Data: data}
		if err := r.Enqueue([]partition.NewTask{{Spec: sp}}, t0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchPartition returns a store holding n tasks with 1 KiB payloads in
// partition 0, a third of them claimed with an update.
func benchPartition(b *testing.B, n int) *store.Store {
	b.Helper()
	const payload, batch = 1 << 10, 1000
	s, err := store.Open(store.Config{Dir: "/db", FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	r := partition.New(config(s))
	if err := r.Load(t0); err != nil {
		b.Fatal(err)
	}
	if err := r.Promise(1, 1); err != nil {
		b.Fatal(err)
	}
	if err := r.Lead(1); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, payload)
	for i := 0; i < n; i += batch {
		nts := make([]partition.NewTask, batch)
		for j := range nts {
			nts[j] = partition.NewTask{Spec: &task.Spec{ID: task.MakeID(t0, 1, uint32(i+j)), Queue: "q", MaxAttempts: 3, Data: data}}
		}
		if err := r.Enqueue(nts, t0); err != nil {
			b.Fatal(err)
		}
	}
	for range n / 3 {
		g, err := r.ClaimBest("q", t0, ttl, nil)
		if err != nil || g == nil {
			b.Fatalf("claim: %v, %v", g, err)
		}
		if err := r.Update(g.Spec.ID, g.Claim.Index, 0, data, t0); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkListBuckets measures listing a round's worth of buckets
// (DefaultConfig's BucketsPerRound of its 1024) in a partition of 1e5
// tasks: a pass over the ids plus the listed records read and hashed.
func BenchmarkListBuckets(b *testing.B) {
	const n = 100_000
	s := benchPartition(b, n)
	r := partition.New(config(s))
	if err := r.Load(t0); err != nil {
		b.Fatal(err)
	}
	buckets := make([]int, antientropy.DefaultConfig().Limits.BucketsPerRound)
	for i := range buckets {
		buckets[i] = i * (antientropy.DefaultConfig().Shape.Buckets / len(buckets))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ListBuckets(buckets); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures Load (indexes and tree rebuilt, every record read
// whole and hashed) of a partition of 1e5 tasks.
func BenchmarkLoad(b *testing.B) {
	const n = 100_000
	s := benchPartition(b, n)
	b.ReportAllocs()
	for b.Loop() {
		if err := partition.New(config(s)).Load(t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
}

// BenchmarkAAEInSync measures one anti-entropy round between two replicas
// of a partition of 1e6 tasks that hold the same records: a tree snapshot,
// the roots compared through the wire codec, nothing listed. The round's
// work is the tree's (fixed by its shape), not the partition's.
//
//	go test -run '^$' -bench AAEInSync -benchtime 2000x ./partition/
func BenchmarkAAEInSync(b *testing.B) {
	const n, batch = 1_000_000, 1000
	s, err := store.Open(store.Config{Dir: "/db", FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	l := partition.New(config(s))
	if err := l.Load(t0); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 100)
	for i := 0; i < n; i += batch {
		nts := make([]partition.NewTask, batch)
		for j := range nts {
			nts[j] = partition.NewTask{Spec: &task.Spec{ID: task.MakeID(t0, 1, uint32(i+j)), Queue: "q", MaxAttempts: 3, Data: data}}
		}
		if err := l.Enqueue(nts, t0); err != nil {
			b.Fatal(err)
		}
	}
	// The peer: another replica loaded from the same records.
	f := partition.New(config(s))
	if err := f.Load(t0); err != nil {
		b.Fatal(err)
	}
	lim := antientropy.DefaultConfig().Limits
	bytes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		snap := l.TreeSnapshot()
		list := func(_ context.Context, buckets []int) ([][]antientropy.Entry, error) { return l.ListBuckets(buckets) }
		res, err := antientropy.Diff(context.Background(), snap, peer{f, snap.Shape()}, list, lim, antientropy.Cursor{})
		if err != nil || !res.InSync {
			b.Fatalf("round: %+v, %v", res, err)
		}
		bytes = res.Stats.BytesSent + res.Stats.BytesReceived
	}
	b.ReportMetric(float64(bytes), "bytes/round")
	b.ReportMetric(float64(l.TreeBytes()), "tree-bytes")
}
