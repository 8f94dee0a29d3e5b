package heads

import (
	"sync"

	"github.com/google/btree"

	"github.com/skuldd/skuldd/partition"
)

// Index holds, per queue, the best ready task of every partition this
// node leads, so a claim finds the best partition in O(log P) and the
// order across the node's partitions is exact. Partitions publish into it
// from their OnHead callback, under their own lock.
//
// Lock order: a queue's pick lock, then partition.Replica.mu, then
// Index.mu.
type Index struct {
	mu     sync.Mutex
	queues map[string]*queueHeads
	// fenced holds the partitions whose heads are kept but not offered:
	// their leader cannot reach a majority of the cohort, so a claim
	// there could not be acknowledged (control.PlanFence). Best and
	// Heads skip them; a partition stays led, and its heads come back as
	// soon as the fence lifts.
	fenced map[uint16]bool
}

type queueHeads struct {
	// pick serialises claim picks of the queue (node's claimOneApply). Lock
	// order: pick, then partition.Replica.mu, then Index.mu.
	pick   sync.Mutex
	tree   *btree.BTreeG[partHead]
	byPart map[uint16]partition.Head
	// ready is closed (and replaced) when the queue gains a head, waking
	// long-polling claims.
	ready chan struct{}
}

type partHead struct {
	h    partition.Head
	part uint16
}

func partHeadLess(a, b partHead) bool {
	if a.h != b.h {
		return a.h.Less(b.h)
	}
	return a.part < b.part
}

func NewIndex() *Index {
	return &Index{queues: map[string]*queueHeads{}, fenced: map[uint16]bool{}}
}

func (x *Index) queueLocked(q string) *queueHeads {
	qh := x.queues[q]
	if qh == nil {
		qh = &queueHeads{
			tree:   btree.NewG(8, partHeadLess),
			byPart: map[uint16]partition.Head{},
			ready:  make(chan struct{}),
		}
		x.queues[q] = qh
	}
	return qh
}

// Set records part's head for queue (ok=false: it has none). It is the
// partitions' OnHead callback: it must not block.
func (x *Index) Set(part uint16, queue string, h partition.Head, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	qh := x.queueLocked(queue)
	if old, had := qh.byPart[part]; had {
		qh.tree.Delete(partHead{old, part})
		delete(qh.byPart, part)
	}
	if !ok {
		return
	}
	qh.byPart[part] = h
	qh.tree.ReplaceOrInsert(partHead{h, part})
	close(qh.ready)
	qh.ready = make(chan struct{})
}

// Best returns the partition holding queue's best ready task, among the
// partitions not fenced.
func (x *Index) Best(queue string) (uint16, partition.Head, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	qh := x.queues[queue]
	if qh == nil {
		return 0, partition.Head{}, false
	}
	ph, ok := x.bestLocked(qh)
	return ph.part, ph.h, ok
}

// bestLocked is the least head of qh whose partition is not fenced. With
// no fence (the rule) that is the tree's minimum, found at once.
func (x *Index) bestLocked(qh *queueHeads) (partHead, bool) {
	if len(x.fenced) == 0 {
		return qh.tree.Min()
	}
	var best partHead
	found := false
	qh.tree.Ascend(func(ph partHead) bool {
		if x.fenced[ph.part] {
			return true
		}
		best, found = ph, true
		return false
	})
	return best, found
}

// Heads returns every queue's best ready head, for the summary this node
// gossips to the others: fenced partitions' heads are not advertised.
func (x *Index) Heads() map[string]partition.Head {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]partition.Head, len(x.queues))
	for q, qh := range x.queues {
		if ph, ok := x.bestLocked(qh); ok {
			out[q] = ph.h
		}
	}
	return out
}

// Fence keeps part's heads out of Best and Heads (on) or lets them back
// (off), and reports whether that changed anything. Lifting a fence wakes
// the long-polling claims of every queue part has a head in.
func (x *Index) Fence(part uint16, on bool) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fenced[part] == on {
		return false
	}
	if on {
		x.fenced[part] = true
		return true
	}
	delete(x.fenced, part)
	for _, qh := range x.queues {
		if _, ok := qh.byPart[part]; ok {
			close(qh.ready)
			qh.ready = make(chan struct{})
		}
	}
	return true
}

// FencedCount returns how many partitions are fenced.
func (x *Index) FencedCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.fenced)
}

// IsFenced reports whether part is fenced.
func (x *Index) IsFenced(part uint16) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fenced[part]
}

// PickLock returns queue's pick lock.
func (x *Index) PickLock(queue string) *sync.Mutex {
	x.mu.Lock()
	defer x.mu.Unlock()
	return &x.queueLocked(queue).pick
}

// ReadyChan returns a channel closed when queue next gains a head. Take it
// before looking for work, so a task arriving in between is not missed.
func (x *Index) ReadyChan(queue string) <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.queueLocked(queue).ready
}
