package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/ring"
)

// electParallel bounds how many partition handoffs run at once at start.
const electParallel = 8

// electLeaders runs the epoch handoff for the partitions this node should
// lead: a placed partition (epoch > 0) keeps its cohort and its leader
// (moving partitions between nodes is the ring's job, driven by the
// metadata leader); a partition never placed gets its cohort from ring
// over the registered members, and its first member leads it.
func (n *Node) electLeaders(ctx context.Context) error {
	meta := n.raft.Meta()
	members := make([]uint64, 0, len(meta.Members))
	for id := range meta.Members {
		members = append(members, id)
	}
	slices.Sort(members)
	sem := make(chan struct{}, electParallel)
	var wg sync.WaitGroup
	errs := make([]error, n.cfg.Partitions)
	for p := range n.cfg.Partitions {
		var cohort []uint64
		if p < len(meta.Partitions) && meta.Partitions[p].Epoch > 0 {
			if meta.Partitions[p].Leader != n.id {
				continue
			}
			cohort = meta.Partitions[p].Cohort
		} else {
			cohort = ring.Cohort(p, members, meta.Config.Replicas)
			if len(cohort) == 0 || cohort[0] != n.id {
				continue
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[p] = n.lead(ctx, p, cohort)
		})
	}
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			return fmt.Errorf("node: partition %d: %w", p, err)
		}
	}
	return nil
}

// lead runs the handoff for part until it wins or ctx ends, then makes the
// local replica lead at the won epoch.
func (n *Node) lead(ctx context.Context, part int, cohort []uint64) error {
	rng := rand.New(rand.NewPCG(n.id, uint64(part)))
	h := epoch.Handoff{Part: part, Self: n.id, Cohort: cohort}
	for attempt := 1; ; attempt++ {
		res, err := epoch.Run(ctx, h, voters{n}, registry{n.raft})
		if err == nil {
			if err := n.parts[part].Lead(res.Epoch); err != nil {
				return err
			}
			n.log.Debug("leading", "partition", part, "epoch", res.Epoch, "claims", len(res.Claims))
			return nil
		}
		n.log.Warn("partition handoff failed; retrying", "partition", part, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("handoff: %w (last: %v)", ctx.Err(), err)
		case <-time.After(epoch.Backoff(attempt, n.cfg.ElectionBackoff, n.cfg.ElectionBackoffMax, rng)):
		}
	}
}

// voters reaches cohort members' replicas for the handoff. The cohort of a
// one-node cluster is this node; reaching other nodes needs the peer
// transport, which comes with cluster membership.
type voters struct{ n *Node }

func (v voters) replica(node uint64, part int) error {
	if node != v.n.id {
		return fmt.Errorf("node %d: no peer transport to reach it (this node runs as a one-node cluster)", node)
	}
	if part < 0 || part >= len(v.n.parts) {
		return fmt.Errorf("partition %d out of range", part)
	}
	return nil
}

func (v voters) Promise(_ context.Context, node uint64, part int, ep, candidate uint64) ([]epoch.Claim, error) {
	if err := v.replica(node, part); err != nil {
		return nil, err
	}
	return v.n.parts[part].Promise(ep, candidate)
}

func (v voters) Install(_ context.Context, node uint64, part int, ep uint64, cs []epoch.Claim) error {
	if err := v.replica(node, part); err != nil {
		return err
	}
	return v.n.parts[part].Install(ep, cs, clock.UnixMilli(v.n.clock))
}

// registry is the metadata group as the handoff sees it.
type registry struct{ g *raftgroup.Group }

func (r registry) Current(part int) (uint64, []uint64, uint64, error) {
	m := r.g.Meta()
	if part < 0 || part >= len(m.Partitions) {
		return 0, nil, 0, fmt.Errorf("%w: %d", raftgroup.ErrBadPartition, part)
	}
	pi := m.Partitions[part]
	return pi.Epoch, slices.Clone(pi.Cohort), pi.Leader, nil
}

func (r registry) CAS(ctx context.Context, part int, prev, next uint64, cohort []uint64, leader uint64) error {
	return r.g.CAS(ctx, raftgroup.CAS{Partition: part, PrevEpoch: prev, Epoch: next, Cohort: cohort, Leader: leader})
}
