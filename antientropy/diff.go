package antientropy

import (
	"bytes"
	"context"
	"fmt"
	"slices"
)

// Entry is one task of a bucket, as a side lists it for a comparison: its
// id and its digest, the XOR of the digests of its items (Fold of its spec
// item, state item, update items and edge items). A bucket's leaf is the
// XOR of its entries' digests.
type Entry struct {
	ID     ID
	Digest Digest
}

// SortEntries sorts es by id.
func SortEntries(es []Entry) { slices.SortFunc(es, compareEntries) }

func compareEntries(a, b Entry) int { return bytes.Compare(a.ID[:], b.ID[:]) }

// checkSorted checks that es is sorted by id with no duplicate and no zero
// id (the zero id is never assigned, and Cursor uses it for "none").
func checkSorted(es []Entry) error {
	for i := range es {
		if es[i].ID == (ID{}) {
			return fmt.Errorf("%w: entry %d has the zero id", ErrMalformed, i)
		}
		if i > 0 && compareEntries(es[i-1], es[i]) >= 0 {
			return fmt.Errorf("%w: entry %d (%x) not after entry %d (%x)", ErrMalformed, i, es[i].ID, i-1, es[i-1].ID)
		}
	}
	return nil
}

// Remote is the other side of a comparison: a peer replica of the same
// partition, usually reached over the network (its driver encodes
// NodesRequest and BucketsRequest, and decodes with DecodeDigests and
// DecodeEntries). Diff calls it from its own goroutine, one call at a time,
// and passes on ctx; the implementation must honour ctx.
type Remote interface {
	// Nodes returns the remote tree's digests of nodes idx of level, in
	// the order of idx: exactly len(idx) of them. idx is strictly
	// increasing and within the level.
	Nodes(ctx context.Context, level int, idx []int) ([]Digest, error)
	// Buckets returns, for each bucket of buckets (strictly increasing),
	// the entries of every task the remote holds in it: exactly
	// len(buckets) lists, in the same order, each in any order. Diff
	// sorts the lists in place and refuses (ErrMalformed) a list with a
	// duplicate id, the zero id or an id of another bucket.
	Buckets(ctx context.Context, buckets []int) ([][]Entry, error)
}

// ListFunc lists the local side's entries of buckets (strictly
// increasing): exactly len(buckets) lists, in the same order, each listing
// every task the replica holds in that bucket (Tree.BucketOf(id) == b) with
// its current digest. Diff calls it once per round, from its goroutine,
// holding no lock; the replica takes its own. Diff sorts the lists in
// place.
type ListFunc func(ctx context.Context, buckets []int) ([][]Entry, error)

// Cursor is where a round starts. Buckets are taken in order from Bucket
// upwards, wrapping around, so that successive rounds that hit
// Limits.BucketsPerRound cover every differing bucket in turn even if
// some cannot be repaired. After, when not the zero id, resumes a bucket
// that a round left half done for Limits.IDsPerRound: in bucket Bucket only
// ids after After are reported; the ones at or before it come up again
// when the cursor next wraps around. The zero Cursor starts at bucket 0.
type Cursor struct {
	Bucket int
	After  ID
}

// Result is what one round of Diff found.
type Result struct {
	// InSync is true when the roots were equal: nothing to do.
	InSync bool
	// Pull lists the ids whose remote record the local side lacks or holds
	// another version of: fetch them from the remote and merge them.
	Pull []ID
	// Push lists the ids whose local record the remote lacks or holds
	// another version of: send them to the remote to merge. An id whose
	// versions differ is in both Pull and Push (merging is a CRDT join, so
	// each side needs the other's). Pull and Push are ordered by bucket,
	// from the cursor on, then by id; together they name at most
	// Limits.IDsPerRound distinct ids.
	Push []ID
	// Truncated is true when the round left differences unreported, for
	// a limit or for the cursor: run another round soon, from Next.
	Truncated bool
	// Next is where the next round starts.
	Next Cursor
	// Passed counts the buckets, from the cursor's on in cursor order,
	// that this round covered: each was equal at the descent or listed to
	// its end (the cursor's own bucket only after From.After). It is
	// Shape.Buckets when the round left nothing unreported (not
	// Truncated), and rounds that each start at the last one's Next cover
	// the whole tree once the sum of their Passed reaches Shape.Buckets:
	// how a caller that needs one complete pass, not the trees equal,
	// bounds its rounds (the carry of a handoff, whose mode may leave
	// differences in place).
	Passed int
	// Stats counts the round's work, for metrics.
	Stats Stats
}

// Stats counts the work of one round.
type Stats struct {
	// RoundTrips counts calls to the Remote.
	RoundTrips int
	// NodesCompared counts node digests fetched from the remote and
	// compared with the local tree's.
	NodesCompared int
	// BucketsDiffering counts the leaves the descent found differing. When
	// the descent pruned (Truncated), there may be more.
	BucketsDiffering int
	// BucketsListed counts the buckets whose entries were exchanged.
	BucketsListed int
	// EntriesLocal and EntriesRemote count the entries of those buckets
	// on each side.
	EntriesLocal  int
	EntriesRemote int
	// BytesSent and BytesReceived are the sizes of the round's requests
	// and responses in this package's encodings (codec.go), without what
	// the transport adds.
	BytesSent     int
	BytesReceived int
}

// Diff runs one round of comparison of local with remote and returns the
// ids each side must fetch from the other. It:
//
//  1. compares the roots, and stops if they are equal (one round trip);
//  2. descends level by level into the nodes that differ, asking the
//     remote only for the children of differing nodes, and following at
//     most lim.BucketsPerRound+1 of them per level, the first from the
//     cursor on (enough to reach the lim.BucketsPerRound first differing
//     buckets: a differing node has a differing leaf below it);
//  3. lists the first lim.BucketsPerRound differing buckets on both sides
//     (list, remote.Buckets), compares the entry lists id by id, and
//     reports what differs, up to lim.IDsPerRound ids.
//
// local must not change during the call: pass a Clone taken under the
// replica's lock. The lists come later than the trees and writes go on
// meanwhile, so a round may report an id that has since converged, or miss
// one that changed after it looked: merging is idempotent, and the next
// round sees the rest. Diff reads no clock and starts no goroutine.
func Diff(ctx context.Context, local *Tree, remote Remote, list ListFunc, lim Limits, from Cursor) (Result, error) {
	if err := lim.Validate(); err != nil {
		return Result{}, err
	}
	if from.Bucket < 0 || from.Bucket >= local.shape.Buckets {
		return Result{}, fmt.Errorf("%w: cursor bucket %d outside [0, %d)", ErrShape, from.Bucket, local.shape.Buckets)
	}
	d := &differ{local: local, remote: remote, list: list, lim: lim, from: from}
	d.res.Next = from
	leaves, err := d.descend(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("antientropy: descend: %w", err)
	}
	if len(leaves) > 0 {
		if err := d.compareBuckets(ctx, leaves); err != nil {
			return Result{}, fmt.Errorf("antientropy: compare buckets: %w", err)
		}
	}
	if !d.res.Truncated {
		d.res.Passed = local.shape.Buckets
	}
	return d.res, nil
}

// differ holds one round of Diff.
type differ struct {
	local  *Tree
	remote Remote
	list   ListFunc
	lim    Limits
	from   Cursor
	res    Result
	ids    int // distinct ids reported so far
}

// descend returns the differing leaves to compare, in cursor order: at
// most lim.BucketsPerRound, the first from the cursor on.
func (d *differ) descend(ctx context.Context) ([]int, error) {
	depth := d.local.Depth()
	var differing []int
	for l := 0; l <= depth; l++ {
		var cand []int
		if l == 0 {
			cand = []int{0}
		} else {
			cand = d.children(l-1, differing)
		}
		rd, err := d.nodes(ctx, l, cand)
		if err != nil {
			return nil, err
		}
		differing = differing[:0]
		for i, idx := range cand {
			if d.local.Node(l, idx) != rd[i] {
				differing = append(differing, idx)
			}
		}
		if len(differing) == 0 {
			// Equal roots; or, below, a concurrent write undid the
			// difference between two requests: next round.
			d.res.InSync = l == 0
			return nil, nil
		}
		keep := d.lim.BucketsPerRound + 1 // the cursor's own node may hold only wrapped-around buckets
		if l == depth {
			keep = d.lim.BucketsPerRound
			d.res.Stats.BucketsDiffering = len(differing)
		}
		d.sortFromCursor(l, differing)
		if len(differing) > keep {
			differing = differing[:keep]
			d.res.Truncated = true
		}
		if l < depth {
			slices.Sort(differing) // children() keeps requests increasing
		}
	}
	return differing, nil
}

// nodes asks the remote for nodes idx of level and checks the answer.
func (d *differ) nodes(ctx context.Context, level int, idx []int) ([]Digest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.res.Stats.RoundTrips++
	d.res.Stats.BytesSent += nodesRequestLen(level, idx)
	rd, err := d.remote.Nodes(ctx, level, idx)
	if err != nil {
		return nil, fmt.Errorf("level %d: %w", level, err)
	}
	if len(rd) != len(idx) {
		return nil, fmt.Errorf("%w: level %d: %d digests for %d nodes", ErrMalformed, level, len(rd), len(idx))
	}
	d.res.Stats.BytesReceived += digestsLen(len(rd))
	d.res.Stats.NodesCompared += len(rd)
	return rd, nil
}

// children returns the children of nodes parents (increasing) of level,
// in increasing order.
func (d *differ) children(level int, parents []int) []int {
	ratio := d.local.levels[level+1].width / d.local.levels[level].width
	out := make([]int, 0, len(parents)*ratio)
	for _, p := range parents {
		for c := p * ratio; c < (p+1)*ratio; c++ {
			out = append(out, c)
		}
	}
	return out
}

// sortFromCursor sorts nodes of level in cursor order: the node holding
// the cursor's bucket first, then the following ones, wrapping around.
func (d *differ) sortFromCursor(level int, nodes []int) {
	lv := d.local.levels[level]
	start := d.from.Bucket >> lv.shift
	rank := func(i int) int { return (i - start + lv.width) % lv.width }
	slices.SortFunc(nodes, func(a, b int) int { return rank(a) - rank(b) })
}

// compareBuckets lists leaves (in cursor order) on both sides and reports
// the ids that differ, within lim.IDsPerRound.
func (d *differ) compareBuckets(ctx context.Context, leaves []int) error {
	req := slices.Clone(leaves)
	slices.Sort(req)
	loc, err := d.list(ctx, req)
	if err != nil {
		return fmt.Errorf("list local: %w", err)
	}
	if len(loc) != len(req) {
		return fmt.Errorf("list local: %d lists for %d buckets", len(loc), len(req))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.res.Stats.RoundTrips++
	d.res.Stats.BytesSent += bucketsRequestLen(req)
	rem, err := d.remote.Buckets(ctx, req)
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	if len(rem) != len(req) {
		return fmt.Errorf("%w: remote: %d lists for %d buckets", ErrMalformed, len(rem), len(req))
	}
	for _, b := range leaves {
		i, _ := slices.BinarySearch(req, b)
		if err := d.local.checkBucket(b, loc[i]); err != nil {
			return fmt.Errorf("local bucket %d: %w", b, err)
		}
		if err := d.local.checkBucket(b, rem[i]); err != nil {
			return fmt.Errorf("remote bucket %d: %w", b, err)
		}
		d.res.Stats.BucketsListed++
		d.res.Stats.EntriesLocal += len(loc[i])
		d.res.Stats.EntriesRemote += len(rem[i])
		d.res.Stats.BytesReceived += entriesLen(len(rem[i]))
		if !d.compareBucket(b, loc[i], rem[i]) {
			d.res.Passed = d.rank(b) // b itself resumes at Next.After
			return nil
		}
		d.res.Next = Cursor{Bucket: (b + 1) % d.local.shape.Buckets}
		// Every bucket of lower rank was equal at the descent (it kept
		// the first differing ones in cursor order) or listed before b.
		d.res.Passed = d.rank(b) + 1
	}
	return nil
}

// rank is bucket b's place in the round's cursor order: 0 for the
// cursor's bucket.
func (d *differ) rank(b int) int {
	n := d.local.shape.Buckets
	return (b - d.from.Bucket + n) % n
}

// checkBucket sorts es and checks it lists distinct, non-zero ids of
// bucket b.
func (t *Tree) checkBucket(b int, es []Entry) error {
	SortEntries(es)
	if err := checkSorted(es); err != nil {
		return err
	}
	for i := range es {
		if got := t.BucketOf(es[i].ID); got != b {
			return fmt.Errorf("%w: id %x is of bucket %d", ErrMalformed, es[i].ID, got)
		}
	}
	return nil
}

// compareBucket merges the sorted lists loc and rem of bucket b and
// reports the ids that differ. It returns false when lim.IDsPerRound
// stopped it, having set Next to resume after the last id reported.
func (d *differ) compareBucket(b int, loc, rem []Entry) bool {
	var after ID // ids at or before it were reported by an earlier round
	if b == d.from.Bucket {
		after = d.from.After
	}
	last := after
	i, j := 0, 0
	for i < len(loc) || j < len(rem) {
		var e Entry
		var pull, push bool
		var c int // <0: only local has e; >0: only remote; 0: both
		switch {
		case i == len(loc):
			c = 1
		case j == len(rem):
			c = -1
		default:
			c = compareEntries(loc[i], rem[j])
		}
		switch {
		case c < 0:
			e, push = loc[i], true
			i++
		case c > 0:
			e, pull = rem[j], true
			j++
		default:
			e = loc[i]
			pull = loc[i].Digest != rem[j].Digest
			push = pull
			i++
			j++
		}
		if !pull && !push {
			continue
		}
		if bytes.Compare(e.ID[:], after[:]) <= 0 {
			d.res.Truncated = true // reported before; comes up again after wrapping
			continue
		}
		if d.ids == d.lim.IDsPerRound {
			d.res.Truncated = true
			d.res.Next = Cursor{Bucket: b, After: last}
			return false
		}
		d.ids++
		last = e.ID
		if pull {
			d.res.Pull = append(d.res.Pull, e.ID)
		}
		if push {
			d.res.Push = append(d.res.Push, e.ID)
		}
	}
	return true
}
