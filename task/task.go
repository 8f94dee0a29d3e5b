package task

import (
	"cmp"
	"fmt"
	"slices"
)

// Spec is the immutable part of a task, fixed at enqueue.
type Spec struct {
	ID       ID     `cbor:"1,keyasint"`
	Queue    string `cbor:"2,keyasint"`
	Priority int32  `cbor:"3,keyasint,omitempty"`
	// Deps are the ids of tasks that must complete before this one is
	// ready; sorted and unique. Deps are older ids that existed at enqueue,
	// so dependency cycles cannot form.
	Deps []ID `cbor:"4,keyasint,omitempty"`
	// NotBefore is the Unix ms time before which the task is not ready.
	NotBefore   int64  `cbor:"5,keyasint,omitempty"`
	Group       string `cbor:"6,keyasint,omitempty"`
	Description string `cbor:"7,keyasint,omitempty"`
	// MaxAttempts is how many claims may end without completion (failed or
	// expired; snoozes do not count) before the task is dead.
	// INVARIANT: >= 1 once stored (the node fills in its default).
	MaxAttempts uint32 `cbor:"8,keyasint,omitempty"`
	// EnqueuedAt is the coordinator's Unix ms time at enqueue.
	EnqueuedAt int64 `cbor:"9,keyasint,omitempty"`
	// Data is the payload. The store keeps it apart from the rest of the
	// spec so that rebuilding indexes never reads payloads.
	Data []byte `cbor:"10,keyasint,omitempty"`
	// TimeLimit is how long, in ms, one claim of the task may run, from
	// its start, renewals included; 0: no limit. The leader grants and
	// renews no lease past Start+TimeLimit, so a claim that reaches it
	// ends there as a failed attempt (TimeLimited). The node fills in the
	// queue's default at enqueue.
	TimeLimit int64 `cbor:"11,keyasint,omitempty"`
	// Kind names what the task does, for routing to a handler (a Go
	// client's Kinds); Subtopic classifies it within its queue, for
	// listing and counting. Both are optional labels (ValidateLabel).
	Kind     string `cbor:"12,keyasint,omitempty"`
	Subtopic string `cbor:"13,keyasint,omitempty"`
	// Key makes the task unique in its queue: while a task of the queue
	// with the key is kept (and, with UniqueFor > 0, for UniqueFor ms
	// after its EnqueuedAt), an enqueue with the key yields that task
	// instead of a new one. The key fixes the partition (KeyPartition).
	Key       string `cbor:"14,keyasint,omitempty"`
	UniqueFor int64  `cbor:"15,keyasint,omitempty"`
}

// LeaseEnd is the end of a lease of ttl ms asked for at now by claim c
// (its Start is the claim's start) of a task with spec sp: now+ttl, at
// most the claim's time limit.
func (sp *Spec) LeaseEnd(c Claim, now, ttl int64) int64 {
	end := now + ttl
	if sp.TimeLimit > 0 {
		end = min(end, c.Start+sp.TimeLimit)
	}
	return end
}

// TimeLimited reports whether claim c of a task with spec sp ended (or
// ends) at its time limit: its lease reaches Start+TimeLimit. Unless
// completed or released before, such a claim is a failed attempt whose
// reason is the time limit.
func (sp *Spec) TimeLimited(c Claim) bool {
	return sp.TimeLimit > 0 && c.End >= c.Start+sp.TimeLimit
}

// Claim is one lease on a task. Its index is the claim id, a fencing token.
type Claim struct {
	Index uint32 `cbor:"1,keyasint"`
	// Start and End are Unix ms by the granting leader's clock. End only
	// grows (renew); merge takes the max.
	Start int64  `cbor:"2,keyasint"`
	End   int64  `cbor:"3,keyasint"`
	Epoch uint64 `cbor:"4,keyasint,omitempty"`
}

// Release ends a claim before its End: a fail (counts as an attempt) or a
// snooze (does not).
type Release struct {
	Claim  uint32 `cbor:"1,keyasint"`
	At     int64  `cbor:"2,keyasint"`
	Snooze bool   `cbor:"3,keyasint,omitempty"`
	// Until is the Unix ms time before which the task is not ready again.
	Until  int64  `cbor:"4,keyasint,omitempty"`
	Reason string `cbor:"5,keyasint,omitempty"`
	// NoRetry ends a failed task for good: it is dead at once, whatever
	// its attempts (a handler's SkipRetry), until a requeue.
	NoRetry bool `cbor:"6,keyasint,omitempty"`
}

// Completion records how a task ended: completed by claim Claim at
// sequence number Seq, or cancelled (Cancelled). Either end is terminal:
// no claim, renewal, update, fail or snooze is accepted after it, and
// every place that holds a task finished (indexes, garbage collection,
// orphan handling) treats the two alike. They differ for dependents: only
// a completion satisfies a dependency, so a task waiting on a cancelled
// one stays blocked.
//
// A cancel's Claim is the index the task's next claim would have had
// (State.NextClaim at the cancel): above every claim ever granted, so the
// cancel supersedes a live claim as a newer claim would, and its holder
// learns it from its next renewal (task.ErrCancelled).
type Completion struct {
	Claim     uint32 `cbor:"1,keyasint"`
	Seq       uint64 `cbor:"2,keyasint"`
	At        int64  `cbor:"3,keyasint"`
	Cancelled bool   `cbor:"4,keyasint,omitempty"`
	// Reason is the cancel's reason, as the caller gave it (trimmed).
	Reason string `cbor:"5,keyasint,omitempty"`
}

// Status returns Completed or Cancelled: the terminal state c records.
func (c *Completion) Status() Status {
	if c.Cancelled {
		return Cancelled
	}
	return Completed
}

// State is the mutable part of a task: a CRDT that any two replicas merge to
// the same value.
//
// INVARIANT: Claims is sorted by Index with no duplicates; Releases is
// sorted by Claim with no duplicates; DepsDone is sorted with no duplicates.
type State struct {
	Claims     []Claim     `cbor:"1,keyasint,omitempty"`
	Releases   []Release   `cbor:"2,keyasint,omitempty"`
	Completion *Completion `cbor:"3,keyasint,omitempty"`
	// DepsDone are the deps known to be completed.
	DepsDone []ID `cbor:"4,keyasint,omitempty"`
	// RequeueBase: claims with a lower index do not count as attempts. A
	// requeue of a dead task sets it to the number of claims; merge by max.
	RequeueBase uint32 `cbor:"5,keyasint,omitempty"`
	// Stamp is the epoch of the partition leader that last wrote this
	// state (0: no leader wrote it, an enqueue's): every write a leader
	// makes to a task's claims, releases, completion, deps done, requeue
	// base or updates stamps the state with the leader's epoch. A state
	// and the updates held with it belong to one leader's line of
	// writes; partition.Merge uses the stamp to tell a write that the
	// handoffs carried from one a superseded leader made after it lost
	// its epoch (package partition, "Epochs and orphans").
	Stamp uint64 `cbor:"6,keyasint,omitempty"`
}

// Status is a task's derived state.
type Status uint8

// The derived states. Their order is only for tables; it means nothing.
const (
	Ready Status = iota
	Claimed
	Delayed
	Blocked
	Completed
	Dead
	// Cancelled is terminal, as Completed is, but satisfies no dependency.
	Cancelled
	numStatus
)

// NumStatus is the number of distinct Status values.
const NumStatus = int(numStatus)

var statusNames = [...]string{"ready", "claimed", "delayed", "blocked", "completed", "dead", "cancelled"}

// String returns the lowercase name used on the wire and in ctl output.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Ended reports whether s is terminal: completed or cancelled.
func (s Status) Ended() bool { return s == Completed || s == Cancelled }

// The names a Delayed task's state takes by what delays it (StateName):
// its enqueue delay ("delayed"), a snooze, or a failure awaiting its
// retry.
const (
	StateSnoozed  = "snoozed"
	StateRetrying = "retrying"
)

// ParseStatus parses a state name: a status's, or StateSnoozed or
// StateRetrying, which are Delayed.
func ParseStatus(s string) (Status, error) {
	switch s {
	case StateSnoozed, StateRetrying:
		return Delayed, nil
	}
	for i, n := range statusNames {
		if n == s {
			return Status(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q (want one of ready, claimed, delayed, snoozed, retrying, blocked, completed, dead, cancelled)",
		ErrInvalid, truncate(s, 32))
}

// StateName is the name of the state of a task whose derived status is
// status: the status's name, except that a Delayed task is "snoozed"
// when a snooze sets its not-before time (NotBefore), "retrying" when a
// failure does, and "delayed" when its enqueue delay does (the earlier
// wins a tie).
func StateName(spec *Spec, s *State, status Status) string {
	if status != Delayed {
		return status.String()
	}
	nb, name := spec.NotBefore, status.String()
	for _, r := range s.Releases {
		if r.Claim < s.RequeueBase || r.Until <= nb {
			continue
		}
		nb, name = r.Until, StateRetrying
		if r.Snooze {
			name = StateSnoozed
		}
	}
	return name
}

// Equal reports whether s and o hold the same state (two replicas that
// agree).
func (s *State) Equal(o *State) bool {
	if (s.Completion == nil) != (o.Completion == nil) || s.Completion != nil && *s.Completion != *o.Completion {
		return false
	}
	return s.RequeueBase == o.RequeueBase && s.Stamp == o.Stamp && slices.Equal(s.Claims, o.Claims) &&
		slices.Equal(s.Releases, o.Releases) && slices.Equal(s.DepsDone, o.DepsDone)
}

// IsZero reports whether s is the zero state: a task no leader touched.
func (s *State) IsZero() bool {
	return len(s.Claims) == 0 && len(s.Releases) == 0 && s.Completion == nil && len(s.DepsDone) == 0 &&
		s.RequeueBase == 0 && s.Stamp == 0
}

// Clone returns a deep copy of s.
func (s *State) Clone() State {
	c := State{
		Claims:      slices.Clone(s.Claims),
		Releases:    slices.Clone(s.Releases),
		DepsDone:    slices.Clone(s.DepsDone),
		RequeueBase: s.RequeueBase,
		Stamp:       s.Stamp,
	}
	if s.Completion != nil {
		cp := *s.Completion
		c.Completion = &cp
	}
	return c
}

// Completed reports whether the task was completed (not cancelled): the
// end that satisfies the dependencies on it.
func (s *State) Completed() bool { return s.Completion != nil && !s.Completion.Cancelled }

// Latest returns the task's highest claim, if any.
func (s *State) Latest() (Claim, bool) {
	if len(s.Claims) == 0 {
		return Claim{}, false
	}
	return s.Claims[len(s.Claims)-1], true
}

// NextClaim returns the index the next claim of the task gets.
func (s *State) NextClaim() uint32 {
	if c, ok := s.Latest(); ok {
		return c.Index + 1
	}
	return 0
}

// ReleaseOf returns the release of claim idx, if it was ended early.
func (s *State) ReleaseOf(idx uint32) (Release, bool) {
	i, ok := slices.BinarySearchFunc(s.Releases, idx, func(r Release, k uint32) int { return cmp.Compare(r.Claim, k) })
	if !ok {
		return Release{}, false
	}
	return s.Releases[i], true
}

// Attempts counts claims since the last requeue that ended without
// completing and were not snoozed. Only claims that have ended count: the
// caller passes whether the latest claim is still live.
func (s *State) Attempts(latestLive bool) uint32 {
	var n uint32
	for i, c := range s.Claims {
		if c.Index < s.RequeueBase {
			continue
		}
		if latestLive && i == len(s.Claims)-1 {
			continue
		}
		if s.Completion != nil && s.Completion.Claim == c.Index {
			continue
		}
		if r, ok := s.ReleaseOf(c.Index); ok && r.Snooze {
			continue
		}
		n++
	}
	return n
}

// DepsPending returns how many of spec's deps are not known complete.
func (s *State) DepsPending(spec *Spec) int {
	n := 0
	for _, d := range spec.Deps {
		if _, ok := slices.BinarySearchFunc(s.DepsDone, d, ID.Compare); !ok {
			n++
		}
	}
	return n
}

// Derive computes the task's state at now (Unix ms). skew is added to a
// claim's End before it counts as expired: a partition leader passes the
// clock-skew bound, so claims of one task never overlap while clocks stay
// within it. Derive also returns the time at which the result next changes
// by the passage of time alone (0 if it does not).
func Derive(spec *Spec, s *State, now, skew int64) (Status, int64) {
	if s.Completion != nil {
		return s.Completion.Status(), 0
	}
	if c, ok := s.Latest(); ok {
		if _, released := s.ReleaseOf(c.Index); !released && now < c.End+skew {
			return Claimed, c.End + skew
		}
	}
	// No claim is live here, so every claim has ended.
	if spec.MaxAttempts > 0 && s.Attempts(false) >= spec.MaxAttempts || s.NoRetry() {
		return Dead, 0
	}
	if s.DepsPending(spec) > 0 {
		return Blocked, 0
	}
	if nb := NotBefore(spec, s); now < nb {
		return Delayed, nb
	}
	return Ready, 0
}

// NoRetry reports whether a claim since the last requeue failed with
// NoRetry: the task is dead, whatever its attempts.
func (s *State) NoRetry() bool {
	for _, r := range s.Releases {
		if r.NoRetry && r.Claim >= s.RequeueBase {
			return true
		}
	}
	return false
}

// NotBefore returns the time before which the task may not be claimed: its
// enqueue delay or the latest retry or snooze delay. A requeue drops the
// delays of the claims before it, as it drops their attempts.
func NotBefore(spec *Spec, s *State) int64 {
	nb := spec.NotBefore
	for _, r := range s.Releases {
		if r.Claim < s.RequeueBase {
			continue
		}
		nb = max(nb, r.Until)
	}
	return nb
}

// Merge folds o into s. It is commutative, associative and idempotent.
// It is the join of two states of one leader's line of writes (equal
// stamps); partition.Merge decides which states may be joined at all.
func (s *State) Merge(o *State) {
	s.Claims = mergeSorted(s.Claims, o.Claims,
		func(a, b Claim) int { return cmp.Compare(a.Index, b.Index) },
		func(a, b Claim) Claim {
			return Claim{Index: a.Index, Start: min(a.Start, b.Start), End: max(a.End, b.End), Epoch: max(a.Epoch, b.Epoch)}
		})
	s.Releases = mergeSorted(s.Releases, o.Releases,
		func(a, b Release) int { return cmp.Compare(a.Claim, b.Claim) },
		func(a, b Release) Release {
			if releaseLess(b, a) {
				return b
			}
			return a
		})
	if o.Completion != nil && (s.Completion == nil || completionLess(*o.Completion, *s.Completion)) {
		c := *o.Completion
		s.Completion = &c
	}
	s.DepsDone = mergeSorted(s.DepsDone, o.DepsDone, ID.Compare, func(a, _ ID) ID { return a })
	s.RequeueBase = max(s.RequeueBase, o.RequeueBase)
	s.Stamp = max(s.Stamp, o.Stamp)
}

// releaseLess orders two releases of one claim so that merge keeps the
// earliest, with a total tie-break so every replica keeps the same one.
func releaseLess(a, b Release) bool {
	return cmp.Or(
		cmp.Compare(a.At, b.At),
		cmp.Compare(boolInt(a.Snooze), boolInt(b.Snooze)),
		cmp.Compare(a.Until, b.Until),
		cmp.Compare(a.Reason, b.Reason),
		cmp.Compare(boolInt(a.NoRetry), boolInt(b.NoRetry)),
	) < 0
}

// completionLess orders completions: the earliest wins, then the lowest
// (claim, seq), then a completion before a cancel and the lower reason,
// so merge is deterministic.
func completionLess(a, b Completion) bool {
	return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Seq, b.Seq),
		cmp.Compare(boolInt(a.Cancelled), boolInt(b.Cancelled)), cmp.Compare(a.Reason, b.Reason)) < 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mergeSorted merges two slices sorted by key into a new sorted slice,
// combining elements with equal keys.
func mergeSorted[T any](a, b []T, key func(T, T) int, combine func(T, T) T) []T {
	if len(b) == 0 {
		return a
	}
	out := make([]T, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := key(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, combine(a[i], b[j]))
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// AddClaim appends a new claim. It panics if c.Index is not the next index:
// claim indices are dense and monotonic, and only a leader holding the
// partition's lock assigns them.
func (s *State) AddClaim(c Claim) {
	if c.Index != s.NextClaim() {
		panic(fmt.Sprintf("task: claim index %d, want next index %d", c.Index, s.NextClaim()))
	}
	s.Claims = append(s.Claims, c)
}

// AddRelease records the early end of a claim.
func (s *State) AddRelease(r Release) {
	s.Releases = mergeSorted(s.Releases, []Release{r},
		func(a, b Release) int { return cmp.Compare(a.Claim, b.Claim) },
		func(a, b Release) Release {
			if releaseLess(b, a) {
				return b
			}
			return a
		})
}

// AddDepDone records that dep completed.
func (s *State) AddDepDone(dep ID) {
	s.DepsDone = mergeSorted(s.DepsDone, []ID{dep}, ID.Compare, func(a, _ ID) ID { return a })
}
