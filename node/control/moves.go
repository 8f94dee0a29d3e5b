package control

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// placementLoop runs on every node and acts only on the metadata leader:
// it starts the moves PlanPlacement returns, each on its own.
func (c *Control) placementLoop(ctx context.Context) {
	t := time.NewTicker(placementInterval)
	defer t.Stop()
	var mu sync.Mutex
	moving := map[int]bool{}
	var last PlacementPlan
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g := c.host.Group()
		if g.Leader() != c.cfg.Self || c.host.Departing() {
			continue
		}
		meta := g.Meta()
		if meta.Config == nil {
			continue
		}
		in := PlacementInput{
			Members: slices.Collect(maps.Keys(meta.Members)), States: c.gossipStates(), Retiring: meta.Retiring,
			Partitions: make([]Placed, len(meta.Partitions)), Replicas: meta.Config.Replicas,
			MaxMoves: maxMoves, LastAlive: last.Alive, LastChange: last.LastChange,
			Now: time.Now(), Settle: c.cfg.PlacementSettle,
		}
		for p, pi := range meta.Partitions {
			in.Partitions[p] = Placed{Leader: pi.Leader, Cohort: pi.Cohort}
		}
		mu.Lock()
		in.Moving = maps.Clone(moving)
		mu.Unlock()
		last = PlanPlacement(in)
		for _, mv := range last.Moves {
			mu.Lock()
			moving[mv.Part] = true
			mu.Unlock()
			c.wg.Go(func() {
				defer func() { mu.Lock(); delete(moving, mv.Part); mu.Unlock() }()
				mctx, cancel := context.WithTimeout(ctx, moveTimeout)
				defer cancel()
				if err := c.move(mctx, mv); err != nil {
					c.log.Warn("partition move failed; will retry", "partition", mv.Part, "from", mv.From, "to", mv.To, "err", err)
					return
				}
				c.log.Info("partition moved", "partition", mv.Part, "from", mv.From, "to", mv.To)
			})
		}
	}
}

// move changes mv.Part's cohort from mv.From (led by mv.Leader) to mv.To.
func (c *Control) move(ctx context.Context, mv Move) error {
	union := slices.Clone(mv.From)
	var added []uint64
	for _, id := range mv.To {
		if !slices.Contains(union, id) {
			union = append(union, id)
			added = append(added, id)
		}
	}
	// Phase 1: the leader takes the union, so the new members get every
	// write from now on.
	if len(added) > 0 {
		// Keep the leader first: ring order puts the preferred leader
		// first, and a takeover keeps whoever runs it as leader.
		if err := c.askTakeover(ctx, mv.Leader, mv.Part, union); err != nil {
			return fmt.Errorf("widen cohort: %w", err)
		}
		// Phase 2: the new members copy what was written before.
		for _, id := range added {
			if err := c.askPull(ctx, id, mv.Part, mv.Leader); err != nil {
				return fmt.Errorf("copy to node %d: %w", id, err)
			}
		}
	}
	// Phase 3: the new cohort's first member leads the new cohort.
	if err := c.askTakeover(ctx, mv.To[0], mv.Part, mv.To); err != nil {
		return fmt.Errorf("hand over: %w", err)
	}
	return nil
}

// askTakeover makes node lead part with cohort.
func (c *Control) askTakeover(ctx context.Context, node uint64, part int, cohort []uint64) error {
	if node == c.cfg.Self {
		return c.lead(ctx, part, cohort, nil)
	}
	addr := c.host.AddrOf(node)
	if addr == "" {
		return errUnknownAddr(node)
	}
	return c.forward(ctx, addr, wire.OpTakeover, &wire.TakeoverRequest{Part: part, Cohort: cohort}, nil)
}

// askPull makes node copy part from node from.
func (c *Control) askPull(ctx context.Context, node uint64, part int, from uint64) error {
	req := &wire.PullRequest{Part: part, From: from}
	if node == c.cfg.Self {
		_, err := c.ServePull(ctx, req)
		return err
	}
	addr := c.host.AddrOf(node)
	if addr == "" {
		return errUnknownAddr(node)
	}
	return c.forward(ctx, addr, wire.OpPull, req, nil)
}

// ServeTakeover is OpTakeover: it runs the handoff for a partition with
// the given cohort, with this node as leader.
func (c *Control) ServeTakeover(ctx context.Context, req *wire.TakeoverRequest) error {
	if c.host.Departing() {
		return c.errLeaving()
	}
	if req.Part < 0 || req.Part >= c.host.Partitions() {
		return wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	uniq := slices.Clone(req.Cohort)
	slices.Sort(uniq)
	if !slices.Contains(req.Cohort, c.cfg.Self) || len(req.Cohort) > raftgroup.MaxCohort || len(slices.Compact(uniq)) != len(req.Cohort) {
		return wire.Errorf(wire.CodeInvalid, "takeover: cohort %v", req.Cohort)
	}
	// The requester gives up after moveTimeout; so does the takeover.
	ctx, cancel := context.WithTimeout(ctx, takeoverTimeout)
	defer cancel()
	return c.lead(ctx, req.Part, req.Cohort, nil)
}

// ServePull is OpPull: it copies a partition from its leader into this
// replica.
func (c *Control) ServePull(ctx context.Context, req *wire.PullRequest) (*wire.PullResponse, error) {
	if req.Part < 0 || req.Part >= c.host.Partitions() {
		return nil, wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	addr := c.host.AddrOf(req.From)
	if addr == "" {
		return nil, errUnknownAddr(req.From)
	}
	began := time.Now()
	k, err := c.host.Pull(ctx, addr, req.From, uint16(req.Part))
	if err != nil {
		return nil, err
	}
	c.log.Info("partition copied", "partition", req.Part, "from", req.From, "records", k, "took", time.Since(began).Round(time.Millisecond))
	return &wire.PullResponse{Records: k}, nil
}
