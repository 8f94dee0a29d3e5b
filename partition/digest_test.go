package partition

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// vectorID is the id of the frozen vectors.
var vectorID = task.ID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

// cborHex joins hex pieces (spaces allowed) into bytes.
func cborHex(t *testing.T, pieces ...string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(pieces, ""), " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vectorSpec and vectorState set every field.
func vectorSpec() *task.Spec {
	return &task.Spec{
		ID: vectorID, Queue: "q", Priority: -2, Deps: []task.ID{vectorID}, NotBefore: 7,
		Group: "g", Description: "d", MaxAttempts: 3, EnqueuedAt: 5, Data: []byte{0xff},
	}
}

func vectorState() *task.State {
	return &task.State{
		Claims:      []task.Claim{{Index: 0, Start: 1, End: 2, Epoch: 3}},
		Releases:    []task.Release{{Claim: 0, At: 2, Snooze: true, Until: 9, Reason: "r"}},
		Completion:  &task.Completion{Claim: 0, Seq: 1, At: 4},
		DepsDone:    []task.ID{vectorID},
		RequeueBase: 1,
	}
}

// TestItemEncodingFrozen pins the canonical bytes the spec and state items
// hash (core deterministic CBOR: integer keys in order, shortest forms,
// empty fields omitted): every replica of every version must hash the
// same bytes for the same spec or state, or trees never agree. If this
// fails, a change of task.Spec, task.State or the encoding broke
// compatibility between replicas.
func TestItemEncodingFrozen(t *testing.T) {
	id := hex.EncodeToString(vectorID[:])
	// {1: id, 2: "q", 3: -2, 4: [id], 5: 7, 6: "g", 7: "d", 8: 3, 9: 5,
	// 10: h'ff'}: the whole spec.
	specBytes := cborHex(t, "aa", "01 54", id, "02 6171", "03 21", "04 81 54", id, "05 07",
		"06 6167", "07 6164", "08 03", "09 05", "0a 41ff")
	// {1: [{1: 0, 2: 1, 3: 2, 4: 3}], 2: [{1: 0, 2: 2, 3: true, 4: 9, 5: "r"}],
	//  3: {1: 0, 2: 1, 3: 4}, 4: [id], 5: 1}
	stateBytes := cborHex(t, "a5", "01 81 a4 0100 0201 0302 0403", "02 81 a5 0100 0202 03f5 0409 05 6172",
		"03 a3 0100 0201 0304", "04 81 54", id, "05 01")
	tests := []struct {
		name      string
		got, want antientropy.Digest
	}{
		{"spec", specDigest(vectorSpec()), antientropy.SpecItem(vectorID, specBytes)},
		{"state", stateDigest(vectorID, vectorState()), antientropy.StateItem(vectorID, stateBytes)},
		{"zero state", stateDigest(vectorID, &task.State{}), antientropy.Digest{}},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: digest %v; want %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestSpecDigestIsSameTask: two specs have the same item exactly when
// they are equal, so the item tells apart every spec Merge refuses and
// every spec of the same task (SameTask) that Merge replaces by the one
// that comes first (specFirst): replicas that hold others differ until
// they hold the same.
func TestSpecDigestIsSameTask(t *testing.T) {
	tests := []struct {
		name string
		edit func(sp *task.Spec)
	}{
		{"enqueue time", func(sp *task.Spec) { sp.EnqueuedAt++ }},
		{"not before", func(sp *task.Spec) { sp.NotBefore++ }},
		{"queue", func(sp *task.Spec) { sp.Queue = "other" }},
		{"priority", func(sp *task.Spec) { sp.Priority++ }},
		{"deps", func(sp *task.Spec) { sp.Deps = nil }},
		{"group", func(sp *task.Spec) { sp.Group = "" }},
		{"description", func(sp *task.Spec) { sp.Description = "other" }},
		{"max attempts", func(sp *task.Spec) { sp.MaxAttempts++ }},
		{"payload", func(sp *task.Spec) { sp.Data = []byte{0xfe} }},
		{"no payload", func(sp *task.Spec) { sp.Data = nil }},
	}
	for _, tc := range tests {
		a, b := vectorSpec(), vectorSpec()
		tc.edit(b)
		if specDigest(a) == specDigest(b) {
			t.Errorf("%s: specs that differ hash alike", tc.name)
		}
		derived := tc.name == "enqueue time" || tc.name == "not before"
		if same := SameTask(a, b); same != derived {
			t.Errorf("%s: SameTask %v; want %v (only the derived times may differ)", tc.name, same, derived)
		}
		if derived && specFirst(a, b) == specFirst(b, a) {
			t.Errorf("%s: specFirst does not order the two", tc.name)
		}
	}
	if specDigest(vectorSpec()) != specDigest(vectorSpec()) {
		t.Error("equal specs hash apart")
	}
}

// TestStateDigestCanonical: equal states hash alike however they were
// built (decoded from the store with nil sets, or merged with empty
// ones), and the zero state has no item.
func TestStateDigestCanonical(t *testing.T) {
	empty := task.State{Claims: []task.Claim{}, Releases: []task.Release{}, DepsDone: []task.ID{}}
	if d := stateDigest(vectorID, &empty); !d.IsZero() {
		t.Errorf("state of empty sets: digest %v; want zero", d)
	}
	merged := task.State{Releases: []task.Release{}}
	merged.Merge(vectorState())
	if a, b := stateDigest(vectorID, &merged), stateDigest(vectorID, vectorState()); a != b {
		t.Errorf("merged state digest %v; built %v", a, b)
	}
	other := vectorState()
	other.Claims[0].End++
	if stateDigest(vectorID, other) == stateDigest(vectorID, vectorState()) {
		t.Errorf("states that differ hash alike")
	}
}

// TestExportDigest: a task's digest is the XOR of its items.
func TestExportDigest(t *testing.T) {
	dep := task.MakeID(1, 2, 3)
	rec := store.TaskExport{
		Spec:       vectorSpec(),
		State:      *vectorState(),
		Updates:    []task.Update{{Claim: 0, Seq: 0, Data: []byte("a")}, {Claim: 0, Seq: 1}},
		Dependents: []task.ID{dep},
	}
	want := antientropy.Fold(specDigest(rec.Spec), stateDigest(vectorID, &rec.State),
		antientropy.UpdateItem(vectorID, 0, 0, []byte("a")), antientropy.UpdateItem(vectorID, 0, 1, nil),
		antientropy.EdgeItem(vectorID, dep))
	if got := exportDigest(&rec); got != want {
		t.Errorf("exportDigest = %v; want %v", got, want)
	}
}

// BenchmarkDigests measures the digests a write computes: the spec item
// of an enqueue (by payload size), the state item of a claim or a
// completion, and an update item.
func BenchmarkDigests(b *testing.B) {
	claimed := task.State{Claims: []task.Claim{{Index: 0, Start: 1_700_000_000_000, End: 1_700_000_030_000, Epoch: 1}}}
	for _, size := range []int{0, 1 << 10, 64 << 10} {
		sp := &task.Spec{ID: vectorID, Queue: "emails", MaxAttempts: 3, EnqueuedAt: 1_700_000_000_000, Data: make([]byte, size)}
		b.Run(fmt.Sprintf("spec/payload=%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				specDigest(sp)
			}
		})
	}
	b.Run("state/one claim", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			stateDigest(vectorID, &claimed)
		}
	})
	b.Run("update/1KiB", func(b *testing.B) {
		data := make([]byte, 1<<10)
		b.ReportAllocs()
		for b.Loop() {
			antientropy.UpdateItem(vectorID, 0, 1, data)
		}
	})
}
