package task_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/task"
)

// Reference: TESTING.md section 8, fuzz targets 2 (the task-record CRDT
// Merge) and 3 (the queue-name validator). The seed corpora below run as
// ordinary tests under `go test`.

// byteSource feeds a state generator from fuzz input: each call takes the
// next byte, and an exhausted source reads as zeros, so every input decodes
// to some valid state.
type byteSource struct {
	b []byte
}

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

// intn returns a value in [0, n).
func (s *byteSource) intn(n int) int { return int(s.next()) % n }

// depPool are the ids DepsDone draws from; a small pool makes merges of
// random states overlap.
var depPool = []task.ID{
	task.MakeID(1, 1, 1), task.MakeID(1, 1, 2), task.MakeID(2, 1, 0), task.MakeID(3, 7, 0), task.MakeID(9, 9, 9),
}

// genState decodes a State that keeps the type's invariants (sorted, unique
// keys). Values come from small ranges so that two generated states often
// hold the same key with different values: the cases merge must settle.
func genState(src *byteSource) task.State {
	var s task.State
	n := src.intn(6)
	for idx := range n {
		if src.intn(4) == 0 {
			continue // leave a gap: merged claim sets need not be dense
		}
		start := int64(src.intn(8))
		s.Claims = append(s.Claims, task.Claim{
			Index: uint32(idx),
			Start: start,
			End:   start + int64(src.intn(8)),
			Epoch: uint64(src.intn(3)),
		})
	}
	for idx := range src.intn(6) {
		if src.intn(2) == 0 {
			continue
		}
		r := task.Release{
			Claim:  uint32(idx),
			At:     int64(src.intn(4)),
			Snooze: src.intn(2) == 1,
			Until:  int64(src.intn(4)),
		}
		if src.intn(2) == 1 {
			r.Reason = fmt.Sprintf("r%d", src.intn(3))
		}
		s.Releases = append(s.Releases, r)
	}
	if src.intn(3) == 0 {
		s.Completion = &task.Completion{
			Claim: uint32(src.intn(4)),
			Seq:   uint64(src.intn(3)),
			At:    int64(src.intn(4)),
		}
		if src.intn(3) == 0 {
			s.Completion.Cancelled = true
			s.Completion.Reason = fmt.Sprintf("c%d", src.intn(2))
		}
	}
	for _, d := range depPool {
		if src.intn(2) == 1 {
			s.DepsDone = append(s.DepsDone, d)
		}
	}
	s.RequeueBase = uint32(src.intn(4))
	return s
}

// merged returns a ⊔ b without changing either.
func merged(a, b task.State) task.State {
	c := a.Clone()
	c.Merge(&b)
	return c
}

// norm maps empty slices to nil, so states that mean the same compare
// equal (the CBOR encoding omits both).
func norm(s task.State) task.State {
	s = s.Clone()
	if len(s.Claims) == 0 {
		s.Claims = nil
	}
	if len(s.Releases) == 0 {
		s.Releases = nil
	}
	if len(s.DepsDone) == 0 {
		s.DepsDone = nil
	}
	return s
}

func sameState(a, b task.State) bool { return reflect.DeepEqual(norm(a), norm(b)) }

func completionCmp(a, b task.Completion) int {
	// On a tie a completion wins over a cancel, then the lower reason.
	cancelled := func(c task.Completion) int {
		if c.Cancelled {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Seq, b.Seq),
		cmp.Compare(cancelled(a), cancelled(b)), cmp.Compare(a.Reason, b.Reason))
}

// checkInvariants reports a broken State invariant.
func checkInvariants(s task.State) error {
	for i := 1; i < len(s.Claims); i++ {
		if s.Claims[i-1].Index >= s.Claims[i].Index {
			return fmt.Errorf("claims not sorted and unique: %+v", s.Claims)
		}
	}
	for i := 1; i < len(s.Releases); i++ {
		if s.Releases[i-1].Claim >= s.Releases[i].Claim {
			return fmt.Errorf("releases not sorted and unique: %+v", s.Releases)
		}
	}
	for i := 1; i < len(s.DepsDone); i++ {
		if s.DepsDone[i-1].Compare(s.DepsDone[i]) >= 0 {
			return fmt.Errorf("deps done not sorted and unique: %v", s.DepsDone)
		}
	}
	return nil
}

// atLeast reports where m loses information held by a: merge must be
// monotonic (a ⊑ a ⊔ b).
func atLeast(m, a task.State) error {
	for _, c := range a.Claims {
		i, ok := slices.BinarySearchFunc(m.Claims, c.Index, func(x task.Claim, k uint32) int { return cmp.Compare(x.Index, k) })
		if !ok {
			return fmt.Errorf("claim %d lost", c.Index)
		}
		if got := m.Claims[i]; got.End < c.End || got.Start > c.Start || got.Epoch < c.Epoch {
			return fmt.Errorf("claim %d went back: %+v from %+v", c.Index, got, c)
		}
	}
	for _, r := range a.Releases {
		if _, ok := m.ReleaseOf(r.Claim); !ok {
			return fmt.Errorf("release of claim %d lost", r.Claim)
		}
	}
	for _, d := range a.DepsDone {
		if !slices.Contains(m.DepsDone, d) {
			return fmt.Errorf("dep done %v lost", d)
		}
	}
	if m.RequeueBase < a.RequeueBase {
		return fmt.Errorf("requeue base went back: %d < %d", m.RequeueBase, a.RequeueBase)
	}
	if a.Completion != nil {
		if m.Completion == nil {
			return fmt.Errorf("completion lost")
		}
		if completionCmp(*m.Completion, *a.Completion) > 0 {
			return fmt.Errorf("completion %+v is later than input %+v", *m.Completion, *a.Completion)
		}
	}
	return nil
}

// checkMerge checks the CRDT laws for three states.
func checkMerge(t *testing.T, a, b, c task.State) {
	t.Helper()
	a0, b0, c0 := a.Clone(), b.Clone(), c.Clone()
	ab, ba := merged(a, b), merged(b, a)
	if !sameState(ab, ba) {
		t.Fatalf("not commutative:\na=%+v\nb=%+v\na⊔b=%+v\nb⊔a=%+v", a, b, ab, ba)
	}
	left, right := merged(ab, c), merged(a, merged(b, c))
	if !sameState(left, right) {
		t.Fatalf("not associative:\na=%+v\nb=%+v\nc=%+v\n(a⊔b)⊔c=%+v\na⊔(b⊔c)=%+v", a, b, c, left, right)
	}
	if aa := merged(a, a); !sameState(aa, a) {
		t.Fatalf("not idempotent:\na=%+v\na⊔a=%+v", a, aa)
	}
	if abb := merged(ab, b); !sameState(abb, ab) {
		t.Fatalf("merging b again changed a⊔b:\nb=%+v\na⊔b=%+v\n(a⊔b)⊔b=%+v", b, ab, abb)
	}
	for _, s := range []task.State{ab, left} {
		if err := checkInvariants(s); err != nil {
			t.Fatalf("merge broke an invariant: %v", err)
		}
	}
	for name, in := range map[string]task.State{"a": a, "b": b} {
		if err := atLeast(ab, in); err != nil {
			t.Fatalf("a⊔b is not at least %s: %v\na=%+v\nb=%+v\na⊔b=%+v", name, err, a, b, ab)
		}
	}
	// Completion is absorbing and the earliest wins.
	switch {
	case a.Completion == nil && b.Completion == nil:
		if ab.Completion != nil {
			t.Fatalf("completion from nowhere: %+v", ab.Completion)
		}
	case a.Completion == nil:
		if ab.Completion == nil || *ab.Completion != *b.Completion {
			t.Fatalf("completion %+v; want b's %+v", ab.Completion, b.Completion)
		}
	case b.Completion == nil:
		if ab.Completion == nil || *ab.Completion != *a.Completion {
			t.Fatalf("completion %+v; want a's %+v", ab.Completion, a.Completion)
		}
	default:
		want := earliest(*a.Completion, *b.Completion)
		if ab.Completion == nil || *ab.Completion != want {
			t.Fatalf("completion %+v; want the earliest %+v", ab.Completion, want)
		}
	}
	// Merge never changes its argument, nor the state a clone came from.
	if !reflect.DeepEqual(a, a0) || !reflect.DeepEqual(b, b0) || !reflect.DeepEqual(c, c0) {
		t.Fatalf("merge mutated an input")
	}
}

// earliest returns the completion merge must keep of a and b.
func earliest(a, b task.Completion) task.Completion {
	if completionCmp(b, a) < 0 {
		return b
	}
	return a
}

func FuzzMerge(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 1, 3, 2, 1, 5, 5, 1, 1, 1, 3, 0, 2, 1, 0, 1, 1, 3, 0, 0, 0, 2})
	f.Add([]byte("a fairly long seed that makes three different states appear"))
	// Seeds from the random generator, so the corpus covers collisions.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 16 {
		b := make([]byte, 120)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		a, b, c := genState(src), genState(src), genState(src)
		checkMerge(t, a, b, c)
	})
}

// allowedQueueByte is the queue charset of docs/design.md, "Data model".
func allowedQueueByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

func FuzzValidateQueue(f *testing.F) {
	for _, s := range []string{
		"", "q", "jobs.email", "a:b_c-d.e", "../etc", "a/b", "a\x00b", "é", "e\u0301",
		"Q", " q", "q\n", "\xff", string(make([]byte, 128)), string(make([]byte, 129)),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		err := task.ValidateQueue(q)
		if err != nil {
			return
		}
		if len(q) < 1 || len(q) > task.MaxQueueLen {
			t.Fatalf("accepted a %d-byte name", len(q))
		}
		for i := 0; i < len(q); i++ {
			if !allowedQueueByte(q[i]) {
				t.Fatalf("accepted %q with byte %q at %d", q, q[i], i)
			}
		}
		// Groups share the charset.
		if err := task.ValidateGroup(q); err != nil {
			t.Fatalf("queue %q is valid but the same group is not: %v", q, err)
		}
	})
}
