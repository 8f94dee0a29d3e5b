package partition

import (
	"math"

	"github.com/google/btree"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/task"
)

// Head is a queue's best ready task in one partition.
type Head struct {
	Priority int32
	ID       task.ID
}

// Less orders heads as claims take them: higher priority first, then the
// older (smaller) id.
func (h Head) Less(o Head) bool {
	if h.Priority != o.Priority {
		return h.Priority > o.Priority
	}
	return h.ID.Compare(o.ID) < 0
}

// entry is the in-memory state of one task that is not completed. It holds
// just enough to move the task between states on a timer without reading
// the store.
type entry struct {
	q        *queueIndex
	priority int32
	status   task.Status
	// pendingDeps is how many deps are not known complete.
	pendingDeps uint16
	// attempts counts ended, non-snoozed claims since the last requeue.
	attempts    uint32
	maxAttempts uint32
	// due is when a timer moves the task: the not-before of a delayed task,
	// or end + skew bound of a claimed one. 0 when no timer is set.
	due int64
	// reserved marks a ready task taken out of the ready index by Reserve
	// and not yet claimed by ClaimReserved (or put back).
	reserved bool
	// stored is false while the task has no state record (never claimed,
	// no dep done), so its first claim skips that lookup.
	stored bool
	// hot caches a claimed task's spec and state, so the operations that
	// follow a claim (renew, update, complete, fail, snooze) read nothing
	// from the store. INVARIANT: set only while status is Claimed, and
	// equal to what the store holds (every state write goes through the
	// replica, under its lock, and refreshes it).
	hot *hotTask
}

// hotTask is the cached spec (without payload) and state of a claimed task.
type hotTask struct {
	spec *task.Spec
	st   task.State
	// nextSeq is the length of the latest claim's contiguous update
	// history, when seqKnown.
	nextSeq  uint64
	seqKnown bool
	// digest is st's tree item (stateDigest), so a write of a claimed
	// task replaces it in the tree without encoding the old state again.
	digest antientropy.Digest
}

// isZeroState reports whether st is the state of a task with no state
// record.
func isZeroState(st *task.State) bool { return st.IsZero() }

// timerItem orders timers by due time, then id.
type timerItem struct {
	due int64
	id  task.ID
}

func timerLess(a, b timerItem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.id.Compare(b.id) < 0
}

// btreeDegree trades node size against depth; 32 keeps a 1e6-entry tree
// four levels deep with small nodes.
const btreeDegree = 32

// queueIndex is one queue's ready index and counts within a partition.
// ready changes only through push and pop, which keep best equal to its
// minimum: every enqueue reads the head, and a cached one saves a walk
// down the tree's left edge.
type queueIndex struct {
	name   string
	ready  *btree.BTreeG[Head]
	best   Head
	counts [task.NumStatus]int64
	// dead holds the queue's dead tasks, for a bulk requeue or purge.
	// INVARIANT: len(dead) == counts[task.Dead]; every status change of an
	// entry goes through track.
	dead map[task.ID]struct{}
	// subs counts the queue's tasks of each subtopic (labels.go); nil
	// until one has a subtopic.
	subs map[string]*labelIndex
}

func newQueueIndex(name string) *queueIndex {
	return &queueIndex{name: name, ready: btree.NewG(btreeDegree, Head.Less), dead: map[task.ID]struct{}{}}
}

// track counts task id, of status, into the queue (in) or out of it,
// keeping the dead set in step.
func (q *queueIndex) track(id task.ID, status task.Status, in bool) {
	if !in {
		q.counts[status]--
		if status == task.Dead {
			delete(q.dead, id)
		}
		return
	}
	q.counts[status]++
	if status == task.Dead {
		q.dead[id] = struct{}{}
	}
}

// oldestReady returns the smallest id (the oldest) among the queue's
// ready tasks: the first of each priority's run in the index, taken by
// seeking past each priority in turn.
func (q *queueIndex) oldestReady() (task.ID, bool) {
	h, ok := q.head()
	if !ok {
		return task.ID{}, false
	}
	oldest := h.ID
	for h.Priority > math.MinInt32 {
		// The first head of a lower priority: Head{p-1, zero id} sorts
		// after every head of priority p and before every other of p-1.
		found := false
		q.ready.AscendGreaterOrEqual(Head{Priority: h.Priority - 1}, func(x Head) bool {
			h, found = x, true
			return false
		})
		if !found {
			break
		}
		if h.ID.Compare(oldest) < 0 {
			oldest = h.ID
		}
	}
	return oldest, true
}

// head returns the queue's best ready task.
func (q *queueIndex) head() (Head, bool) { return q.best, q.ready.Len() > 0 }

// push adds h to the ready index.
func (q *queueIndex) push(h Head) {
	q.ready.ReplaceOrInsert(h)
	if q.ready.Len() == 1 || h.Less(q.best) {
		q.best = h
	}
}

// pop removes h from the ready index and reports whether it was there.
// A claim pops the head, which DeleteMin finds without comparing keys.
func (q *queueIndex) pop(h Head) bool {
	if q.ready.Len() > 0 && h == q.best {
		q.ready.DeleteMin()
		q.best, _ = q.ready.Min()
		return true
	}
	_, ok := q.ready.Delete(h)
	return ok
}
