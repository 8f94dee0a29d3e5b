package control

import (
	"context"
	"sync"

	"github.com/skuldd/skuldd/wire"
)

// A handoff that gives up may leave promises behind: each attempt asks
// the old and new cohorts to promise an epoch above the registry's, and
// a replica that promised stops leading at its own epoch. When another
// candidate won meanwhile (the registry names it, at an epoch below the
// promises), its replica stays promised to the loser, and its failover
// would take the partition back only after PromiseGrace (45 s by
// default): no claims meanwhile. (The in-process harness saw it at
// placement: a node's takeover of a partition the registry named it
// leader of raced the hand-off that moved it, asked above the winner's
// epoch, and lost the CAS.) So the loser tells the leader the registry
// names (OpAbandoned, tellAbandoned), which takes the partition back at
// once (PlanFailover, TakeoverAbandoned). Only an optimisation of that
// grace: a takeover against a candidate that is still running is safe
// (epochs order the two), and a message lost costs the grace.

// abandonMark is what a candidate said of its handoff given up: it asked
// promises of epochs up to epoch.
type abandonMark struct {
	candidate, epoch uint64
}

// abandonedMarks holds the marks by partition. The failover loop reads
// them and drops those it no longer needs (failoverTick).
type abandonedMarks struct {
	sync.Mutex
	by map[int]abandonMark
}

// ServeAbandoned is OpAbandoned: candidate gave up its handoff of a
// partition after asking promises up to req.Epoch. The failover loop
// takes the partition back on its next tick if the registry names this
// node and its replica is promised to candidate at or below that epoch.
func (c *Control) ServeAbandoned(candidate uint64, req *wire.AbandonedRequest) error {
	if req.Part < 0 || req.Part >= c.host.Partitions() {
		return wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	c.abandoned.Lock()
	defer c.abandoned.Unlock()
	if m, ok := c.abandoned.by[req.Part]; !ok || m.candidate != candidate || m.epoch < req.Epoch {
		c.abandoned.by[req.Part] = abandonMark{candidate: candidate, epoch: req.Epoch}
	}
	c.log.Info("a candidate gave up its handoff", "partition", req.Part, "candidate", candidate, "asked_up_to", req.Epoch)
	return nil
}

// abandonedBy returns the highest epoch candidate said it gave up on for
// part (0: none).
func (c *Control) abandonedBy(part int, candidate uint64) uint64 {
	c.abandoned.Lock()
	defer c.abandoned.Unlock()
	if m, ok := c.abandoned.by[part]; ok && m.candidate == candidate {
		return m.epoch
	}
	return 0
}

// dropAbandoned forgets the mark of part.
func (c *Control) dropAbandoned(part int) {
	c.abandoned.Lock()
	defer c.abandoned.Unlock()
	delete(c.abandoned.by, part)
}

// tellAbandoned tells the leader the registry names for part that this
// node gave up its handoff of part, having asked promises up to asked,
// when that leader is another node at an epoch below asked (a promise of
// this node's may keep it from leading). Bounded by
// abandonedTellTimeout, also when ctx is done (the handoff may have
// ended with it); a failure is logged, and costs the leader its promise
// grace.
func (c *Control) tellAbandoned(ctx context.Context, part int, asked uint64) {
	pl, ok := c.host.Placement()
	if !ok || asked == 0 || part >= len(pl.Leaders) {
		return
	}
	leader, ep := pl.Leaders[part], pl.Epochs[part]
	if leader == 0 || leader == c.cfg.Self || ep >= asked {
		return
	}
	addr := c.host.AddrOf(leader)
	if addr == "" {
		return
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonedTellTimeout)
	defer cancel()
	if err := c.forward(tctx, addr, wire.OpAbandoned, &wire.AbandonedRequest{Part: part, Epoch: asked}, nil); err != nil {
		c.log.Info("telling the partition's leader of a handoff given up", "partition", part, "leader", leader, "err", err)
	}
}
