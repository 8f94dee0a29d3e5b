package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The writes on one claimed task: each applies on the leader's replica,
// ships the record the write returns while the local sync runs
// (replication.Plane.Replicate), and answers once W replicas hold it.

// leaderErr turns a replica's refusal as not the leader (it stepped down
// between routing the request and writing) into unavailable, which
// coordinators retry at the new leader, rather than an internal error.
func leaderErr(err error) error {
	if errors.Is(err, partition.ErrNotLeader) {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return err
}

// stateRefusals are the refusals a leader derives from its replica's
// state of a task, which a stale replica gets wrong.
var stateRefusals = []error{
	task.ErrClaimSuperseded, task.ErrClaimExpired, task.ErrTimeLimit, task.ErrClaimEnded, task.ErrCompleted,
	task.ErrCancelled, task.ErrNoSuchClaim, task.ErrNotFound, task.ErrSeq, task.ErrNotDead, task.ErrConflict,
}

// isStateRefusal reports whether err is one of stateRefusals.
func isStateRefusal(err error) bool {
	return slices.ContainsFunc(stateRefusals, func(e error) bool { return errors.Is(err, e) })
}

// refusal returns err, this leader's refusal of an operation on task id,
// once it confirmed that it still leads the task's partition
// (replication.Plane.ConfirmLeading); if it cannot, the refusal may come from a stale
// state, and the answer is unavailable: the client must not take it as
// final. A leader cut off while another took over still believes it
// leads; its replica lacks the new leader's writes and holds claims of
// its own that no majority took, so "superseded by claim 2" there may be
// false for a claim the new leader granted (found by the simulation).
// Only a refusal costs the round trip; a write is confirmed by its
// replication anyway.
func (p *Plane) refusal(ctx context.Context, id task.ID, err error) error {
	err = leaderErr(err)
	if !isStateRefusal(err) {
		return err
	}
	if cerr := p.repl.ConfirmLeading(ctx, p.partOf(id)); cerr != nil {
		return fmt.Errorf("%w: %v; this node could not confirm it still leads the task's partition: %v", wire.ErrUnavailable, err, cerr)
	}
	return err
}

// onTask runs a write on task id at its partition's leader: forwarded
// there when that is another node (at: its answer, handled), else checked (check,
// after forwarding: the leader's limits apply), applied (apply returns the
// write's record and its durability handle; a refusal is confirmed first:
// refusal) and shipped while the local sync runs, answering once W
// replicas hold it.
func onTask[Req, Resp any](ctx context.Context, p *Plane, fwd bool, op wire.Op, id task.ID, req *Req,
	check func() error, apply func(r *partition.Replica, now int64) (partition.Write, error),
) (acks int, at *Resp, handled bool, err error) {
	if err := p.h.Serving(); err != nil {
		return 0, nil, true, err
	}
	if err := id.Check(); err != nil {
		return 0, nil, true, err
	}
	if at, handled, err := forward[Req, Resp](ctx, p, fwd, p.partOf(id), op, req); handled {
		return 0, at, true, err
	}
	if check != nil {
		if err := check(); err != nil {
			return 0, nil, true, err
		}
	}
	part := p.partOf(id)
	wr, err := apply(p.parts[part], p.now())
	if errors.Is(err, task.ErrNotFound) {
		// An enqueue written to the cohort directly may not have reached
		// this replica yet: look for it there before refusing.
		if found, rerr := p.repl.ReadMissing(ctx, part, id); rerr != nil {
			return 0, nil, true, fmt.Errorf("%w: %v; looking for it on the cohort: %v", wire.ErrUnavailable, err, rerr)
		} else if found {
			wr, err = apply(p.parts[part], p.now())
		}
	}
	if err != nil {
		return 0, nil, true, p.refusal(ctx, id, err)
	}
	acks, err = p.repl.Replicate(ctx, part, 0, wr)
	return acks, nil, err != nil, err
}

// ack is the answer of an onTask write with an Ack.
func ack(acks int, at *wire.Ack, handled bool, err error) (*wire.Ack, error) {
	if handled {
		return at, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// renew extends a claim.
func (p *Plane) renew(ctx context.Context, fwd bool, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	var c task.Claim
	var ttl int64
	acks, at, handled, err := onTask[wire.RenewRequest, wire.RenewResponse](ctx, p, fwd, wire.OpRenew, req.ID, req,
		func() error {
			if drifting, _ := p.h.Drifting(); drifting {
				return p.h.ErrDrifting() // the coordinator retries at the next leader
			}
			// 0: the queue's default lease, else the node's, as a claim's.
			if ttl = req.TTLMs; ttl < 0 || ttl > p.cfg.MaxTTL.Milliseconds() {
				return fmt.Errorf("%w: ttl %dms: want 0 (the default) or 1ms..%v", task.ErrInvalid, ttl, p.cfg.MaxTTL)
			}
			return nil
		},
		func(r *partition.Replica, now int64) (wr partition.Write, err error) {
			c, wr, err = r.RenewApply(req.ID, req.Claim, now, partition.Lease{TTL: ttl, QueueTTL: p.defaultLease})
			return wr, err
		})
	if handled {
		return at, err
	}
	return &wire.RenewResponse{End: c.End, Acks: acks}, nil
}

// update appends a progress entry.
func (p *Plane) update(ctx context.Context, fwd bool, req *wire.UpdateRequest) (*wire.Ack, error) {
	return ack(onTask[wire.UpdateRequest, wire.Ack](ctx, p, fwd, wire.OpUpdate, req.ID, req,
		func() error { return task.ValidateData(req.Data, p.cfg.MaxPayload) },
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.UpdateApply(req.ID, req.Claim, req.Seq, req.Data, now)
		}))
}

// fail ends a claim as a failed attempt.
func (p *Plane) fail(ctx context.Context, fwd bool, req *wire.FailRequest) (*wire.Ack, error) {
	return ack(onTask[wire.FailRequest, wire.Ack](ctx, p, fwd, wire.OpFail, req.ID, req,
		func() error {
			if req.RetryAfterMs == nil {
				return nil
			}
			if req.NoRetry {
				return fmt.Errorf("%w: a fail with no retry takes no retry-after", task.ErrInvalid)
			}
			return task.ValidateMs("retry-after", *req.RetryAfterMs, p.cfg.MaxDelay)
		},
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.FailApply(req.ID, req.Claim, req.Reason,
				partition.Retry{NoRetry: req.NoRetry, After: req.RetryAfterMs, Backoff: p.queues.Backoff}, now)
		}))
}

// snooze ends a claim without counting an attempt.
func (p *Plane) snooze(ctx context.Context, fwd bool, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return ack(onTask[wire.SnoozeRequest, wire.Ack](ctx, p, fwd, wire.OpSnooze, req.ID, req,
		func() error { return task.ValidateMs("delay", req.DelayMs, p.cfg.MaxDelay) },
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.SnoozeApply(req.ID, req.Claim, req.DelayMs, now)
		}))
}

// requeue makes a dead task ready again.
func (p *Plane) requeue(ctx context.Context, fwd bool, req *wire.RequeueRequest) (*wire.Ack, error) {
	return ack(onTask[wire.RequeueRequest, wire.Ack](ctx, p, fwd, wire.OpRequeue, req.ID, req, nil,
		func(r *partition.Replica, now int64) (partition.Write, error) { return r.RequeueApply(req.ID, now) }))
}

// complete completes a task and tells its dependents; with Next it also
// claims the next tasks (see wire.CompleteRequest), applying the claims
// before waiting so that one fsync covers the completion and the claims.
func (p *Plane) complete(ctx context.Context, fwd bool, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.CompleteRequest, wire.CompleteResponse](ctx, p, fwd, p.partOf(req.ID), wire.OpComplete, req); handled {
		return resp, err
	}
	var ttl int64
	var count int
	if req.Next != nil {
		var err error
		if ttl, count, err = p.claimParams(req.Next); err != nil {
			return nil, fmt.Errorf("next: %w", err)
		}
		if req.Next.WaitMs != 0 {
			return nil, fmt.Errorf("%w: next: a claim with a completion does not long-poll; claim separately to wait", task.ErrInvalid)
		}
	}
	part := p.partOf(req.ID)
	_, wr, err := p.parts[part].CompleteApply(req.ID, req.Claim, req.Seq, p.now())
	if err != nil {
		return nil, p.refusal(ctx, req.ID, err)
	}
	ship := p.repl.Ship(part, p.repl.NeedAcks(part, 0), []task.Record{wr.Rec}, p.repl.WholeRecord(part, req.ID))
	resp := &wire.CompleteResponse{}
	var next *claimed
	if req.Next != nil && !p.queues.Paused(req.Next.Queue) {
		next, err = p.claimBatch(req.Next.Queue, ttl, count)
		if err != nil {
			// The completion stands; the worker claims again on its own.
			p.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
		}
	}
	// Every write here was applied before any wait, so one fsync can
	// cover the completion and the claims.
	if resp.Acks, err = ship.Finish(ctx, wr.Durable); err != nil {
		return nil, err
	}
	if resp.Next, err = next.wait(ctx); err != nil {
		p.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
	}
	// Not only when newly completed: a retry of a completion whose first
	// attempt failed after the write must still tell the dependents (take
	// makes it once).
	p.deps.Completed(req.ID)
	return resp, nil
}
