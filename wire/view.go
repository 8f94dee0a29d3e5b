package wire

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/task"
)

// The client's view of a task, as every node builds it.

// ViewOf builds a task's client view at now (Unix ms) from its spec, its
// payload, its state and its updates, deriving its status with the
// leader's skew bound (task.Derive). Only the contiguous prefix of each
// claim's updates (seq 0, 1, 2, ... without a gap) is visible.
func ViewOf(sp *task.Spec, data []byte, st *task.State, ups []task.Update, now, skew int64) TaskView {
	status, _ := task.Derive(sp, st, now, skew)
	live := status == task.Claimed
	v := TaskView{
		ID:          sp.ID,
		Queue:       sp.Queue,
		Priority:    sp.Priority,
		Data:        data,
		Deps:        sp.Deps,
		State:       task.StateName(sp, st, status),
		Claims:      make([]ClaimView, 0, len(st.Claims)),
		Updates:     []UpdateView{},
		Group:       sp.Group,
		Description: sp.Description,
		MaxAttempts: sp.MaxAttempts,
		Attempts:    st.Attempts(live),
		NotBefore:   task.NotBefore(sp, st),
		EnqueuedAt:  sp.EnqueuedAt,
		TimeLimitMs: sp.TimeLimit,
		Kind:        sp.Kind,
		Subtopic:    sp.Subtopic,
		Key:         sp.Key,
		UniqueForMs: sp.UniqueFor,
	}
	if v.Deps == nil {
		v.Deps = []task.ID{}
	}
	if v.Data == nil {
		v.Data = []byte{}
	}
	for _, c := range st.Claims {
		cv := ClaimView{Claim: c.Index, Start: c.Start, End: c.End, Epoch: c.Epoch}
		if comp := st.Completion; comp != nil && comp.Claim == c.Index {
			at := comp.At
			cv.Completed = &at
		}
		if r, ok := st.ReleaseOf(c.Index); ok {
			cv.End = min(cv.End, r.At)
		}
		v.Claims = append(v.Claims, cv)
	}
	if c := st.Completion; c != nil && c.Cancelled {
		v.Cancelled = &CancelView{At: c.At, Reason: c.Reason}
	}
	for _, r := range st.Releases {
		v.Failures = append(v.Failures, FailureView{Claim: r.Claim, At: r.At, Reason: r.Reason, Snooze: r.Snooze, Until: r.Until, NoRetry: r.NoRetry})
	}
	v.Failures = appendTimeLimited(v.Failures, sp, st, live)
	var claim uint32
	var next uint64
	for i, u := range ups {
		if i == 0 || u.Claim != claim {
			claim, next = u.Claim, 0
		}
		if u.Seq != next {
			continue // a gap: later entries of this claim stay hidden
		}
		v.Updates = append(v.Updates, UpdateView{Claim: u.Claim, Seq: u.Seq, Data: u.Data})
		next++
	}
	return v
}

// TimeLimitReason is the reason of a failure that is a claim's time
// limit: the leader ended the claim there (no fail was written; the
// failure is derived from the claim's lease reaching the limit).
const TimeLimitReason = "time limit"

// appendTimeLimited adds to fs, in claim order, a failure for each claim
// of st that ran to its time limit and ended there: neither completed nor
// released, and over (not the live claim).
func appendTimeLimited(fs []FailureView, sp *task.Spec, st *task.State, live bool) []FailureView {
	if sp.TimeLimit <= 0 {
		return fs
	}
	latest, _ := st.Latest()
	added := false
	for _, c := range st.Claims {
		if !sp.TimeLimited(c) || (live && c.Index == latest.Index) {
			continue
		}
		if comp := st.Completion; comp != nil && (comp.Claim == c.Index || comp.Cancelled && comp.At < c.End) {
			continue // completed by it, or cancelled before it ran out
		}
		if _, ok := st.ReleaseOf(c.Index); ok {
			continue
		}
		fs = append(fs, FailureView{Claim: c.Index, At: c.End, Reason: TimeLimitReason, TimeLimit: true})
		added = true
	}
	if added {
		slices.SortStableFunc(fs, func(a, b FailureView) int { return cmp.Compare(a.Claim, b.Claim) })
	}
	return fs
}

// Check checks a list request's filters and returns the status it asks
// for (nil: any).
func (req *ListRequest) Check() (*task.Status, error) {
	if req.Queue != "" {
		if err := task.ValidateQueue(req.Queue); err != nil {
			return nil, err
		}
	}
	if err := task.ValidateGroup(req.Group); err != nil {
		return nil, err
	}
	if err := task.ValidateLabel("kind", req.Kind); err != nil {
		return nil, err
	}
	if err := task.ValidateLabel("subtopic", req.Subtopic); err != nil {
		return nil, err
	}
	var want *task.Status
	if req.State != "" {
		s, err := task.ParseStatus(req.State)
		if err != nil {
			return nil, err
		}
		want = &s
	}
	if req.Limit < 0 {
		return nil, fmt.Errorf("%w: limit %d is negative", task.ErrInvalid, req.Limit)
	}
	return want, nil
}
