package control

import (
	"context"
	"slices"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/raftgroup"
)

// voterLoop keeps the metadata group's shape while this node is its
// leader: learners promoted to voters (up to maxVoters, an odd number),
// dead voters replaced after DeadVoterGrace (raftgroup.PlanVoters plans
// it). A membership change (MembersChanged) checks at once.
func (c *Control) voterLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.VoterInterval)
	defer t.Stop()
	deadSince := make(map[uint64]time.Time)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.shapeVoters(ctx, deadSince)
	}
}

// shapeVoters takes the first step of the group's plan. deadSince carries
// since when each member not alive has been so.
func (c *Control) shapeVoters(ctx context.Context, deadSince map[uint64]time.Time) {
	g := c.host.Group()
	if g.Leader() != c.cfg.Self {
		clear(deadSince)
		return
	}
	now := c.cfg.Clock.Now()
	alive := map[uint64]bool{c.cfg.Self: true}
	for _, p := range c.members() {
		if p.State == member.Alive {
			alive[p.ID] = true
		}
	}
	voters, learners := g.Config()
	for _, id := range slices.Concat(voters, learners) {
		if alive[id] {
			delete(deadSince, id)
		} else if _, ok := deadSince[id]; !ok {
			deadSince[id] = now
		}
	}
	steps := raftgroup.PlanVoters(voters, learners, alive, deadSince, now, raftgroup.VoterPolicy{MaxVoters: maxVoters, DeadGrace: c.cfg.DeadVoterGrace})
	if len(steps) == 0 {
		return
	}
	st := steps[0]
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	if err := g.ApplyConfStep(cctx, st); err != nil {
		c.log.Warn("metadata group change failed", "step", st.Kind, "peer", st.ID, "err", err)
		return
	}
	c.log.Info("metadata group changed", "step", st.Kind, "peer", st.ID)
}
