package control

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/wire"
)

// Clock drift (docs/design.md, Clock). Every ClockProbe this node reads each
// live peer's clock over a ping and estimates the peer's offset from the
// round trip (clock.Detector). A node whose clock is ahead of the
// cluster's median by more than Drift.MaxDrift must not hold claims to its
// clock: it would expire leases early and grant leases that end late. So
// while it drifts it
//
//   - hands every partition it leads to another cohort member and takes
//     none (lead refuses, the failover loop stands by),
//   - grants no claim and renews none on the partitions it still leads
//     while they are handed off, and runs no timers (no expiry): node
//     asks Drifting,
//   - reports unhealthy on /healthz with the reason, and logs it;
//
// and it resumes when its clock is back in bounds (ExitOnDrift: it exits
// instead, as the seed did). A node behind the cluster only holds leases
// longer, which is safe: it keeps serving. A node whose clock was not yet
// judged against a peer's (it just started) is treated as drifting: it
// leads nothing before the first verdict (AwaitClock holds its start for
// it), and hands off what the registry names it for if that verdict says
// it drifts.

// driftWatch is the node's clock-drift state.
type driftWatch struct {
	det *clock.Detector
	mu  sync.Mutex
	// last is the latest verdict, for health, cluster views and requests.
	last clock.Drift
	// checked: the clock was judged against a peer's at least once, or
	// the node has no peer to judge it against. Until then the node leads
	// nothing and grants nothing, as if it drifted: a node restarted with
	// its clock ahead must not lead before the first verdict.
	checked bool
}

// DriftInput is one verdict of the clock loop, for PlanDrift.
type DriftInput struct {
	Verdict clock.Drift
	// Alone: the registry knows no member but this node, so the clock
	// has nothing to be compared with.
	Alone       bool
	ExitOnDrift bool
	// Leads: this node leads a partition, or the registry names it the
	// leader of one it does not lead (a drifting node that restarted).
	Leads bool
	// HandingOff: a hand-off the clock loop started still runs.
	HandingOff bool
}

// DriftPlan is what the clock loop does about a verdict.
type DriftPlan struct {
	// Checked: the clock counts as judged from now on.
	Checked bool
	// StandBy: the node just started drifting (log it); Exit: it exits
	// instead (ExitOnDrift), and does nothing else.
	StandBy, Exit bool
	// Resume: the clock is back in bounds: the timers skipped meanwhile
	// run now.
	Resume bool
	// HandOff: hand off every partition this node leads or is named for.
	HandOff bool
}

// PlanDrift decides what a drift verdict calls for: a node whose clock is
// ahead stands by (or exits) and hands its partitions off, one at a time;
// one back in bounds resumes. A verdict with peers behind it, or a node
// alone, makes the clock judged.
func PlanDrift(in DriftInput) DriftPlan {
	d := in.Verdict
	var out DriftPlan
	out.Checked = d.Peers > 0 || in.Alone
	switch {
	case d.Changed && d.Drifting:
		out.StandBy = true
		if in.ExitOnDrift {
			out.Exit = true
			return out
		}
	case d.Changed:
		out.Resume = true
	}
	out.HandOff = d.Drifting && in.Leads && !in.HandingOff
	return out
}

// Drifting reports whether this node's clock is ahead of the cluster's by
// more than allowed, or not yet judged; reason says why.
func (c *Control) Drifting() (bool, string) {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	if !c.clock.checked {
		return true, "not yet compared with a peer's"
	}
	return c.clock.last.Drifting, c.clock.last.Reason
}

// ErrDrifting is the refusal of a drifting node.
func (c *Control) ErrDrifting() error {
	_, reason := c.Drifting()
	return fmt.Errorf("%w: this node's clock is not trusted: %s", wire.ErrUnavailable, reason)
}

// alone reports whether the registry knows no member but this node: a
// clock with nothing to be compared with.
func (c *Control) alone() bool {
	for id := range c.host.Group().Meta().Members {
		if id != c.cfg.Self {
			return false
		}
	}
	return true
}

// AwaitClock waits, while the node starts, until its clock has been
// judged against a peer's (the clock loop runs), or clockCheckWait.
func (c *Control) AwaitClock(ctx context.Context) {
	if c.alone() {
		c.markClockChecked()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, clockCheckWait)
	defer cancel()
	t := time.NewTicker(c.cfg.ClockProbe / clockAwaitPolls)
	defer t.Stop()
	for {
		c.clock.mu.Lock()
		checked := c.clock.checked
		c.clock.mu.Unlock()
		if checked {
			return
		}
		select {
		case <-ctx.Done():
			c.log.Warn("the clock could not be compared with a peer's yet: leading nothing until it is")
			return
		case <-t.C:
		}
	}
}

// markClockChecked records that the clock has been judged.
func (c *Control) markClockChecked() {
	c.clock.mu.Lock()
	was := c.clock.checked
	c.clock.checked = true
	c.clock.mu.Unlock()
	if !was {
		c.host.TimersDue() // timers held until the verdict run now
	}
}

// clockLoop probes the peers' clocks, judges this node's, and acts on a
// change of verdict (PlanDrift). Its first probe runs at once.
func (c *Control) clockLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ClockProbe)
	defer t.Stop()
	// handing is set while a hand-off runs: it runs beside the loop, so
	// the probes (and the verdict that ends the drift) go on meanwhile.
	var handing atomic.Bool
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		c.probeClocks(ctx)
		d := c.clock.det.Ahead(c.cfg.Clock.Now())
		c.clock.mu.Lock()
		c.clock.last = d
		c.clock.mu.Unlock()
		in := DriftInput{Verdict: d, ExitOnDrift: c.cfg.ExitOnDrift, HandingOff: handing.Load()}
		in.Alone = d.Peers == 0 && c.alone()
		// What this node leads matters only while it drifts.
		in.Leads = d.Drifting && (c.leadsAny() || c.namedLeader())
		plan := PlanDrift(in)
		if plan.Checked {
			c.markClockChecked()
		}
		switch {
		case plan.StandBy:
			c.log.Warn("clock drift: stepping down from every partition, granting and expiring no claims", "ahead", d.Ahead, "peers", d.Peers, "reason", d.Reason)
		case plan.Resume:
			c.log.Info("clock back in bounds: serving again", "ahead", d.Ahead, "peers", d.Peers)
			c.host.TimersDue() // timers skipped while drifting run now
		}
		if plan.Exit {
			c.host.Exit(fmt.Errorf("clock drift: %s", d.Reason))
			return
		}
		if plan.HandOff && handing.CompareAndSwap(false, true) {
			c.wg.Go(func() {
				defer handing.Store(false)
				if moved, failed := c.handOff(ctx, true); moved+failed > 0 {
					c.log.Info("clock drift: handed partitions off", "moved", moved, "failed", failed)
				}
			})
		}
	}
}

// probeClocks pings every live peer once, at the same time, and feeds the
// readings to the detector; peers gossip no longer sees are forgotten.
func (c *Control) probeClocks(ctx context.Context) {
	g := c.host.Gossip()
	if g == nil {
		return
	}
	var wg sync.WaitGroup
	for _, p := range g.Members() {
		if p.ID == c.cfg.Self {
			continue
		}
		if p.State != member.Alive {
			c.clock.det.Forget(p.ID)
			continue
		}
		wg.Go(func() { c.probeClock(ctx, p) })
	}
	wg.Wait()
}

// probeClock reads peer p's clock once.
func (c *Control) probeClock(ctx context.Context, p member.Peer) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.ClockProbe)
	defer cancel()
	sent, start := c.cfg.Clock.Now(), time.Now()
	var resp wire.PingResponse
	if err := c.host.Peers().Call(cctx, p.Addr, wire.OpPing, nil, &resp); err != nil {
		return
	}
	rtt, recv := time.Since(start), c.cfg.Clock.Now()
	if resp.NodeID != p.ID {
		return
	}
	s := clock.Sample{Sent: sent, Peer: time.UnixMilli(resp.Time), Recv: recv, RTT: rtt}
	if err := c.clock.det.Observe(p.ID, s); err != nil {
		c.log.Debug("clock sample refused", "peer", p.ID, "err", err)
	}
}

// namedLeader reports whether the registry names this node the leader of
// a partition it does not lead (a drifting node that restarted: it hands
// them off too, or they would have no leader while it drifts).
func (c *Control) namedLeader() bool {
	for p, pi := range c.host.Group().Meta().Partitions {
		if pi.Leader == c.cfg.Self && p < c.host.Partitions() && !c.leads(p) {
			return true
		}
	}
	return false
}

// leadsAny reports whether this node leads a partition.
func (c *Control) leadsAny() bool {
	for p := range c.host.Partitions() {
		if c.leads(p) {
			return true
		}
	}
	return false
}

// ClockView is the drift state for ctl cluster and the metrics.
func (c *Control) ClockView() *wire.ClockView {
	c.clock.mu.Lock()
	d := c.clock.last
	c.clock.mu.Unlock()
	v := &wire.ClockView{AheadMs: d.Ahead.Milliseconds(), Drifting: d.Drifting, Reason: d.Reason, MaxDriftMs: c.cfg.Drift.MaxDrift.Milliseconds()}
	for id, o := range c.clock.det.Offsets(c.cfg.Clock.Now()) {
		v.Peers = append(v.Peers, wire.PeerClock{ID: id, OffsetMs: o.Offset.Milliseconds(), RTTUs: o.RTT.Microseconds()})
	}
	return v
}
