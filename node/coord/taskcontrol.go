package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Task control: an operator cancels or deletes one task, requeues or
// purges every dead task of a queue, or cancels a group's tasks. Each acts through the same writes as
// a worker's operations: at the partition's leader, shipped, answered
// once W replicas hold it.

// cancel ends a task that is not completed as cancelled.
func (p *Plane) cancel(ctx context.Context, fwd bool, req *wire.CancelRequest) (*wire.Ack, error) {
	return ack(onTask[wire.CancelRequest, wire.Ack](ctx, p, fwd, wire.OpCancel, req.ID, req, nil,
		func(r *partition.Replica, now int64) (partition.Write, error) {
			if req.Claim != nil {
				return r.CancelUnderApply(req.ID, *req.Claim, req.Reason, now)
			}
			return r.CancelApply(req.ID, req.Reason, now)
		}))
}

// delete deletes a task (see partition.DeleteMarkApply): its cancel mark
// first, acknowledged by W replicas, then its tombstone. A repeat finds
// the tombstone and is acknowledged.
func (p *Plane) delete(ctx context.Context, fwd bool, req *wire.DeleteRequest) (*wire.Ack, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	part := p.partOf(req.ID)
	if resp, handled, err := forward[wire.DeleteRequest, wire.Ack](ctx, p, fwd, part, wire.OpDelete, req); handled {
		return resp, err
	}
	acks, err := p.deleteHere(ctx, part, req.ID)
	if err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// deleteHere deletes task id of part, which this node leads.
func (p *Plane) deleteHere(ctx context.Context, part uint16, id task.ID) (int, error) {
	r := p.parts[part]
	wr, edges, err := r.DeleteMarkApply(id, p.now())
	if errors.Is(err, task.ErrNotFound) {
		// Written to the cohort directly, perhaps not yet here (onTask).
		if found, rerr := p.repl.ReadMissing(ctx, part, id); rerr != nil {
			return 0, fmt.Errorf("%w: %v; looking for it on the cohort: %v", wire.ErrUnavailable, err, rerr)
		} else if found {
			wr, edges, err = r.DeleteMarkApply(id, p.now())
		}
	}
	if errors.Is(err, task.ErrNotFound) {
		gone, cerr := r.Collected(id)
		if cerr != nil {
			return 0, cerr
		}
		if gone {
			// A repeat (or a task garbage collection took): the tombstone
			// is here; ship it again so the answer means W replicas hold
			// it, once it is durable here too.
			return p.reshipTomb(ctx, part, id)
		}
	}
	if err != nil {
		return 0, p.refusal(ctx, id, err)
	}
	if _, err := p.repl.Replicate(ctx, part, 0, wr); err != nil {
		return 0, fmt.Errorf("delete %s: its cancel mark: %w", id, err)
	}
	d, err := r.Collect([]task.ID{id}, map[task.ID]int{id: edges}, p.now())
	if err != nil {
		return 0, fmt.Errorf("delete %s: cancelled, not yet deleted (a retry finishes it): %w", id, leaderErr(err))
	}
	p.deps.Collected(id)
	return p.shipTomb(ctx, part, id, d)
}

// reshipTomb ships again the tombstone of task id, which part holds,
// once a sync barrier behind the write that made it passed.
func (p *Plane) reshipTomb(ctx context.Context, part uint16, id task.ID) (int, error) {
	if err := p.store.Barrier(); err != nil {
		return 0, err
	}
	return p.shipTomb(ctx, part, id, nil)
}

// shipTomb ships the tombstone of task id, applied in part, to the
// cohort while d (nil: nothing) makes it durable here, and answers once W
// replicas hold it.
func (p *Plane) shipTomb(ctx context.Context, part uint16, id task.ID, d partition.Durable) (int, error) {
	recs, err := p.parts[part].Records([]task.ID{id})
	if err != nil {
		return 0, err
	}
	if len(recs) != 1 || recs[0].Tomb == 0 {
		return 0, fmt.Errorf("%w: %s", task.ErrNotFound, id)
	}
	return p.repl.Replicate(ctx, part, 0, partition.Write{Rec: recs[0], Durable: d})
}

// requeueDead makes every dead task of a queue ready again.
func (p *Plane) requeueDead(ctx context.Context, fwd bool, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return p.onDead(ctx, fwd, wire.OpRequeueDead, req, func(part uint16, id task.ID) (int, error) {
		wr, err := p.parts[part].RequeueApply(id, p.now())
		if err != nil {
			return 0, err
		}
		return p.repl.Replicate(ctx, part, 0, wr)
	})
}

// purgeDead deletes every dead task of a queue, except those others
// depend on (deleting one would release its dependents).
func (p *Plane) purgeDead(ctx context.Context, fwd bool, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return p.onDead(ctx, fwd, wire.OpPurgeDead, req, func(part uint16, id task.ID) (int, error) {
		return p.deleteHere(ctx, part, id)
	})
}

// onDead applies do to each dead task of req.Queue (see onEach).
func (p *Plane) onDead(ctx context.Context, fwd bool, op wire.Op, req *wire.DeadRequest, do func(part uint16, id task.ID) (int, error)) (*wire.BulkResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if err := task.ValidateQueue(req.Queue); err != nil {
		return nil, err
	}
	return onEach(ctx, p, fwd, op, req.Queue, req, req.Parts, func(part uint16) []task.ID { return p.parts[part].Dead(req.Queue) }, do)
}

// groupCancel cancels every task of a group that is not ended.
func (p *Plane) groupCancel(ctx context.Context, fwd bool, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if err := validateGroupName(req.Group); err != nil {
		return nil, err
	}
	return onEach(ctx, p, fwd, wire.OpGroupCancel, req.Group, req, req.Parts, func(part uint16) []task.ID { return p.parts[part].GroupOpen(req.Group) },
		func(part uint16, id task.ID) (int, error) {
			wr, err := p.parts[part].CancelApply(id, req.Reason, p.now())
			if err != nil {
				return 0, err
			}
			return p.repl.Replicate(ctx, part, 0, wr)
		})
}

// Bulk operations: a queue's dead tasks, a group's open ones.
const (
	// bulkWorkers is how many tasks a bulk op acts on at once per
	// partition: their writes share the store's syncs.
	bulkWorkers = 32
	// bulkErrorsMax is how many refusals a bulk answer quotes.
	bulkErrorsMax = 5
)

// onEach applies do to each task that list gives in the partitions this
// node leads (of those named, on a forwarded request: see fanPlanFor),
// then asks the other leaders to do the same for theirs (req, op), and
// sums the answers; what names the queue or group in errors. A task do
// refuses by its state is skipped and counted (it stopped being dead, or
// ended, or others depend on it); any other error ends the call, which is
// safe to repeat: what was done is not listed again. So does a change of
// leaders meanwhile (a partition that moved here after the listing, or
// away before the peers were asked, would be missed): the answer is then
// unavailable, and a repeat completes the work. An answer without error
// means every partition's leader acted on every task list gave it.
func onEach[Req any, PReq fanned[Req]](ctx context.Context, p *Plane, fwd bool, op wire.Op, what string, req PReq, named []uint16,
	list func(part uint16) []task.ID, do func(part uint16, id task.ID) (int, error),
) (*wire.BulkResponse, error) {
	plan, err := p.fanPlanFor(ctx, fwd, named)
	if err != nil {
		return nil, err
	}
	resp := &wire.BulkResponse{}
	listedAt := map[uint16]uint64{} // the epoch each partition was listed at
	for i := range p.parts {
		part := uint16(i)
		if !plan.mine[part] {
			continue
		}
		listedAt[part] = p.parts[part].Epoch()
		// An enqueue acknowledged without this leader's copy (written to
		// the cohort directly) must be in the listing: found by the
		// simulation, a group cancel acknowledged after such an enqueue
		// left its task open.
		if err := p.repl.CatchUp(ctx, part); err != nil {
			return nil, fmt.Errorf("%s %s: partition %d, after %d done: %w", op, what, part, resp.Done, err)
		}
		if err := p.onEachPart(ctx, part, list(part), do, resp); err != nil {
			return nil, fmt.Errorf("%s %s: partition %d, after %d done: %w", op, what, part, resp.Done, err)
		}
	}
	if err := p.confirmListed(ctx, listedAt); err != nil {
		return nil, fmt.Errorf("%s %s: after %d done: %w", op, what, resp.Done, err)
	}
	if plan.changed(p) {
		return nil, fmt.Errorf("%w: %s %s: partitions changed leaders meanwhile, after %d done; repeat it", wire.ErrUnavailable, op, what, resp.Done)
	}
	err = fanOut(ctx, p, plan, op, req, func(r *wire.BulkResponse) {
		resp.Done += r.Done
		resp.Skipped += r.Skipped
		resp.Errors = append(resp.Errors, r.Errors...)
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s: after %d done here: %w", op, what, resp.Done, err)
	}
	if len(resp.Errors) > bulkErrorsMax {
		resp.Errors = resp.Errors[:bulkErrorsMax]
	}
	return resp, nil
}

// confirmListed confirms with a majority of each partition's cohort that
// this node still leads it at the epoch it was listed at
// (replication.Plane.ConfirmLeading). A leader cut off while another took
// over still believes it leads, and its listing lacks what the new leader
// took: a bulk op that found nothing to write there would answer ok
// without a write to fence it (found by the simulation: an acknowledged
// group cancel left a task of the group open). Once confirmed, every task
// acknowledged before the listing was in it.
func (p *Plane) confirmListed(ctx context.Context, listedAt map[uint16]uint64) error {
	errs := make(chan error, len(listedAt))
	for part, ep := range listedAt {
		go func() {
			err := p.repl.ConfirmLeading(ctx, part)
			if err == nil && p.parts[part].Epoch() != ep {
				err = fmt.Errorf("%w: partition %d: leading at epoch %d, listed at %d; repeat it", wire.ErrUnavailable, part, p.parts[part].Epoch(), ep)
			}
			errs <- err
		}()
	}
	var all []error
	for range listedAt {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// onEachPart applies do to ids of part, bulkWorkers at a time, counting
// into resp. It stops at the first error that is not a refusal by the
// task's state (the partition cannot be written, the request's context
// ended) and returns it.
func (p *Plane) onEachPart(ctx context.Context, part uint16, ids []task.ID, do func(part uint16, id task.ID) (int, error), resp *wire.BulkResponse) error {
	var mu sync.Mutex
	var fatal error
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return cmp.Or(fatal, ctx.Err())
	}
	sem := make(chan struct{}, bulkWorkers)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		if failed() != nil {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := do(part, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				resp.Done++
			case isStateRefusal(err):
				resp.Skipped++
				if len(resp.Errors) < bulkErrorsMax {
					resp.Errors = append(resp.Errors, err.Error())
				}
			case fatal == nil:
				fatal = err
			}
		})
	}
	wg.Wait()
	return failed()
}
