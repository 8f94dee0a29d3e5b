package antientropy

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/skuldd/skuldd/task"
)

// The package's ID must stay assignable to and from task.ID.
var (
	_ ID      = task.ID{}
	_ task.ID = ID{}
)

// testID returns the i-th test id, a real flake id.
func testID(i int) ID {
	const (
		baseMs   = 1_700_000_000_000
		idsPerMs = 7
		nodes    = 3
	)
	return task.MakeID(baseMs+int64(i/idsPerMs), uint64(1+i%nodes), uint32(i))
}

// testTaskDigest returns the digest of a task made of a spec, a state of
// the given version and i%3 updates, as a replica would fold it.
func testTaskDigest(id ID, i, version int) Digest {
	d := Fold(
		SpecItem(id, fmt.Appendf(nil, "spec %d", i)),
		StateItem(id, fmt.Appendf(nil, "state %d v%d", i, version)),
	)
	for seq := range i % 3 {
		d = d.Xor(UpdateItem(id, 1, uint64(seq), fmt.Appendf(nil, "progress %d", seq)))
	}
	return d
}

// replica is a test stand-in for a partition replica: a tree and, per
// bucket, the task digests it holds.
type replica struct {
	tree    *Tree
	buckets []map[ID]Digest
}

// newReplica returns an empty replica of shape s, which must be valid.
func newReplica(s Shape) *replica {
	tree, err := NewTree(s)
	if err != nil {
		panic(fmt.Sprintf("NewTree(%+v): %v", s, err))
	}
	r := &replica{tree: tree, buckets: make([]map[ID]Digest, s.Buckets)}
	for b := range r.buckets {
		r.buckets[b] = map[ID]Digest{}
	}
	return r
}

// put stores task id with digest d, replacing any other version.
func (r *replica) put(id ID, d Digest) {
	m := r.buckets[r.tree.BucketOf(id)]
	if old, ok := m[id]; ok {
		r.tree.Replace(id, old, d)
	} else {
		r.tree.Add(id, d)
	}
	m[id] = d
}

// del removes task id, if held.
func (r *replica) del(id ID) {
	m := r.buckets[r.tree.BucketOf(id)]
	if old, ok := m[id]; ok {
		r.tree.Remove(id, old)
		delete(m, id)
	}
}

func (r *replica) get(id ID) (Digest, bool) {
	d, ok := r.buckets[r.tree.BucketOf(id)][id]
	return d, ok
}

func (r *replica) clone() *replica {
	c := &replica{tree: r.tree.Clone(), buckets: make([]map[ID]Digest, len(r.buckets))}
	for b, m := range r.buckets {
		c.buckets[b] = maps.Clone(m)
	}
	return c
}

// entries lists bucket b in id order.
func (r *replica) entries(b int) []Entry {
	es := make([]Entry, 0, len(r.buckets[b]))
	for id, d := range r.buckets[b] {
		es = append(es, Entry{ID: id, Digest: d})
	}
	SortEntries(es)
	return es
}

// list is the replica's ListFunc.
func (r *replica) list(_ context.Context, buckets []int) ([][]Entry, error) {
	out := make([][]Entry, len(buckets))
	for i, b := range buckets {
		out[i] = r.entries(b)
	}
	return out, nil
}

// fakeRemote serves a replica as a peer would, through the byte formats,
// and counts what crossed.
type fakeRemote struct {
	r        *replica
	sent     int   // request bytes
	received int   // response bytes
	listed   []int // buckets listed, in request order
}

var _ Remote = (*fakeRemote)(nil)

func (f *fakeRemote) Nodes(_ context.Context, level int, idx []int) ([]Digest, error) {
	reqb := NodesRequest{Shape: f.r.tree.Shape(), Level: level, Idx: idx}.Append(nil)
	f.sent += len(reqb)
	req, err := DecodeNodesRequest(reqb)
	if err != nil {
		return nil, err
	}
	ds, err := f.r.tree.Answer(req, nil)
	if err != nil {
		return nil, err
	}
	respb := AppendDigests(nil, ds)
	f.received += len(respb)
	return DecodeDigests(respb, len(idx))
}

func (f *fakeRemote) Buckets(_ context.Context, buckets []int) ([][]Entry, error) {
	reqb := BucketsRequest{Shape: f.r.tree.Shape(), Buckets: buckets}.Append(nil)
	f.sent += len(reqb)
	req, err := DecodeBucketsRequest(reqb)
	if err != nil {
		return nil, err
	}
	if req.Shape != f.r.tree.Shape() {
		return nil, ErrShape
	}
	out := make([][]Entry, len(req.Buckets))
	for i, b := range req.Buckets {
		f.listed = append(f.listed, b)
		respb := AppendEntries(nil, f.r.entries(b))
		f.received += len(respb)
		if out[i], err = DecodeEntries(respb, IDsPerRoundMax); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Test population: baseTasks tasks in a DefaultConfig tree.
const baseTasks = 100_000

// baseReplica builds the base population once; tests clone it.
var baseReplica = sync.OnceValue(func() *replica {
	r := newReplica(DefaultConfig().Shape)
	for i := range baseTasks {
		id := testID(i)
		r.put(id, testTaskDigest(id, i, 0))
	}
	return r
})

// unlimited lets one round report every difference.
var unlimited = Limits{BucketsPerRound: BucketsMax, IDsPerRound: IDsPerRoundMax}

// pick returns k distinct indexes of [0, n), spread evenly.
func pick(k, n int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = i * (n / max(k, 1))
	}
	return out
}

// syntheticDigest is a cheap, distinct digest for item i (no hashing).
func syntheticDigest(i int) Digest {
	const mul = 0x9e3779b97f4a7c15 // odd: a bijection of uint64
	var d Digest
	binary.LittleEndian.PutUint64(d[:8], uint64(i)*mul)
	binary.LittleEndian.PutUint64(d[8:], ^uint64(i))
	return d
}

// syntheticID is a cheap, distinct, non-zero id for item i.
func syntheticID(i int) ID {
	var id ID
	binary.BigEndian.PutUint64(id[12:], uint64(i)+1)
	return id
}

func sortedIDs(ids []ID) []ID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b ID) int { return compareEntries(Entry{ID: a}, Entry{ID: b}) })
	return out
}
