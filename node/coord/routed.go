package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// leaderForwardWait bounds the forward of tasks without key or deps to
// their partition's leader (PlanForward): a leader answers in
// milliseconds, and past this the coordinator writes them to their cohort
// itself (DirectWrite) rather than wait out a leader that died or was cut
// off before its peers noticed.
const leaderForwardWait = 500 * time.Millisecond

// enqueueRouted splits an enqueue by where its tasks are written
// (RouteTask, SplitEnqueue): the tasks of partitions led here, those
// written without a leader and those to be hinted go to enqueueLocal
// here, the others are forwarded to their leaders (PlanForward), and the
// results are put back in request order. Every task gets its id first,
// so a forwarded part is idempotent under the client's retries. handled
// is false when every task is written here: the caller writes the whole
// request (a forwarded request is always so: fwd).
//
// The FreshID and Hinted marks are trusted: each enqueue reaches here
// through StampIDs, from a peer's coordinator, or from this node's own
// hints (HandOverKeyed).
func (p *Plane) enqueueRouted(ctx context.Context, fwd bool, req *wire.EnqueueRequest, start time.Time) (*wire.EnqueueResponse, bool, error) {
	if fwd {
		return nil, false, nil
	}
	hintBy := p.hintBy(req, start)
	hint := !hintBy.IsZero()
	plan := make([]EnqueueTask, len(req.Tasks))
	for i := range req.Tasks {
		t := &req.Tasks[i]
		fresh := t.FreshID
		if t.ID == nil {
			// Not stamped (a test calling the plane directly): written
			// as a client's id would be.
			id := p.newID(t, req.W)
			t.ID, fresh = &id, false
		}
		part := p.partOf(*t.ID)
		route, err := RouteTask(t.Key, t.Deps, fresh, p.leaderOutOfReach(part), hint, func() (string, error) {
			return p.routeTo(ctx, fwd, part)
		})
		if err != nil {
			return nil, true, fmt.Errorf("task %d of %d: %w", i+1, len(req.Tasks), err)
		}
		plan[i] = EnqueueTask{ID: *t.ID, Key: t.Key, Deps: t.Deps, Route: route}
	}
	split := SplitEnqueue(plan)
	if !split.Remote() {
		return nil, false, nil
	}
	resp := &wire.EnqueueResponse{Results: make([]wire.EnqueueResult, len(req.Tasks))}
	send := func(route string, idx []int) error {
		sub := &wire.EnqueueRequest{W: req.W, Tasks: make([]wire.EnqueueTask, len(idx))}
		group := make([]EnqueueTask, len(idx))
		for k, i := range idx {
			sub.Tasks[k], group[k] = req.Tasks[i], plan[i]
		}
		plan := PlanForward(group, hint, req.Hint, leaderForwardWait, time.Until(hintBy))
		r, err := p.sendEnqueue(ctx, route, sub, plan, start)
		if err != nil {
			return err
		}
		if len(r.Results) != len(idx) {
			return fmt.Errorf("%w: node %s answered %d results for %d tasks", wire.ErrUnavailable, route, len(r.Results), len(idx))
		}
		for k, i := range idx {
			resp.Results[i] = r.Results[k]
		}
		return nil
	}
	if split.Sequential {
		for i := range req.Tasks {
			if err := send(plan[i].Route, []int{i}); err != nil {
				return nil, true, fmt.Errorf("task %d of %d: %w", i+1, len(req.Tasks), err)
			}
		}
		return resp, true, nil
	}
	errs := make([]error, len(split.Order))
	done := make(chan struct{}, len(split.Order))
	for gi, route := range split.Order {
		go func() {
			errs[gi] = send(route, split.Tasks[route])
			done <- struct{}{}
		}()
	}
	for range split.Order {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// sendEnqueue writes sub, one route's tasks, here (RouteHere,
// RouteHint) or at the leader at route, by plan. A forward that failed
// in doubt may have been written: the same tasks again are repeats.
func (p *Plane) sendEnqueue(ctx context.Context, route string, sub *wire.EnqueueRequest, plan ForwardPlan, start time.Time) (*wire.EnqueueResponse, error) {
	if route == RouteHere || route == RouteHint {
		// The tasks written without a leader, those of partitions this
		// node leads, and those whose leader it cannot reach (it does
		// not lead their partition, so its write fails at once and hints
		// them).
		sub.Hint = plan.Hint
		return p.enqueueLocal(ctx, sub, start)
	}
	// The copy forwarded asks for no hint: the leader writes or refuses,
	// and this node hints what it must.
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if plan.Wait > 0 {
		fctx, cancel = context.WithTimeout(ctx, plan.Wait)
	}
	r := new(wire.EnqueueResponse)
	err := p.forwardCall(fctx, route, wire.OpEnqueue, sub, r)
	cancel()
	if err == nil || !plan.Fallback || !hintable(err) || ctx.Err() != nil {
		return r, err
	}
	sub.Hint = plan.Hint
	return p.enqueueLocal(ctx, sub, start)
}
