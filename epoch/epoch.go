// Package epoch owns partition leadership: the cohort-vote handoff that
// makes a node the leader of a partition for a new epoch (DESIGN.md,
// "Partition leaders"), and the claim-set values it moves.
//
// The handoff, run by the candidate:
//
//  1. read the partition's (epoch, cohort) from the metadata group;
//  2. pick epoch' = epoch + 1;
//  3. ask old ∪ new cohort to promise epoch' (a node promises once per
//     epoch, persists it, and then refuses claim writes of lower epochs);
//  4. need promises from a majority of the old cohort, and
//  5. from a majority of the new cohort;
//  6. union the claim sets those promises returned (a majority of the old
//     cohort is among them);
//  7. install that union on a majority of the new cohort;
//  8. compare-and-set (epoch', cohort', leader) in the metadata group.
//
// Steps 3-5 freeze the claims of every lower epoch; 6-7 carry them into the
// new cohort, so by induction each leader's claim set is a superset of the
// previous one's. A candidate that loses (a refusal, no majority, a CAS
// conflict) backs off for a random time and retries from step 1.
//
// The package reaches other nodes and the metadata group only through the
// Voter and Registry interfaces; it imports nothing internal.
package epoch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Claim is one claim as the handoff moves it: task id, claim index, lease
// window and the epoch that granted it.
type Claim struct {
	Task  [20]byte `cbor:"1,keyasint"`
	Index uint32   `cbor:"2,keyasint"`
	Start int64    `cbor:"3,keyasint"`
	End   int64    `cbor:"4,keyasint"`
	Epoch uint64   `cbor:"5,keyasint,omitempty"`
}

// Union merges claim sets: one entry per (task, index), with the latest
// end, sorted by task then index.
func Union(sets ...[]Claim) []Claim {
	var all []Claim
	for _, s := range sets {
		all = append(all, s...)
	}
	slices.SortFunc(all, func(a, b Claim) int {
		return cmp.Or(bytes.Compare(a.Task[:], b.Task[:]), cmp.Compare(a.Index, b.Index))
	})
	out := all[:0]
	for _, c := range all {
		if n := len(out); n > 0 && out[n-1].Task == c.Task && out[n-1].Index == c.Index {
			out[n-1].End = max(out[n-1].End, c.End)
			out[n-1].Start = min(out[n-1].Start, c.Start)
			out[n-1].Epoch = max(out[n-1].Epoch, c.Epoch)
			continue
		}
		out = append(out, c)
	}
	return out
}

// Errors of the handoff.
var (
	// ErrRefused: a voter promised the epoch (or a higher one) to another
	// candidate.
	ErrRefused = errors.New("epoch: promise refused")
	// ErrNoQuorum: not enough of the old or new cohort answered.
	ErrNoQuorum = errors.New("epoch: no quorum")
)

// Voter reaches one cohort member's replica of a partition. Implementations
// must be safe for concurrent calls.
type Voter interface {
	// Promise asks node to promise epoch for part to candidate: it persists
	// the promise, refuses claim writes from lower epochs from then on, and
	// returns its claim set for part. A node that promised this epoch to
	// another candidate, or a higher epoch, returns an error wrapping
	// ErrRefused. Promising the same (epoch, candidate) twice is a no-op.
	Promise(ctx context.Context, node uint64, part int, epoch, candidate uint64) ([]Claim, error)
	// Install merges cs into node's replica of part (step 7).
	Install(ctx context.Context, node uint64, part int, epoch uint64, cs []Claim) error
}

// Registry is the metadata group's view of partitions.
type Registry interface {
	// Current returns part's epoch, cohort and leader as last applied.
	Current(part int) (epoch uint64, cohort []uint64, leader uint64, err error)
	// CAS sets part to (next, cohort, leader) iff its epoch is still prev.
	CAS(ctx context.Context, part int, prev, next uint64, cohort []uint64, leader uint64) error
}

// Handoff describes one attempt by Self to lead Part with cohort Cohort.
type Handoff struct {
	Part   int
	Self   uint64
	Cohort []uint64
}

// Result is a won handoff.
type Result struct {
	Epoch  uint64
	Claims []Claim // the claim set installed on the new cohort
	// Old is the cohort of the epoch this one replaced, as read in step 1:
	// a majority of it acknowledged every earlier write.
	Old []uint64
}

// Run makes one attempt at the handoff. It returns the new epoch, or an
// error after which the caller backs off (Backoff) and calls Run again.
func Run(ctx context.Context, h Handoff, v Voter, r Registry) (Result, error) {
	if !slices.Contains(h.Cohort, h.Self) {
		return Result{}, fmt.Errorf("epoch: part %d: candidate %d not in cohort %v", h.Part, h.Self, h.Cohort)
	}
	prev, oldCohort, _, err := r.Current(h.Part)
	if err != nil {
		return Result{}, fmt.Errorf("epoch: part %d: read current: %w", h.Part, err)
	}
	next := prev + 1

	voters := unionNodes(oldCohort, h.Cohort)
	type answer struct {
		node   uint64
		claims []Claim
		err    error
	}
	// Voters answer on a buffered channel, so stragglers (a dead node
	// whose call waits out its timeout) never block the handoff: it goes
	// on as soon as both majorities promised. Their calls end on their
	// own; cancel tells them to stop early.
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(voters))
	for _, n := range voters {
		go func() {
			cs, err := v.Promise(vctx, n, h.Part, next, h.Self)
			answers <- answer{n, cs, err}
		}()
	}
	var sets [][]Claim
	promised := map[uint64]bool{}
	var firstErr error
	for range voters {
		a := <-answers
		if a.err != nil {
			firstErr = cmp.Or(firstErr, a.err)
		} else {
			promised[a.node] = true
			sets = append(sets, a.claims)
		}
		if hasMajority(oldCohort, promised) && hasMajority(h.Cohort, promised) {
			break
		}
	}
	if !hasMajority(oldCohort, promised) || !hasMajority(h.Cohort, promised) {
		return Result{}, fmt.Errorf("%w: part %d epoch %d: promises from %d of old %v and new %v: %v",
			ErrNoQuorum, h.Part, next, len(promised), oldCohort, h.Cohort, firstErr)
	}
	claims := Union(sets...)

	// Installs run on ctx, not vctx: a member still installing when the
	// majority is reached finishes on its own.
	installed := make(chan error, len(h.Cohort))
	for _, n := range h.Cohort {
		go func() { installed <- v.Install(ctx, n, h.Part, next, claims) }()
	}
	acks := 0
	firstErr = nil
	var grace <-chan time.Time
wait:
	for answered := 0; answered < len(h.Cohort); answered++ {
		select {
		case err := <-installed:
			if err == nil {
				acks++
			} else {
				firstErr = cmp.Or(firstErr, err)
			}
		case <-grace:
			break wait
		}
		if acks >= len(h.Cohort)/2+1 && grace == nil {
			t := time.NewTimer(installGrace)
			defer t.Stop()
			grace = t.C
		}
	}
	if acks < len(h.Cohort)/2+1 {
		return Result{}, fmt.Errorf("%w: part %d epoch %d: claim set installed on %d of %v: %v",
			ErrNoQuorum, h.Part, next, acks, h.Cohort, firstErr)
	}
	if err := r.CAS(ctx, h.Part, prev, next, h.Cohort, h.Self); err != nil {
		return Result{}, fmt.Errorf("epoch: part %d: cas %d->%d: %w", h.Part, prev, next, err)
	}
	return Result{Epoch: next, Claims: claims, Old: slices.Clone(oldCohort)}, nil
}

// installGrace is how long the handoff waits, once a majority installed
// the claim set, for the other members: healthy ones then all hold it,
// while a dead member's call cannot hold up the handoff.
const installGrace = 200 * time.Millisecond

// hasMajority reports whether more than half of cohort promised. An empty
// cohort (a partition never led) needs nobody.
func hasMajority(cohort []uint64, promised map[uint64]bool) bool {
	n := 0
	for _, c := range cohort {
		if promised[c] {
			n++
		}
	}
	return n >= len(cohort)/2+1 || len(cohort) == 0
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
