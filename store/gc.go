package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

// Garbage collection (docs/design.md, "Storage"): a collected task's keys are
// deleted and a tombstone (kindTomb part id -> the record's Tomb: the
// deletion time, Unix ms, negated for a task that had been cancelled;
// big-endian two's complement) is written in their place, in one batch, so that
// anti-entropy and replication never bring the task back. A collected
// task reads as not found: every read of its spec, payload, state,
// updates or edges finds nothing. Tombstones are dropped after a horizon
// longer than any partition can stay apart (DeleteTomb).

func tombKey(part uint16, id task.ID) []byte { return taskKey(kindTomb, part, id) }

func tombValue(at int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(at)) }

func decodeTomb(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: tombstone of %d bytes", ErrCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// DeleteTask deletes every key of task id of queue in partition part:
// its spec and payload, its queue index key, its state, its updates and
// its reverse edges (the edges stored under it as the dep). Keys it does
// not have are no matter.
func (b *Batch) DeleteTask(part uint16, id task.ID, queue string) error {
	if err := b.b.Delete(queueKey(part, queue, id), nil); err != nil {
		return fmt.Errorf("store: delete task: %w", err)
	}
	for _, kind := range []byte{kindSpec, kindData, kindState} {
		if err := b.b.Delete(taskKey(kind, part, id), nil); err != nil {
			return fmt.Errorf("store: delete task: %w", err)
		}
	}
	for _, kind := range []byte{kindUpdate, kindEdge} {
		p := taskKey(kind, part, id)
		if err := b.b.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return fmt.Errorf("store: delete task: %w", err)
		}
	}
	return nil
}

// PutTomb writes the tombstone of task id, deleted at (Unix ms).
func (b *Batch) PutTomb(part uint16, id task.ID, at int64) error {
	if err := b.b.Set(tombKey(part, id), tombValue(at), nil); err != nil {
		return fmt.Errorf("store: put tombstone: %w", err)
	}
	return nil
}

// CollectTask deletes task id of queue (DeleteTask) and writes its
// tombstone (PutTomb) in the batch.
func (b *Batch) CollectTask(part uint16, id task.ID, queue string, at int64) error {
	if err := b.DeleteTask(part, id, queue); err != nil {
		return err
	}
	return b.PutTomb(part, id, at)
}

// DeleteTomb deletes the tombstone of task id: the horizon passed.
func (b *Batch) DeleteTomb(part uint16, id task.ID) error {
	if err := b.b.Delete(tombKey(part, id), nil); err != nil {
		return fmt.Errorf("store: delete tombstone: %w", err)
	}
	return nil
}

// Tomb returns the deletion time of task id's tombstone; found=false if
// the partition holds none.
func (s *Store) Tomb(part uint16, id task.ID) (at int64, found bool, err error) {
	v, err := s.get(tombKey(part, id))
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	at, err = decodeTomb(v)
	if err != nil {
		return 0, false, fmt.Errorf("task %s: %w", id, err)
	}
	return at, true, nil
}

// Tombs calls fn with every tombstone of partition part with id >= from
// (id and deletion time), in id order, until fn returns false or an error.
func (s *Store) Tombs(part uint16, from task.ID, fn func(id task.ID, at int64) (bool, error)) error {
	return scanTombs(s.db, part, from, fn)
}

// Tombs is Store.Tombs on the snapshot.
func (v *Snapshot) Tombs(part uint16, from task.ID, fn func(id task.ID, at int64) (bool, error)) error {
	return scanTombs(v.snap, part, from, fn)
}

// Tomb is Store.Tomb on the snapshot.
func (v *Snapshot) Tomb(part uint16, id task.ID) (at int64, found bool, err error) {
	val, closer, err := v.snap.Get(tombKey(part, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: get tombstone: %w", err)
	}
	at, err = decodeTomb(val)
	if cerr := closer.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("store: get tombstone: %w", cerr)
	}
	if err != nil {
		return 0, false, fmt.Errorf("task %s: %w", id, err)
	}
	return at, true, nil
}

func scanTombs(r pebble.Reader, part uint16, from task.ID, fn func(task.ID, int64) (bool, error)) (err error) {
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: tombKey(part, from),
		UpperBound: prefixEnd(partKey(kindTomb, part, 0)),
	})
	if err != nil {
		return fmt.Errorf("store: tombstones of part %d: %w", part, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: tombstones of part %d: %w", part, cerr)
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 3+task.IDLen {
			return fmt.Errorf("%w: tombstone key of %d bytes", ErrCorrupt, len(k))
		}
		id := task.ID(k[3:])
		at, err := decodeTomb(it.Value())
		if err != nil {
			return fmt.Errorf("part %d task %s: %w", part, id, err)
		}
		more, err := fn(id, at)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// Completed is a completed task, as CompletedBefore finds it: when it
// completed, the tasks it depends on (its spec's deps, in any partition)
// and the tasks recorded as waiting on it (its reverse edges).
type Completed struct {
	ID          task.ID
	Queue       string
	CompletedAt int64
	Deps        []task.ID
	Dependents  []task.ID
}

// CompletedBefore calls fn, in id order, with every task of partition part
// with id >= from that completed before cutoff (Unix ms), until fn
// returns false or an error, or scan task states were read (scan <= 0:
// no bound). It reads one snapshot, walking the state range (a task with
// no state record is not completed) and looking up the spec and the
// reverse edges of each task it returns. more says where it stopped
// early: next is the id to resume from (the task fn refused, or the first
// state not read); a scan that reached the partition's end has more false.
func (s *Store) CompletedBefore(part uint16, from task.ID, cutoff int64, scan int, fn func(Completed) (bool, error)) (next task.ID, more bool, err error) {
	snap := s.db.NewSnapshot()
	var its []*pebble.Iterator
	defer func() {
		for _, it := range its {
			if cerr := it.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("store: completed tasks of part %d: %w", part, cerr)
			}
		}
		if cerr := snap.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: completed tasks of part %d: %w", part, cerr)
		}
	}()
	for _, kind := range []byte{kindState, kindSpec, kindEdge} {
		it, err := snap.NewIter(&pebble.IterOptions{
			LowerBound: taskKey(kind, part, from),
			UpperBound: prefixEnd(partKey(kind, part, 0)),
		})
		if err != nil {
			return from, false, fmt.Errorf("store: completed tasks of part %d: %w", part, err)
		}
		its = append(its, it)
	}
	ti, si, ei := its[0], its[1], its[2]
	read := 0
	for ti.First(); ti.Valid(); ti.Next() {
		k := ti.Key()
		if len(k) != 3+task.IDLen {
			return from, false, fmt.Errorf("%w: state key of %d bytes", ErrCorrupt, len(k))
		}
		id := task.ID(k[3:])
		if scan > 0 && read == scan {
			return id, true, nil
		}
		read++
		var st task.State
		if err := decode(ti.Value(), &st); err != nil {
			return from, false, fmt.Errorf("part %d task %s: %w", part, id, err)
		}
		if st.Completion == nil || st.Completion.At >= cutoff {
			continue
		}
		sk := taskKey(kindSpec, part, id)
		if !si.SeekGE(sk) || !bytes.Equal(si.Key(), sk) {
			if err := si.Error(); err != nil {
				return from, false, fmt.Errorf("store: completed tasks of part %d: %w", part, err)
			}
			continue // a state without a spec: no write makes one
		}
		sp := new(task.Spec)
		if _, err := decodeSpec(si.Value(), sp); err != nil {
			return from, false, fmt.Errorf("part %d task %s: %w", part, id, err)
		}
		c := Completed{ID: id, Queue: sp.Queue, CompletedAt: st.Completion.At, Deps: sp.Deps}
		ei.SeekGE(taskKey(kindEdge, part, id))
		if c.Dependents, err = exportEdges(ei, id[:]); err != nil {
			return from, false, fmt.Errorf("part %d task %s: %w", part, id, err)
		}
		more, err := fn(c)
		if err != nil {
			return from, false, err
		}
		if !more {
			return id, true, nil
		}
	}
	if err := ti.Error(); err != nil {
		return from, false, fmt.Errorf("store: completed tasks of part %d: %w", part, err)
	}
	return task.ID{}, false, nil
}

// aliveKey holds the last time the node recorded it was up (Unix ms,
// big-endian u64): on a restart, how long it was away tells whether its
// replicas may still hold tasks the cluster collected and whose
// tombstones have since expired.
var aliveKey = []byte{kindMeta, 'a', 'l', 'i', 'v', 'e'}

// Alive returns the time PutAlive last recorded; found=false on a store
// that never recorded one.
func (s *Store) Alive() (at int64, found bool, err error) { return s.mark(aliveKey, "alive mark") }

// PutAlive records that the node is up at at (Unix ms). It is not synced:
// a mark lost to a crash only makes the node look away longer, which errs
// on the safe side.
func (s *Store) PutAlive(at int64) error { return s.putMark(aliveKey, "alive mark", at, pebble.NoSync) }

// idReservationKey holds the millisecond up to which the node's ids may
// have been issued (task.IDGen.Reserve), big-endian u64.
var idReservationKey = []byte{kindMeta, 'i', 'd', 'r', 'e', 's'}

// IDReservation returns the recorded id reservation; found=false on a
// store that never recorded one.
func (s *Store) IDReservation() (ms int64, found bool, err error) {
	return s.mark(idReservationKey, "id reservation")
}

// PutIDReservation durably records that ids up to ms may have been
// issued: synced, since an id issued past a lost record could be issued
// again after a restart with the clock set back.
func (s *Store) PutIDReservation(ms int64) error {
	return s.putMark(idReservationKey, "id reservation", ms, pebble.Sync)
}

// mark reads a node mark (a big-endian u64 under key; what names it in
// errors); found=false if it was never written.
func (s *Store) mark(key []byte, what string) (v int64, found bool, err error) {
	b, err := s.get(key)
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if v, err = decodeTomb(b); err != nil {
		return 0, false, fmt.Errorf("store: %s: %w", what, err)
	}
	return v, true, nil
}

// putMark writes a node mark.
func (s *Store) putMark(key []byte, what string, v int64, opts *pebble.WriteOptions) error {
	if err := s.db.Set(key, tombValue(v), opts); err != nil {
		return fmt.Errorf("store: put %s: %w", what, err)
	}
	return nil
}
