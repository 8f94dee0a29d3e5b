package node

import (
	"context"
	"fmt"

	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/node/control"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The leadership control plane (failover, placement, zombies, the clock,
// the metadata group's voters, the epoch handoff) lives in node/control;
// node builds it at Start, over controlHost, and asks it whether the
// clock is trusted.

// controlConfig is control's part of cfg, for node id self (0 while
// New only validates it).
func controlConfig(cfg Config, self uint64) control.Config {
	return control.Config{
		Self: self, Logger: cfg.Logger, Clock: cfg.Clock,
		Drift: cfg.Drift, ClockProbe: cfg.ClockProbe, ExitOnDrift: cfg.ExitOnDrift,
		VoterInterval: cfg.VoterInterval, DeadVoterGrace: cfg.DeadVoterGrace,
		PlacementSettle: cfg.PlacementSettle, ZombieCheck: cfg.ZombieCheck,
		StartTimeout: cfg.StartTimeout, PromiseGrace: cfg.PromiseGrace,
		ElectionBackoff: cfg.ElectionBackoff, ElectionBackoffMax: cfg.ElectionBackoffMax,
		CallTimeout: peerCallTimeout, DialTimeout: peerDialTimeout,
	}
}

// startControl builds the control plane, once the node knows its id and
// before anything can call into it (the peer handlers, gossip).
func (n *Node) startControl() error {
	cc := controlConfig(n.cfg, n.id)
	cc.Logger = n.log
	c, err := control.New(cc, controlHost{n})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.ctl = c
	return nil
}

// controlHost is the node as node/control sees it (control.Host).
type controlHost struct{ n *Node }

var _ control.Host = controlHost{}

func (h controlHost) Partitions() int                    { return len(h.n.parts) }
func (h controlHost) Replica(part int) control.Replica   { return h.n.parts[part] }
func (h controlHost) HasTasks(part uint16) (bool, error) { return h.n.store.HasTasks(part) }
func (h controlHost) Fence(part uint16, on bool) bool    { return h.n.heads.Fence(part, on) }
func (h controlHost) Fenced(part uint16) bool            { return h.n.heads.IsFenced(part) }
func (h controlHost) Group() control.Group               { return h.n.raft }
func (h controlHost) Peers() *peer.Pool                  { return h.n.peers }
func (h controlHost) AddrOf(id uint64) string            { return h.n.ms.AddrOf(id) }
func (h controlHost) Departing() bool                    { return h.n.departing.Load() }

// Led: a new leader re-checks its blocked tasks soon (reconcileLoop).
func (h controlHost) Led(uint16)     { h.n.reconcileSoonAfter() }
func (h controlHost) TimersDue()     { h.n.nextDue.Store(0) }
func (h controlHost) Exit(err error) { h.n.exit(err) }

func (h controlHost) Gossip() control.Gossip {
	if m := h.n.ms.Gossip(); m != nil {
		return m
	}
	return nil // not a nil *member.Member in a non-nil interface
}

func (h controlHost) Placement() (control.Placement, bool) {
	pl := h.n.placement.Load()
	if pl == nil {
		return control.Placement{}, false
	}
	return control.Placement{Cohorts: pl.cohorts, Leaders: pl.leaders, Epochs: pl.epochs}, true
}

// Carry is the replication plane's carry (epoch.Carrier).
func (h controlHost) Carry(ctx context.Context, cr epoch.Carry) ([]uint64, error) {
	return h.n.repl.Carry(ctx, cr)
}

// Pull is the replication plane's paged transfer of a partition.
func (h controlHost) Pull(ctx context.Context, addr string, from uint64, part uint16) (int, error) {
	return h.n.repl.PullPartition(ctx, addr, from, part)
}

// Gather is the replication plane's gathering of a zombie's copy.
func (h controlHost) Gather(ctx context.Context, part uint16, from uint64) error {
	return h.n.repl.Gather(ctx, part, from)
}

// Leave hands this node's partitions to other members and then stops the
// node (Leaving is closed; the process exits).
func (n *Node) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	if err := n.serving(); err != nil {
		return nil, err
	}
	n.departing.Store(true)
	moved, failed := n.ctl.HandOffAll(ctx)
	n.log.Info("leaving the cluster", "handed_off", moved, "failed", failed)
	n.leaveOnce.Do(func() { close(n.leaving) })
	return &wire.LeaveResponse{HandedOff: moved, Failed: failed}, nil
}

// Leaving is closed once a client asked the node to leave (ctl leave):
// the process then closes the node and exits.
func (n *Node) Leaving() <-chan struct{} { return n.leaving }

// Holds reports whether this node's store holds tasks of partition part:
// a cohort member's copy, or a zombie not yet released.
func (n *Node) Holds(part int) (bool, error) {
	if part < 0 || part >= len(n.parts) {
		return false, fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, part)
	}
	return n.store.HasTasks(uint16(part))
}
