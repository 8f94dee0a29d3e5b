package partition

import (
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/task"
)

// Deletion by an operator (task control; docs/design.md, "Storage").
//
// A deleted task ends the way a collected one does (see gc.go): deleted
// whole and replaced by a tombstone. A tombstone is authoritative and
// carries no epoch: a replica that merges one deletes the task, whoever
// sent it. So a leader must not write one for a task that is open: a
// leader cut off while another took over would delete, through
// anti-entropy, a task the new line of writes is still running. The
// delete therefore takes two steps:
//
//  1. DeleteMarkApply ends the task as cancelled (reason DeleteReason), a
//     state write stamped with the leader's epoch like any other: a
//     superseded leader's mark is an orphan that the line that counts
//     replaces, and it supersedes a live claim (the worker learns it
//     from its next renewal). The node ships it and waits for W replicas.
//  2. Only then the node collects the task (Collect, with the edge count
//     the mark saw) and ships the tombstone, as garbage collection does
//     for an ended task.
//
// A task that has dependents and is not completed is refused (step 1,
// task.ErrConflict): a tombstone reads to the dependency check as
// "completed, then collected", so its dependents would run. Cancel it
// instead, which keeps them blocked. A delete that stops after step 1
// (the leader failed, or a dependent came between the steps) leaves the
// task cancelled, which is what a retry or garbage collection finishes.

// DeleteReason is the cancel reason of a task an operator's delete ended
// (step 1 above), seen if the delete stopped before its tombstone.
const DeleteReason = "deleted"

// DeleteMarkApply is step 1 of a delete (see above): it ends task id as
// cancelled unless it has ended already, and returns the write to ship
// and the number of dependents the task has, for Collect's edge check.
// It fails with task.ErrNotFound for an unknown task (a deleted or
// collected one included: the caller checks Collected for a repeat).
func (r *Replica) DeleteMarkApply(id task.ID, now int64) (w Write, edges int, err error) {
	w, err = r.mutateApply(id, now, func(sp *task.Spec, st *task.State) (bool, error) {
		edges = 0
		if err := r.cfg.Store.Dependents(r.cfg.Part, id, func(task.ID) bool { edges++; return true }); err != nil {
			return false, fmt.Errorf("partition %d: dependents of %s: %w", r.cfg.Part, id, err)
		}
		if edges > 0 && !st.Completed() {
			status, _ := task.Derive(sp, st, now, r.skew)
			return false, fmt.Errorf("%w: %d tasks depend on %s, which is %s: deleting it would release them; cancel it instead",
				task.ErrConflict, edges, id, status)
		}
		if st.Completion != nil {
			return false, nil // ended: the tombstone may follow
		}
		return st.Cancel(now, DeleteReason)
	})
	return w, edges, err
}

// Dead returns the ids of queue's dead tasks, in id order: what a bulk
// requeue or purge of the queue acts on, one task at a time.
func (r *Replica) Dead(queue string) []task.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[queue]
	if q == nil || len(q.dead) == 0 {
		return nil
	}
	ids := make([]task.ID, 0, len(q.dead))
	for id := range q.dead {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}
