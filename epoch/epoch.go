// Package epoch owns partition leadership: the cohort-vote handoff that
// makes a node the leader of a partition for a new epoch (docs/design.md,
// "Partition leaders").
//
// The handoff, run by the candidate:
//
//  1. read the partition's (epoch, cohort, sealed) from the metadata
//     group: sealed is the set of members the handoff to that epoch left
//     holding exactly what it carried (step 6);
//  2. pick epoch' above that epoch and above every epoch a voter refused
//     an earlier attempt with;
//  3. ask old ∪ new cohort to promise epoch' (a node promises once per
//     epoch, persists it, and then refuses writes of lower epochs);
//  4. need promises from a majority of the old cohort, and
//  5. from a majority of the new cohort;
//  6. carry: bring into the candidate's replica what the old cohort's
//     promisers hold (writes of the sealed epoch from any of them, older
//     ones only from sealed members), then make a majority of the new
//     cohort hold exactly that (Carrier); those members are the new
//     sealed set;
//  7. compare-and-set (epoch', cohort', leader, sealed') in the metadata
//     group.
//
// Steps 3-5 freeze the writes of every lower epoch: a majority of the
// old cohort refuses them from then on, so a write of a lower epoch
// acknowledged before is on one of the promisers, and one made after
// (by a leader that was paused or cut off) is acknowledged nowhere. Step
// 6 carries the first kind into a majority of the new cohort before the
// CAS makes the new epoch current, so that the next handoff, whichever
// majority it asks, finds them; and it leaves the second kind out: those
// are the orphans of package partition, which no replica may take as
// truth. A candidate that loses (a refusal, no majority, a CAS conflict)
// backs off for a random time and retries from step 1, above the epochs
// it was refused with: a handoff always makes progress once majorities
// of the old and new cohorts can talk, and an abandoned attempt (a
// promise given, no CAS) never blocks a later one.
//
// The package reaches other nodes and the metadata group only through the
// Voter, Carrier and Registry interfaces; it imports nothing internal.
package epoch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Errors of the handoff.
var (
	// ErrRefused: a voter promised the epoch (or a higher one) to another
	// candidate. Refusals are *RefusedError.
	ErrRefused = errors.New("epoch: promise refused")
	// ErrNoQuorum: not enough of the old or new cohort answered.
	ErrNoQuorum = errors.New("epoch: no quorum")
)

// RefusedError is a voter's refusal to promise: it promised Promised to
// candidate To (0: not known), and a candidate must ask above it.
type RefusedError struct {
	Part     int
	Promised uint64
	To       uint64
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: partition %d promised epoch %d to node %d", ErrRefused, e.Part, e.Promised, e.To)
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Voter reaches one cohort member's replica of a partition. Implementations
// must be safe for concurrent calls.
type Voter interface {
	// Promise asks node to promise epoch for part to candidate: it
	// persists the promise and refuses writes of lower epochs from then
	// on. A node that promised this epoch to another candidate, or a
	// higher epoch, returns a *RefusedError. Promising the same (epoch,
	// candidate) twice is a no-op.
	Promise(ctx context.Context, node uint64, part int, epoch, candidate uint64) error
}

// Carry is step 6 of a handoff, as the Carrier gets it.
type Carry struct {
	Part int
	// Epoch is the epoch being won; Prev the registry's current one,
	// whose writes the carry seals.
	Epoch, Prev uint64
	// Old is the cohort of Prev; Promised its members that promised
	// Epoch (a majority of it): the carry reads from them, and only
	// them, since they refuse Prev's leader from now on.
	Old, Promised []uint64
	// Sealed is the registry's sealed set of Prev: the members of Old
	// that hold exactly what the handoff to Prev carried, besides Prev's
	// own writes. Empty for a partition never led, or led before sealed
	// sets were kept (then every promiser is trusted).
	Sealed []uint64
	// Cohort is the new cohort; Self the candidate.
	Cohort []uint64
	Self   uint64
}

// Carrier moves a partition's data for a handoff.
type Carrier interface {
	// Carry brings into the candidate's replica what c.Promised hold of
	// the partition (writes stamped c.Prev from any of them, older ones
	// from the members of c.Sealed among them; all of it when c.Sealed
	// is empty), then makes members of c.Cohort hold exactly the
	// candidate's replica, and returns those members, the candidate
	// included if it is one: at least a majority of c.Cohort, or an
	// error.
	Carry(ctx context.Context, c Carry) (sealed []uint64, err error)
}

// Current is a partition as the registry has it.
type Current struct {
	Epoch  uint64
	Cohort []uint64
	Leader uint64
	// Sealed are the members the handoff to Epoch left holding exactly
	// what it carried (see Carry.Sealed).
	Sealed []uint64
}

// Registry is the metadata group's view of partitions.
type Registry interface {
	// Current returns part as last applied.
	Current(part int) (Current, error)
	// CAS sets part to (next, cohort, leader, sealed) iff its epoch is
	// still prev.
	CAS(ctx context.Context, part int, prev, next uint64, cohort []uint64, leader uint64, sealed []uint64) error
}

// Handoff describes one attempt by Self to lead Part with cohort Cohort.
type Handoff struct {
	Part   int
	Self   uint64
	Cohort []uint64
	// Above is the highest epoch voters refused earlier attempts with
	// (RefusedError.Promised): this attempt asks for an epoch above it.
	Above uint64
}

// Result is a won handoff.
type Result struct {
	Epoch uint64
	// Old is the cohort of the epoch this one replaced, as read in step 1.
	Old []uint64
	// Sealed are the members of the new cohort that hold what the handoff
	// carried.
	Sealed []uint64
}

// Run makes one attempt at the handoff. It returns the new epoch, or an
// error after which the caller backs off (Backoff) and calls Run again;
// after a refusal, with h.Above raised to the refusal's epoch (Next does
// both). With an error, Result.Epoch is the epoch the attempt asked
// promises of (0: it asked none): voters may hold promises of it, which
// keep them from serving a lower epoch's leader.
func Run(ctx context.Context, h Handoff, v Voter, c Carrier, r Registry) (Result, error) {
	if !slices.Contains(h.Cohort, h.Self) {
		return Result{}, fmt.Errorf("epoch: part %d: candidate %d not in cohort %v", h.Part, h.Self, h.Cohort)
	}
	cur, err := r.Current(h.Part)
	if err != nil {
		return Result{}, fmt.Errorf("epoch: part %d: read current: %w", h.Part, err)
	}
	next := max(cur.Epoch, h.Above) + 1
	asked := Result{Epoch: next}
	promised, err := promise(ctx, h, v, cur.Cohort, next)
	if err != nil {
		return asked, err
	}
	var oldPromised []uint64
	for _, n := range cur.Cohort {
		if promised[n] {
			oldPromised = append(oldPromised, n)
		}
	}
	sealed, err := c.Carry(ctx, Carry{
		Part: h.Part, Epoch: next, Prev: cur.Epoch,
		Old: slices.Clone(cur.Cohort), Promised: oldPromised, Sealed: slices.Clone(cur.Sealed),
		Cohort: slices.Clone(h.Cohort), Self: h.Self,
	})
	if err != nil {
		return asked, fmt.Errorf("epoch: part %d epoch %d: carry: %w", h.Part, next, err)
	}
	if !hasMajority(h.Cohort, setOf(sealed)) {
		return asked, fmt.Errorf("%w: part %d epoch %d: carried to %v of %v", ErrNoQuorum, h.Part, next, sealed, h.Cohort)
	}
	if err := r.CAS(ctx, h.Part, cur.Epoch, next, h.Cohort, h.Self, sealed); err != nil {
		return asked, fmt.Errorf("epoch: part %d: cas %d->%d: %w", h.Part, cur.Epoch, next, err)
	}
	return Result{Epoch: next, Old: slices.Clone(cur.Cohort), Sealed: sealed}, nil
}

// promise runs steps 3-5: it asks old ∪ new to promise next and returns
// who did, once majorities of both have; else an error, a *RefusedError
// (the highest refusal) when a voter refused.
func promise(ctx context.Context, h Handoff, v Voter, old []uint64, next uint64) (map[uint64]bool, error) {
	voters := unionNodes(old, h.Cohort)
	type answer struct {
		node uint64
		err  error
	}
	// Voters answer on a buffered channel, so stragglers (a dead node
	// whose call waits out its timeout) never block the handoff: it goes
	// on as soon as both majorities promised. Their calls end on their
	// own; cancel tells them to stop early.
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(voters))
	for _, n := range voters {
		go func() { answers <- answer{n, v.Promise(vctx, n, h.Part, next, h.Self)} }()
	}
	promised := map[uint64]bool{}
	var firstErr error
	var refused *RefusedError
	for range voters {
		a := <-answers
		if a.err == nil {
			promised[a.node] = true
		} else {
			firstErr = cmp.Or(firstErr, a.err)
			var re *RefusedError
			if errors.As(a.err, &re) && (refused == nil || re.Promised > refused.Promised) {
				refused = re
			}
		}
		if hasMajority(old, promised) && hasMajority(h.Cohort, promised) {
			return promised, nil
		}
	}
	if refused != nil {
		return nil, fmt.Errorf("epoch: part %d epoch %d: promises from %d of old %v and new %v: %w",
			h.Part, next, len(promised), old, h.Cohort, refused)
	}
	return nil, fmt.Errorf("%w: part %d epoch %d: promises from %d of old %v and new %v: %v",
		ErrNoQuorum, h.Part, next, len(promised), old, h.Cohort, firstErr)
}

// Next returns the handoff to attempt after one that failed with err:
// above the epoch a voter refused it with, if one did.
func Next(h Handoff, err error) Handoff {
	var re *RefusedError
	if errors.As(err, &re) {
		h.Above = max(h.Above, re.Promised)
	}
	return h
}

// hasMajority reports whether more than half of cohort is in set. An
// empty cohort (a partition never led) needs nobody.
func hasMajority(cohort []uint64, set map[uint64]bool) bool {
	n := 0
	for _, c := range cohort {
		if set[c] {
			n++
		}
	}
	return n >= len(cohort)/2+1 || len(cohort) == 0
}

// HasMajority reports whether members holds a majority of cohort (any
// number of an empty cohort).
func HasMajority(cohort, members []uint64) bool { return hasMajority(cohort, setOf(members)) }

func setOf(ids []uint64) map[uint64]bool {
	s := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		s[id] = true
	}
	return s
}

func unionNodes(a, b []uint64) []uint64 {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// Backoff returns how long a candidate waits before attempt number attempt
// (from 1): a random time in [0, min(maxWait, base·2^(attempt-1))), so
// contending candidates spread out.
func Backoff(attempt int, base, maxWait time.Duration, rng *rand.Rand) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}
