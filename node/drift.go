package node

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

// Clock drift (DESIGN.md, Clock). Every ClockProbe this node reads each
// live peer's clock over a ping and estimates the peer's offset from the
// round trip (clock.Detector). A node whose clock is ahead of the
// cluster's median by more than Drift.MaxDrift must not hold claims to its
// clock: it would expire leases early and grant leases that end late. So
// while it drifts it
//
//   - hands every partition it leads to another cohort member and takes
//     none (lead refuses, the failover loop stands by),
//   - grants no claim and renews none on the partitions it still leads
//     while they are handed off, and runs no timers (no expiry),
//   - reports unhealthy on /healthz with the reason, and logs it;
//
// and it resumes when its clock is back in bounds (ExitOnDrift: it exits
// instead, as the seed did). A node behind the cluster only holds leases
// longer, which is safe: it keeps serving. A node whose clock was not yet
// judged against a peer's (it just started) is treated as drifting: it
// leads nothing before the first verdict (awaitClock holds its start for
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

// drifting reports whether this node's clock is ahead of the cluster's by
// more than allowed, or not yet judged; reason says why.
func (n *Node) drifting() (bool, string) {
	if n.drift == nil {
		return false, ""
	}
	n.drift.mu.Lock()
	defer n.drift.mu.Unlock()
	if !n.drift.checked {
		return true, "not yet compared with a peer's"
	}
	return n.drift.last.Drifting, n.drift.last.Reason
}

// errDrifting is the refusal of a drifting node.
func (n *Node) errDrifting() error {
	_, reason := n.drifting()
	return fmt.Errorf("%w: this node's clock is not trusted: %s", wire.ErrUnavailable, reason)
}

// alone reports whether the registry knows no member but this node: a
// clock with nothing to be compared with.
func (n *Node) alone() bool {
	for id := range n.raft.Meta().Members {
		if id != n.id {
			return false
		}
	}
	return true
}

// clockCheckWait bounds how long a starting node waits for its clock's
// first verdict before it goes on without leading anything (its peers
// are down: it could not win a handoff anyway; the failover loop leads
// what the registry names it for once the clock is judged).
const clockCheckWait = 10 * time.Second

// awaitClock waits, while the node starts, until its clock has been
// judged against a peer's (clockLoop runs), or clockCheckWait.
func (n *Node) awaitClock(ctx context.Context) {
	if n.alone() {
		n.markClockChecked()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, clockCheckWait)
	defer cancel()
	t := time.NewTicker(n.cfg.ClockProbe / 4)
	defer t.Stop()
	for {
		n.drift.mu.Lock()
		checked := n.drift.checked
		n.drift.mu.Unlock()
		if checked {
			return
		}
		select {
		case <-ctx.Done():
			n.log.Warn("the clock could not be compared with a peer's yet: leading nothing until it is")
			return
		case <-t.C:
		}
	}
}

// markClockChecked records that the clock has been judged.
func (n *Node) markClockChecked() {
	n.drift.mu.Lock()
	was := n.drift.checked
	n.drift.checked = true
	n.drift.mu.Unlock()
	if !was {
		n.nextDue.Store(0) // timers held until the verdict run now
	}
}

// clockLoop probes the peers' clocks, judges this node's, and acts on a
// change of verdict. Its first probe runs at once.
func (n *Node) clockLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ClockProbe)
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
		n.probeClocks(ctx)
		d := n.drift.det.Ahead(n.clock.Now())
		n.drift.mu.Lock()
		n.drift.last = d
		n.drift.mu.Unlock()
		if d.Peers > 0 || n.alone() {
			n.markClockChecked()
		}
		switch {
		case d.Changed && d.Drifting:
			n.log.Warn("clock drift: stepping down from every partition, granting and expiring no claims", "ahead", d.Ahead, "peers", d.Peers, "reason", d.Reason)
			if n.cfg.ExitOnDrift {
				n.exit(fmt.Errorf("clock drift: %s", d.Reason))
				return
			}
		case d.Changed:
			n.log.Info("clock back in bounds: serving again", "ahead", d.Ahead, "peers", d.Peers)
			n.nextDue.Store(0) // timers skipped while drifting run now
		}
		if d.Drifting && (n.leadsAny() || n.namedLeader()) && handing.CompareAndSwap(false, true) {
			n.wg.Go(func() {
				defer handing.Store(false)
				if moved, failed := n.handOff(ctx, true); moved+failed > 0 {
					n.log.Info("clock drift: handed partitions off", "moved", moved, "failed", failed)
				}
			})
		}
	}
}

// probeClocks pings every live peer once, at the same time, and feeds the
// readings to the detector; peers gossip no longer sees are forgotten.
func (n *Node) probeClocks(ctx context.Context) {
	if n.member == nil {
		return
	}
	var wg sync.WaitGroup
	for _, p := range n.member.Members() {
		if p.ID == n.id {
			continue
		}
		if p.State != member.Alive {
			n.drift.det.Forget(p.ID)
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, n.cfg.ClockProbe)
			defer cancel()
			sent, start := n.clock.Now(), time.Now()
			var resp wire.PingResponse
			if err := n.peers.Call(cctx, p.Addr, wire.OpPing, nil, &resp); err != nil {
				return
			}
			rtt, recv := time.Since(start), n.clock.Now()
			if resp.NodeID != p.ID {
				return
			}
			s := clock.Sample{Sent: sent, Peer: time.UnixMilli(resp.Time), Recv: recv, RTT: rtt}
			if err := n.drift.det.Observe(p.ID, s); err != nil {
				n.log.Debug("clock sample refused", "peer", p.ID, "err", err)
			}
		})
	}
	wg.Wait()
}

// namedLeader reports whether the registry names this node the leader of
// a partition it does not lead (a drifting node that restarted: it hands
// them off too, or they would have no leader while it drifts).
func (n *Node) namedLeader() bool {
	for p, pi := range n.raft.Meta().Partitions {
		if pi.Leader == n.id && p < len(n.parts) && !n.leads(uint16(p)) {
			return true
		}
	}
	return false
}

// leadsAny reports whether this node leads a partition.
func (n *Node) leadsAny() bool {
	for _, r := range n.parts {
		if r.Epoch() > 0 {
			return true
		}
	}
	return false
}

// clockView is the drift state for ctl cluster.
func (n *Node) clockView() *wire.ClockView {
	if n.drift == nil {
		return nil
	}
	n.drift.mu.Lock()
	d := n.drift.last
	n.drift.mu.Unlock()
	v := &wire.ClockView{AheadMs: d.Ahead.Milliseconds(), Drifting: d.Drifting, Reason: d.Reason, MaxDriftMs: n.cfg.Drift.MaxDrift.Milliseconds()}
	for id, o := range n.drift.det.Offsets(n.clock.Now()) {
		v.Peers = append(v.Peers, wire.PeerClock{ID: id, OffsetMs: o.Offset.Milliseconds(), RTTUs: o.RTT.Microseconds()})
	}
	return v
}
