package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/wire"
)

// electParallel bounds how many partition handoffs run at once at start.
const electParallel = 8

// electLeaders runs the epoch handoff for the partitions this node should
// lead: a placed partition (epoch > 0) keeps its cohort and its leader
// (moving partitions between nodes is the ring's job, driven by the
// metadata leader); a partition never placed gets its cohort from ring
// over the registered members, and its first member leads it.
func (n *Node) electLeaders(ctx context.Context) error {
	if drifting, reason := n.drifting(); drifting {
		// The failover loop leads what the registry names this node for
		// once its clock is trusted; meanwhile the clock loop hands it off.
		n.log.Warn("leading nothing at start: this node's clock is not trusted", "reason", reason)
		return nil
	}
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
			errs[p] = n.lead(ctx, p, cohort, nil)
		})
	}
	wg.Wait()
	for p, err := range errs {
		if errors.Is(err, partition.ErrNotLeader) {
			// Another cohort member won a newer epoch while this node was
			// starting (it took over while this node was down): it leads,
			// and this node serves as a follower.
			n.log.Info("another node took the partition over while this one started", "partition", p, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("node: partition %d: %w", p, err)
		}
	}
	return nil
}

// lead runs the handoff for part until it wins or ctx ends, then makes the
// local replica lead at the won epoch. still, if not nil, is asked before
// every attempt after the first: an error from it (the reason for the
// handoff is gone) ends the handoff with that error. An attempt refused
// by a voter's promise to a higher epoch asks above it next time (an
// abandoned takeover never blocks the partition).
func (n *Node) lead(ctx context.Context, part int, cohort []uint64, still func() error) error {
	n.leadRuns[part].Add(1)
	defer n.leadRuns[part].Add(-1)
	rng := rand.New(rand.NewPCG(n.id, uint64(part)))
	h := epoch.Handoff{Part: part, Self: n.id, Cohort: cohort}
	for attempt := 1; ; attempt++ {
		if n.departing.Load() {
			return fmt.Errorf("%w: node %d is leaving the cluster", wire.ErrUnavailable, n.id)
		}
		if drifting, _ := n.drifting(); drifting {
			return n.errDrifting()
		}
		if still != nil && attempt > 1 {
			if err := still(); err != nil {
				return fmt.Errorf("handoff of partition %d abandoned after %d attempts: %w", part, attempt-1, err)
			}
		}
		res, err := epoch.Run(ctx, h, voters{n}, n.repl, registry{n.raft})
		if err == nil {
			// The carry left this replica holding exactly what the
			// handoff carried, before the CAS made the epoch current.
			if err := n.parts[part].Lead(res.Epoch); err != nil {
				return err
			}
			n.log.Debug("leading", "partition", part, "epoch", res.Epoch, "sealed", res.Sealed)
			return nil
		}
		h = epoch.Next(h, err)
		n.log.Warn("partition handoff failed; retrying", "partition", part, "attempt", attempt, "above", h.Above, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("handoff: %w (last: %v)", ctx.Err(), err)
		case <-time.After(epoch.Backoff(attempt, n.cfg.ElectionBackoff, n.cfg.ElectionBackoffMax, rng)):
		}
	}
}

// voters reaches cohort members' replicas for the handoff: this node's
// directly, the others over peer connections.
type voters struct{ n *Node }

func (v voters) local(part int) (*partition.Replica, error) {
	if part < 0 || part >= len(v.n.parts) {
		return nil, fmt.Errorf("partition %d out of range", part)
	}
	return v.n.parts[part], nil
}

func (v voters) addr(node uint64) (string, error) {
	a := v.n.addrOf(node)
	if a == "" {
		return "", fmt.Errorf("%w: the address of node %d is unknown", wire.ErrUnavailable, node)
	}
	return a, nil
}

func (v voters) Promise(ctx context.Context, node uint64, part int, ep, candidate uint64) error {
	if node == v.n.id {
		r, err := v.local(part)
		if err != nil {
			return err
		}
		return r.Promise(ep, candidate)
	}
	addr, err := v.addr(node)
	if err != nil {
		return err
	}
	var resp wire.PromiseResponse
	if err := v.n.peers.Call(ctx, addr, wire.OpPromise, &wire.PromiseRequest{Part: part, Epoch: ep, Candidate: candidate}, &resp); err != nil {
		return err
	}
	if resp.Refused {
		return &epoch.RefusedError{Part: part, Promised: resp.Promised, To: resp.To}
	}
	return nil
}

// servePromise is the voter side of a handoff another node runs. A
// refusal is an answer naming the epoch promised (the candidate asks
// above it next), not an error.
func (n *Node) servePromise(req *wire.PromiseRequest) (*wire.PromiseResponse, error) {
	r, err := voters{n}.local(req.Part)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "%v", err)
	}
	err = r.Promise(req.Epoch, req.Candidate)
	var re *epoch.RefusedError
	if errors.As(err, &re) {
		return &wire.PromiseResponse{Refused: true, Promised: re.Promised, To: re.To}, nil
	}
	if err != nil {
		return nil, err
	}
	return &wire.PromiseResponse{}, nil
}

// registry is the metadata group as the handoff sees it.
type registry struct{ g *raftgroup.Group }

func (r registry) Current(part int) (epoch.Current, error) {
	m := r.g.Meta()
	if part < 0 || part >= len(m.Partitions) {
		return epoch.Current{}, fmt.Errorf("%w: %d", raftgroup.ErrBadPartition, part)
	}
	pi := m.Partitions[part]
	return epoch.Current{Epoch: pi.Epoch, Cohort: slices.Clone(pi.Cohort), Leader: pi.Leader, Sealed: slices.Clone(pi.Sealed)}, nil
}

func (r registry) CAS(ctx context.Context, part int, prev, next uint64, cohort []uint64, leader uint64, sealed []uint64) error {
	return r.g.CAS(ctx, raftgroup.CAS{Partition: part, PrevEpoch: prev, Epoch: next, Cohort: cohort, Leader: leader, Sealed: sealed})
}
