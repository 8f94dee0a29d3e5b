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
	Now         time.Time
	// DeadGrace is how long a leader gossip never heard of (this node
	// restarted after it died) stays unknown before it counts as dead.
	DeadGrace time.Duration
}

// Takeover is a partition this node should take over from Old.
type Takeover struct {
	Part   int
	Old    uint64
	Cohort []uint64
}

// PlanFailover returns the partitions this node should lead now, and the
// absent-since map for the next plan. A partition is taken over when the
// registry names this node leader and it does not lead (a restart, or a
// handoff that did not finish here), unless it promised a newer epoch to
// another node, which is then taking over; or when its leader is dead (or
// unknown past DeadGrace) and this node is the leader's successor. Never
// when this node sees less than a majority of the cohort alive: then it
// is the one cut off, a handoff cannot win, and one still retrying when
// the network heals would take the partition from the leader the others
// chose meanwhile.
func PlanFailover(in FailoverInput) ([]Takeover, map[uint64]time.Time) {
	absent := make(map[uint64]time.Time, len(in.AbsentSince))
	for id, since := range in.AbsentSince {
		if _, known := in.States[id]; !known {
			absent[id] = since
		}
	}
	var out []Takeover
	for _, p := range in.Partitions {
		if p.Leader == 0 || !slices.Contains(p.Cohort, in.Self) {
			continue
		}
		if p.Leader == in.Self {
			if p.Leading || p.Handoff {
				continue
			}
			if p.Promised > p.Epoch && p.PromisedTo != in.Self {
				continue
			}
		} else {
			st, known := in.States[p.Leader]
			if !known {
				since, ok := absent[p.Leader]
				if !ok {
					absent[p.Leader] = in.Now
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
		out = append(out, Takeover{Part: p.Part, Old: p.Leader, Cohort: slices.Clone(p.Cohort)})
	}
	return out, absent
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
