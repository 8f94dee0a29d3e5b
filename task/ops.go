package task

import "fmt"

// The methods below check and apply the client operations that act on a
// claim. Each checks fencing first (docs/design.md, Fencing): only the task's
// latest claim may renew, update, snooze, fail or complete it. They mutate
// s only when they return nil.

// CheckLatest returns nil if idx is the task's latest claim.
func (s *State) CheckLatest(idx uint32) error {
	c, ok := s.Latest()
	switch {
	case !ok || idx > c.Index:
		return fmt.Errorf("%w: claim %d was never granted", ErrNoSuchClaim, idx)
	case idx < c.Index:
		return fmt.Errorf("%w: claim %d was superseded by claim %d", ErrClaimSuperseded, idx, c.Index)
	}
	return nil
}

// checkOpen returns nil if idx is the latest claim, the task is not
// completed or cancelled and the claim was not ended by fail or snooze.
func (s *State) checkOpen(idx uint32) error {
	if c := s.Completion; c != nil && c.Cancelled {
		return fmt.Errorf("%w: at %d, superseding claim %d", ErrCancelled, c.At, idx)
	}
	if s.Completion != nil {
		return fmt.Errorf("%w: by claim %d", ErrCompleted, s.Completion.Claim)
	}
	if err := s.CheckLatest(idx); err != nil {
		return err
	}
	if r, ok := s.ReleaseOf(idx); ok {
		what := "failed"
		if r.Snooze {
			what = "snoozed"
		}
		return fmt.Errorf("%w: claim %d was %s", ErrClaimEnded, idx, what)
	}
	return nil
}

// Renew grows the end of claim idx of a task with spec sp to at least
// now+ttl, at most the claim's time limit (Spec.LeaseEnd). It is refused
// once the claim has expired (now >= End) by the renewing node's clock:
// with ErrTimeLimit when the claim ran for its time limit (it can run no
// longer, whatever the worker asks). A claim whose lease already reaches
// its time limit, still running, renews to the same end: it is alive,
// and its worker learns from the unchanged end that no renewal will
// grow it.
func (s *State) Renew(sp *Spec, idx uint32, now, ttl int64) (Claim, error) {
	if err := s.checkOpen(idx); err != nil {
		return Claim{}, err
	}
	c := &s.Claims[len(s.Claims)-1]
	if now >= c.End {
		if sp.TimeLimited(*c) {
			return Claim{}, fmt.Errorf("%w: claim %d ran for its time limit of %d ms", ErrTimeLimit, idx, sp.TimeLimit)
		}
		return Claim{}, fmt.Errorf("%w: claim %d ended at %d, now %d", ErrClaimExpired, idx, c.End, now)
	}
	c.End = max(c.End, sp.LeaseEnd(*c, now, ttl))
	return *c, nil
}

// CheckUpdate checks that claim idx may append the update with seq, given
// next, the length of the claim's visible (contiguous) history. It returns
// dup=true for an idempotent retry of seq < next, which the caller must
// confirm carries the same data.
func (s *State) CheckUpdate(idx uint32, seq, next uint64) (dup bool, err error) {
	if err := s.checkOpen(idx); err != nil {
		return false, err
	}
	if seq > next {
		return false, fmt.Errorf("%w: update seq %d, next is %d", ErrSeq, seq, next)
	}
	return seq < next, nil
}

// Complete marks the task completed by claim idx at seq, where next is the
// length of the claim's visible history: seq must equal it, so a completion
// is the last entry of a contiguous history. Repeating the same completion
// is a no-op (done=false, nil); the same claim at another seq is a
// conflict; another claim finds the task completed (ErrCompleted, as
// every other write under it does: its claim allows no more writes).
func (s *State) Complete(idx uint32, seq, next uint64, now int64) (done bool, err error) {
	if c := s.Completion; c != nil {
		switch {
		case c.Cancelled:
			return false, s.checkOpen(idx)
		case c.Claim == idx && c.Seq == seq:
			return false, nil
		case c.Claim == idx:
			return false, fmt.Errorf("%w: task already completed by claim %d at seq %d", ErrConflict, c.Claim, c.Seq)
		}
		return false, fmt.Errorf("%w: by claim %d at seq %d", ErrCompleted, c.Claim, c.Seq)
	}
	if err := s.checkOpen(idx); err != nil {
		return false, err
	}
	if seq != next {
		return false, fmt.Errorf("%w: complete seq %d, next is %d", ErrSeq, seq, next)
	}
	s.Completion = &Completion{Claim: idx, Seq: seq, At: now}
	return true, nil
}

// RetiredKeyReason begins the cancel reason of a task its leader retired
// because another task holds its unique key; the holder's id follows.
const RetiredKeyReason = "duplicate key, held by task "

// Cancel ends the task as cancelled at now, superseding its live claim if
// it has one. Repeating a cancel is a no-op (done=false, nil), whatever
// its reason: the first one stands. A completed task cannot be cancelled
// (ErrCompleted).
func (s *State) Cancel(now int64, reason string) (done bool, err error) {
	if c := s.Completion; c != nil {
		if c.Cancelled {
			return false, nil
		}
		return false, fmt.Errorf("%w: by claim %d at seq %d", ErrCompleted, c.Claim, c.Seq)
	}
	s.Completion = &Completion{Claim: s.NextClaim(), At: now, Cancelled: true, Reason: TrimReason(reason)}
	return true, nil
}

// CancelUnder is Cancel by the holder of claim idx (a handler cancelling
// its own task): fenced like a fail, it is refused unless idx is the
// task's latest claim, not ended; a repeat of a cancel is a no-op.
func (s *State) CancelUnder(idx uint32, now int64, reason string) (done bool, err error) {
	if c := s.Completion; c == nil || !c.Cancelled {
		if err := s.checkOpen(idx); err != nil {
			return false, err
		}
	}
	return s.Cancel(now, reason)
}

// End ends claim idx early: a fail (snooze=false) or a snooze. A retry of
// the same kind of release is a no-op (done=false, nil).
func (s *State) End(idx uint32, r Release) (done bool, err error) {
	if s.Completion == nil && s.CheckLatest(idx) == nil {
		// A repeat is a no-op, unless it asks for more than the first
		// gave: a fail with no retry after a plain fail is refused (it
		// would be acknowledged and change nothing).
		if prev, ok := s.ReleaseOf(idx); ok && prev.Snooze == r.Snooze && (prev.NoRetry || !r.NoRetry) {
			return false, nil
		}
	}
	if err := s.checkOpen(idx); err != nil {
		return false, err
	}
	// A snooze hands the task back without counting an attempt, so it must
	// come while the claim is live: after its end the expiry has already
	// counted as an attempt, and snoozing then would dodge max_attempts.
	if c, _ := s.Latest(); r.Snooze && r.At >= c.End {
		return false, fmt.Errorf("%w: claim %d ended at %d; a snooze must come before the end", ErrClaimExpired, idx, c.End)
	}
	r.Claim = idx
	s.AddRelease(r)
	return true, nil
}

// Requeue makes a dead task claimable again: claims so far stop counting as
// attempts. The caller checks that the task is dead.
func (s *State) Requeue() {
	s.RequeueBase = max(s.RequeueBase, s.NextClaim())
}
