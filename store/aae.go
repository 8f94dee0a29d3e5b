package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

// Reads for anti-entropy. A partition replica keeps a hash tree of the
// records it holds (package antientropy) and, to compare it with a peer's,
// lists the tasks of some buckets with their digests and reads whole
// records of chosen ids. Everything here is read-only.

// Snapshot is a consistent, read-only view of the database: it sees
// exactly the batches applied before NewSnapshot returned, and none
// applied after. Taken while holding the lock that orders a partition's
// writes, it matches whatever the holder derived from those writes at that
// instant (a replica's hash tree). Its methods may be called concurrently;
// Close it once they are done: it pins what it sees until then.
type Snapshot struct {
	snap *pebble.Snapshot
}

// NewSnapshot returns a snapshot of the database as it is now. It is cheap
// (no copy, no I/O) and does not block writes.
func (s *Store) NewSnapshot() *Snapshot { return &Snapshot{snap: s.db.NewSnapshot()} }

// Close releases the snapshot. No method may be called after Close.
func (v *Snapshot) Close() error {
	if err := v.snap.Close(); err != nil {
		return fmt.Errorf("store: close snapshot: %w", err)
	}
	return nil
}

// TaskIDs calls fn with the id of every task of partition part, in id
// order, until fn returns false or an error. It walks the keys of the spec
// range, one key per task, and decodes no value.
func (v *Snapshot) TaskIDs(part uint16, fn func(task.ID) (bool, error)) (err error) {
	p := partKey(kindSpec, part, 0)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("store: task ids of part %d: %w", part, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: task ids of part %d: %w", part, cerr)
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 3+task.IDLen {
			return fmt.Errorf("%w: spec key of %d bytes", ErrCorrupt, len(k))
		}
		more, err := fn(task.ID(k[3:]))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// ExportTasks calls fn with the whole record (as ExportPartition returns
// it: spec with payload, state, updates, dependents) of each task of ids
// that partition part holds, in the order of ids, until fn returns false
// or an error. ids must be strictly increasing; ids the partition does not
// hold are skipped. It seeks to each id in the spec, state, update and
// edge ranges, and in the data range for a payload stored apart, with one
// iterator per range for the whole call: its cost follows len(ids) and
// their records, not the size of the partition.
func (v *Snapshot) ExportTasks(part uint16, ids []task.ID, fn func(TaskExport) (bool, error)) (err error) {
	for i := 1; i < len(ids); i++ {
		if ids[i-1].Compare(ids[i]) >= 0 {
			return fmt.Errorf("store: export tasks of part %d: id %s not after %s", part, ids[i], ids[i-1])
		}
	}
	var its []*pebble.Iterator
	defer func() {
		for _, it := range its {
			if cerr := it.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("store: export tasks of part %d: %w", part, cerr)
			}
		}
	}()
	for _, kind := range []byte{kindSpec, kindState, kindUpdate, kindEdge, kindData} {
		p := partKey(kind, part, 0)
		it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return fmt.Errorf("store: export tasks of part %d: %w", part, err)
		}
		its = append(its, it)
	}
	si, ti, ui, ei, di := its[0], its[1], its[2], its[3], its[4]
	for _, id := range ids {
		rec, ok, err := exportTask(part, id, si, ti, ui, ei, di)
		if err != nil {
			return fmt.Errorf("part %d task %s: %w", part, id, err)
		}
		if !ok {
			continue
		}
		more, err := fn(rec)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// exportTask seeks the iterators to task id and reads its whole record;
// ok is false if the partition does not hold the task.
func exportTask(part uint16, id task.ID, si, ti, ui, ei, di *pebble.Iterator) (rec TaskExport, ok bool, err error) {
	sk := taskKey(kindSpec, part, id)
	if !si.SeekGE(sk) || !bytes.Equal(si.Key(), sk) {
		return TaskExport{}, false, si.Error()
	}
	if rec.Spec, err = exportSpec(si.Value(), di, part, id[:]); err != nil {
		return TaskExport{}, false, err
	}
	ti.SeekGE(taskKey(kindState, part, id))
	if err := exportState(ti, id[:], &rec.State); err != nil {
		return TaskExport{}, false, err
	}
	ui.SeekGE(taskKey(kindUpdate, part, id))
	if rec.Updates, err = exportUpdates(ui, id[:]); err != nil {
		return TaskExport{}, false, err
	}
	ei.SeekGE(taskKey(kindEdge, part, id))
	if rec.Dependents, err = exportEdges(ei, id[:]); err != nil {
		return TaskExport{}, false, err
	}
	return rec, true, nil
}

// HasEdge reports whether the reverse edge "dependent waits on dep" is
// stored in partition part (dep's). It is one point lookup, which the
// bloom filters make cheap when the edge is absent.
func (s *Store) HasEdge(part uint16, dep, dependent task.ID) (bool, error) {
	_, err := s.get(edgeKey(part, dep, dependent))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}
