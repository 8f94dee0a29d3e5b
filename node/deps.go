package node

import (
	"sync"

	"github.com/skuldd/skuldd/task"
)

// depSet holds the ids of tasks that other tasks wait on, so a completion
// reads the reverse edges only when there are some: most tasks are no
// one's dependency, and an edge scan costs an iterator. Safe for
// concurrent use.
//
// Ordering (DESIGN.md, Dependencies): an enqueue adds its deps here before
// it writes their edges, and re-checks their completions after; a
// completion writes itself before it looks here. So either the completer
// sees the dep here and reads the edge, or the enqueuer sees the
// completion: a notice is never lost between them.
type depSet struct {
	mu  sync.Mutex
	ids map[task.ID]struct{}
}

func newDepSet() *depSet { return &depSet{ids: map[task.ID]struct{}{}} }

func (d *depSet) add(id task.ID) {
	d.mu.Lock()
	d.ids[id] = struct{}{}
	d.mu.Unlock()
}

// take reports whether id is a dependency and forgets it: a completed task
// completes once, so its dependents are told once; a dependent enqueued
// later finds the completion itself.
func (d *depSet) take(id task.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.ids[id]
	delete(d.ids, id)
	return ok
}
