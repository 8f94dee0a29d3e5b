package antientropy

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestTreeOrderIndependent: the tree is a function of the set of items,
// not of the order of writes (package doc, "Invariant"). Reference:
// docs/design.md, "Anti-entropy": replicas converge.
func TestTreeOrderIndependent(t *testing.T) {
	const items = 5000
	type item struct {
		id ID
		d  Digest
	}
	all := make([]item, 0, 3*items)
	for i := range items {
		id := testID(i)
		all = append(all,
			item{id, SpecItem(id, []byte{byte(i)})},
			item{id, StateItem(id, []byte{byte(i >> 8)})},
			item{id, UpdateItem(id, uint32(i), uint64(i), nil)})
	}
	for _, s := range []Shape{DefaultConfig().Shape, DefaultLocalConfig().Shape, {Buckets: 2048, Fanout: 32}, {Buckets: 2, Fanout: 2}} {
		inOrder := newReplica(s).tree
		for _, it := range all {
			inOrder.Add(it.id, it.d)
		}
		shuffled := newReplica(s).tree
		rng := rand.New(rand.NewPCG(1, 2))
		perm := rng.Perm(len(all))
		for _, p := range perm {
			shuffled.Add(all[p].id, all[p].d)
		}
		if !inOrder.Equal(shuffled) {
			t.Errorf("shape %+v: trees differ after the same items in another order: roots %v and %v",
				s, inOrder.Root(), shuffled.Root())
		}
		if inOrder.Root().IsZero() {
			t.Errorf("shape %+v: root of %d items is zero", s, len(all))
		}
		// Removing every item, in yet another order, leaves the empty tree.
		for _, p := range rng.Perm(len(all)) {
			shuffled.Remove(all[p].id, all[p].d)
		}
		if !shuffled.Equal(newReplica(s).tree) {
			t.Errorf("shape %+v: tree not empty after removing every item", s)
		}
	}
}

// TestTreeInnerNodesAreXORs checks the invariant of Tree: every inner node
// is the XOR of its children, and the root the XOR of the leaves.
func TestTreeInnerNodesAreXORs(t *testing.T) {
	for _, s := range []Shape{DefaultConfig().Shape, {Buckets: 2048, Fanout: 32}, {Buckets: 8, Fanout: 4}} {
		r := newReplica(s)
		for i := range 3000 {
			r.tree.Add(syntheticID(i), syntheticDigest(i))
		}
		tr := r.tree
		for l := range tr.Depth() {
			ratio := s.Width(l+1) / s.Width(l)
			for i := range s.Width(l) {
				var sum Digest
				for c := i * ratio; c < (i+1)*ratio; c++ {
					sum = sum.Xor(tr.Node(l+1, c))
				}
				if got := tr.Node(l, i); got != sum {
					t.Fatalf("shape %+v: node %d of level %d is %v; want the XOR of its children %v", s, i, l, got, sum)
				}
			}
		}
		var leaves Digest
		for b := range s.Buckets {
			leaves = leaves.Xor(tr.Leaf(b))
		}
		if leaves != tr.Root() {
			t.Errorf("shape %+v: root %v; want XOR of leaves %v", s, tr.Root(), leaves)
		}
	}
}

// TestTreeReplace: Replace(old, new) is Remove(old) then Add(new), and a
// replace by the same digest is a no-op.
func TestTreeReplace(t *testing.T) {
	a, b := newReplica(DefaultLocalConfig().Shape).tree, newReplica(DefaultLocalConfig().Shape).tree
	id := testID(1)
	oldD, newD := StateItem(id, []byte("v1")), StateItem(id, []byte("v2"))
	a.Add(id, oldD)
	a.Replace(id, oldD, newD)
	b.Add(id, newD)
	if !a.Equal(b) {
		t.Fatalf("Replace: root %v; want %v", a.Root(), b.Root())
	}
	a.Replace(id, newD, newD)
	if !a.Equal(b) {
		t.Fatalf("Replace by the same digest changed the tree")
	}
}

// TestTreeMemoryConstant: memory is O(buckets), not O(tasks).
// Reference: docs/design.md, "Anti-entropy".
func TestTreeMemoryConstant(t *testing.T) {
	const few, many = 1_000, 1_000_000
	s := DefaultConfig().Shape
	small, large := newReplica(s).tree, newReplica(s).tree
	empty := small.Bytes()
	for i := range few {
		small.Add(syntheticID(i), syntheticDigest(i))
	}
	for i := range many {
		large.Add(syntheticID(i), syntheticDigest(i))
	}
	if small.Bytes() != large.Bytes() || small.Bytes() != empty {
		t.Errorf("Bytes: %d empty, %d with %d items, %d with %d items; want all equal",
			empty, small.Bytes(), few, large.Bytes(), many)
	}
	// 1024 leaves + 32 + 1 nodes of 16 bytes, plus small headers.
	const nodes = 1024 + 32 + 1
	if lo, hi := nodes*DigestLen, nodes*DigestLen+1024; large.Bytes() < lo || large.Bytes() > hi {
		t.Errorf("Bytes = %d; want within [%d, %d]", large.Bytes(), lo, hi)
	}
}

// TestTreeAddAllocatesNothing: Add, Remove and Replace run on every write.
func TestTreeAddAllocatesNothing(t *testing.T) {
	tr := newReplica(DefaultConfig().Shape).tree
	id, d, d2 := testID(7), syntheticDigest(7), syntheticDigest(8)
	for name, f := range map[string]func(){
		"Add":     func() { tr.Add(id, d) },
		"Remove":  func() { tr.Remove(id, d) },
		"Replace": func() { tr.Replace(id, d, d2) },
		"BucketOf": func() {
			if tr.BucketOf(id) < 0 {
				t.Fatal("negative bucket")
			}
		},
	} {
		if allocs := testing.AllocsPerRun(1000, f); allocs != 0 {
			t.Errorf("%s: %v allocations per call; want 0", name, allocs)
		}
	}
}

// TestTreeClone: a clone is a snapshot; later writes do not reach it.
func TestTreeClone(t *testing.T) {
	tr := newReplica(DefaultLocalConfig().Shape).tree
	tr.Add(testID(1), syntheticDigest(1))
	snap := tr.Clone()
	if !snap.Equal(tr) {
		t.Fatal("clone differs from its source")
	}
	tr.Add(testID(2), syntheticDigest(2))
	if snap.Equal(tr) {
		t.Fatal("a write to the source reached the clone")
	}
	tr.Reset()
	if !tr.Root().IsZero() || snap.Root().IsZero() {
		t.Fatalf("Reset: root %v, clone root %v; want zero and non-zero", tr.Root(), snap.Root())
	}
}

// TestTreeNodesChecksInput: Nodes and Answer take indexes from peers.
func TestTreeNodesChecksInput(t *testing.T) {
	s := DefaultLocalConfig().Shape // 64 buckets, fan-out 8: widths 1, 8, 64
	tr := newReplica(s).tree
	other := Shape{Buckets: 128, Fanout: 8}
	tests := []struct {
		name  string
		req   NodesRequest
		want  int
		error error
	}{
		{"root", NodesRequest{s, 0, []int{0}}, 1, nil},
		{"leaves", NodesRequest{s, 2, []int{0, 5, 63}}, 3, nil},
		{"level below leaves", NodesRequest{s, 3, []int{0}}, 0, ErrShape},
		{"negative level", NodesRequest{s, -1, []int{0}}, 0, ErrShape},
		{"index beyond width", NodesRequest{s, 1, []int{8}}, 0, ErrShape},
		{"negative index", NodesRequest{s, 1, []int{-1}}, 0, ErrShape},
		{"more than the width", NodesRequest{s, 0, []int{0, 0}}, 0, ErrShape},
		{"other shape", NodesRequest{other, 0, []int{0}}, 0, ErrShape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := tr.Answer(tc.req, nil)
			if !errors.Is(err, tc.error) || (tc.error == nil) != (err == nil) {
				t.Fatalf("Answer(%+v): err %v; want %v", tc.req, err, tc.error)
			}
			if len(ds) != tc.want {
				t.Fatalf("Answer(%+v): %d digests; want %d", tc.req, len(ds), tc.want)
			}
		})
	}
}

func BenchmarkTreeAdd(b *testing.B) {
	tr := newReplica(DefaultConfig().Shape).tree
	const n = 1 << 12
	ids := make([]ID, n)
	ds := make([]Digest, n)
	for i := range n {
		ids[i], ds[i] = testID(i), syntheticDigest(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.Add(ids[i%n], ds[i%n])
		i++
	}
}

func BenchmarkItemDigest(b *testing.B) {
	id := testID(1)
	state := make([]byte, 200) // a typical encoded state
	b.ReportAllocs()
	for b.Loop() {
		_ = StateItem(id, state)
	}
}
