package control

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/raftgroup"
)

// Failover (docs/design.md, Topology and Partition leaders): every node watches
// the leaders of the partitions whose cohort it is in. When gossip says a
// leader is dead (or left), the first live member of the cohort, in
// cohort order, runs the handoff with the same cohort and leads
// (PlanFailover); the dead member stays in the cohort (its writes count
// as missing acks) until placement replaces it. A node that sees most of
// a cohort dead is the one cut off: it takes nothing over, fences the
// partitions of that cohort it leads (PlanFence: no claims), and steps
// down when the registry shows it a newer leader (stepDownSuperseded).

// failoverState is what the failover loop carries from tick to tick.
type failoverState struct {
	// mu guards running, which the takeovers started clear.
	mu      sync.Mutex
	running map[int]bool
	// absentSince, promisedSince, gone and backSince are the loop's own.
	absentSince   map[uint64]time.Time
	promisedSince map[int]time.Time // PlanFailover's, from tick to tick
	gone          map[uint64]bool
	backSince     map[uint16]time.Time // fenced partitions whose majority is back
}

// failoverLoop takes over partitions whose leader died.
func (c *Control) failoverLoop(ctx context.Context) {
	t := time.NewTicker(failoverInterval)
	defer t.Stop()
	st := newFailoverState()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.failoverTick(ctx, st, time.Now())
	}
}

func newFailoverState() *failoverState {
	return &failoverState{running: map[int]bool{}, absentSince: map[uint64]time.Time{}, promisedSince: map[int]time.Time{},
		gone: map[uint64]bool{}, backSince: map[uint16]time.Time{}}
}

// failoverTick is one tick of the failover loop, at now.
func (c *Control) failoverTick(ctx context.Context, st *failoverState, now time.Time) {
	members := c.members() // one view per tick
	c.dropGone(st.gone, members)
	states := StatesOf(c.cfg.Self, members)
	meta := c.host.Group().Meta()
	c.stepDownSuperseded(meta)
	st.backSince = c.fenceCutOff(states, st.backSince, now)
	if drifting, _ := c.Drifting(); c.host.Departing() || drifting {
		return // leaving, or a clock ahead: take nothing over
	}
	handoffs := c.handoffsRunning()
	parts := make([]Partition, 0, len(meta.Partitions))
	st.mu.Lock()
	for p, pi := range meta.Partitions {
		cp := Partition{
			Part: p, Leader: pi.Leader, Epoch: pi.Epoch, Cohort: pi.Cohort,
			Leading: c.leads(p), Handoff: handoffs[p], Running: st.running[p],
		}
		if pi.Leader == c.cfg.Self && !cp.Leading {
			// The planner reads the promise only then; it takes the
			// replica's lock, which writes hold.
			cp.Promised, cp.PromisedTo = c.host.Replica(p).Promised()
			cp.Abandoned = c.abandonedBy(p, cp.PromisedTo)
		} else {
			c.dropAbandoned(p) // led here, or named another: no promise to take back
		}
		parts = append(parts, cp)
	}
	st.mu.Unlock()
	plan := PlanFailover(FailoverInput{
		Self: c.cfg.Self, Partitions: parts, States: states,
		AbsentSince: st.absentSince, PromisedSince: st.promisedSince,
		Now: now, DeadGrace: c.cfg.DeadVoterGrace, PromiseGrace: c.cfg.PromiseGrace,
	})
	st.absentSince, st.promisedSince = plan.AbsentSince, plan.PromisedSince
	for _, tk := range plan.Takeovers {
		st.mu.Lock()
		if st.running[tk.Part] {
			st.mu.Unlock()
			continue
		}
		st.running[tk.Part] = true
		st.mu.Unlock()
		switch tk.Why {
		case TakeoverAbandoned:
			pr := parts[tk.Part] // parts is indexed by partition
			c.log.Warn("a handoff this node promised the partition to was abandoned: taking it back", "partition", tk.Part,
				"registry_epoch", pr.Epoch, "promised", pr.Promised, "promised_to", pr.PromisedTo,
				"since", st.promisedSince[tk.Part], "grace", c.cfg.PromiseGrace)
		case TakeoverNamed:
			c.log.Warn("the registry names this node leader and it does not lead: taking the partition over", "partition", tk.Part, "cohort", tk.Cohort)
		default:
			c.log.Warn("partition leader gone: taking over", "partition", tk.Part, "old_leader", tk.Old, "cohort", tk.Cohort)
		}
		c.wg.Go(func() {
			defer func() { st.mu.Lock(); delete(st.running, tk.Part); st.mu.Unlock() }()
			cctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
			defer cancel()
			if err := c.lead(cctx, tk.Part, tk.Cohort, c.stillTakeover(tk)); err != nil {
				c.log.Warn("takeover failed", "partition", tk.Part, "err", err)
			}
		})
	}
}

// stillTakeover returns the check that a takeover goes on only while its
// reasons hold: the registry still names the leader it replaces (this
// node, when the registry named it: a candidate it promised to may have
// won after all, and is not to be fought), gossip still holds that one
// dead, and this node sees a majority.
func (c *Control) stillTakeover(tk Takeover) func() error {
	p, old, cohort := tk.Part, tk.Old, tk.Cohort
	return func() error {
		if pl, ok := c.host.Placement(); !ok || p >= len(pl.Leaders) || pl.Leaders[p] != old {
			return fmt.Errorf("partition %d has another leader now", p)
		}
		if old == c.cfg.Self {
			return nil // the registry's own choice: lead
		}
		st := c.gossipStates()
		if s := st[old]; s == member.Alive || s == member.Suspect {
			return fmt.Errorf("its leader, node %d, is back", old)
		}
		if !LiveMajority(cohort, st) {
			return fmt.Errorf("this node is cut off from most of the cohort %v", cohort)
		}
		return nil
	}
}

// fenceCutOff stops this node granting claims in each partition it leads
// whose cohort it cannot reach a majority of, and lets them resume when it
// can again (PlanFence). It returns the back-since map for the next tick.
func (c *Control) fenceCutOff(states map[uint64]member.State, backSince map[uint16]time.Time, now time.Time) map[uint16]time.Time {
	parts := make([]FencePartition, c.host.Partitions())
	for p := range parts {
		fp := FencePartition{Part: uint16(p), Leads: c.leads(p), Fenced: c.host.Fenced(uint16(p))}
		if fp.Leads {
			fp.Cohort = c.cohort(p)
		}
		parts[p] = fp
	}
	steps, back := PlanFence(FenceInput{Partitions: parts, States: states, BackSince: backSince, Now: now, Settle: fenceLiftSettle})
	for _, s := range steps {
		changed := c.host.Fence(s.Part, s.On)
		switch {
		case s.Why == FenceCutOff && changed:
			c.log.Warn("partition leader cut off from a majority of its cohort: granting no claims until it is back", "partition", s.Part, "cohort", parts[s.Part].Cohort)
		case s.Why == FenceBack:
			c.log.Info("partition leader reaches a majority of its cohort again: granting claims", "partition", s.Part)
		}
	}
	return back
}

// stepDownSuperseded makes this node stop leading each partition the
// registry says another node leads at a newer epoch: the other side of a
// split took it over while this node was cut off. (A follower's
// stale-epoch answer does the same at the next write; this does it
// without one, before the node grants anything.) The registry's epoch
// only grows past this node's after a handoff that did not make this
// node the leader, so a leader never steps down on it by mistake; a
// stale registry view shows an older epoch, and nothing happens.
func (c *Control) stepDownSuperseded(meta raftgroup.Meta) {
	for p, pi := range meta.Partitions {
		if p >= c.host.Partitions() || pi.Leader == c.cfg.Self {
			continue
		}
		r := c.host.Replica(p)
		if ep := r.Epoch(); ep != 0 && pi.Epoch > ep {
			c.log.Warn("stepping down: the registry names a newer leader", "partition", p, "epoch", ep, "registry_epoch", pi.Epoch, "leader", pi.Leader)
			r.Resign()
		}
	}
}

// dropGone closes the peer connections of the members gossip has newly
// declared dead or gone (peer.Pool.Drop), so that requests waiting on one
// (a claim or an enqueue forwarded to a leader that crashed) fail over
// now rather than at their deadline. gone carries the verdicts from call
// to call, so each one drops once.
func (c *Control) dropGone(gone map[uint64]bool, members []member.Peer) {
	for _, p := range members {
		if p.State != member.Dead && p.State != member.Left {
			delete(gone, p.ID)
			continue
		}
		if !gone[p.ID] && p.Addr != "" {
			c.log.Info("peer gone: closing its connection", "peer", p.ID, "addr", p.Addr, "state", p.State)
			c.host.Peers().Drop(p.Addr)
		}
		gone[p.ID] = true
	}
}
