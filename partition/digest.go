package partition

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/internal/cbormode"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// The items of a task in the replica's hash tree (package antientropy;
// docs/design.md, "Anti-entropy"). What is hashed is what replicas must agree
// on, and nothing else:
//
//   - the spec item (antientropy.SpecItem): the canonical CBOR of the spec
//     with its payload. EnqueuedAt and NotBefore are derived by the
//     coordinator from its clock, so a retried enqueue may carry others
//     than the attempt some replicas hold; Merge takes such a spec as the
//     same task (SameTask) and keeps, of the two, the one that comes
//     first (specFirst), so replicas converge on one spec, and the item
//     hashes it whole so that anti-entropy sees those that have not.
//   - the state item (antientropy.StateItem): the canonical CBOR of the
//     task's merged state. A task whose state is the zero state (no state
//     record, as an enqueued task that was never claimed) has NO state
//     item: its state digest is the zero digest. So a stored zero state and
//     a missing state record hash alike, as they mean the same (Merge and
//     the store treat them alike), and the common enqueue hashes one item.
//   - one update item (antientropy.UpdateItem) per stored (claim, seq),
//     with its data;
//   - one edge item (antientropy.EdgeItem) per stored reverse dependency
//     edge (Record.Dependents): dependent waits on the task.
//   - a collected task has none of the above, only its tombstone item
//     (antientropy.TombItem), which hashes the id alone (see gc.go).
//
// Nothing local to the replica is hashed: not the indexes, the hot cache,
// the timers, the id filter, the promise or the epoch.
//
// Canonical bytes: hashEnc is CBOR's core deterministic encoding (RFC 8949
// §4.2.1: shortest integers, map keys sorted), and task.Spec and
// task.State encode as maps with integer keys whose empty fields are
// omitted. The sets of a State are kept sorted by their invariant (Merge
// refuses records that break it), so equal states have equal bytes on
// every replica, whether a field was decoded from the store (nil) or
// built by a merge (empty). The encoding is pinned by
// TestItemEncodingFrozen: a change there needs a new item kind or domain
// in antientropy.
var hashEnc = cbormode.Enc

// hashBufs recycles encoding buffers: digests are computed on every write,
// under the replica's lock, and by Load and ListBuckets outside it.
var hashBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// canonical calls fn with v's canonical CBOR, in a buffer valid only
// during the call. The types hashed (task.Spec, task.State) have no field
// CBOR cannot encode, so an error is a bug: it panics.
func canonical(v any, fn func([]byte)) {
	buf := hashBufs.Get().(*bytes.Buffer)
	buf.Reset()
	// Spec and State, hashed on every write, encode by hand to the same
	// bytes (task.AppendCBOR).
	switch v := v.(type) {
	case *task.Spec:
		buf.Write(v.AppendCBOR(buf.AvailableBuffer()))
	case *task.State:
		buf.Write(v.AppendCBOR(buf.AvailableBuffer()))
	default:
		if err := hashEnc.MarshalToBuffer(v, buf); err != nil {
			panic(fmt.Sprintf("partition: canonical encoding of %T: %v", v, err))
		}
	}
	fn(buf.Bytes())
	hashBufs.Put(buf)
}

// specDigest returns the spec item of sp, which must carry its payload.
func specDigest(sp *task.Spec) antientropy.Digest {
	var d antientropy.Digest
	canonical(sp, func(b []byte) { d = antientropy.SpecItem(sp.ID, b) })
	return d
}

// specFirst reports whether a, a spec of the same task as b (SameTask),
// comes before b: an earlier enqueue time, then an earlier not-before.
// Keeping the first of two is a join (a total order's minimum), so
// replicas that merge each other's specs hold the same one.
func specFirst(a, b *task.Spec) bool {
	if a.EnqueuedAt != b.EnqueuedAt {
		return a.EnqueuedAt < b.EnqueuedAt
	}
	return a.NotBefore < b.NotBefore
}

// stateDigest returns the state item of task id in state st: the zero
// digest for the zero state (see the comment on hashEnc).
func stateDigest(id task.ID, st *task.State) antientropy.Digest {
	if isZeroState(st) {
		return antientropy.Digest{}
	}
	var d antientropy.Digest
	canonical(st, func(b []byte) { d = antientropy.StateItem(id, b) })
	return d
}

// exportDigest returns the task digest of a whole stored record: the XOR
// of its spec, state, update and edge items.
func exportDigest(t *store.TaskExport) antientropy.Digest {
	id := t.Spec.ID
	d := specDigest(t.Spec).Xor(stateDigest(id, &t.State))
	for _, u := range t.Updates {
		d = d.Xor(antientropy.UpdateItem(id, u.Claim, u.Seq, u.Data))
	}
	for _, dep := range t.Dependents {
		d = d.Xor(antientropy.EdgeItem(id, dep))
	}
	return d
}

// treeDelta is what one store batch changes in the tree: item digests to
// XOR into it, per task. A write path collects it while it stages the
// batch and applies it (applyTreeLocked) only after the batch applied, in
// the same critical section: a batch that fails leaves the tree as it was.
type treeDelta []treeItem

type treeItem struct {
	id task.ID
	d  antientropy.Digest
}

// add records that item d of task id appears (or, XOR being its own
// inverse, goes).
func (td *treeDelta) add(id task.ID, d antientropy.Digest) {
	if !d.IsZero() {
		*td = append(*td, treeItem{id, d})
	}
}

// replace records that item old of task id becomes new: a no-op when
// they are equal (a state written without change).
func (td *treeDelta) replace(id task.ID, old, new antientropy.Digest) { td.add(id, old.Xor(new)) }

// applyTreeLocked applies td to the tree. The caller applied the batch td
// mirrors, and holds r.mu since before it staged it. Consecutive items of
// one task (a record's spec, updates and edges) are folded into one Add:
// an Add hashes the id to find its bucket.
func (r *Replica) applyTreeLocked(td treeDelta) {
	for i := 0; i < len(td); {
		id, d := td[i].id, td[i].d
		for i++; i < len(td) && td[i].id == id; i++ {
			d = d.Xor(td[i].d)
		}
		r.tree.Add(id, d)
	}
}

// stateDigestLocked returns the state item of task id, whose stored state
// is st: from the hot cache when it holds the task (its digest is kept
// with its state), else computed.
func (r *Replica) stateDigestLocked(id task.ID, st *task.State) antientropy.Digest {
	if e := r.tasks[id]; e != nil && e.hot != nil {
		return e.hot.digest
	}
	return stateDigest(id, st)
}
