package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Groups: a group's counts come from each partition leader's label index
// (partition/labels.go), and a group cancel (taskcontrol.go) reaches its
// open tasks through it, so neither reads a task outside the group.

// validateGroupName checks the group a group op names: a valid, non-empty
// group label.
func validateGroupName(g string) error {
	if g == "" {
		return fmt.Errorf("%w: no group named", task.ErrInvalid)
	}
	return task.ValidateGroup(g)
}

// group reads a group's counts by state, cluster-wide, and its first dead
// tasks with their last failure.
func (p *Plane) group(ctx context.Context, fwd bool, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if err := validateGroupName(req.Group); err != nil {
		return nil, err
	}
	dead := req.Dead
	switch {
	case dead < 0 || dead > wire.MaxGroupDead:
		return nil, fmt.Errorf("%w: dead=%d: list 1 to %d dead tasks (0: %d)", task.ErrInvalid, dead, wire.MaxGroupDead, wire.DefaultGroupDead)
	case dead == 0:
		dead = wire.DefaultGroupDead
	}
	p.h.CatchUp()
	plan, err := p.fanPlanFor(ctx, fwd, req.Parts)
	if err != nil {
		return nil, err
	}
	resp := &wire.GroupResponse{Group: req.Group}
	var sum [task.NumStatus]int64
	err = fanOut(ctx, p, plan, wire.OpGroup, req, func(r *wire.GroupResponse) {
		sum[task.Ready] += r.Ready
		sum[task.Claimed] += r.Claimed
		sum[task.Delayed] += r.Delayed
		sum[task.Blocked] += r.Blocked
		sum[task.Completed] += r.Completed
		sum[task.Dead] += r.Dead
		sum[task.Cancelled] += r.Cancelled
		resp.Failures = append(resp.Failures, r.Failures...)
	})
	if err != nil {
		return nil, err
	}
	now := p.now()
	for _, r := range p.parts {
		if !plan.mine[r.Part()] {
			continue
		}
		c, ids := r.GroupCounts(req.Group, dead)
		for i, v := range c {
			sum[i] += v
		}
		for _, id := range ids {
			f, err := p.groupFailure(r.Part(), id, now)
			if errors.Is(err, store.ErrNotFound) {
				continue // collected or deleted since the count
			}
			if err != nil {
				return nil, fmt.Errorf("group %s: read dead task %s: %w", req.Group, id, err)
			}
			resp.Failures = append(resp.Failures, f)
		}
	}
	resp.Ready, resp.Claimed, resp.Delayed, resp.Blocked = sum[task.Ready], sum[task.Claimed], sum[task.Delayed], sum[task.Blocked]
	resp.Completed, resp.Dead, resp.Cancelled = sum[task.Completed], sum[task.Dead], sum[task.Cancelled]
	for _, v := range sum {
		resp.Total += v
	}
	slices.SortFunc(resp.Failures, func(a, b wire.GroupFailure) int { return a.ID.Compare(b.ID) })
	resp.Failures = resp.Failures[:min(len(resp.Failures), dead)]
	return resp, nil
}

// groupFailure reads dead task id of part: its queue, attempts and last
// failure.
func (p *Plane) groupFailure(part uint16, id task.ID, now int64) (wire.GroupFailure, error) {
	sp, err := p.store.Spec(part, id)
	if err != nil {
		return wire.GroupFailure{}, err
	}
	st, _, err := p.store.State(part, id)
	if err != nil {
		return wire.GroupFailure{}, err
	}
	v := p.view(sp, nil, &st, nil, now)
	f := wire.GroupFailure{ID: id, Queue: sp.Queue, Attempts: v.Attempts}
	if len(v.Failures) > 0 {
		last := v.Failures[len(v.Failures)-1]
		f.At, f.Reason = last.At, last.Reason
		if last.TimeLimit && f.Reason == "" {
			f.Reason = "time limit"
		}
	}
	return f, nil
}
