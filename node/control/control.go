package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/wire"
)

// Control is one node's leadership control plane: the loops that take
// snapshots, ask the planners and act (failover, placement, zombies, the
// clock, the metadata group's voters), the epoch handoff that makes this
// node a partition's leader, and the peer ops that move leadership
// (OpPromise, OpTakeover, OpPull, OpRelease, OpAbandoned). Safe for
// concurrent use.
type Control struct {
	cfg  Config
	host Host
	log  *slog.Logger

	// clock is the drift watch (drift.go).
	clock driftWatch
	// kick wakes the voter loop when membership changed; buffered (1).
	kick chan struct{}

	// runs counts, by partition, the handoffs this node is running
	// (lead): the failover loop leaves a partition alone while one runs.
	runs struct {
		sync.Mutex
		by map[int]int
	}

	// gathers are the gathers of zombies' copies this node ran or runs as
	// their partitions' leader (zombie.go).
	gathers gatherRuns

	// abandoned holds, by partition, what candidates told this node of
	// handoffs they gave up (abandon.go).
	abandoned abandonedMarks

	// wg holds the loops and everything they started (takeovers, moves,
	// hand-offs, gathers); Wait waits for it.
	wg sync.WaitGroup
}

// New returns the control plane of node cfg.Self over host. Nothing runs
// until StartClock and Start.
func New(cfg Config, host Host) (*Control, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Self == 0 {
		return nil, errors.New("control: node id 0")
	}
	det, err := clock.NewDetector(cfg.Drift)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	c := &Control{cfg: cfg, host: host, log: cfg.Logger, kick: make(chan struct{}, 1)}
	c.clock.det = det
	c.runs.by = make(map[int]int)
	c.gathers.by = make(map[gatherKey]*gatherRun)
	c.abandoned.by = make(map[int]abandonMark)
	return c, nil
}

// StartClock starts the clock loop: it must run before the node leads
// anything (AwaitClock waits for its first verdict).
func (c *Control) StartClock(ctx context.Context) {
	c.wg.Go(func() { c.clockLoop(ctx) })
}

// Start starts the loops that run once the node serves: the voters of
// the metadata group, failover, placement and zombies. They end with ctx.
func (c *Control) Start(ctx context.Context) {
	c.startGathers(ctx)
	c.wg.Go(func() { c.voterLoop(ctx) })
	c.wg.Go(func() { c.failoverLoop(ctx) })
	c.wg.Go(func() { c.placementLoop(ctx) })
	c.wg.Go(func() { c.zombieLoop(ctx) })
}

// Wait waits until the loops, and what they started, ended (after their
// context did).
func (c *Control) Wait() { c.wg.Wait() }

// MembersChanged wakes the voter loop: gossip's OnChange.
func (c *Control) MembersChanged() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// handoffStarted and handoffEnded count the handoffs of part this node
// runs; handoffsRunning copies the counts.
func (c *Control) handoffStarted(part int) {
	c.runs.Lock()
	c.runs.by[part]++
	c.runs.Unlock()
}

func (c *Control) handoffEnded(part int) {
	c.runs.Lock()
	if c.runs.by[part]--; c.runs.by[part] == 0 {
		delete(c.runs.by, part)
	}
	c.runs.Unlock()
}

func (c *Control) handoffsRunning() map[int]bool {
	c.runs.Lock()
	defer c.runs.Unlock()
	out := make(map[int]bool, len(c.runs.by))
	for p := range c.runs.by {
		out[p] = true
	}
	return out
}

// StatesOf maps node ids to their gossip state over a member list, with
// self alive.
func StatesOf(self uint64, members []member.Peer) map[uint64]member.State {
	out := make(map[uint64]member.State, len(members))
	for _, p := range members {
		out[p.ID] = p.State
	}
	out[self] = member.Alive
	return out
}

// members is gossip's member list; none before gossip started.
func (c *Control) members() []member.Peer {
	if g := c.host.Gossip(); g != nil {
		return g.Members()
	}
	return nil
}

// gossipStates is StatesOf over gossip's current view.
func (c *Control) gossipStates() map[uint64]member.State {
	return StatesOf(c.cfg.Self, c.members())
}

// leads reports whether this node's replica of part leads.
func (c *Control) leads(part int) bool { return c.host.Replica(part).Epoch() > 0 }

// cohort is part's cohort in node's placement cache (shared: never
// modified), nil when unknown.
func (c *Control) cohort(part int) []uint64 {
	pl, ok := c.host.Placement()
	if !ok || part >= len(pl.Cohorts) {
		return nil
	}
	return pl.Cohorts[part]
}

// errUnknownAddr is the refusal to reach a node whose address is unknown.
func errUnknownAddr(node uint64) error {
	return fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, node)
}

// errLeaving refuses leadership while the node departs.
func (c *Control) errLeaving() error {
	return fmt.Errorf("%w: node %d is leaving the cluster", wire.ErrUnavailable, c.cfg.Self)
}

// forward sends op to the node at addr over a peer connection, bounded by
// ctx only (a takeover or a copy takes as long as its move allows).
func (c *Control) forward(ctx context.Context, addr string, op wire.Op, req, resp any) error {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	conn, err := c.host.Peers().Get(dctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: forward %s to %s: %v", wire.ErrUnavailable, op, addr, err)
	}
	return conn.Call(ctx, op, req, resp)
}
