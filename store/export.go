package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

// TaskExport is a task's whole record: the spec with its payload, the
// state (zero if the task has no state record), every stored update, in
// (claim, seq) order, and the tasks recorded as waiting on it (its reverse
// dependency edges), in id order.
type TaskExport struct {
	Spec       *task.Spec
	State      task.State
	Updates    []task.Update
	Dependents []task.ID
}

// ExportPartition calls fn with the whole record of every task of
// partition part with id >= from, in id order, until fn returns false or
// an error. It is the read side of copying a partition to another replica.
//
// The records come from one snapshot of the database, read by walking the
// spec, state, update and edge ranges side by side: one pass over each, and
// a seek into the data range only for a payload stored apart. The snapshot
// pins what it reads until the call returns, so fn must not block for
// long; a caller streaming to the network reads a bounded chunk, returns
// false, sends it, and resumes after the last id.
func (s *Store) ExportPartition(part uint16, from task.ID, fn func(TaskExport) (bool, error)) (err error) {
	snap := s.db.NewSnapshot()
	var its []*pebble.Iterator
	defer func() {
		// Close reports an iterator's read errors too.
		for _, it := range its {
			if cerr := it.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("store: export part %d: %w", part, cerr)
			}
		}
		if cerr := snap.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: export part %d: %w", part, cerr)
		}
	}()
	for _, kind := range []byte{kindSpec, kindState, kindUpdate, kindEdge, kindData} {
		it, err := snap.NewIter(&pebble.IterOptions{
			LowerBound: taskKey(kind, part, from),
			UpperBound: prefixEnd(partKey(kind, part, 0)),
		})
		if err != nil {
			return fmt.Errorf("store: export part %d: %w", part, err)
		}
		it.First()
		its = append(its, it)
	}
	si, ti, ui, ei, di := its[0], its[1], its[2], its[3], its[4]

	for ; si.Valid(); si.Next() {
		key := si.Key()
		if len(key) != 3+task.IDLen {
			return fmt.Errorf("%w: spec key of %d bytes", ErrCorrupt, len(key))
		}
		id := key[3:]
		rec := TaskExport{}
		if rec.Spec, err = exportSpec(si.Value(), di, part, id); err != nil {
			return fmt.Errorf("part %d task %x: %w", part, id, err)
		}
		if err := exportState(ti, id, &rec.State); err != nil {
			return fmt.Errorf("part %d task %x: %w", part, id, err)
		}
		if rec.Updates, err = exportUpdates(ui, id); err != nil {
			return fmt.Errorf("part %d task %x: %w", part, id, err)
		}
		if rec.Dependents, err = exportEdges(ei, id); err != nil {
			return fmt.Errorf("part %d task %x: %w", part, id, err)
		}
		more, err := fn(rec)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// exportSpec decodes a spec key's value v, and reads the payload from
// di, the data range, if the spec is apart. Checked after reading, as the
// spec is checked before writing: the record under a key is the task that
// key names.
func exportSpec(v []byte, di *pebble.Iterator, part uint16, id []byte) (*task.Spec, error) {
	sp := new(task.Spec)
	apart, err := decodeSpec(v, sp)
	if err != nil {
		return nil, err
	}
	if apart {
		dk := taskKey(kindData, part, task.ID(id))
		found := di.SeekGE(dk) && bytes.Equal(di.Key(), dk)
		if err := di.Error(); err != nil {
			return nil, err
		}
		var v []byte
		if found {
			v = di.Value()
		}
		if sp, err = decodeApart(v, found); err != nil {
			return nil, err
		}
	}
	if !bytes.Equal(sp.ID[:], id) {
		return nil, fmt.Errorf("%w: key %x holds task %s", ErrCorrupt, id, sp.ID)
	}
	return sp, nil
}

// exportState advances ti to task id and decodes its state, if it has one.
// States of ids without a spec (which no write makes) are skipped.
func exportState(ti *pebble.Iterator, id []byte, st *task.State) error {
	for ; ti.Valid(); ti.Next() {
		k := ti.Key()
		if len(k) != 3+task.IDLen {
			return fmt.Errorf("%w: state key of %d bytes", ErrCorrupt, len(k))
		}
		switch c := bytes.Compare(k[3:], id); {
		case c < 0:
			continue
		case c == 0:
			return decode(ti.Value(), st)
		}
		return nil // past id: the task has no state record
	}
	return nil
}

// exportEdges advances ei past task id's reverse edges and returns the
// dependents they name. Edges of ids without a spec (which no write makes)
// are skipped.
func exportEdges(ei *pebble.Iterator, id []byte) ([]task.ID, error) {
	var deps []task.ID
	for ; ei.Valid(); ei.Next() {
		k := ei.Key()
		if len(k) != 3+2*task.IDLen {
			return nil, fmt.Errorf("%w: edge key of %d bytes", ErrCorrupt, len(k))
		}
		c := bytes.Compare(k[3:3+task.IDLen], id)
		if c < 0 {
			continue
		}
		if c > 0 {
			break
		}
		var d task.ID
		copy(d[:], k[3+task.IDLen:])
		deps = append(deps, d)
	}
	return deps, nil
}

// exportUpdates advances ui past task id's updates and returns them.
func exportUpdates(ui *pebble.Iterator, id []byte) ([]task.Update, error) {
	var ups []task.Update
	for ; ui.Valid(); ui.Next() {
		k := ui.Key()
		if len(k) != 3+task.IDLen+12 {
			return nil, fmt.Errorf("%w: update key of %d bytes", ErrCorrupt, len(k))
		}
		c := bytes.Compare(k[3:3+task.IDLen], id)
		if c < 0 {
			continue // updates of an id without a spec: skipped
		}
		if c > 0 {
			break
		}
		rest := k[3+task.IDLen:]
		ups = append(ups, task.Update{
			Claim: binary.BigEndian.Uint32(rest[0:4]),
			Seq:   binary.BigEndian.Uint64(rest[4:12]),
			Data:  append([]byte(nil), ui.Value()...),
		})
	}
	return ups, nil
}
