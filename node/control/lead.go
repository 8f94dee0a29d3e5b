package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// Elect is a partition this node leads at start, with its cohort.
type Elect struct {
	Part   int
	Cohort []uint64
}

// ElectionInput is the snapshot PlanElection plans over.
type ElectionInput struct {
	Self uint64
	// Partitions is the cluster's partition count.
	Partitions int
	// Registry is the registry's entries, indexed by partition (possibly
	// fewer than Partitions before the first placement).
	Registry []raftgroup.PartitionInfo
	// Members are the registered members; Replicas the cohort size.
	Members  []uint64
	Replicas int
}

// PlanElection returns the partitions this node should lead at start: a
// placed partition (epoch > 0) keeps its cohort and its leader (moving
// partitions between nodes is placement's job, driven by the metadata
// leader); a partition never placed gets its cohort from ring over the
// registered members, and its first member leads it.
func PlanElection(in ElectionInput) []Elect {
	members := slices.Sorted(slices.Values(in.Members))
	var out []Elect
	for p := range in.Partitions {
		var cohort []uint64
		if p < len(in.Registry) && in.Registry[p].Epoch > 0 {
			if in.Registry[p].Leader != in.Self {
				continue
			}
			cohort = in.Registry[p].Cohort
		} else {
			cohort = ring.Cohort(p, members, in.Replicas)
			if len(cohort) == 0 || cohort[0] != in.Self {
				continue
			}
		}
		out = append(out, Elect{Part: p, Cohort: cohort})
	}
	return out
}

// ElectLeaders runs the epoch handoff for the partitions this node should
// lead at start (PlanElection), electParallel at a time. A node whose
// clock is not trusted leads nothing: the failover loop leads what the
// registry names it for once it is, meanwhile the clock loop hands it off.
func (c *Control) ElectLeaders(ctx context.Context) error {
	if drifting, reason := c.Drifting(); drifting {
		c.log.Warn("leading nothing at start: this node's clock is not trusted", "reason", reason)
		return nil
	}
	meta := c.host.Group().Meta()
	plan := PlanElection(ElectionInput{
		Self: c.cfg.Self, Partitions: c.host.Partitions(), Registry: meta.Partitions,
		Members: slices.Collect(maps.Keys(meta.Members)), Replicas: meta.Config.Replicas,
	})
	sem := make(chan struct{}, electParallel)
	var wg sync.WaitGroup
	errs := make([]error, len(plan))
	for i, e := range plan {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = c.lead(ctx, e.Part, e.Cohort, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		p := plan[i].Part
		if errors.Is(err, partition.ErrNotLeader) {
			// Another cohort member won a newer epoch while this node was
			// starting (it took over while this node was down): it leads,
			// and this node serves as a follower.
			c.log.Info("another node took the partition over while this one started", "partition", p, "err", err)
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
// abandoned takeover never blocks the partition). One that gives up
// tells the registry's leader, should its promises stop that one leading
// (tellAbandoned).
func (c *Control) lead(ctx context.Context, part int, cohort []uint64, still func() error) error {
	c.handoffStarted(part)
	defer c.handoffEnded(part)
	var asked uint64 // the highest epoch an attempt asked promises of
	won := false
	defer func() {
		if !won {
			c.tellAbandoned(ctx, part, asked)
		}
	}()
	rng := rand.New(rand.NewPCG(c.cfg.Self, uint64(part)))
	h := epoch.Handoff{Part: part, Self: c.cfg.Self, Cohort: cohort}
	for attempt := 1; ; attempt++ {
		if c.host.Departing() {
			return c.errLeaving()
		}
		if drifting, _ := c.Drifting(); drifting {
			return c.ErrDrifting()
		}
		if still != nil && attempt > 1 {
			if err := still(); err != nil {
				return fmt.Errorf("handoff of partition %d abandoned after %d attempts: %w", part, attempt-1, err)
			}
		}
		res, err := epoch.Run(ctx, h, voters{c}, c.host, registry{c.host.Group()})
		asked = max(asked, res.Epoch)
		if err == nil {
			won = true
			// The carry left this replica holding exactly what the
			// handoff carried, before the CAS made the epoch current.
			if err := c.host.Replica(part).Lead(res.Epoch); err != nil {
				return err
			}
			// At Info: an operator reads leadership changes from the log, and
			// the fault suite maps each epoch to the node that led it from
			// this line (faults.Leadership).
			c.log.Info("leading", "partition", part, "epoch", res.Epoch, "sealed", res.Sealed)
			c.host.Led(uint16(part))
			return nil
		}
		h = epoch.Next(h, err)
		c.log.Warn("partition handoff failed; retrying", "partition", part, "attempt", attempt, "above", h.Above, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("handoff: %w (last: %v)", ctx.Err(), err)
		case <-time.After(epoch.Backoff(attempt, c.cfg.ElectionBackoff, c.cfg.ElectionBackoffMax, rng)):
		}
	}
}

// voters reaches cohort members' replicas for the handoff: this node's
// directly, the others over peer connections.
type voters struct{ c *Control }

func (v voters) local(part int) (Replica, error) {
	if part < 0 || part >= v.c.host.Partitions() {
		return nil, fmt.Errorf("partition %d out of range", part)
	}
	return v.c.host.Replica(part), nil
}

func (v voters) addr(node uint64) (string, error) {
	a := v.c.host.AddrOf(node)
	if a == "" {
		return "", fmt.Errorf("%w: the address of node %d is unknown", wire.ErrUnavailable, node)
	}
	return a, nil
}

// Promise implements epoch.Voters.
func (v voters) Promise(ctx context.Context, node uint64, part int, ep, candidate uint64) error {
	if node == v.c.cfg.Self {
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
	if err := v.c.host.Peers().Call(ctx, addr, wire.OpPromise, &wire.PromiseRequest{Part: part, Epoch: ep, Candidate: candidate}, &resp); err != nil {
		return err
	}
	if resp.Refused {
		return &epoch.RefusedError{Part: part, Promised: resp.Promised, To: resp.To}
	}
	return nil
}

// ServePromise is OpPromise: the voter side of a handoff another node
// runs. A refusal is an answer naming the epoch promised (the candidate
// asks above it next), not an error.
func (c *Control) ServePromise(req *wire.PromiseRequest) (*wire.PromiseResponse, error) {
	r, err := voters{c}.local(req.Part)
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
type registry struct{ g Group }

// Current implements epoch.Registry.
func (r registry) Current(part int) (epoch.Current, error) {
	m := r.g.Meta()
	if part < 0 || part >= len(m.Partitions) {
		return epoch.Current{}, fmt.Errorf("%w: %d", raftgroup.ErrBadPartition, part)
	}
	pi := m.Partitions[part]
	return epoch.Current{Epoch: pi.Epoch, Cohort: slices.Clone(pi.Cohort), Leader: pi.Leader, Sealed: slices.Clone(pi.Sealed)}, nil
}

// CAS implements epoch.Registry.
func (r registry) CAS(ctx context.Context, part int, prev, next uint64, cohort []uint64, leader uint64, sealed []uint64) error {
	return r.g.CAS(ctx, raftgroup.CAS{Partition: part, PrevEpoch: prev, Epoch: next, Cohort: cohort, Leader: leader, Sealed: sealed})
}
