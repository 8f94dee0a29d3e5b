package partition

import (
	"sync/atomic"

	"github.com/skuldd/skuldd/task"
)

// freshSpecs holds the full specs, payload included, of ready tasks that a
// leading replica wrote and has not granted yet, so that a claim of fresh
// work reads nothing from the store. The claim's store read had been its
// largest single cost on a busy node: a point lookup searches every
// memtable, and a young database has several.
//
// Specs are immutable once written (docs/design.md, "Data model"), so an entry
// is never stale, only absent, and an absent spec is read from the store:
// the cache changes costs, never results.
//
// New specs are admitted only while they fit in the budget, which the
// replicas of a node share: only the partitions a node leads use it, and
// which those are changes with the cluster. The oldest unclaimed work,
// which a FIFO queue hands out next, keeps its place; newer work waits for
// room, which claims free.
//
// Guarded by the replica's mu. INVARIANT: bytes is the sum of specCost over
// specs, and is what this cache holds of its budget.
type freshSpecs struct {
	budget *FreshBudget // nil: no cache
	bytes  int64
	specs  map[task.ID]*task.Spec
}

// FreshBudget is the memory the fresh spec caches of a node's replicas
// share. Safe for concurrent use. INVARIANT: used is the sum of the
// caches' bytes, and used <= max.
type FreshBudget struct {
	max  int64
	used atomic.Int64
}

// NewFreshBudget returns a budget of max bytes; nil if max <= 0 (no
// cache).
func NewFreshBudget(max int64) *FreshBudget {
	if max <= 0 {
		return nil
	}
	return &FreshBudget{max: max}
}

// Used returns the bytes the caches hold.
func (b *FreshBudget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// reserve takes c bytes if they fit.
func (b *FreshBudget) reserve(c int64) bool {
	for {
		u := b.used.Load()
		if u+c > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+c) {
			return true
		}
	}
}

func (b *FreshBudget) release(c int64) { b.used.Add(-c) }

// specOverhead approximates the memory of one entry beyond its variable
// fields: the Spec struct, its map slot and the id key.
const specOverhead = 192

// specCost is what sp is charged against the cache's room.
func specCost(sp *task.Spec) int64 {
	return specOverhead + int64(len(sp.Data)+len(sp.Queue)+len(sp.Group)+len(sp.Kind)+len(sp.Subtopic)+len(sp.Key)+len(sp.Description)+task.IDLen*len(sp.Deps))
}

// add admits sp if it fits. sp must be the full spec as stored, and the
// caller must not modify it afterwards.
func (f *freshSpecs) add(sp *task.Spec) {
	if f.budget == nil {
		return
	}
	if _, ok := f.specs[sp.ID]; ok {
		return
	}
	c := specCost(sp)
	if !f.budget.reserve(c) {
		return
	}
	if f.specs == nil {
		f.specs = make(map[task.ID]*task.Spec)
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
	c := specCost(sp)
	f.bytes -= c
	f.budget.release(c)
	return sp
}

// reset empties the cache, giving its memory back.
func (f *freshSpecs) reset() {
	if f.bytes > 0 {
		f.budget.release(f.bytes)
	}
	f.specs, f.bytes = nil, 0
}

// len returns the number of specs held.
func (f *freshSpecs) len() int { return len(f.specs) }
