package partition

import (
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Deletion by an operator (task control; DESIGN.md, "Storage").
//
// A deleted task goes the way a collected one does (see gc.go): deleted
// whole and replaced by a tombstone, in one batch, which the leader ships
// to the cohort and anti-entropy spreads like any record. Two kinds of
// task are refused, because a tombstone reads to the dependency check as
// "completed, then collected":
//
//   - a task that has dependents and is not completed: its dependents
//     would run as if it had completed (task.ErrConflict; cancel it
//     instead, which keeps them blocked);
//   - a task under a live claim: its worker still acts on it (fencing);
//     cancel it first, or wait for the claim to end (task.ErrConflict).

// DeleteApply, at the partition's leader, deletes task id and writes its
// tombstone at now. A task already deleted or collected is a repeat: the
// answer waits for the tombstone to be durable and ships it again. Like
// every write here it is applied, not yet durable (see Write); its record
// is the tombstone.
func (r *Replica) DeleteApply(id task.ID, now int64) (Write, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLeaderLocked(); err != nil {
		return Write{}, err
	}
	if at, tomb, err := r.cfg.Store.Tomb(r.cfg.Part, id); err != nil || tomb {
		if err != nil {
			return Write{}, fmt.Errorf("partition %d: delete %s: %w", r.cfg.Part, id, err)
		}
		return Write{Rec: task.Record{ID: id, Tomb: at}, Durable: barrier{r.cfg.Store}}, nil
	}
	b := r.cfg.Store.NewBatch()
	var delta treeDelta
	c, held, err := r.stageCollectLocked(b, id, now, &delta, func(t *store.TaskExport) error {
		if err := r.checkStampLocked(id, &t.State); err != nil {
			return err
		}
		return deletable(t, now, r.skew)
	})
	if err == nil && !held {
		err = fmt.Errorf("%w: %s", task.ErrNotFound, id)
	}
	if err != nil {
		b.Close()
		return Write{}, err
	}
	p, err := b.Apply()
	if err != nil {
		return Write{}, fmt.Errorf("partition %d: delete %s: %w", r.cfg.Part, id, err)
	}
	r.applyTreeLocked(delta)
	r.dropIndexLocked(c.sp, &c.st)
	return Write{Rec: task.Record{ID: id, Tomb: now}, Durable: p}, nil
}

// deletable refuses the deletion of t (see the comment at the top).
func deletable(t *store.TaskExport, now, skew int64) error {
	status, _ := task.Derive(t.Spec, &t.State, now, skew)
	if status == task.Claimed {
		c, _ := t.State.Latest()
		return fmt.Errorf("%w: %s is claimed (claim %d): cancel it first, or wait for the claim to end", task.ErrConflict, t.Spec.ID, c.Index)
	}
	if len(t.Dependents) > 0 && !t.State.Completed() {
		return fmt.Errorf("%w: %d tasks depend on %s, which is %s: deleting it would release them; cancel it instead",
			task.ErrConflict, len(t.Dependents), t.Spec.ID, status)
	}
	return nil
}

// Dead returns the ids of queue's dead tasks, in id order: what a bulk
// requeue or purge of the queue acts on, one task at a time.
func (r *Replica) Dead(queue string) []task.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[queue]
	if q == nil || q.counts[task.Dead] == 0 {
		return nil
	}
	ids := make([]task.ID, 0, q.counts[task.Dead])
	for id, e := range r.tasks {
		if e.q == q && e.status == task.Dead {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}
