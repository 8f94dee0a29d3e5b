package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Hints (docs/design.md, Operations: placement and hints): an enqueue that
// asked for one, and whose cohort cannot take it, is kept on this node
// (node/hints) and answered "hinted"; node/hints hands it over later.

// errHinted is writeNew's and writeAtLeader's word that the tasks were
// hinted (node/hints) rather than written to W replicas.
var errHinted = errors.New("hinted")

// hint keeps ts, tasks of part without deps, as hints (node/hints),
// enqueued with w, and returns errHinted once they are durable. A task
// with deps is never hinted (its first state records which deps were
// done, its leader's write): err, the write's failure, then stands.
//
// A task whose key this leader found held by another (DupOf) is answered
// as a duplicate naming the holder, which the leader could not ship to W
// replicas: the holder's own record, read from this replica, is hinted in
// its place, so that the answer's task is durable here as a hint's is
// (this replica may hold it unsynced: its own enqueue may be in flight)
// and reaches its cohort by the handover, a repeat of one id wherever it
// is held already. (Hinting the duplicate's own spec would create a task
// the answer does not name: the simulation's seed 87.) A holder with deps,
// or one this replica no longer holds, leaves err standing.
//
// A keyed hint is handed to the key's leader, which retires it if the key
// was taken meanwhile (wire.EnqueueTask.Hinted).
func (p *Plane) hint(part uint16, ts []partition.NewTask, w int, err error) error {
	specs := make([]*task.Spec, 0, len(ts))
	own := make(map[task.ID]bool, len(ts))
	var holders []task.ID
	for i := range ts {
		switch {
		case len(ts[i].Spec.Deps) > 0:
			return err
		case !ts[i].DupOf.IsZero():
			holders = append(holders, ts[i].DupOf)
		default:
			specs = append(specs, ts[i].Spec)
			own[ts[i].Spec.ID] = true
		}
	}
	// A holder written by this same batch is hinted as its own task.
	holders = slices.DeleteFunc(holders, func(id task.ID) bool { return own[id] })
	if len(holders) > 0 {
		recs, rerr := p.parts[part].Records(holders)
		if rerr != nil {
			return fmt.Errorf("%w; reading the tasks holding the keys to hint them failed too: %v", err, rerr)
		}
		for _, r := range recs {
			if r.Spec == nil || len(r.Spec.Deps) > 0 {
				return err
			}
			specs = append(specs, r.Spec)
		}
	}
	if herr := p.hints.Add(specs, w); herr != nil {
		return fmt.Errorf("%w; hinting it failed too: %v", err, herr)
	}
	return errHinted
}

// hintDeadline is when a write that may be hinted stops waiting for its
// cohort (Shipment.FinishBy): hintBy (the zero time: not hinted, it
// waits as long as its ctx), but at least minHintWait from now. What its
// cohort has not taken by then is hinted instead.
func hintDeadline(hintBy time.Time) time.Time {
	if hintBy.IsZero() {
		return hintBy
	}
	if floor := time.Now().Add(minHintWait); hintBy.Before(floor) {
		return floor
	}
	return hintBy
}

// minHintWait is the least a hinted write waits for its cohort, even when
// its enqueue's hint wait ran out before it began (its leader took it
// all): a cohort that answers at once is written, not hinted.
const minHintWait = 50 * time.Millisecond

// hintBy is when the tasks of req, an enqueue this node took at start,
// are hinted rather than waited for any longer (the zero time: never,
// the enqueue is not hinted). HintWait bounds the whole enqueue's wait
// for its cohort, the forward to a leader included, not each step of it:
// a client's deadline a little above HintWait then sees the hint.
func (p *Plane) hintBy(req *wire.EnqueueRequest, start time.Time) time.Time {
	if !p.hinted(req) {
		return time.Time{}
	}
	return start.Add(p.cfg.HintWait)
}

// hinted reports whether req's tasks are hinted when their cohort cannot
// be written: the request asks for it (wire.EnqueueRequest.Hint), or the
// queue of each of its tasks does (its "hint" setting).
func (p *Plane) hinted(req *wire.EnqueueRequest) bool {
	if req.Hint {
		return true
	}
	for i := range req.Tasks {
		if !p.queues.Of(req.Tasks[i].Queue).Hint {
			return false
		}
	}
	return len(req.Tasks) > 0
}

// HandOverKeyed hands hinted keyed tasks (node/hints) to their key's
// leader, as an enqueue marked Hinted (this node's word): the leader
// checks the key under the lock that orders its writes and retires a
// task whose key was taken meanwhile (partition.NewTask.Hinted). It
// returns nil once W replicas hold every task.
func (p *Plane) HandOverKeyed(ctx context.Context, w int, specs []*task.Spec) error {
	ctx, exit, err := p.enter(ctx)
	if err != nil {
		return err
	}
	defer exit()
	now := p.now()
	req := &wire.EnqueueRequest{W: w, Tasks: make([]wire.EnqueueTask, len(specs))}
	for i, sp := range specs {
		id := sp.ID
		req.Tasks[i] = wire.EnqueueTask{
			ID: &id, Queue: sp.Queue, Priority: sp.Priority, Data: sp.Data, Group: sp.Group, Description: sp.Description,
			MaxAttempts: sp.MaxAttempts, TimeLimitMs: sp.TimeLimit, Kind: sp.Kind, Subtopic: sp.Subtopic,
			Key: sp.Key, UniqueForMs: sp.UniqueFor, DelayMs: max(sp.NotBefore-now, 0), Hinted: true,
		}
	}
	// The Hinted marks are this node's own, which enqueueRouted trusts.
	start := time.Now()
	resp, handled, err := p.enqueueRouted(ctx, false, req, start)
	if !handled {
		resp, err = p.enqueueLocal(ctx, req, start)
	}
	if err != nil {
		return err
	}
	for _, r := range resp.Results {
		if r.Hinted {
			return fmt.Errorf("%w: task %s: its leader could not take it", wire.ErrUnavailable, r.ID)
		}
	}
	return nil
}
