package partition

import (
	"errors"
	"fmt"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Garbage collection (docs/design.md, "Storage"; the node drives it).
//
// A collected task is deleted whole (spec, payload, state, updates,
// reverse edges) and replaced, in the same store batch, by a tombstone:
// (partition, id) -> deletion time. Afterwards every read of the task
// finds nothing: a collected task reads as not found.
//
// Tree convention: a tombstone has one item, antientropy.TombItem(id),
// which hashes the id only (not the deletion time). Collecting a task
// XORs its task digest (every item of its record) out of the tree and the
// tombstone item in, so
//
//   - two replicas holding the same tombstone are equal, whatever their
//     deletion times;
//   - a replica holding the tombstone and one still holding the task
//     differ (TombItem is not the digest of any record), so anti-entropy
//     names the id. ListBuckets lists a tombstoned id with TombItem as
//     its digest, and Records returns task.Record{ID, Tomb: at} for it, so the
//     tombstone is pulled or pushed like any record.
//
// INVARIANT: a partition never holds a task and a tombstone of the same
// id: every write that adds a tombstone deletes the task in its batch,
// and no write adds a task under a tombstoned id (Merge accepts the
// record of a tombstoned id as a no-op, Enqueue refuses the id).
// Tombstoned ids stay in the id filter, so the "certainly new" fast path
// of Enqueue and Merge never skips the tombstone lookup.
//
// Merge of a tombstone record (Record.Tomb != 0):
//
//   - onto an id this replica holds as a task: the task is deleted and
//     the tombstone written. A tombstone is authoritative: the leader
//     collects only ended tasks whose whole dependency component is
//     ended and past retention, or deletes one an operator named
//     (delete.go), and the tombstone was acknowledged by its cohort. A
//     replica that holds the task open was deleted from under it, or
//     missed the end; refusing the tombstone would leave the two replicas
//     different forever, and keeping the task would let anti-entropy
//     spread it back. So it deletes anyway.
//   - onto a tombstoned id: the earlier deletion time is kept (min), so
//     replicas converge on when the tombstone expires; the tree does not
//     change.
//   - onto an unknown id: the tombstone is written, unless it is older
//     than the horizon this replica already expired tombstones to
//     (ExpireTombs): that one would only be expired again.
//
// Tombstones are dropped by ExpireTombs after a horizon that the node
// must choose longer than any replica can stay apart from its cohort
// (a replica partitioned away for longer may still hold the task and
// bring it back to a replica that forgot the tombstone).

// ErrNotCollectable refuses a Collect of a task that is not completed or
// cancelled.
var ErrNotCollectable = errors.New("task has not ended (completed or cancelled): not collectable")

// ErrEdgesChanged refuses a Collect of a task that gained dependents since
// the caller checked its dependency component: the new dependent was not
// part of the check, so the component must be checked again.
var ErrEdgesChanged = errors.New("task gained dependents since its component was checked")

// ErrCollected says a task was garbage-collected: it was completed, and
// its tombstone is all that is left of it. (The tombstone of a cancelled
// task is refused as a dependency: task.ErrConflict.)
var ErrCollected = errors.New("task was completed and garbage-collected")

// Candidate is a completed task that Collectable found: when it
// completed, the tasks it depends on (spec deps, in any partition) and
// the tasks recorded as waiting on it (its reverse edges, whose tasks may
// be in any partition). The node collects it only once every task of its
// dependency component is completed and old enough.
type Candidate struct {
	ID          task.ID
	Queue       string
	CompletedAt int64
	Deps        []task.ID
	Dependents  []task.ID
}

// Collectable returns up to limit completed tasks of this partition that
// completed before cutoff (Unix ms), in id order, from the start.
func (r *Replica) Collectable(cutoff int64, limit int) ([]Candidate, error) {
	cs, _, _, err := r.CollectableFrom(task.ID{}, cutoff, limit, 0)
	return cs, err
}

// CollectableFrom is Collectable from id from on, reading at most scan
// task states (scan <= 0: no bound): when more is true, the scan stopped
// at limit candidates or scan states and resumes from next. It reads a
// store snapshot without the replica's lock (completion is permanent: a
// candidate stays completed, though it may be collected meanwhile, which
// Collect skips).
func (r *Replica) CollectableFrom(from task.ID, cutoff int64, limit, scan int) (cands []Candidate, next task.ID, more bool, err error) {
	if limit <= 0 {
		return nil, from, true, nil
	}
	next, more, err = r.cfg.Store.CompletedBefore(r.cfg.Part, from, cutoff, scan, func(c store.Completed) (bool, error) {
		if len(cands) == limit {
			return false, nil
		}
		cands = append(cands, Candidate(c))
		return true, nil
	})
	if err != nil {
		return nil, from, false, fmt.Errorf("partition %d: collectable: %w", r.cfg.Part, err)
	}
	return cands, next, more, nil
}

// GCStatus is what a replica holds of a task, for the dependency check of
// garbage collection.
type GCStatus uint8

const (
	// GCUnknown: neither the task nor its tombstone.
	GCUnknown GCStatus = iota
	// GCOpen: the task, not completed.
	GCOpen
	// GCCompleted: the task, completed.
	GCCompleted
	// GCCollected: its tombstone, of a completed task.
	GCCollected
	// GCCollectedCancelled: its tombstone, of a cancelled task (which
	// satisfies no dependency).
	GCCollectedCancelled
)

// GCInfo is a task's part in its dependency component: whether it is
// open, completed (and when) or collected, and its edges both ways.
type GCInfo struct {
	ID task.ID
	// Queue is the task's queue, when this replica holds it.
	Queue       string
	Status      GCStatus
	CompletedAt int64
	Deps        []task.ID
	Dependents  []task.ID
}

// GCInfo returns what this replica holds of each of ids, in the order
// given. It reads the store without the lock: a completion and a
// tombstone are permanent, and edges only grow, which Collect's edge
// count catches.
func (r *Replica) GCInfo(ids []task.ID) ([]GCInfo, error) {
	out := make([]GCInfo, len(ids))
	for i, id := range ids {
		out[i].ID = id
		sp, err := r.cfg.Store.Spec(r.cfg.Part, id)
		if errors.Is(err, store.ErrNotFound) {
			at, tomb, err := r.cfg.Store.Tomb(r.cfg.Part, id)
			if err != nil {
				return nil, fmt.Errorf("partition %d: gc info %s: %w", r.cfg.Part, id, err)
			}
			switch {
			case tomb && task.TombCancelled(at):
				out[i].Status = GCCollectedCancelled
			case tomb:
				out[i].Status = GCCollected
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("partition %d: gc info %s: %w", r.cfg.Part, id, err)
		}
		st, _, err := r.cfg.Store.State(r.cfg.Part, id)
		if err != nil {
			return nil, fmt.Errorf("partition %d: gc info %s: %w", r.cfg.Part, id, err)
		}
		out[i].Status, out[i].Queue, out[i].Deps = GCOpen, sp.Queue, sp.Deps
		if st.Completion != nil {
			out[i].Status, out[i].CompletedAt = GCCompleted, st.Completion.At
		}
		err = r.cfg.Store.Dependents(r.cfg.Part, id, func(t task.ID) bool {
			out[i].Dependents = append(out[i].Dependents, t)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("partition %d: gc info %s: %w", r.cfg.Part, id, err)
		}
	}
	return out, nil
}

// Collected reports whether task id was collected (its tombstone is
// here).
func (r *Replica) Collected(id task.ID) (bool, error) {
	_, tomb, err := r.cfg.Store.Tomb(r.cfg.Part, id)
	if err != nil {
		return false, fmt.Errorf("partition %d: tombstone of %s: %w", r.cfg.Part, id, err)
	}
	return tomb, nil
}

// collected is a task deleted by a batch, to take out of the indexes once
// the batch applied.
type collected struct {
	sp *task.Spec
	st task.State
}

// Collect, at the partition's leader (else ErrNotLeader), garbage-collects
// tasks ids: each is deleted with everything of
// it and replaced by a tombstone at now (see the comment at the top of
// gc.go). Every task must be completed: an open task (ErrNotCollectable)
// or an unknown one (task.ErrNotFound) fails the whole call, which then
// writes nothing. An id already collected is skipped (a retry). The
// caller waits on the Durable and ships Records(ids), the tombstones, to
// the cohort: each is task.TombOf(now, cancelled), by how the task
// ended.
//
// edges, if not nil, is how many dependents (reverse edges) each id had
// when the caller checked its dependency component: a task with more now
// gained a dependent the check did not see, and the call fails with
// ErrEdgesChanged. Edges only grow until collection, so an equal count is
// the same set. The check and the deletion are under the replica's lock,
// which AddDependents takes too: a dependent added later finds the
// tombstone (ErrCollected) and starts with the dep done.
func (r *Replica) Collect(ids []task.ID, edges map[task.ID]int, now int64) (Durable, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The leader collects: its replica has every edge a dependent's
	// enqueue wrote (AddDependents runs at the leader), which the edge
	// check relies on.
	if err := r.checkLeaderLocked(); err != nil {
		return nil, err
	}
	b := r.cfg.Store.NewBatch()
	var delta treeDelta
	var done []collected
	seen := make(map[task.ID]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if _, tomb, err := r.cfg.Store.Tomb(r.cfg.Part, id); err != nil || tomb {
			if err != nil {
				b.Close()
				return nil, err
			}
			continue
		}
		c, held, err := r.stageCollectLocked(b, id, now, true, &delta, func(t *store.TaskExport) error {
			if t.State.Completion == nil {
				return fmt.Errorf("%w: %s", ErrNotCollectable, id)
			}
			if want, checked := edges[id]; edges != nil && (!checked || len(t.Dependents) != want) {
				return fmt.Errorf("%w: %s has %d dependents, %d were checked", ErrEdgesChanged, id, len(t.Dependents), want)
			}
			return nil
		})
		if err == nil && !held {
			err = fmt.Errorf("%w: %s", task.ErrNotFound, id)
		}
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("partition %d: collect: %w", r.cfg.Part, err)
		}
		done = append(done, c)
	}
	if b.Empty() {
		b.Close()
		return barrier{r.cfg.Store}, nil
	}
	p, err := b.Apply()
	if err != nil {
		return nil, fmt.Errorf("partition %d: collect: %w", r.cfg.Part, err)
	}
	r.applyTreeLocked(delta)
	for i := range done {
		r.dropIndexLocked(done[i].sp, &done[i].st)
	}
	return p, nil
}

// stageCollectLocked stages in b the deletion of task id, if this
// partition holds it, and its tombstone tomb, and in delta the removal
// of the task's items and the addition of the tombstone item. With
// ofState (a collection here) tomb is the deletion time and the
// tombstone is task.TombOf it, by how the task ended; otherwise (a
// tombstone merged) it is written as given. check, if set, may refuse the
// task from its state (nothing is staged then). held=false: the task is
// not stored and nothing was staged.
func (r *Replica) stageCollectLocked(b *store.Batch, id task.ID, tomb int64, ofState bool, delta *treeDelta, check func(*store.TaskExport) error) (c collected, held bool, err error) {
	// Under r.mu the store holds exactly what the tree sums: the record
	// read here is the one whose items leave the tree.
	snap := r.cfg.Store.NewSnapshot()
	var rec store.TaskExport
	err = snap.ExportTasks(r.cfg.Part, []task.ID{id}, func(t store.TaskExport) (bool, error) {
		rec, held = t, true
		return false, nil
	})
	closeSnapshot(snap, &err)
	if err != nil || !held {
		return collected{}, false, err
	}
	if check != nil {
		if err := check(&rec); err != nil {
			return collected{}, true, err
		}
	}
	if ofState {
		c := rec.State.Completion
		tomb = task.TombOf(tomb, c != nil && c.Cancelled)
	}
	if err := b.CollectTask(r.cfg.Part, id, rec.Spec.Queue, tomb); err != nil {
		return collected{}, true, err
	}
	delta.add(id, exportDigest(&rec))
	delta.add(id, antientropy.TombItem(id))
	return collected{sp: withoutData(rec.Spec), st: rec.State}, true, nil
}

// dropIndexLocked takes a deleted task out of the indexes and the counts.
// A task has an entry unless it is completed (only counted) or ready and
// never touched (only in the ready index). The id filter keeps its bits.
func (r *Replica) dropIndexLocked(sp *task.Spec, st *task.State) {
	r.fresh.take(sp.ID) // a fresh ready task no claim will take now
	if e := r.tasks[sp.ID]; e != nil {
		r.unplaceLocked(sp.ID, e)
		r.countLocked(e.q, sp.ID, e.status, false)
		delete(r.tasks, sp.ID)
		r.unlabelLocked(e.q, sp.ID)
		r.unkeyLocked(sp)
		return
	}
	r.unkeyLocked(sp)
	q := r.queues[sp.Queue]
	if q == nil {
		return
	}
	if st.Completion != nil {
		r.countLocked(q, sp.ID, st.Completion.Status(), false)
	} else if h := (Head{sp.Priority, sp.ID}); q.ready.Has(h) {
		r.popReadyLocked(q, h)
		r.countLocked(q, sp.ID, task.Ready, false)
	}
	r.unlabelLocked(q, sp.ID)
}

// tombstoned reports whether task id has a tombstone, staged by this
// Merge call or stored.
func (m *merger) tombstoned(id task.ID) (bool, error) {
	if _, ok := m.tombs[id]; ok {
		return true, nil
	}
	_, found, err := m.r.cfg.Store.Tomb(m.r.cfg.Part, id)
	return found, err
}

// tomb stages a tombstone record (see the comment at the top of gc.go).
func (m *merger) tomb(rec *task.Record) error {
	r, id := m.r, rec.ID
	at, found := m.tombs[id]
	if !found {
		var err error
		if at, found, err = r.cfg.Store.Tomb(r.cfg.Part, id); err != nil {
			return err
		}
	}
	if found {
		if task.TombLess(rec.Tomb, at) { // keep the earliest deletion time
			if err := m.b.PutTomb(r.cfg.Part, id, rec.Tomb); err != nil {
				return err
			}
			m.tombs[id] = rec.Tomb
		}
		return nil
	}
	c, held, err := r.stageCollectLocked(m.b, id, rec.Tomb, false, &m.delta, nil)
	if err != nil {
		return err
	}
	if held {
		if c.st.Completion == nil {
			// An operator's delete (delete.go), or a completion this
			// replica missed before the task was collected.
			r.log.Info("tombstone received for a task held open: deleting it", "task", id, "deleted_at", rec.Tomb)
		}
		m.dropped = append(m.dropped, c)
	} else {
		if task.TombTime(rec.Tomb) < r.tombFloor {
			return nil // past the horizon: it would only be expired again
		}
		if err := m.b.PutTomb(r.cfg.Part, id, rec.Tomb); err != nil {
			return err
		}
		m.delta.add(id, antientropy.TombItem(id))
		r.ids.add(id)
	}
	m.tombs[id] = rec.Tomb
	return nil
}

// expireChunk bounds the tombstones ExpireTombs reads under the lock at a
// time, so a long expiry never stalls the partition's writes for long.
const expireChunk = 4096

// ExpireTombs drops the tombstones deleted before before (Unix ms), with
// their tree items, and returns how many it dropped. before is the
// horizon: now minus a period longer than any replica can stay apart
// from its cohort. Afterwards Merge ignores tombstone records older than
// before for ids it does not hold (until a restart). It scans every
// tombstone of the partition, in chunks, each under the lock.
func (r *Replica) ExpireTombs(before int64) (int, error) {
	r.mu.Lock()
	r.tombFloor = max(r.tombFloor, before)
	r.mu.Unlock()
	total := 0
	from := task.ID{}
	for {
		n, next, more, d, err := r.expireChunk(from, before)
		if err != nil {
			return total, err
		}
		if err := d.Wait(); err != nil {
			return total, err
		}
		total += n
		if !more {
			return total, nil
		}
		from = next
	}
}

// expireChunk expires the tombstones among up to expireChunk of them from
// from on, under the lock.
func (r *Replica) expireChunk(from task.ID, before int64) (n int, next task.ID, more bool, d Durable, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.cfg.Store.NewBatch()
	var delta treeDelta
	scanned := 0
	err = r.cfg.Store.Tombs(r.cfg.Part, from, func(id task.ID, at int64) (bool, error) {
		if scanned == expireChunk {
			next, more = id, true
			return false, nil
		}
		scanned++
		if task.TombTime(at) >= before {
			return true, nil
		}
		n++
		delta.add(id, antientropy.TombItem(id))
		return true, b.DeleteTomb(r.cfg.Part, id)
	})
	if err != nil || n == 0 {
		b.Close()
		if err != nil {
			return 0, next, false, nil, fmt.Errorf("partition %d: expire tombstones: %w", r.cfg.Part, err)
		}
		return 0, next, more, nothing{}, nil
	}
	p, err := b.Apply()
	if err != nil {
		return 0, next, false, nil, fmt.Errorf("partition %d: expire tombstones: %w", r.cfg.Part, err)
	}
	r.applyTreeLocked(delta)
	return n, next, more, p, nil
}
