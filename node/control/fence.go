package control

import (
	"time"

	"github.com/skuldd/skuldd/member"
)

// The fence (docs/design.md, Partition leaders): a leader that cannot reach a
// majority of its partition's cohort grants no claims. Gossip decides,
// the same verdict (dead) on which the other side of a network split
// takes the partition over: then the two sides agree about who may
// grant. A claim granted while cut off could never be acknowledged (it
// needs a majority), but its record would stay here and come back with
// anti-entropy after the split heals, costing its task an attempt nobody
// made. The fence keeps the partition's leadership and its heads
// (enqueues with a smaller w still succeed; the handoff of the other
// side, or the stale-epoch answer of a follower, ends the leadership); it
// only keeps its heads out of claims and summaries.
//
// The fence lifts fenceLiftSettle after the majority is back, so that a
// leader the other side replaced meanwhile learns so from the registry
// and steps down (stepDownSuperseded) before it grants a claim.

// FencePartition is one partition as the fence planner sees it.
type FencePartition struct {
	Part uint16
	// Leads: this node's replica leads the partition.
	Leads bool
	// Cohort is the registry's cohort (read only when Leads).
	Cohort []uint64
	// Fenced: the partition's heads are fenced now.
	Fenced bool
}

// FenceInput is one snapshot for PlanFence.
type FenceInput struct {
	Partitions []FencePartition
	// States is gossip's view, with this node alive.
	States map[uint64]member.State
	// BackSince says since when each fenced partition has had a majority
	// of its cohort back (carried from the previous plan).
	BackSince map[uint16]time.Time
	Now       time.Time
	// Settle is how long a majority must be back before the fence lifts.
	Settle time.Duration
}

// FenceWhy says why a FenceStep changes a partition's fence.
type FenceWhy int

const (
	// FenceCutOff: this node leads and sees less than a majority of the
	// cohort alive: fence (again; a fenced partition stays so).
	FenceCutOff FenceWhy = iota + 1
	// FenceBack: the majority has been back for Settle: lift.
	FenceBack
	// FenceNotLeading: this node no longer leads a fenced partition:
	// lift, there is nothing to grant from either way.
	FenceNotLeading
)

// FenceStep sets (On) or lifts a partition's fence.
type FenceStep struct {
	Part uint16
	On   bool
	Why  FenceWhy
}

// PlanFence returns the fence changes a snapshot calls for and the
// back-since map for the next plan.
func PlanFence(in FenceInput) ([]FenceStep, map[uint16]time.Time) {
	back := make(map[uint16]time.Time, len(in.BackSince))
	var out []FenceStep
	for _, p := range in.Partitions {
		switch {
		case p.Leads && !LiveMajority(p.Cohort, in.States):
			out = append(out, FenceStep{Part: p.Part, On: true, Why: FenceCutOff})
		case !p.Fenced:
		case !p.Leads:
			out = append(out, FenceStep{Part: p.Part, Why: FenceNotLeading})
		default:
			since, ok := in.BackSince[p.Part]
			if !ok {
				back[p.Part] = in.Now
				continue
			}
			if in.Now.Sub(since) < in.Settle {
				back[p.Part] = since
				continue
			}
			out = append(out, FenceStep{Part: p.Part, Why: FenceBack})
		}
	}
	return out, back
}
