package raftgroup

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of VoterPolicy.
const (
	// DefaultMaxVoters is docs/design.md's cap: "up to 5 voters (the rest are
	// learners)". Five voters survive two failures; more only slow every
	// commit down.
	DefaultMaxVoters = 5
	// DefaultDeadGrace is how long a voter may be unreachable before it is
	// replaced: long enough to ride out a restart or a short partition
	// without churning the configuration.
	DefaultDeadGrace = 30 * time.Second
)

// ConfKind names one membership change of the raft group.
type ConfKind uint8

// The membership changes, as Group's methods of the same names do them.
const (
	// ConfAddLearner adds a non-voting member (Group.AddLearner).
	ConfAddLearner ConfKind = iota + 1
	// ConfPromote makes a learner a voter (Group.Promote).
	ConfPromote
	// ConfDemote makes a voter a learner (Group.Demote).
	ConfDemote
	// ConfRemove removes a voter or learner (Group.Remove).
	ConfRemove
)

func (k ConfKind) String() string {
	switch k {
	case ConfAddLearner:
		return "add-learner"
	case ConfPromote:
		return "promote"
	case ConfDemote:
		return "demote"
	case ConfRemove:
		return "remove"
	}
	return fmt.Sprintf("conf-kind(%d)", uint8(k))
}

// ConfStep is one membership change for one node.
type ConfStep struct {
	Kind ConfKind
	ID   uint64
}

func (s ConfStep) String() string { return fmt.Sprintf("%v %d", s.Kind, s.ID) }

// VoterPolicy is the target shape of the group for PlanVoters. Zero
// fields take their defaults.
type VoterPolicy struct {
	// MaxVoters caps the voters; default DefaultMaxVoters. The group keeps
	// an odd number of voters, so an even cap acts as the odd number below
	// it (4 allows 3).
	MaxVoters int
	// DeadGrace is how long a voter may be dead before PlanVoters replaces
	// it; default DefaultDeadGrace.
	DeadGrace time.Duration
}

func (p VoterPolicy) withDefaults() VoterPolicy {
	if p.MaxVoters <= 0 {
		p.MaxVoters = DefaultMaxVoters
	}
	if p.DeadGrace <= 0 {
		p.DeadGrace = DefaultDeadGrace
	}
	return p
}

// PlanVoters says which conf changes move the group toward the target
// shape. It is pure: the caller (the metadata leader's node) supplies the
// configuration (Group.Config), who is alive and since when the others
// are dead, and the time; it applies the steps in order, each waiting
// until applied (Group.ApplyConfStep), and plans again, since every step
// changes what the next should be.
//
// The target is the largest odd number of voters that is at most
// MaxVoters and at most the number of healthy members (live voters and
// learners, plus voters dead for no longer than DeadGrace, which are
// expected back). An odd count because an even one tolerates no more
// failures than the odd one below it while needing one more vote per
// commit. So two nodes keep one voter and a learner: two voters would
// need both alive, halving availability.
//
// The steps, most urgent first:
//
//  1. at most one voter change, because raft applies one conf change at
//     a time and each moves the quorum the next must be judged against:
//     - promote the live learner with the lowest id while the voters
//     not dead past grace are fewer than the target (growth, and the
//     replacement of a dead voter: its successor comes first);
//     - otherwise demote the dead voter (past grace) with the lowest id
//     while there are more voters than the target, if demoting every
//     dead voter leaves an odd count (or one still above MaxVoters):
//     3 voters with one dead and no learner stay as they are, since 2
//     voters would tolerate no more failures and need both alive;
//     - otherwise, with no dead voter left and more voters than the
//     target (the cap was lowered, or growth stopped at an even count),
//     demote a voter that is down within grace, else the live voter
//     with the highest id;
//  2. an AddLearner for each live node that is not a member, by id.
//
// No step is planned while fewer than a majority of the voters are
// alive: no conf change could commit. A voter change is planned only if
// a majority of the new voters is alive too. Dead voters are demoted, not
// removed: removal is final (a removed id must never come back, raft doc
// "An ID represents a unique node in a cluster for all time"), so it is
// an operator's decision; a demoted node that returns is promoted again.
// For the same reason PlanVoters never removes learners, and the caller
// must not report a removed node as alive.
//
// A node absent from alive is not alive. A dead node absent from
// deadSince is taken to have just died (within grace). The caller should
// report a learner alive only once it caught up with the log, or its
// promotion may stall commits until it has.
func PlanVoters(voters, learners []uint64, alive map[uint64]bool, deadSince map[uint64]time.Time, now time.Time, p VoterPolicy) []ConfStep {
	p = p.withDefaults()
	voters, learners = sortedIDs(voters), sortedIDs(learners)
	var live, grace, dead, liveLearners []uint64
	for _, id := range voters {
		switch {
		case alive[id]:
			live = append(live, id)
		case deadPastGrace(id, deadSince, now, p.DeadGrace):
			dead = append(dead, id)
		default:
			grace = append(grace, id)
		}
	}
	if !liveMajority(len(live), len(voters)) {
		return nil
	}
	for _, id := range learners {
		if alive[id] {
			liveLearners = append(liveLearners, id)
		}
	}
	keep := len(live) + len(grace)
	maxVoters := oddFloor(p.MaxVoters)
	target := oddFloor(min(maxVoters, keep+len(liveLearners)))
	rest := len(voters) - len(dead) // voters once every dead one is demoted

	var steps []ConfStep
	switch {
	case keep < target && len(liveLearners) > 0:
		steps = append(steps, ConfStep{ConfPromote, liveLearners[0]})
	case len(dead) > 0 && len(voters) > target && (rest%2 == 1 || rest > maxVoters) &&
		liveMajority(len(live), len(voters)-1):
		steps = append(steps, ConfStep{ConfDemote, dead[0]})
	case len(dead) == 0 && len(voters) > target:
		// Demote a voter that is down (within grace) before a live one:
		// the voters left are then more likely to form a quorum.
		if len(grace) > 0 && liveMajority(len(live), len(voters)-1) {
			steps = append(steps, ConfStep{ConfDemote, grace[len(grace)-1]})
		} else if len(grace) == 0 && liveMajority(len(live)-1, len(voters)-1) {
			steps = append(steps, ConfStep{ConfDemote, live[len(live)-1]})
		}
	}
	members := make(map[uint64]bool, len(voters)+len(learners))
	for _, id := range voters {
		members[id] = true
	}
	for _, id := range learners {
		members[id] = true
	}
	var joiners []uint64
	for id, ok := range alive {
		if ok && id != 0 && !members[id] {
			joiners = append(joiners, id)
		}
	}
	slices.Sort(joiners)
	for _, id := range joiners {
		steps = append(steps, ConfStep{ConfAddLearner, id})
	}
	return steps
}

func deadPastGrace(id uint64, deadSince map[uint64]time.Time, now time.Time, grace time.Duration) bool {
	since, ok := deadSince[id]
	return ok && now.Sub(since) > grace
}

// liveMajority: a config of n voters of which live are alive can commit.
func liveMajority(live, n int) bool { return n > 0 && live > n/2 }

// oddFloor is the largest odd number not above n, and at least 1.
func oddFloor(n int) int {
	if n <= 1 {
		return 1
	}
	if n%2 == 0 {
		return n - 1
	}
	return n
}

// sortedIDs is a sorted copy of ids without duplicates.
func sortedIDs(ids []uint64) []uint64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
