package control

import (
	"slices"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/ring"
)

// Partition is one partition as the failover planner sees it: the
// registry's entry and this node's replica.
type Partition struct {
	Part   int
	Leader uint64 // the registry's leader; 0: none yet
	Epoch  uint64 // the registry's epoch
	Cohort []uint64
	// Leading: this node's replica leads (at any epoch).
	Leading bool
	// Handoff: a handoff of this node's own is running for the partition
	// (a takeover asked for, or a start, between its CAS and leading).
	Handoff bool
	// Promised and PromisedTo: the highest epoch this replica promised,
	// and to whom.
	Promised, PromisedTo uint64
	// Abandoned is the highest epoch PromisedTo said it gave up its
	// handoff at (OpAbandoned; 0: it said nothing).
	Abandoned uint64
	// Running: a takeover by this node's failover is already running.
	Running bool
}

// FailoverInput is one snapshot for PlanFailover.
type FailoverInput struct {
	Self       uint64
	Partitions []Partition
	// States is gossip's view, with Self alive.
	States map[uint64]member.State
	// AbsentSince says since when each leader gossip never heard of has
	// been seen absent (carried from the previous plan).
	AbsentSince map[uint64]time.Time
	// PromisedSince says since when each partition the registry names
	// this node leader of has stood promised away: not leading, its
	// replica promised a newer epoch than the registry's to another node
	// (carried from the previous plan).
	PromisedSince map[int]time.Time
	Now           time.Time
	// DeadGrace is how long a leader gossip never heard of (this node
	// restarted after it died) stays unknown before it counts as dead.
	DeadGrace time.Duration
	// PromiseGrace is how long a partition may stand promised away before
	// this node takes it back (Config.PromiseGrace).
	PromiseGrace time.Duration
}

// TakeoverWhy is why PlanFailover plans a takeover.
type TakeoverWhy int

// Why a takeover is planned.
const (
	// TakeoverDead: the leader is dead (or unknown past DeadGrace) and
	// this node is its successor.
	TakeoverDead TakeoverWhy = iota + 1
	// TakeoverNamed: the registry names this node, which does not lead
	// (a restart, or a handoff of its own that did not finish).
	TakeoverNamed
	// TakeoverAbandoned: the registry names this node, which promised a
	// newer epoch to another candidate whose handoff has not finished
	// within PromiseGrace: that handoff was abandoned.
	TakeoverAbandoned
)

// Takeover is a partition this node should take over from Old.
type Takeover struct {
	Part   int
	Old    uint64
	Cohort []uint64
	Why    TakeoverWhy
}

// FailoverPlan is what PlanFailover returns: the takeovers to start, and
// the state the next plan is given back.
type FailoverPlan struct {
	Takeovers []Takeover
	// AbsentSince and PromisedSince are the next FailoverInput's.
	AbsentSince   map[uint64]time.Time
	PromisedSince map[int]time.Time
}

// PlanFailover returns the partitions this node should lead now. A
// partition is taken over
//
//   - when the registry names this node leader and it does not lead (a
//     restart, or a handoff that did not finish here), unless it
//     promised a newer epoch to another node, which is then taking over;
//   - when that promise has stood for PromiseGrace and the registry
//     still names this node, or at once when the candidate said it gave
//     up at or above the epoch promised (Abandoned): the other node's
//     handoff was abandoned (it crashed, was cut off or gave up after
//     the promise stopped this replica leading). Nobody else would take over, since this node is
//     alive, and the partition would stay without a leader for good. The
//     takeover is an ordinary handoff, above the epoch promised: the
//     promise keeps this replica from granting until one wins, and the
//     epochs keep two leaders apart, should the other node finish after
//     all;
//   - when its leader is dead (or unknown past DeadGrace) and this node
//     is the leader's successor.
//
// Never when this node sees less than a majority of the cohort alive:
// then it is the one cut off, a handoff cannot win, and one still
// retrying when the network heals would take the partition from the
// leader the others chose meanwhile.
func PlanFailover(in FailoverInput) FailoverPlan {
	plan := FailoverPlan{
		AbsentSince:   make(map[uint64]time.Time, len(in.AbsentSince)),
		PromisedSince: make(map[int]time.Time, len(in.PromisedSince)),
	}
	for id, since := range in.AbsentSince {
		if _, known := in.States[id]; !known {
			plan.AbsentSince[id] = since
		}
	}
	for _, p := range in.Partitions {
		if p.Leader == 0 || !slices.Contains(p.Cohort, in.Self) {
			continue
		}
		why := TakeoverDead
		if p.Leader == in.Self {
			if p.Leading || p.Handoff {
				continue
			}
			why = TakeoverNamed
			if p.Promised > p.Epoch && p.PromisedTo != in.Self {
				// Only an unbroken stretch promised away counts: the
				// entry is dropped as soon as the partition is led, or
				// promised to this node's own handoff.
				since, ok := in.PromisedSince[p.Part]
				if !ok {
					since = in.Now
				}
				plan.PromisedSince[p.Part] = since
				if in.Now.Sub(since) < in.PromiseGrace && p.Abandoned < p.Promised {
					continue
				}
				why = TakeoverAbandoned
			}
		} else {
			st, known := in.States[p.Leader]
			if !known {
				since, ok := plan.AbsentSince[p.Leader]
				if !ok {
					plan.AbsentSince[p.Leader] = in.Now
					continue
				}
				if in.Now.Sub(since) < in.DeadGrace {
					continue
				}
			} else if st == member.Alive || st == member.Suspect {
				continue
			}
			if Successor(p.Cohort, p.Leader, in.States, in.Self) != in.Self {
				continue
			}
		}
		if !LiveMajority(p.Cohort, in.States) || p.Running {
			continue
		}
		plan.Takeovers = append(plan.Takeovers, Takeover{Part: p.Part, Old: p.Leader, Cohort: slices.Clone(p.Cohort), Why: why})
	}
	return plan
}

// LiveMajority reports whether gossip holds a majority of cohort alive or
// suspect (not yet dead); states counts this node alive. An empty cohort
// (no placement yet) has nobody to be cut off from.
func LiveMajority(cohort []uint64, states map[uint64]member.State) bool {
	live := 0
	for _, id := range cohort {
		if st := states[id]; st == member.Alive || st == member.Suspect {
			live++
		}
	}
	return len(cohort) == 0 || live >= ring.Majority(len(cohort))
}

// Successor is the first live member of cohort other than the old leader
// (self counts as live), or 0.
func Successor(cohort []uint64, old uint64, states map[uint64]member.State, self uint64) uint64 {
	for _, id := range cohort {
		if id == old && id != self {
			continue
		}
		if id == self || states[id] == member.Alive {
			return id
		}
	}
	return 0
}
