package partition

import (
	"fmt"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Export bounds on the records read from one store snapshot before they
// are handed to fn: fn may block (a network send), and no snapshot stays
// open while it does. The byte bound counts payloads and update data.
const (
	exportChunkRecords = 256
	exportChunkBytes   = 4 << 20
	// exportChunkTombs bounds the tombstones of one chunk (24 bytes
	// each): a range of ids collected wholesale is exported in pieces.
	exportChunkTombs = 4096
)

// Export calls fn with the whole record (spec with payload, state, every
// stored update, reverse edges) of each task of the partition with id >=
// from, and the tombstone record (task.Record{ID, Tomb}) of each collected
// one, in id order, until fn returns false or an error; it is how a
// partition is copied to a new cohort member, tombstones included so the
// copy never takes a collected task back from an older replica.
//
// Export does not take the replica's lock: it reads the store in chunks,
// each from one snapshot. A write that lands meanwhile may or may not be
// in what it returns; the receiver merges CRDTs and gets the write by live
// replication as well.
func (r *Replica) Export(from task.ID, fn func(task.Record) (bool, error)) error {
	for {
		var chunk []task.Record
		size, full := 0, false
		err := r.cfg.Store.ExportPartition(r.cfg.Part, from, func(t store.TaskExport) (bool, error) {
			size += len(t.Spec.Data)
			for _, u := range t.Updates {
				size += len(u.Data)
			}
			chunk = append(chunk, exportRecord(t))
			full = len(chunk) >= exportChunkRecords || size >= exportChunkBytes
			return !full, nil
		})
		if err != nil {
			return fmt.Errorf("partition %d: export from %s: %w", r.cfg.Part, from, err)
		}
		// The tombstones up to the chunk's last task (all of them when
		// the tasks ran out), at most exportChunkTombs: the chunk ends
		// at whichever of the two scans stopped first.
		var tombs []task.Record
		tombsFull := false
		err = r.cfg.Store.Tombs(r.cfg.Part, from, func(id task.ID, at int64) (bool, error) {
			if full && id.Compare(chunk[len(chunk)-1].ID) > 0 {
				return false, nil
			}
			if len(tombs) == exportChunkTombs {
				tombsFull = true
				return false, nil
			}
			tombs = append(tombs, task.Record{ID: id, Tomb: at})
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("partition %d: export tombstones from %s: %w", r.cfg.Part, from, err)
		}
		var last task.ID
		switch {
		case tombsFull:
			last = tombs[len(tombs)-1].ID
		case full:
			last = chunk[len(chunk)-1].ID
		}
		// Emit both in id order, up to last when a scan stopped early.
		// The two scans read the store at different times, so a task
		// collected between them comes as both, its tombstone first: a
		// task record merged after its tombstone is a no-op.
		i, j := 0, 0
		for i < len(chunk) || j < len(tombs) {
			var rec task.Record
			if j == len(tombs) || i < len(chunk) && chunk[i].ID.Compare(tombs[j].ID) < 0 {
				rec = chunk[i]
				i++
			} else {
				rec = tombs[j]
				j++
			}
			if (full || tombsFull) && rec.ID.Compare(last) > 0 {
				break
			}
			more, err := fn(rec)
			if err != nil || !more {
				return err
			}
		}
		if !full && !tombsFull {
			return nil // both scans reached the end of the partition
		}
		next, ok := nextID(last)
		if !ok {
			return nil
		}
		from = next
	}
}

// nextID returns the smallest id above id; false if id is the largest.
func nextID(id task.ID) (task.ID, bool) {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			return id, true
		}
	}
	return id, false
}
