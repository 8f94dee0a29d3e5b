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
	meta := g.Meta()
	// A removed node is never alive to PlanVoters (its rule): it may
	// still gossip, if someone started it again. Nor is a retiring one:
	// it is about to leave (ctl decommission), so it is demoted first
	// (retiringVoter) and not promoted again.
	alive := map[uint64]bool{c.cfg.Self: !meta.Retiring[c.cfg.Self]}
	for _, p := range c.members() {
		if p.State == member.Alive && !meta.Removed[p.ID] && !meta.Retiring[p.ID] {
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
	var st raftgroup.ConfStep
	if id, ok := RetiringVoter(voters, meta.Retiring, alive); ok {
		st = raftgroup.ConfStep{Kind: raftgroup.ConfDemote, ID: id}
	} else {
		steps := raftgroup.PlanVoters(voters, learners, alive, deadSince, now, raftgroup.VoterPolicy{MaxVoters: maxVoters, DeadGrace: c.cfg.DeadVoterGrace})
		if len(steps) == 0 {
			return
		}
		st = steps[0]
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	if err := g.ApplyConfStep(cctx, st); err != nil {
		c.log.Warn("metadata group change failed", "step", st.Kind, "peer", st.ID, "err", err)
		return
	}
	c.log.Info("metadata group changed", "step", st.Kind, "peer", st.ID)
}

// RetiringVoter returns a retiring voter to demote now: one whose demotion
// leaves a configuration the other live voters commit alone (so it does
// not wait for the node that is leaving).
func RetiringVoter(voters []uint64, retiring, alive map[uint64]bool) (uint64, bool) {
	for _, id := range voters {
		if !retiring[id] {
			continue
		}
		live := 0
		for _, v := range voters {
			if v != id && alive[v] {
				live++
			}
		}
		if n := len(voters) - 1; n > 0 && live > n/2 {
			return id, true
		}
	}
	return 0, false
}
