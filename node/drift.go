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
// longer, which is safe: it keeps serving.

// driftWatch is the node's clock-drift state.
type driftWatch struct {
	det *clock.Detector
	mu  sync.Mutex
	// last is the latest verdict, for health, cluster views and requests.
	last clock.Drift
}

// drifting reports whether this node's clock is ahead of the cluster's by
// more than allowed; reason says by how much.
func (n *Node) drifting() (bool, string) {
	if n.drift == nil {
		return false, ""
	}
	n.drift.mu.Lock()
	defer n.drift.mu.Unlock()
	return n.drift.last.Drifting, n.drift.last.Reason
}

// errDrifting is the refusal of a drifting node.
func (n *Node) errDrifting() error {
	_, reason := n.drifting()
	return fmt.Errorf("%w: this node's clock is ahead of the cluster's: %s", wire.ErrUnavailable, reason)
}

// clockLoop probes the peers' clocks, judges this node's, and acts on a
// change of verdict.
func (n *Node) clockLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ClockProbe)
	defer t.Stop()
	// handing is set while a hand-off runs: it runs beside the loop, so
	// the probes (and the verdict that ends the drift) go on meanwhile.
	var handing atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.probeClocks(ctx)
		d := n.drift.det.Ahead(n.clock.Now())
		n.drift.mu.Lock()
		n.drift.last = d
		n.drift.mu.Unlock()
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
		if d.Drifting && n.leadsAny() && handing.CompareAndSwap(false, true) {
			n.wg.Go(func() {
				defer handing.Store(false)
				if moved, failed := n.handOff(ctx); moved+failed > 0 {
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
			if err := n.peers.call(cctx, p.Addr, wire.OpPing, nil, &resp); err != nil {
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
