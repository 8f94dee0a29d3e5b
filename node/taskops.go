package node

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
func (n *Node) refusal(ctx context.Context, id task.ID, err error) error {
	err = leaderErr(err)
	if !isStateRefusal(err) {
		return err
	}
	if cerr := n.repl.ConfirmLeading(ctx, n.partOf(id)); cerr != nil {
		return fmt.Errorf("%w: %v; this node could not confirm it still leads the task's partition: %v", wire.ErrUnavailable, err, cerr)
	}
	return err
}

// onTask runs a write on task id at its partition's leader: forwarded
// there when that is another node (fwd, handled), else checked (check,
// after forwarding: the leader's limits apply), applied (apply returns the
// write's record and its durability handle; a refusal is confirmed first:
// refusal) and shipped while the local sync runs, answering once W
// replicas hold it.
func onTask[Req, Resp any](ctx context.Context, n *Node, op wire.Op, id task.ID, req *Req,
	check func() error, apply func(r *partition.Replica, now int64) (partition.Write, error),
) (acks int, fwd *Resp, handled bool, err error) {
	if err := n.checkServing(); err != nil {
		return 0, nil, true, err
	}
	if err := id.Check(); err != nil {
		return 0, nil, true, err
	}
	if fwd, handled, err := forward[Req, Resp](ctx, n, n.partOf(id), op, req); handled {
		return 0, fwd, true, err
	}
	if check != nil {
		if err := check(); err != nil {
			return 0, nil, true, err
		}
	}
	part := n.partOf(id)
	wr, err := apply(n.parts[part], n.now())
	if errors.Is(err, task.ErrNotFound) {
		// An enqueue written to the cohort directly may not have reached
		// this replica yet: look for it there before refusing.
		if found, rerr := n.repl.ReadMissing(ctx, part, id); rerr != nil {
			return 0, nil, true, fmt.Errorf("%w: %v; looking for it on the cohort: %v", wire.ErrUnavailable, err, rerr)
		} else if found {
			wr, err = apply(n.parts[part], n.now())
		}
	}
	if err != nil {
		return 0, nil, true, n.refusal(ctx, id, err)
	}
	acks, err = n.repl.Replicate(ctx, part, 0, wr)
	return acks, nil, err != nil, err
}

// ack is the answer of an onTask write with an Ack.
func ack(acks int, fwd *wire.Ack, handled bool, err error) (*wire.Ack, error) {
	if handled {
		return fwd, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// Renew extends a claim.
func (n *Node) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	var c task.Claim
	var ttl int64
	acks, fwd, handled, err := onTask[wire.RenewRequest, wire.RenewResponse](ctx, n, wire.OpRenew, req.ID, req,
		func() error {
			if drifting, _ := n.drifting(); drifting {
				return n.errDrifting() // the coordinator retries at the next leader
			}
			// 0: the queue's default lease, else the node's, as a claim's.
			if ttl = req.TTLMs; ttl < 0 || ttl > n.cfg.MaxTTL.Milliseconds() {
				return fmt.Errorf("%w: ttl %dms: want 0 (the default) or 1ms..%v", task.ErrInvalid, ttl, n.cfg.MaxTTL)
			}
			return nil
		},
		func(r *partition.Replica, now int64) (wr partition.Write, err error) {
			c, wr, err = r.RenewApply(req.ID, req.Claim, now, partition.Lease{TTL: ttl, QueueTTL: n.defaultLease})
			return wr, err
		})
	if handled {
		return fwd, err
	}
	return &wire.RenewResponse{End: c.End, Acks: acks}, nil
}

// Update appends a progress entry.
func (n *Node) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return ack(onTask[wire.UpdateRequest, wire.Ack](ctx, n, wire.OpUpdate, req.ID, req,
		func() error { return task.ValidateData(req.Data, n.cfg.MaxPayload) },
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.UpdateApply(req.ID, req.Claim, req.Seq, req.Data, now)
		}))
}

// Fail ends a claim as a failed attempt.
func (n *Node) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return ack(onTask[wire.FailRequest, wire.Ack](ctx, n, wire.OpFail, req.ID, req,
		func() error {
			if req.RetryAfterMs == nil {
				return nil
			}
			if req.NoRetry {
				return fmt.Errorf("%w: a fail with no retry takes no retry-after", task.ErrInvalid)
			}
			return task.ValidateMs("retry-after", *req.RetryAfterMs, n.cfg.MaxDelay)
		},
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.FailApply(req.ID, req.Claim, req.Reason,
				partition.Retry{NoRetry: req.NoRetry, After: req.RetryAfterMs, Backoff: n.queues.Backoff}, now)
		}))
}

// Snooze ends a claim without counting an attempt.
func (n *Node) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return ack(onTask[wire.SnoozeRequest, wire.Ack](ctx, n, wire.OpSnooze, req.ID, req,
		func() error { return task.ValidateMs("delay", req.DelayMs, n.cfg.MaxDelay) },
		func(r *partition.Replica, now int64) (partition.Write, error) {
			return r.SnoozeApply(req.ID, req.Claim, req.DelayMs, now)
		}))
}

// Requeue makes a dead task ready again.
func (n *Node) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return ack(onTask[wire.RequeueRequest, wire.Ack](ctx, n, wire.OpRequeue, req.ID, req, nil,
		func(r *partition.Replica, now int64) (partition.Write, error) { return r.RequeueApply(req.ID, now) }))
}

// Complete completes a task and tells its dependents; with Next it also
// claims the next tasks (see wire.CompleteRequest), applying the claims
// before waiting so that one fsync covers the completion and the claims.
func (n *Node) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.CompleteRequest, wire.CompleteResponse](ctx, n, n.partOf(req.ID), wire.OpComplete, req); handled {
		return resp, err
	}
	var ttl int64
	var count int
	if req.Next != nil {
		var err error
		if ttl, count, err = n.claimParams(req.Next); err != nil {
			return nil, fmt.Errorf("next: %w", err)
		}
		if req.Next.WaitMs != 0 {
			return nil, fmt.Errorf("%w: next: a claim with a completion does not long-poll; claim separately to wait", task.ErrInvalid)
		}
	}
	part := n.partOf(req.ID)
	_, wr, err := n.parts[part].CompleteApply(req.ID, req.Claim, req.Seq, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	ship := n.repl.Ship(part, n.repl.NeedAcks(part, 0), []task.Record{wr.Rec}, n.repl.WholeRecord(part, req.ID))
	resp := &wire.CompleteResponse{}
	var next *claimed
	if req.Next != nil && !n.queues.Paused(req.Next.Queue) {
		next, err = n.claimBatch(req.Next.Queue, ttl, count)
		if err != nil {
			// The completion stands; the worker claims again on its own.
			n.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
		}
	}
	// Every write here was applied before any wait, so one fsync can
	// cover the completion and the claims.
	if resp.Acks, err = ship.Finish(ctx, wr.Durable); err != nil {
		return nil, err
	}
	if resp.Next, err = next.wait(ctx); err != nil {
		n.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
	}
	// Not only when newly completed: a retry of a completion whose first
	// attempt failed after the write must still tell the dependents (take
	// makes it once).
	n.deps.Completed(req.ID)
	return resp, nil
}
