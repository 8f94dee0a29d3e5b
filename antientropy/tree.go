package antientropy

import (
	"fmt"
	"unsafe"
)

// Tree is the hash tree of one partition replica: a fixed array of node
// digests, level by level from the root down to Shape.Buckets leaves.
//
// Invariants:
//   - a leaf is the XOR of the digests of every item added to its bucket
//     and not removed since;
//   - an inner node is the XOR of its children, hence of every item below
//     it, and the root is the XOR of every item;
//   - so the tree is a function of the set of items alone: replicas that
//     hold the same items have equal trees (equal nodes at every level)
//     whatever the order of their writes, and an inner node that differs
//     between two trees has at least one differing child.
//
// Add, Remove and Replace update a leaf and its ancestors in place:
// O(Depth()) XORs, no allocation, no recomputation of siblings. Memory is
// fixed by the shape (Bytes), never by the number of items.
//
// A Tree is not safe for concurrent use: its owner serialises every call
// (a partition replica calls it under its own lock, in the same critical
// section as the store batch it mirrors), and takes a Clone under that lock
// for a Diff, which must not run under the lock.
type Tree struct {
	shape      Shape
	bucketBits int
	// levels[l] locates level l in nodes; shared, never written, by clones.
	levels []level
	// nodes holds every level, root first; len is the sum of the widths.
	nodes []Digest
}

// level locates one level of a tree.
type level struct {
	off   int // index of the level's first node in Tree.nodes
	width int // number of nodes
	shift int // a bucket's ancestor at this level is bucket >> shift
}

// NewTree returns an empty tree (every digest zero) of shape s.
func NewTree(s Shape) (*Tree, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	depth := s.Depth()
	t := &Tree{shape: s, bucketBits: s.bucketBits(), levels: make([]level, depth+1)}
	off := 0
	for l := range t.levels {
		lb := s.levelBits(l)
		t.levels[l] = level{off: off, width: 1 << lb, shift: t.bucketBits - lb}
		off += 1 << lb
	}
	t.nodes = make([]Digest, off)
	return t, nil
}

// Shape returns the tree's shape.
func (t *Tree) Shape() Shape { return t.shape }

// Depth returns the level of the leaves; the root is level 0.
func (t *Tree) Depth() int { return len(t.levels) - 1 }

// BucketOf returns the bucket of id; see Shape.BucketOf. A replica lists a
// bucket's entries by the ids it holds whose BucketOf is that bucket.
func (t *Tree) BucketOf(id ID) int {
	return int(bucketHash(id) >> (64 - t.bucketBits))
}

// Add adds the item digest d of task id: XORs d into id's leaf and every
// ancestor. The caller adds an item exactly once, when the item appears in
// the replica (see the package doc): adding it twice cancels it out.
func (t *Tree) Add(id ID, d Digest) {
	b := int(bucketHash(id) >> (64 - t.bucketBits))
	for _, lv := range t.levels {
		t.nodes[lv.off+(b>>lv.shift)].xorIn(d)
	}
}

// Remove removes the item digest d of task id, which must have been added:
// the same XOR as Add, named for the reader.
func (t *Tree) Remove(id ID, d Digest) { t.Add(id, d) }

// Replace replaces item digest old of task id with new, in one pass: for a
// state that changed, or for a task's whole digest when the caller keeps
// one per task. Replacing a digest by itself changes nothing.
func (t *Tree) Replace(id ID, old, new Digest) { t.Add(id, old.Xor(new)) }

// Root returns the root digest: the XOR of every item in the tree.
func (t *Tree) Root() Digest { return t.nodes[0] }

// Node returns the digest of node idx at level. It panics if level or idx
// is out of range: use Nodes for indexes that come from a peer.
func (t *Tree) Node(level, idx int) Digest {
	lv := t.levels[level]
	if idx < 0 || idx >= lv.width {
		panic(fmt.Sprintf("antientropy: node %d outside level %d of width %d", idx, level, lv.width))
	}
	return t.nodes[lv.off+idx]
}

// Leaf returns the digest of bucket b: the XOR of its tasks' digests.
func (t *Tree) Leaf(b int) Digest { return t.Node(t.Depth(), b) }

// Nodes appends to dst the digests of nodes idx at level, in the order of
// idx, and returns it. It checks its arguments, which may come from a
// peer: a level outside [0, Depth()], an index outside the level, or more
// indexes than the level has nodes fail with ErrShape.
func (t *Tree) Nodes(level int, idx []int, dst []Digest) ([]Digest, error) {
	if level < 0 || level >= len(t.levels) {
		return dst, fmt.Errorf("%w: level %d outside [0, %d]", ErrShape, level, t.Depth())
	}
	lv := t.levels[level]
	if len(idx) > lv.width {
		return dst, fmt.Errorf("%w: %d nodes asked of level %d of width %d", ErrShape, len(idx), level, lv.width)
	}
	for _, i := range idx {
		if i < 0 || i >= lv.width {
			return dst, fmt.Errorf("%w: node %d outside level %d of width %d", ErrShape, i, level, lv.width)
		}
	}
	for _, i := range idx {
		dst = append(dst, t.nodes[lv.off+i])
	}
	return dst, nil
}

// Answer answers a peer's NodesRequest (decoded by DecodeNodesRequest)
// from this tree: ErrShape if the peer's shape is not this tree's, else
// Nodes.
func (t *Tree) Answer(req NodesRequest, dst []Digest) ([]Digest, error) {
	if req.Shape != t.shape {
		return dst, fmt.Errorf("%w: peer has %d buckets of fan-out %d, this replica %d of %d",
			ErrShape, req.Shape.Buckets, req.Shape.Fanout, t.shape.Buckets, t.shape.Fanout)
	}
	return t.Nodes(req.Level, req.Idx, dst)
}

// Clone returns a copy of t that shares nothing mutable with it: a
// snapshot to Diff against, or to answer peers from, outside the owner's
// lock. It costs one allocation of about Bytes().
func (t *Tree) Clone() *Tree {
	c := *t
	c.nodes = append([]Digest(nil), t.nodes...)
	return &c
}

// Reset zeroes every digest: the empty tree, before a rebuild.
func (t *Tree) Reset() { clear(t.nodes) }

// Equal reports whether t and o have the same shape and the same digest at
// every node.
func (t *Tree) Equal(o *Tree) bool {
	if t.shape != o.shape {
		return false
	}
	for i := range t.nodes {
		if t.nodes[i] != o.nodes[i] {
			return false
		}
	}
	return true
}

// Bytes returns the memory the tree holds, in bytes: its header, level
// table and node digests. It depends on the shape only, never on the
// number of items.
func (t *Tree) Bytes() int {
	return int(unsafe.Sizeof(*t)) +
		cap(t.levels)*int(unsafe.Sizeof(level{})) +
		cap(t.nodes)*DigestLen
}
