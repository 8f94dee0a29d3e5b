package antientropy

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/skuldd/skuldd/task"
)

func TestIDLenMatchesTask(t *testing.T) {
	if IDLen != task.IDLen {
		t.Fatalf("IDLen = %d; want task.IDLen = %d", IDLen, task.IDLen)
	}
}

// vectorID is the id of the frozen vectors; vectorDependent the dependent
// of the edge vector.
var (
	vectorID        = ID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	vectorDependent = ID{21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40}
)

// TestFormatsFrozen pins the bucket hash and the item digests: they must
// be identical on every node, of every version, and across restarts (the
// expected values were checked against Python's hashlib). If this fails,
// a change broke compatibility between replicas.
func TestFormatsFrozen(t *testing.T) {
	tests := []struct {
		name string
		got  Digest
		want string
	}{
		{"spec", SpecItem(vectorID, []byte("spec")), "887160f6e744c989be9ae36f54079807"},
		{"state", StateItem(vectorID, []byte("state")), "d939e2ab418f1aa794904e5389c0a2af"},
		{"update", UpdateItem(vectorID, 3, 42, []byte("data")), "f358574da1d0a5d2e6968876ed7b3385"},
		{"update without data", UpdateItem(vectorID, 0, 0, nil), "b73ba75660b5ac231aa934aaf336e0ef"},
		{"edge", EdgeItem(vectorID, vectorDependent), "e117e406a9141055b114ccd1da88a204"},
		{"tombstone", TombItem(vectorID), "28692fce9f09c229553afc3b21127390"},
	}
	for _, tc := range tests {
		if tc.got.String() != tc.want {
			t.Errorf("%s: digest %v; want %s", tc.name, tc.got, tc.want)
		}
	}
	const wantHash = 0x6b4946ad0a89352b
	if got := bucketHash(vectorID); got != wantHash {
		t.Errorf("bucketHash = %#x; want %#x", got, uint64(wantHash))
	}
	bucketTests := []struct {
		shape Shape
		want  int
	}{
		{Shape{Buckets: 1024, Fanout: 32}, 429}, // top 10 bits of wantHash
		{Shape{Buckets: 2048, Fanout: 32}, 858}, // top 11 bits: a refinement
		{Shape{Buckets: 2, Fanout: 2}, 0},
	}
	for _, tc := range bucketTests {
		if got := tc.shape.BucketOf(vectorID); got != tc.want {
			t.Errorf("BucketOf with %d buckets = %d; want %d", tc.shape.Buckets, got, tc.want)
		}
	}
}

// TestItemsAreDistinct: the kind and the fixed fields separate items whose
// bytes would otherwise coincide.
func TestItemsAreDistinct(t *testing.T) {
	other := vectorID
	other[IDLen-1]++
	data := []byte("same bytes")
	items := map[string]Digest{
		"spec":               SpecItem(vectorID, data),
		"state":              StateItem(vectorID, data),
		"update":             UpdateItem(vectorID, 0, 0, data),
		"update claim 1":     UpdateItem(vectorID, 1, 0, data),
		"update seq 1":       UpdateItem(vectorID, 0, 1, data),
		"spec of other id":   SpecItem(other, data),
		"spec of no bytes":   SpecItem(vectorID, nil),
		"state of no bytes":  StateItem(vectorID, nil),
		"edge":               EdgeItem(vectorID, other),
		"edge reversed":      EdgeItem(other, vectorID),
		"spec of dependent":  SpecItem(vectorID, other[:]),
		"tombstone":          TombItem(vectorID),
		"tombstone of other": TombItem(other),
	}
	seen := map[Digest]string{}
	for name, d := range items {
		if prev, ok := seen[d]; ok {
			t.Errorf("%s and %s have the same digest %v", name, prev, d)
		}
		seen[d] = name
	}
}

func TestFoldAndXor(t *testing.T) {
	a, b, c := syntheticDigest(1), syntheticDigest(2), syntheticDigest(3)
	if !Fold().IsZero() {
		t.Errorf("Fold() = %v; want zero", Fold())
	}
	if Fold(a, b, c) != Fold(c, a, b) {
		t.Errorf("Fold depends on order")
	}
	if got := Fold(a, b, a); got != b {
		t.Errorf("Fold(a, b, a) = %v; want b = %v", got, b)
	}
	if got := a.Xor(b).Xor(b); got != a {
		t.Errorf("a^b^b = %v; want a = %v", got, a)
	}
	if _, err := hex.DecodeString(a.String()); err != nil || len(a.String()) != 2*DigestLen {
		t.Errorf("String() = %q: not %d hex characters", a.String(), 2*DigestLen)
	}
}

// TestBucketSpread: flake ids are k-ordered, yet they spread evenly over
// the buckets (each count within 6 standard deviations of the mean).
func TestBucketSpread(t *testing.T) {
	const ids = 200_000
	s := DefaultConfig().Shape
	counts := make([]int, s.Buckets)
	for i := range ids {
		counts[s.BucketOf(testID(i))]++
	}
	mean := float64(ids) / float64(s.Buckets)
	slack := 6 * math.Sqrt(mean)
	for b, n := range counts {
		if math.Abs(float64(n)-mean) > slack {
			t.Errorf("bucket %d holds %d ids; want %.0f ± %.0f", b, n, mean, slack)
		}
	}
}
