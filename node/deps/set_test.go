package deps

import (
	"testing"

	"github.com/skuldd/skuldd/task"
)

// TestNote: merged records that name dependents make their task a
// dependency here; a record of it completed or collected forgets it (its
// leader told the dependents), so the set does not grow with every
// dependency this replica ever held.
func TestNote(t *testing.T) {
	p := &Plane{set: newSet()}
	id := func(i byte) task.ID { return task.MakeID(1_700_000_000_000, 1, uint32(i)) }
	p.Note([]task.Record{
		{ID: id(1), Dependents: []task.ID{id(9)}},
		{ID: id(2), Dependents: []task.ID{id(9)}},
		{ID: id(3), Dependents: []task.ID{id(9)}},
		{ID: id(4)}, // no edge: not a dependency
	})
	p.Note([]task.Record{
		{ID: id(2), State: &task.State{Completion: &task.Completion{}}},
		{ID: id(3), Tomb: 5},
	})
	for _, tc := range []struct {
		id   task.ID
		want bool
	}{{id(1), true}, {id(2), false}, {id(3), false}, {id(4), false}} {
		if got := p.set.take(tc.id); got != tc.want {
			t.Errorf("dependency %v held: %v; want %v", tc.id, got, tc.want)
		}
	}
	// take forgets: a completion tells the dependents once.
	p.set.add(id(5))
	if !p.set.take(id(5)) || p.set.take(id(5)) {
		t.Fatal("take did not report the dependency exactly once")
	}
	p.set.add(id(6))
	p.Collected(id(6))
	if p.set.take(id(6)) {
		t.Fatal("a collected dependency is still held")
	}
}
