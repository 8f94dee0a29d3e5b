package node

import (
	"context"
	"math"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/wire"
)

// The node's own loops: the partitions' timers, the cached view of the
// metadata registry, the dependency reconcile and the retiring of
// duplicate keys.

// tickLoop moves due timers (delays, claim expiries) every TickInterval.
func (n *Node) tickLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.tick(clock.UnixMilli(n.clock))
		}
	}
}

// noteTimer lowers nextDue to due: the partitions' OnTimer callback.
func (n *Node) noteTimer(due int64) {
	for {
		cur := n.nextDue.Load()
		if due >= cur || n.nextDue.CompareAndSwap(cur, due) {
			return
		}
	}
}

// tick moves every partition's due timers and recomputes nextDue.
func (n *Node) tick(now int64) {
	if drifting, _ := n.drifting(); drifting {
		return // no expiry by a clock that is ahead; the clock loop reruns them
	}
	n.tickMu.Lock()
	defer n.tickMu.Unlock()
	// Reset first: timers set while the partitions are walked lower it
	// again through noteTimer, so none is missed.
	n.nextDue.Store(math.MaxInt64)
	for _, r := range n.parts {
		r.Tick(now)
		if due, ok := r.NextDue(); ok {
			n.noteTimer(due)
		}
	}
}

// catchUp runs the timers that are due before a request looks at states,
// so what a claim, a count or a get sees agrees to the millisecond rather
// than to the tick.
func (n *Node) catchUp() {
	if now := n.now(); now >= n.nextDue.Load() {
		n.tick(now)
	}
}

// refreshMeta caches what requests need from the metadata group.
func (n *Node) refreshMeta() {
	m := n.raft.Meta()
	if m.Config == nil {
		return
	}
	// Writes are acknowledged by the partition's cohort as placed in the
	// registry; the smallest cohort bounds what a request may ask for.
	size := m.Config.Replicas
	np := len(m.Partitions)
	pl := &placementView{cohorts: make([][]uint64, np), leaders: make([]uint64, np), epochs: make([]uint64, np)}
	for i, p := range m.Partitions {
		if len(p.Cohort) > 0 {
			size = min(size, len(p.Cohort))
		}
		pl.cohorts[i], pl.leaders[i], pl.epochs[i] = p.Cohort, p.Leader, p.Epoch
	}
	n.placement.Store(pl)
	n.cohort.Store(int32(max(1, size)))
	n.queues.Refresh(m.Queues) // Meta returned a copy of its own
	n.access.Refresh(m.Credentials)
}

// metaLoop refreshes the cached metadata after every change.
func (n *Node) metaLoop(ctx context.Context) {
	for {
		ch := n.raft.Changed()
		n.refreshMeta()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// reconcileLoop re-checks blocked tasks' deps, and retires the tasks
// whose key another task holds, every ReconcileInterval.
//
// A round whose dependency checks could not all be made (a dep's leader
// out of reach: after a restart of every node, say) is followed by
// another after reconcileRetry, not a whole interval later.
func (n *Node) reconcileLoop(ctx context.Context) {
	next := func(incomplete bool) time.Duration {
		if incomplete {
			return min(reconcileRetry, n.cfg.ReconcileInterval)
		}
		return n.cfg.ReconcileInterval
	}
	t := time.NewTimer(next(false))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.reconcileSoon:
			t.Reset(next(true))
		case <-t.C:
			incomplete := n.deps.Reconcile()
			n.retireDuplicateKeys(ctx)
			t.Reset(next(incomplete))
		}
	}
}

// reconcileRetry is how soon a reconcile round that could not check every
// dependency is tried again, and how soon a new leader reconciles.
const reconcileRetry = time.Second

// reconcileSoonAfter makes the next reconcile round come within
// reconcileRetry.
func (n *Node) reconcileSoonAfter() {
	select {
	case n.reconcileSoon <- struct{}{}:
	default: // one is asked for already
	}
}

// retireDuplicateKeys cancels, in each partition this node leads, the
// tasks whose unique key another task holds: two leaders took the key
// (partition.DuplicateKeys). A failure is left to the next round.
func (n *Node) retireDuplicateKeys(ctx context.Context) {
	for _, r := range n.parts {
		rs, err := r.DuplicateKeys(n.now())
		if err != nil {
			n.log.Warn("finding tasks whose key another holds", "partition", r.Part(), "err", err)
			continue
		}
		for _, x := range rs {
			wr, err := r.CancelApply(x.ID, wire.RetiredKeyReason+x.Keeper.String(), n.now())
			if err == nil {
				_, err = n.repl.Replicate(ctx, r.Part(), 0, wr)
			}
			if err != nil {
				n.log.Warn("retiring a task whose key another holds", "partition", r.Part(), "task", x.ID, "keeper", x.Keeper, "err", err)
				continue
			}
			n.log.Info("retired a task whose key another holds", "partition", r.Part(), "task", x.ID, "keeper", x.Keeper)
		}
	}
}

// leaders returns the registry's leader of every partition, from the copy
// refreshMeta keeps (a request never copies the metadata group's state).
// The slice is shared: callers must not modify it.
func (n *Node) leaders() []uint64 {
	if pl := n.placement.Load(); pl != nil {
		return pl.leaders
	}
	return nil
}
