package control

import (
	"context"
	"slices"
	"sync"

	"github.com/skuldd/skuldd/member"
)

// HandOff is one partition a hand-off gives to To.
type HandOff struct {
	Part   int
	To     uint64
	Cohort []uint64
}

// HandOffInput is one snapshot for PlanHandOff.
type HandOffInput struct {
	Self uint64
	// Partitions are the registry's entries, indexed by partition;
	// Leading says which this node's replicas lead.
	Partitions []Placed
	Leading    []bool
	// Named: also give away the partitions the registry names this node
	// for but that it does not lead (a node that restarted drifting leads
	// none of them).
	Named bool
	// States is gossip's view.
	States map[uint64]member.State
}

// PlanHandOff returns, for each partition this node leads (or, with
// Named, is named for), the cohort member it goes to: the first other one
// gossip holds alive. A cohort of one has nobody to take over. Failed
// counts the partitions that have no live successor.
func PlanHandOff(in HandOffInput) (plan []HandOff, failed int) {
	for p, pi := range in.Partitions {
		// The replica's own view decides: a partition handed off makes it
		// step down at once, while this node's copy of the registry may
		// lag.
		leading := p < len(in.Leading) && in.Leading[p]
		if !leading && !(in.Named && pi.Leader == in.Self) || len(pi.Cohort) < 2 {
			continue
		}
		succ := uint64(0)
		for _, id := range pi.Cohort {
			if id != in.Self && in.States[id] == member.Alive {
				succ = id
				break
			}
		}
		if succ == 0 {
			failed++
			continue
		}
		plan = append(plan, HandOff{Part: p, To: succ, Cohort: slices.Clone(pi.Cohort)})
	}
	return plan, failed
}

// handOff gives the leadership of every partition this node leads to the
// next live member of its cohort (PlanHandOff), so clients see no
// failover when the node stops on purpose, maxMoves at a time. It returns
// how many moved and how many could not.
func (c *Control) handOff(ctx context.Context, named bool) (moved, failed int) {
	meta := c.host.Group().Meta()
	in := HandOffInput{Self: c.cfg.Self, Partitions: make([]Placed, len(meta.Partitions)), Named: named, States: c.gossipStates()}
	for p, pi := range meta.Partitions {
		in.Partitions[p] = Placed{Leader: pi.Leader, Cohort: pi.Cohort}
	}
	in.Leading = make([]bool, c.host.Partitions())
	for p := range in.Leading {
		in.Leading[p] = c.leads(p)
	}
	plan, failed := PlanHandOff(in)
	var mu sync.Mutex // moved and failed, counted by the hand-offs
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxMoves)
	for _, h := range plan {
		r := c.host.Replica(h.Part)
		ep := r.Epoch()
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := c.askTakeover(ctx, h.To, h.Part, h.Cohort)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				c.log.Warn("hand-off failed", "partition", h.Part, "to", h.To, "err", err)
				failed++
				return
			}
			// The successor leads at a newer epoch: stop leading now,
			// not when its promise or the registry reaches this node
			// (a majority of promises need not include this one).
			r.ResignAt(ep)
			moved++
		})
	}
	wg.Wait()
	return moved, failed
}

// HandOffAll hands off until this node leads nothing (a takeover that was
// already running when the node started departing may still make it a
// leader once), within HandOffTimeout. The node departs first
// (Host.Departing), so that it takes nothing over meanwhile. It returns
// how many partitions moved and how many could not.
func (c *Control) HandOffAll(ctx context.Context) (moved, failed int) {
	ctx, cancel := context.WithTimeout(ctx, HandOffTimeout)
	defer cancel()
	for {
		m, f := c.handOff(ctx, false)
		moved += m
		if m == 0 || ctx.Err() != nil {
			return moved, failed + f
		}
	}
}
