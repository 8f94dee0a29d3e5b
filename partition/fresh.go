package partition

import "github.com/skuldd/skuldd/task"

// freshSpecs holds the full specs, payload included, of ready tasks that a
// leading replica wrote and has not granted yet, so that a claim of fresh
// work reads nothing from the store. The claim's store read had been its
// largest single cost on a busy node: a point lookup searches every
// memtable, and a young database has several.
//
// Specs are immutable once written (DESIGN.md, "Data model"), so an entry
// is never stale, only absent, and an absent spec is read from the store:
// the cache changes costs, never results.
//
// New specs are admitted only while they fit. The oldest unclaimed work,
// which a FIFO queue hands out next, keeps its place; newer work waits for
// room, which claims free.
//
// Guarded by the replica's mu. INVARIANT: bytes is the sum of specCost over
// specs, and bytes <= max.
type freshSpecs struct {
	max   int64
	bytes int64
	specs map[task.ID]*task.Spec
}

// specOverhead approximates the memory of one entry beyond its variable
// fields: the Spec struct, its map slot and the id key.
const specOverhead = 192

// specCost is what sp is charged against the cache's room.
func specCost(sp *task.Spec) int64 {
	return specOverhead + int64(len(sp.Data)+len(sp.Queue)+len(sp.Group)+len(sp.Description)+task.IDLen*len(sp.Deps))
}

// add admits sp if it fits. sp must be the full spec as stored, and the
// caller must not modify it afterwards.
func (f *freshSpecs) add(sp *task.Spec) {
	c := specCost(sp)
	if f.bytes+c > f.max {
		return
	}
	if f.specs == nil {
		f.specs = make(map[task.ID]*task.Spec)
	}
	if _, ok := f.specs[sp.ID]; ok {
		return
	}
	f.specs[sp.ID] = sp
	f.bytes += c
}

// take removes and returns id's spec, nil if the cache does not hold it.
func (f *freshSpecs) take(id task.ID) *task.Spec {
	sp, ok := f.specs[id]
	if !ok {
		return nil
	}
	delete(f.specs, id)
	f.bytes -= specCost(sp)
	return sp
}

// reset empties the cache, giving its memory back.
func (f *freshSpecs) reset() {
	f.specs, f.bytes = nil, 0
}

// len returns the number of specs held.
func (f *freshSpecs) len() int { return len(f.specs) }
