package antientropy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// mutation is how a test makes two replicas differ on one task.
type mutation int

const (
	remoteLacks mutation = iota // the remote misses the task: push it
	localLacks                  // the local side misses it: pull it
	changed                     // both hold it, in other versions: both
)

func (m mutation) String() string {
	return [...]string{"remote lacks", "local lacks", "changed"}[m]
}

// diverge makes local and remote (clones of baseReplica) differ on the
// tasks of indexes, and returns the ids Diff must report, in bucket then id
// order (the order of a round from cursor 0).
func diverge(local, remote *replica, indexes []int, m mutation) (pull, push []ID) {
	for _, i := range indexes {
		id := testID(i)
		switch m {
		case remoteLacks:
			remote.del(id)
			push = append(push, id)
		case localLacks:
			local.del(id)
			pull = append(pull, id)
		case changed:
			remote.put(id, testTaskDigest(id, i, 1))
			pull, push = append(pull, id), append(push, id)
		}
	}
	byBucket := func(ids []ID) {
		slices.SortFunc(ids, func(a, b ID) int {
			if c := local.tree.BucketOf(a) - local.tree.BucketOf(b); c != 0 {
				return c
			}
			return compareEntries(Entry{ID: a}, Entry{ID: b})
		})
	}
	byBucket(pull)
	byBucket(push)
	return pull, push
}

// repair does what the driver does with a result: the remote's version of
// each pulled id is merged locally and the local version of each pushed id
// remotely. Merging two versions is modelled as their XOR, the same on
// both sides.
func repair(local, remote *replica, res Result) {
	merged := map[ID]Digest{}
	for _, id := range res.Pull {
		rd, _ := remote.get(id)
		ld, _ := local.get(id)
		merged[id] = rd.Xor(ld)
	}
	for _, id := range res.Push {
		if _, ok := merged[id]; ok {
			continue
		}
		ld, _ := local.get(id)
		merged[id] = ld
	}
	for id, d := range merged {
		local.put(id, d)
		remote.put(id, d)
	}
}

func distinctIDs(res Result) map[ID]bool {
	ids := map[ID]bool{}
	for _, id := range slices.Concat(res.Pull, res.Push) {
		ids[id] = true
	}
	return ids
}

// TestDiffFindsExactlyTheDifferences: out of 100k tasks, k missing or
// changed tasks are reported, and nothing else; only their buckets are
// listed. Reference: docs/design.md, "Anti-entropy": compare roots, descend
// into differing subtrees, exchange lists of differing buckets.
func TestDiffFindsExactlyTheDifferences(t *testing.T) {
	base := baseReplica()
	shape := base.tree.Shape()
	for _, k := range []int{0, 1, 1000} {
		for _, m := range []mutation{remoteLacks, localLacks, changed} {
			t.Run(fmt.Sprintf("k=%d/%v", k, m), func(t *testing.T) {
				local, remote := base.clone(), base.clone()
				wantPull, wantPush := diverge(local, remote, pick(k, baseTasks), m)
				buckets, parents := map[int]bool{}, map[int]bool{}
				for _, id := range slices.Concat(wantPull, wantPush) {
					b := shape.BucketOf(id)
					buckets[b] = true
					parents[b/shape.Fanout] = true
				}

				f := &fakeRemote{r: remote}
				res, err := Diff(t.Context(), local.tree.Clone(), f, local.list, unlimited, Cursor{})
				if err != nil {
					t.Fatalf("Diff: %v", err)
				}
				if !slices.Equal(res.Pull, wantPull) || !slices.Equal(res.Push, wantPush) {
					t.Fatalf("Diff: %d pulls, %d pushes; want %d and %d, in bucket order",
						len(res.Pull), len(res.Push), len(wantPull), len(wantPush))
				}
				if res.Truncated || res.InSync != (k == 0) {
					t.Errorf("Truncated %v, InSync %v; want false, %v", res.Truncated, res.InSync, k == 0)
				}

				// Only differing buckets, and the children of differing
				// nodes, were looked at.
				st := res.Stats
				if listed := slices.Sorted(maps.Keys(buckets)); !slices.Equal(f.listed, listed) {
					t.Errorf("listed buckets %v; want the differing ones %v", f.listed, listed)
				}
				wantNodes := 1
				if k > 0 {
					wantNodes += shape.Width(1) + len(parents)*shape.Fanout
				}
				if st.NodesCompared != wantNodes || st.BucketsListed != len(buckets) || st.BucketsDiffering != len(buckets) {
					t.Errorf("stats %+v; want %d nodes, %d buckets listed and differing", st, wantNodes, len(buckets))
				}
				if st.BytesSent != f.sent || st.BytesReceived != f.received {
					t.Errorf("stats bytes %d sent, %d received; the remote saw %d and %d",
						st.BytesSent, st.BytesReceived, f.sent, f.received)
				}

				repair(local, remote, res)
				if !local.tree.Equal(remote.tree) {
					t.Fatalf("trees differ after repair")
				}
				res, err = Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, unlimited, res.Next)
				if err != nil || !res.InSync || res.Stats.RoundTrips != 1 {
					t.Fatalf("after repair: %+v, %v; want in sync in one round trip", res, err)
				}
			})
		}
	}
}

// TestDiffLimits: limits bound every round; the rounds that follow (from
// Next) cover every difference, whether or not the driver repairs in
// between, and never report an id twice before all were reported.
func TestDiffLimits(t *testing.T) {
	const k = 1000
	lim := Limits{BucketsPerRound: 16, IDsPerRound: 100}
	base := baseReplica()
	for _, repairs := range []bool{true, false} {
		t.Run(fmt.Sprintf("repair=%v", repairs), func(t *testing.T) {
			local, remote := base.clone(), base.clone()
			idx := pick(k, baseTasks)
			pull1, push1 := diverge(local, remote, idx[:k/2], remoteLacks)
			pull2, push2 := diverge(local, remote, idx[k/2:], changed)
			want := distinctIDs(Result{Pull: slices.Concat(pull1, pull2), Push: slices.Concat(push1, push2)})
			buckets := map[int]bool{}
			for id := range want {
				buckets[local.tree.BucketOf(id)] = true
			}
			// A round stops at a limit: on ids, or on buckets.
			maxRounds := k/lim.IDsPerRound + len(buckets)/lim.BucketsPerRound + 2

			seen := map[ID]bool{}
			cursor := Cursor{}
			rounds, passed := 0, 0
			for ; len(seen) < len(want); rounds++ {
				if rounds == maxRounds {
					t.Fatalf("%d of %d ids reported after %d rounds", len(seen), len(want), rounds)
				}
				res, err := Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, lim, cursor)
				if err != nil {
					t.Fatalf("round %d: %v", rounds, err)
				}
				ids := distinctIDs(res)
				if len(ids) > lim.IDsPerRound || res.Stats.BucketsListed > lim.BucketsPerRound {
					t.Fatalf("round %d: %d ids, %d buckets; limits %+v", rounds, len(ids), res.Stats.BucketsListed, lim)
				}
				if len(ids) == 0 {
					t.Fatalf("round %d from %+v reported nothing", rounds, cursor)
				}
				var again []ID
				for id := range ids {
					if !want[id] {
						t.Fatalf("round %d: id %x does not differ", rounds, id)
					}
					if seen[id] {
						again = append(again, id)
					}
					seen[id] = true
				}
				// Without repair, the round that ends the sweep wraps
				// around past the last bucket to the first ones again.
				if len(again) > 0 && (repairs || len(seen) < len(want)) {
					t.Fatalf("round %d: %d ids reported twice, before the sweep ended", rounds, len(again))
				}
				if !res.Truncated && len(seen) < len(want) {
					t.Fatalf("round %d not truncated with %d ids left", rounds, len(want)-len(seen))
				}
				// Rounds tile the buckets in cursor order: their Passed
				// reach a whole tree only once every difference was
				// reported.
				passed += res.Passed
				if passed >= base.tree.shape.Buckets && len(seen) < len(want) {
					t.Fatalf("round %d: rounds passed %d buckets of %d with %d ids unreported", rounds, passed, base.tree.shape.Buckets, len(want)-len(seen))
				}
				if repairs {
					repair(local, remote, res)
				}
				cursor = res.Next
			}
			t.Logf("%d ids in %d buckets: %d rounds", len(want), len(buckets), rounds)
			if !repairs {
				// The differences stay: the rounds go on wrapping around,
				// and their Passed tell when one whole pass is done.
				for extra := 0; passed < base.tree.shape.Buckets; extra++ {
					if extra == 2 {
						t.Fatalf("rounds passed only %d buckets of %d, %d rounds after the last difference", passed, base.tree.shape.Buckets, extra)
					}
					res, err := Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, lim, cursor)
					if err != nil {
						t.Fatal(err)
					}
					passed += res.Passed
					cursor = res.Next
				}
			}
			if repairs {
				res, err := Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, lim, cursor)
				if err != nil || !res.InSync {
					t.Fatalf("after %d rounds of repair: %+v, %v; want in sync", rounds, res, err)
				}
			}
		})
	}
}

// idsInBucket returns n test ids of bucket b of shape s.
func idsInBucket(s Shape, b, n int) []ID {
	var out []ID
	for i := 0; len(out) < n; i++ {
		if id := testID(i); s.BucketOf(id) == b {
			out = append(out, id)
		}
	}
	return out
}

// TestDiffResumesWithinBucket: a bucket with more differences than
// IDsPerRound is resumed where the last round stopped.
func TestDiffResumesWithinBucket(t *testing.T) {
	const bucket = 7
	s := DefaultLocalConfig().Shape
	local, remote := newReplica(s), newReplica(s)
	ids := idsInBucket(s, bucket, 5)
	for _, id := range ids {
		local.put(id, syntheticDigest(int(id[19])))
	}
	lim := Limits{BucketsPerRound: 4, IDsPerRound: 2}
	tests := []struct {
		push      []ID
		next      Cursor
		truncated bool
		passed    int
	}{
		{ids[0:2], Cursor{bucket, ids[1]}, true, bucket}, // buckets before 7, equal
		{ids[2:4], Cursor{bucket, ids[3]}, true, 0},
		{ids[4:5], Cursor{bucket + 1, ID{}}, true, 1}, // skipped ids[:4], before the cursor
		{ids[0:2], Cursor{bucket, ids[1]}, true, 63},  // wrapped around: 8..63, 0..6
	}
	cursor := Cursor{}
	for round, tc := range tests {
		res, err := Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, lim, cursor)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !slices.Equal(res.Push, tc.push) || len(res.Pull) != 0 || res.Next != tc.next || res.Truncated != tc.truncated || res.Passed != tc.passed {
			t.Fatalf("round %d from %+v: push %x, pull %x, next %+v, truncated %v, passed %d; want push %x, next %+v, truncated %v, passed %d",
				round, cursor, res.Push, res.Pull, res.Next, res.Truncated, res.Passed, tc.push, tc.next, tc.truncated, tc.passed)
		}
		cursor = res.Next
	}
}

// TestDiffCursorWraps: with one bucket per round and two differing buckets
// on both sides of the cursor inside one subtree, rounds alternate between
// them instead of sticking to the first (the +1 of the descent).
func TestDiffCursorWraps(t *testing.T) {
	s := DefaultLocalConfig().Shape // 64 buckets, fan-out 8
	local, remote := newReplica(s), newReplica(s)
	a, b := idsInBucket(s, 3, 1)[0], idsInBucket(s, 40, 1)[0]
	local.put(a, syntheticDigest(1))
	local.put(b, syntheticDigest(2))
	lim := Limits{BucketsPerRound: 1, IDsPerRound: 10}
	tests := []struct {
		from   Cursor
		push   ID
		next   Cursor
		passed int
	}{
		{Cursor{Bucket: 5}, b, Cursor{Bucket: 41}, 36},
		{Cursor{Bucket: 41}, a, Cursor{Bucket: 4}, 27},
		{Cursor{Bucket: 4}, b, Cursor{Bucket: 41}, 37},
		{Cursor{Bucket: 3}, a, Cursor{Bucket: 4}, 1},
	}
	for _, tc := range tests {
		res, err := Diff(t.Context(), local.tree.Clone(), &fakeRemote{r: remote}, local.list, lim, tc.from)
		if err != nil {
			t.Fatalf("from %+v: %v", tc.from, err)
		}
		if !slices.Equal(res.Push, []ID{tc.push}) || res.Next != tc.next || !res.Truncated || res.Passed != tc.passed {
			t.Errorf("from %+v: push %x, next %+v, truncated %v, passed %d; want push %x, next %+v, truncated, passed %d",
				tc.from, res.Push, res.Next, res.Truncated, res.Passed, tc.push, tc.next, tc.passed)
		}
	}
}

// badRemote wraps a fakeRemote and spoils its answers.
type badRemote struct {
	*fakeRemote
	nodes   func([]Digest) ([]Digest, error)
	buckets func([]int, [][]Entry) ([][]Entry, error)
}

func (r *badRemote) Nodes(ctx context.Context, level int, idx []int) ([]Digest, error) {
	ds, err := r.fakeRemote.Nodes(ctx, level, idx)
	if err != nil || r.nodes == nil {
		return ds, err
	}
	return r.nodes(ds)
}

func (r *badRemote) Buckets(ctx context.Context, buckets []int) ([][]Entry, error) {
	ls, err := r.fakeRemote.Buckets(ctx, buckets)
	if err != nil || r.buckets == nil {
		return ls, err
	}
	return r.buckets(buckets, ls)
}

// TestDiffRejectsBadInput: what a peer answers is checked; a bad answer is
// an error, never a panic or a wrong result.
func TestDiffRejectsBadInput(t *testing.T) {
	s := DefaultLocalConfig().Shape
	local, remote := newReplica(s), newReplica(s)
	for i := range 50 {
		local.put(testID(i), syntheticDigest(i))
	}
	errPeer := errors.New("peer gone")
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		nodes   func([]Digest) ([]Digest, error)
		buckets func([]int, [][]Entry) ([][]Entry, error)
		list    ListFunc
		lim     Limits
		from    Cursor
		want    error // nil: any error
	}{
		{name: "peer error", nodes: func([]Digest) ([]Digest, error) { return nil, errPeer }, want: errPeer},
		{name: "too few digests", nodes: func(ds []Digest) ([]Digest, error) { return ds[:len(ds)-1], nil }, want: ErrMalformed},
		{name: "too many digests", nodes: func(ds []Digest) ([]Digest, error) { return append(ds, Digest{}), nil }, want: ErrMalformed},
		{name: "too few lists", buckets: func(_ []int, ls [][]Entry) ([][]Entry, error) { return ls[1:], nil }, want: ErrMalformed},
		{name: "id of another bucket", buckets: func(bs []int, ls [][]Entry) ([][]Entry, error) {
			ls[0] = append(ls[0], Entry{ID: idsInBucket(s, (bs[0]+1)%s.Buckets, 1)[0]})
			return ls, nil
		}, want: ErrMalformed},
		{name: "duplicate id", buckets: func(bs []int, ls [][]Entry) ([][]Entry, error) {
			e := Entry{ID: idsInBucket(s, bs[0], 1)[0]}
			ls[0] = append(ls[0], e, e)
			return ls, nil
		}, want: ErrMalformed},
		{name: "zero id", buckets: func(_ []int, ls [][]Entry) ([][]Entry, error) {
			ls[0] = append(ls[0], Entry{})
			return ls, nil
		}, want: ErrMalformed},
		{name: "local list short", list: func(context.Context, []int) ([][]Entry, error) { return nil, nil }},
		{name: "local list fails", list: func(context.Context, []int) ([][]Entry, error) { return nil, errPeer }, want: errPeer},
		{name: "local id of another bucket", list: func(_ context.Context, bs []int) ([][]Entry, error) {
			ls := make([][]Entry, len(bs))
			ls[0] = []Entry{{ID: idsInBucket(s, (bs[0]+1)%s.Buckets, 1)[0]}}
			return ls, nil
		}, want: ErrMalformed},
		{name: "canceled", ctx: canceled, want: context.Canceled},
		{name: "no limits", lim: Limits{}, want: ErrConfig},
		{name: "cursor outside", from: Cursor{Bucket: s.Buckets}, want: ErrShape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, list, lim := tc.ctx, tc.list, tc.lim
			if ctx == nil {
				ctx = t.Context()
			}
			if list == nil {
				list = local.list
			}
			if lim == (Limits{}) && tc.want != ErrConfig {
				lim = DefaultLocalConfig().Limits
			}
			r := &badRemote{fakeRemote: &fakeRemote{r: remote}, nodes: tc.nodes, buckets: tc.buckets}
			res, err := Diff(ctx, local.tree.Clone(), r, list, lim, tc.from)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Diff = %+v, %v; want error %v", res, err, tc.want)
			}
		})
	}
}

// FuzzDiff: a peer answering anything makes Diff fail or succeed within
// its limits, never panic.
func FuzzDiff(f *testing.F) {
	f.Add([]byte{0, 0})
	f.Add([]byte{3, 7, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 3, 1, 2, 3})
	s := DefaultLocalConfig().Shape
	local := newReplica(s)
	for i := range 300 {
		local.put(testID(i), syntheticDigest(i))
	}
	pool := make([][]ID, s.Buckets) // ids a fuzzed remote may list per bucket
	for i := range 400 {
		id := testID(i)
		pool[s.BucketOf(id)] = append(pool[s.BucketOf(id)], id)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		lim := Limits{BucketsPerRound: 1 + int(data[0]%4), IDsPerRound: 1 + int(data[1]%8)}
		r := &fuzzRemote{data: data[2:], local: local, pool: pool}
		from := Cursor{Bucket: int(data[0]) % s.Buckets}
		res, err := Diff(t.Context(), local.tree.Clone(), r, local.list, lim, from)
		if err != nil {
			return
		}
		if n := len(distinctIDs(res)); n > lim.IDsPerRound {
			t.Fatalf("%d ids; limit %d", n, lim.IDsPerRound)
		}
		if res.Stats.BucketsListed > lim.BucketsPerRound {
			t.Fatalf("%d buckets; limit %d", res.Stats.BucketsListed, lim.BucketsPerRound)
		}
		if res.Next.Bucket < 0 || res.Next.Bucket >= s.Buckets {
			t.Fatalf("next %+v outside the tree", res.Next)
		}
	})
}

// fuzzRemote answers from fuzz data: digests either the local side's or
// made up, entries of real ids of the bucket or made up.
type fuzzRemote struct {
	data  []byte
	local *replica
	pool  [][]ID
}

func (r *fuzzRemote) take(n int) ([]byte, bool) {
	if len(r.data) < n {
		return nil, false
	}
	b := r.data[:n]
	r.data = r.data[n:]
	return b, true
}

func (r *fuzzRemote) Nodes(_ context.Context, level int, idx []int) ([]Digest, error) {
	var ds []Digest
	for _, i := range idx {
		flag, ok := r.take(1)
		if !ok {
			return ds, nil // short: Diff must notice
		}
		d := r.local.tree.Node(level, i)
		if flag[0]&1 == 1 {
			raw, ok := r.take(DigestLen)
			if !ok {
				return ds, nil
			}
			d = Digest(raw)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func (r *fuzzRemote) Buckets(_ context.Context, buckets []int) ([][]Entry, error) {
	out := make([][]Entry, len(buckets))
	for i, b := range buckets {
		n, ok := r.take(1)
		if !ok {
			return out[:i], nil
		}
		for range n[0] % 8 {
			sel, ok := r.take(2)
			if !ok {
				break
			}
			var e Entry
			switch pool := r.pool[b]; {
			case sel[0] < 0xf0 && len(pool) > 0:
				e.ID = pool[int(sel[0])%len(pool)]
			default:
				raw, ok := r.take(IDLen)
				if !ok {
					return out, nil
				}
				e.ID = ID(raw)
			}
			e.Digest, _ = r.local.get(e.ID)
			if sel[1]&1 == 1 {
				e.Digest = syntheticDigest(int(sel[1]))
			}
			out[i] = append(out[i], e)
		}
	}
	return out, nil
}

func BenchmarkDiffNoDifference(b *testing.B) {
	base := baseReplica()
	remote := &fakeRemote{r: base.clone()}
	snap := base.tree.Clone()
	b.ReportAllocs()
	for b.Loop() {
		res, err := Diff(b.Context(), snap, remote, base.list, DefaultConfig().Limits, Cursor{})
		if err != nil || !res.InSync {
			b.Fatalf("Diff = %+v, %v; want in sync", res, err)
		}
	}
}

// BenchmarkDiffOneBucket: the cost of finding and listing one differing
// bucket of ~100 tasks (3 levels, 65 digests, 2 bucket lists).
func BenchmarkDiffOneBucket(b *testing.B) {
	base := baseReplica()
	local, remote := base.clone(), base.clone()
	diverge(local, remote, []int{42}, changed)
	f := &fakeRemote{r: remote}
	snap := local.tree.Clone()
	b.ReportAllocs()
	for b.Loop() {
		res, err := Diff(b.Context(), snap, f, local.list, DefaultConfig().Limits, Cursor{})
		if err != nil || len(res.Pull) != 1 {
			b.Fatalf("Diff = %+v, %v; want one pull", res, err)
		}
	}
}
