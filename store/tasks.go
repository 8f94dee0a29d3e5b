package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

func taskKey(kind byte, part uint16, id task.ID) []byte {
	return append(partKey(kind, part, task.IDLen), id[:]...)
}

func updateKey(part uint16, id task.ID, claim uint32, seq uint64) []byte {
	k := append(partKey(kindUpdate, part, task.IDLen+12), id[:]...)
	k = binary.BigEndian.AppendUint32(k, claim)
	return binary.BigEndian.AppendUint64(k, seq)
}

func edgeKey(part uint16, dep, dependent task.ID) []byte {
	k := append(partKey(kindEdge, part, 2*task.IDLen), dep[:]...)
	return append(k, dependent[:]...)
}

// Batch collects writes that become durable together. Not safe for
// concurrent use. See the package doc for Apply/Wait.
type Batch struct {
	s *Store
	b *pebble.Batch
}

// NewBatch returns an empty batch.
func (s *Store) NewBatch() *Batch { return &Batch{s: s, b: s.db.NewBatch()} }

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.b.Empty() }

// PutSpec writes a task's spec with its payload: one record under the
// spec key if the payload is at most inlinePayloadMax bytes, else the spec
// without payload (marked apart) plus the whole spec under the data key
// (layout.go).
func (b *Batch) PutSpec(part uint16, sp *task.Spec) error {
	whole, err := encode(sp)
	if err != nil {
		return err
	}
	if err := putQueueIndex(b.b, part, sp); err != nil {
		return err
	}
	if len(sp.Data) <= inlinePayloadMax {
		if err := b.b.Set(taskKey(kindSpec, part, sp.ID), whole, nil); err != nil {
			return fmt.Errorf("store: put spec: %w", err)
		}
		return nil
	}
	if err := b.b.Set(taskKey(kindSpec, part, sp.ID), encodeSpecApart(sp), nil); err != nil {
		return fmt.Errorf("store: put spec: %w", err)
	}
	if err := b.b.Set(taskKey(kindData, part, sp.ID), whole, nil); err != nil {
		return fmt.Errorf("store: put data: %w", err)
	}
	return nil
}

// PutState writes a task's state.
func (b *Batch) PutState(part uint16, id task.ID, st *task.State) error {
	v, err := encode(st)
	if err != nil {
		return err
	}
	if err := b.b.Set(taskKey(kindState, part, id), v, nil); err != nil {
		return fmt.Errorf("store: put state: %w", err)
	}
	return nil
}

// PutUpdate writes one progress update.
func (b *Batch) PutUpdate(part uint16, id task.ID, claim uint32, seq uint64, data []byte) error {
	if err := b.b.Set(updateKey(part, id, claim, seq), data, nil); err != nil {
		return fmt.Errorf("store: put update: %w", err)
	}
	return nil
}

// DeleteUpdate removes one progress update: a replica taking another's
// whole record in place of its own drops the updates that record lacks.
func (b *Batch) DeleteUpdate(part uint16, id task.ID, claim uint32, seq uint64) error {
	if err := b.b.Delete(updateKey(part, id, claim, seq), nil); err != nil {
		return fmt.Errorf("store: delete update: %w", err)
	}
	return nil
}

// PutEdge records that dependent waits on dep; part is dep's partition.
func (b *Batch) PutEdge(part uint16, dep, dependent task.ID) error {
	if err := b.b.Set(edgeKey(part, dep, dependent), nil, nil); err != nil {
		return fmt.Errorf("store: put edge: %w", err)
	}
	return nil
}

// PutPromise records the epoch a partition replica promised, and to which
// candidate.
func (b *Batch) PutPromise(part uint16, epoch, candidate uint64) error {
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, epoch), candidate)
	if err := b.b.Set(partKey(kindPromise, part, 0), v, nil); err != nil {
		return fmt.Errorf("store: put promise: %w", err)
	}
	return nil
}

// Pending is an applied batch whose durability is not yet confirmed.
type Pending struct {
	b     *pebble.Batch
	pacer *syncPacer
}

// Apply gives the batch its place in the WAL and makes it visible to reads,
// without waiting for the sync. Call it while holding the lock that orders
// the writes; then release the lock and Wait. The batch must not be used
// after Apply.
func (b *Batch) Apply() (*Pending, error) {
	b.s.pacer.applied()
	if err := b.s.db.ApplyNoSyncWait(b.b, pebble.Sync); err != nil {
		b.s.pacer.synced()
		_ = b.b.Close()
		return nil, fmt.Errorf("store: apply: %w", err)
	}
	return &Pending{b: b.b, pacer: b.s.pacer}, nil
}

// Wait blocks until the applied batch is durable (its WAL synced). Every
// Pending must be waited on, once (the sync pacer counts it until then).
func (p *Pending) Wait() error {
	err := p.b.SyncWait()
	p.pacer.synced()
	_ = p.b.Close()
	if err != nil {
		return fmt.Errorf("store: sync: %w", err)
	}
	return nil
}

// Commit applies the batch and waits for it to be durable.
func (b *Batch) Commit() error {
	p, err := b.Apply()
	if err != nil {
		return err
	}
	return p.Wait()
}

// Barrier returns once every write applied before it is durable. An
// operation that succeeds without writing (a retry that finds its write
// already there) calls it before acknowledging: the write it found may have
// been applied by a concurrent request and not yet be synced.
func (s *Store) Barrier() error {
	s.pacer.applied()
	err := s.db.LogData(nil, pebble.Sync)
	s.pacer.synced()
	if err != nil {
		return fmt.Errorf("store: sync barrier: %w", err)
	}
	return nil
}

// Close discards a batch that was not applied.
func (b *Batch) Close() { _ = b.b.Close() }

// Spec reads a task's spec without its payload.
func (s *Store) Spec(part uint16, id task.ID) (*task.Spec, error) {
	sp, _, err := s.readSpec(part, id)
	if err != nil {
		return nil, err
	}
	sp.Data = nil
	return sp, nil
}

// FullSpec reads a task's spec with its payload: one lookup, two for a
// payload over inlinePayloadMax.
func (s *Store) FullSpec(part uint16, id task.ID) (*task.Spec, error) {
	sp, apart, err := s.readSpec(part, id)
	if err != nil || !apart {
		return sp, err
	}
	v, err := s.get(taskKey(kindData, part, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	whole, err := decodeApart(v, err == nil)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
	}
	return whole, nil
}

// readSpec reads the spec key of task id: the spec, with its payload
// unless apart.
func (s *Store) readSpec(part uint16, id task.ID) (sp *task.Spec, apart bool, err error) {
	v, err := s.get(taskKey(kindSpec, part, id))
	if err != nil {
		return nil, false, err
	}
	sp = new(task.Spec)
	if apart, err = decodeSpec(v, sp); err != nil {
		return nil, false, fmt.Errorf("task %s: %w", id, err)
	}
	return sp, apart, nil
}

// Data reads a task's payload.
func (s *Store) Data(part uint16, id task.ID) ([]byte, error) {
	sp, err := s.FullSpec(part, id)
	if err != nil {
		return nil, err
	}
	return sp.Data, nil
}

// State reads a task's state; a task with no state record has the zero
// state (found=false).
func (s *Store) State(part uint16, id task.ID) (st task.State, found bool, err error) {
	v, err := s.get(taskKey(kindState, part, id))
	if errors.Is(err, ErrNotFound) {
		return task.State{}, false, nil
	}
	if err != nil {
		return task.State{}, false, err
	}
	if err := decode(v, &st); err != nil {
		return task.State{}, false, fmt.Errorf("task %s: %w", id, err)
	}
	return st, true, nil
}

// Updates calls fn for each stored update of task id, ordered by (claim,
// seq), until fn returns false.
func (s *Store) Updates(part uint16, id task.ID, fn func(task.Update) bool) error {
	prefix := taskKey(kindUpdate, part, id)
	return s.scan(prefix, prefixEnd(prefix), func(k, v []byte) (bool, error) {
		rest := k[len(prefix):]
		if len(rest) != 12 {
			return false, fmt.Errorf("%w: update key of %d bytes", ErrCorrupt, len(k))
		}
		u := task.Update{
			Claim: binary.BigEndian.Uint32(rest[0:4]),
			Seq:   binary.BigEndian.Uint64(rest[4:12]),
			Data:  append([]byte(nil), v...),
		}
		return fn(u), nil
	})
}

// task.Update reads one update, or ErrNotFound.
func (s *Store) Update(part uint16, id task.ID, claim uint32, seq uint64) ([]byte, error) {
	return s.get(updateKey(part, id, claim, seq))
}

// NextSeq returns the length of claim's contiguous update history: the
// number of updates with seq 0, 1, 2, ... present without a gap.
func (s *Store) NextSeq(part uint16, id task.ID, claim uint32) (uint64, error) {
	prefix := binary.BigEndian.AppendUint32(taskKey(kindUpdate, part, id), claim)
	var next uint64
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		if len(k) != len(prefix)+8 {
			return false, fmt.Errorf("%w: update key of %d bytes", ErrCorrupt, len(k))
		}
		if binary.BigEndian.Uint64(k[len(prefix):]) != next {
			return false, nil
		}
		next++
		return true, nil
	})
	return next, err
}

// Dependents calls fn with each task recorded as waiting on dep.
func (s *Store) Dependents(part uint16, dep task.ID, fn func(task.ID) bool) error {
	prefix := taskKey(kindEdge, part, dep)
	return s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		if len(k) != len(prefix)+task.IDLen {
			return false, fmt.Errorf("%w: edge key of %d bytes", ErrCorrupt, len(k))
		}
		var id task.ID
		copy(id[:], k[len(prefix):])
		return fn(id), nil
	})
}

// DepTargets calls fn once for every task that some task depends on, as
// the reverse edges record them, in partition then id order.
func (s *Store) DepTargets(fn func(dep task.ID)) error {
	var last task.ID
	first := true
	return s.scan([]byte{kindEdge}, []byte{kindEdge + 1}, func(k, _ []byte) (bool, error) {
		if len(k) != 3+2*task.IDLen {
			return false, fmt.Errorf("%w: edge key of %d bytes", ErrCorrupt, len(k))
		}
		var dep task.ID
		copy(dep[:], k[3:3+task.IDLen])
		if first || dep != last {
			fn(dep)
			last, first = dep, false
		}
		return true, nil
	})
}

// Promise returns the epoch partition part promised and the candidate it
// promised it to; 0, 0 if none.
func (s *Store) Promise(part uint16) (epoch, candidate uint64, err error) {
	v, err := s.get(partKey(kindPromise, part, 0))
	if errors.Is(err, ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("%w: promise of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v[:8]), binary.BigEndian.Uint64(v[8:]), nil
}

// TaskRecord is a task's spec and state, as a scan returns them. The spec
// carries its payload when the payload is stored with it (up to
// inlinePayloadMax bytes); otherwise PayloadApart is set and Store.Data
// reads it.
type TaskRecord struct {
	Spec         *task.Spec
	State        task.State
	PayloadApart bool
}

// ScanPartition calls fn for every task of partition part with id >= from,
// in id order, until fn returns false or an error. A payload over
// inlinePayloadMax is not read (TaskRecord.PayloadApart). It walks the
// spec and state ranges side by side, so a scan costs one pass over each.
func (s *Store) ScanPartition(part uint16, from task.ID, fn func(TaskRecord) (bool, error)) error {
	specHi := partKey(kindSpec, part+1, 0)
	if part == ^uint16(0) {
		specHi = []byte{kindSpec + 1}
	}
	return s.scanTasks(part, taskKey(kindSpec, part, from), specHi,
		taskKey(kindState, part, from), prefixEnd(partKey(kindState, part, 0)), false, fn)
}

// ScanPartitionDesc is ScanPartition backwards: it calls fn for every task
// of partition part with id < before (the zero id: every task), in
// descending id order, until fn returns false or an error.
func (s *Store) ScanPartitionDesc(part uint16, before task.ID, fn func(TaskRecord) (bool, error)) error {
	specLo := partKey(kindSpec, part, 0)
	stateLo := partKey(kindState, part, 0)
	specHi, stateHi := prefixEnd(specLo), prefixEnd(stateLo)
	if !before.IsZero() {
		specHi, stateHi = taskKey(kindSpec, part, before), taskKey(kindState, part, before)
	}
	return s.scanTasks(part, specLo, specHi, stateLo, stateHi, true, fn)
}

// scanTasks walks the spec keys in [specLo, specHi) forward (or backward
// when desc) with the state keys in [stateLo, stateHi) beside them, and
// calls fn with each task's record.
func (s *Store) scanTasks(part uint16, specLo, specHi, stateLo, stateHi []byte, desc bool, fn func(TaskRecord) (bool, error)) error {
	si, err := s.db.NewIter(&pebble.IterOptions{LowerBound: specLo, UpperBound: specHi})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	defer si.Close()
	ti, err := s.db.NewIter(&pebble.IterOptions{LowerBound: stateLo, UpperBound: stateHi})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	defer ti.Close()
	// dir is the walk's direction: +1 forward, -1 backward. A state key
	// behind the spec's id (in the walk's direction) belongs to no spec.
	first, next, tnext, dir := si.First, si.Next, ti.Next, 1
	if desc {
		first, next, tnext, dir = si.Last, si.Prev, ti.Prev, -1
		ti.Last()
	} else {
		ti.First()
	}
	for first(); si.Valid(); next() {
		key := si.Key()
		if len(key) != 3+task.IDLen {
			return fmt.Errorf("%w: spec key of %d bytes", ErrCorrupt, len(key))
		}
		s.scanned.Add(1)
		rec := TaskRecord{Spec: new(task.Spec)}
		if rec.PayloadApart, err = decodeSpec(si.Value(), rec.Spec); err != nil {
			return fmt.Errorf("part %d: %w", part, err)
		}
		id := key[3:]
		for ti.Valid() && bytes.Compare(ti.Key()[3:], id)*dir < 0 {
			tnext() // a state without a spec: cannot happen, skip it
		}
		if ti.Valid() && bytes.Equal(ti.Key()[3:], id) {
			if err := decode(ti.Value(), &rec.State); err != nil {
				return fmt.Errorf("part %d task %x: %w", part, id, err)
			}
		}
		more, err := fn(rec)
		if err != nil || !more {
			return err
		}
	}
	if err := si.Error(); err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	return ti.Error()
}

// scan iterates [lo, hi) calling fn until it returns false or an error.
func (s *Store) scan(lo, hi []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		more, err := fn(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	return nil
}

// NodeMeta is a node's durable identity.
type NodeMeta struct {
	NodeID    uint64 `cbor:"1,keyasint"`
	ClusterID string `cbor:"2,keyasint,omitempty"`
	CreatedAt int64  `cbor:"3,keyasint,omitempty"`
	// ResetKey keys the node's QUIC stateless resets; it is random, made
	// once, and kept so that it survives restarts.
	ResetKey []byte `cbor:"4,keyasint,omitempty"`
}

var nodeMetaKey = []byte{kindMeta, 'n', 'o', 'd', 'e'}

// NodeMeta returns the node's identity, or ErrNotFound on a new database.
func (s *Store) NodeMeta() (NodeMeta, error) {
	var m NodeMeta
	v, err := s.get(nodeMetaKey)
	if err != nil {
		return m, err
	}
	if err := decode(v, &m); err != nil {
		return m, err
	}
	return m, nil
}

// PutNodeMeta durably writes the node's identity.
func (s *Store) PutNodeMeta(m NodeMeta) error {
	v, err := encode(&m)
	if err != nil {
		return err
	}
	if err := s.db.Set(nodeMetaKey, v, pebble.Sync); err != nil {
		return fmt.Errorf("store: put node meta: %w", err)
	}
	return nil
}

// partitionKinds are the key kinds of a partition's task data: what a
// replica that leaves a cohort drops (its tombstones included). The promise (kindPromise) is not
// among them: it fences old epochs whether or not the data is held.
var partitionKinds = []byte{kindSpec, kindData, kindState, kindUpdate, kindEdge, kindTomb, kindQueue}

// HasTasks reports whether partition part holds any task.
func (s *Store) HasTasks(part uint16) (bool, error) {
	found := false
	p := partKey(kindSpec, part, 0)
	err := s.scan(p, prefixEnd(p), func(_, _ []byte) (bool, error) {
		found = true
		return false, nil
	})
	return found, err
}

// DropPartition deletes every task of partition part (specs, payloads,
// states, updates, reverse edges, tombstones, the queue index) in one synced batch of range deletions.
// The caller makes sure no other write of the partition runs meanwhile.
func (s *Store) DropPartition(part uint16) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, kind := range partitionKinds {
		p := partKey(kind, part, 0)
		if err := b.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return fmt.Errorf("store: drop partition %d: %w", part, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: drop partition %d: %w", part, err)
	}
	return nil
}
