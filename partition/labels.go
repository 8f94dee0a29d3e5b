package partition

import (
	"slices"

	"github.com/skuldd/skuldd/task"
)

// Labels: each group's tasks, and each subtopic's within its queue, are
// counted by state beside their queue's counts, so a group's progress or
// a subtopic's depth is answered from memory, and a group's open tasks
// are found (for a group cancel) without reading any other task.
//
// Every change of a count goes through countLocked, which moves the
// queue's count and the counts of the task's labels together. A task
// with a label is entered in labelled when it is first indexed
// (insertLocked) and leaves it when it leaves the indexes
// (dropIndexLocked); a label whose last task left is forgotten, so the
// memory follows the labels of the tasks held, not every label ever used.

// labelIndex counts one label's tasks by state within a partition.
type labelIndex struct {
	name   string
	counts [task.NumStatus]int64
	// open holds a group's tasks that are not ended (nil for a
	// subtopic). INVARIANT: len(open) == sum(counts) - counts[Completed]
	// - counts[Cancelled], outside countLocked's callers' critical steps.
	open map[task.ID]struct{}
}

// taskLabels are the label indexes one task counts in; nil where the
// task has no such label.
type taskLabels struct{ group, sub *labelIndex }

// count moves task id, of status, into the label's counts (in) or out.
func (l *labelIndex) count(id task.ID, status task.Status, in bool) {
	if l == nil {
		return
	}
	if !in {
		l.counts[status]--
		return
	}
	l.counts[status]++
	if l.open == nil {
		return
	}
	// Every status change is an out then an in: the in decides whether
	// the task is open.
	if status.Ended() {
		delete(l.open, id)
	} else {
		l.open[id] = struct{}{}
	}
}

func (l *labelIndex) empty() bool {
	for _, c := range l.counts {
		if c != 0 {
			return false
		}
	}
	return true
}

// countLocked counts task id of queue q, of status, into its queue and
// labels (in) or out of them.
func (r *Replica) countLocked(q *queueIndex, id task.ID, status task.Status, in bool) {
	q.track(id, status, in)
	if len(r.labelled) == 0 {
		return
	}
	if l, ok := r.labelled[id]; ok {
		l.group.count(id, status, in)
		l.sub.count(id, status, in)
	}
}

// labelLocked enters task sp's labels, unless it has none or they are
// entered already (a task reopened is indexed again: see reopenLocked).
func (r *Replica) labelLocked(q *queueIndex, sp *task.Spec) {
	if sp.Group == "" && sp.Subtopic == "" {
		return
	}
	if _, ok := r.labelled[sp.ID]; ok {
		return
	}
	var l taskLabels
	if sp.Group != "" {
		if l.group = r.groups[sp.Group]; l.group == nil {
			l.group = &labelIndex{name: sp.Group, open: map[task.ID]struct{}{}}
			r.groups[sp.Group] = l.group
		}
	}
	if sp.Subtopic != "" {
		if l.sub = q.subs[sp.Subtopic]; l.sub == nil {
			l.sub = &labelIndex{name: sp.Subtopic}
			if q.subs == nil {
				q.subs = map[string]*labelIndex{}
			}
			q.subs[sp.Subtopic] = l.sub
		}
	}
	r.labelled[sp.ID] = l
}

// unlabelLocked takes task id, counted out already, out of its labels,
// forgetting a label left with no task.
func (r *Replica) unlabelLocked(q *queueIndex, id task.ID) {
	l, ok := r.labelled[id]
	if !ok {
		return
	}
	delete(r.labelled, id)
	if g := l.group; g != nil {
		delete(g.open, id)
		if g.empty() {
			delete(r.groups, g.name)
		}
	}
	if s := l.sub; s != nil && s.empty() {
		delete(q.subs, s.name)
	}
}

// GroupCounts returns group g's counts by state in this replica and the
// ids of up to dead of its dead tasks, the lowest first. It walks the
// group's open tasks under the lock only when some are dead and asked
// for.
func (r *Replica) GroupCounts(g string, dead int) (counts [task.NumStatus]int64, deadIDs []task.ID) {
	r.mu.Lock()
	l := r.groups[g]
	if l == nil {
		r.mu.Unlock()
		return counts, nil
	}
	counts = l.counts
	if dead > 0 && l.counts[task.Dead] > 0 {
		deadIDs = make([]task.ID, 0, l.counts[task.Dead])
		for id := range l.open {
			if e := r.tasks[id]; e != nil && e.status == task.Dead {
				deadIDs = append(deadIDs, id)
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(deadIDs, task.ID.Compare)
	return counts, deadIDs[:min(len(deadIDs), dead)]
}

// GroupOpen returns the ids of group g's tasks that are not ended, in id
// order.
func (r *Replica) GroupOpen(g string) []task.ID {
	r.mu.Lock()
	l := r.groups[g]
	if l == nil {
		r.mu.Unlock()
		return nil
	}
	ids := make([]task.ID, 0, len(l.open))
	for id := range l.open {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}

// SubtopicStats calls fn with the counts by state of each subtopic of
// each queue.
func (r *Replica) SubtopicStats(fn func(queue, subtopic string, counts [task.NumStatus]int64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, q := range r.queues {
		for sub, l := range q.subs {
			fn(name, sub, l.counts)
		}
	}
}
