package control

import (
	"slices"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/ring"
)

// Placement (docs/design.md, Topology): the metadata leader compares every
// partition's cohort with ring's cohort over the live members, once
// membership has been quiet for PlacementSettle, and moves the partitions
// that differ, a few at a time (PlanPlacement). A move is two-phase: the
// current leader first takes the union of the old and new cohort (new
// members then receive every new write), each new member copies the
// partition from the leader (a resumable paged transfer), and then the
// new cohort's first member takes over with the new cohort. Members that
// leave the cohort keep their data (zombies) until a later release.

// Placed is one partition's registry entry as the placement planner sees
// it.
type Placed struct {
	Leader uint64 // 0: none yet
	Cohort []uint64
}

// PlacementInput is one snapshot for PlanPlacement.
type PlacementInput struct {
	// Members are the registry's members; States is gossip's view of
	// them, with this node alive.
	Members []uint64
	States  map[uint64]member.State
	// Retiring are members being decommissioned: alive, but no cohort
	// is to name them.
	Retiring map[uint64]bool
	// Partitions are the registry's entries, indexed by partition.
	Partitions []Placed
	Replicas   int
	// Moving are the partitions whose move is running; at most MaxMoves
	// move at once.
	Moving   map[int]bool
	MaxMoves int
	// LastAlive and LastChange are the live members of the previous plan
	// and since when they have been so (carried from plan to plan).
	LastAlive  []uint64
	LastChange time.Time
	Now        time.Time
	// Settle is how long the live members must stay the same first.
	Settle time.Duration
}

// Move changes a partition's cohort From (led by Leader) To; To[0] leads
// it afterwards.
type Move struct {
	Part     int
	Leader   uint64
	From, To []uint64
}

// PlacementPlan is PlanPlacement's answer: the moves to start, and the
// live members and since when, for the next plan.
type PlacementPlan struct {
	Moves      []Move
	Alive      []uint64
	LastChange time.Time
}

// PlanPlacement returns the moves that bring the partitions to ring's
// cohorts over the live members that are not retiring. None while membership is unsettled: a
// member suspect, the live set changed since the last plan or within
// Settle, or nobody alive. A partition whose leader is not alive is
// failover's first. A partition is placed when its cohort is ring's (as a
// set) and ring's first member leads it: moves end that way, and a
// partition that failed over goes back to it once it is up again, so
// leadership stays spread.
func PlanPlacement(in PlacementInput) PlacementPlan {
	var alive []uint64
	unsettled := false
	for _, id := range in.Members {
		switch in.States[id] {
		case member.Alive:
			alive = append(alive, id)
		case member.Suspect:
			unsettled = true
		}
	}
	slices.Sort(alive)
	if !slices.Equal(alive, in.LastAlive) {
		return PlacementPlan{Alive: alive, LastChange: in.Now}
	}
	out := PlacementPlan{Alive: in.LastAlive, LastChange: in.LastChange}
	if unsettled || in.Now.Sub(in.LastChange) < in.Settle || len(alive) == 0 {
		return out
	}
	// A retiring member still leads what it leads until its moves hand
	// it over, but no new cohort names it.
	candidates := slices.DeleteFunc(slices.Clone(alive), func(id uint64) bool { return in.Retiring[id] })
	if len(candidates) == 0 {
		return out
	}
	moving := len(in.Moving)
	for p, pi := range in.Partitions {
		if pi.Leader == 0 || in.States[pi.Leader] != member.Alive {
			continue // failover first
		}
		want := ring.Cohort(p, candidates, in.Replicas)
		if sameSet(want, pi.Cohort) && pi.Leader == want[0] {
			continue
		}
		if in.Moving[p] || moving >= in.MaxMoves {
			continue
		}
		moving++
		out.Moves = append(out.Moves, Move{Part: p, Leader: pi.Leader, From: slices.Clone(pi.Cohort), To: want})
	}
	return out
}

// sameSet reports whether a and b hold the same ids (each once).
func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
