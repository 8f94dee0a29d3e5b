package client

import (
	"context"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// ID is a task's id: 20 bytes, rendered as 40 hex characters.
type ID = task.ID

// ParseID parses an id from its 40 hex characters.
func ParseID(s string) (ID, error) { return task.ParseID(s) }

// Task is a task to enqueue.
type Task struct {
	// ID names the task; the zero ID: the client picks one (NewID). A
	// task enqueued again with its id is not duplicated.
	ID ID
	// Queue is the queue's name; required.
	Queue string
	// Priority: higher is claimed first; within a priority, lower ids
	// (older tasks) first.
	Priority int32
	// Data is the payload the worker gets.
	Data []byte
	// Deps are tasks that must complete before this one can be claimed.
	Deps []ID
	// Delay keeps the task from being claimed before now+Delay.
	Delay time.Duration
	// Group labels tasks that are read and cancelled as one (Group,
	// CancelGroup), across queues; Description is free text, for people.
	Group, Description string
	// Kind names what the task does: a Worker whose handler is a Kinds
	// routes it by kind (EnqueueKind sets it). Subtopic classifies it
	// within its queue, for List, CountSubtopic and Subtopics.
	Kind, Subtopic string
	// MaxAttempts is how many claims may end without completion before
	// the task is dead; 0 takes the queue's default, else the node's.
	MaxAttempts uint32
	// TimeLimit bounds how long one claim of the task may run, renewals
	// included; 0 takes the queue's default, else none. The leader ends
	// a claim at its limit, a failed attempt ("time limit"), and a
	// Worker ends the handler a little before.
	TimeLimit time.Duration
	// Key makes the task unique in its queue: while a task of the queue
	// with the key is kept (completed included, cancelled not; until
	// garbage collection, or for at most UniqueFor after its enqueue when
	// that is set), enqueueing the key again yields that task
	// (Enqueued.Duplicate) instead of a new one. Leave ID zero with a key:
	// the node picks an id of the key's partition. A task with a key
	// cannot have Deps.
	Key       string
	UniqueFor time.Duration
}

// Enqueued is the outcome of one enqueued task.
type Enqueued struct {
	// ID is the task's id.
	ID ID
	// Acks is the number of replicas that hold the task durably.
	Acks int
	// Duplicate: the task's key was taken, by the task ID names (perhaps
	// an earlier attempt of this same enqueue); no task was created.
	Duplicate bool
	// Hinted: the task's cohort could not be reached; the node holds the
	// task durably and hands it to the cohort once it can (EnqueueOptions.
	// Hint). It is not claimable until then. Acks is 0.
	Hinted bool
}

// Enqueue enqueues t and returns its id once a majority of its replicas
// hold it durably.
func (c *Client) Enqueue(ctx context.Context, t Task) (Enqueued, error) {
	out, err := c.EnqueueBatch(ctx, []Task{t})
	if err != nil {
		return Enqueued{}, err
	}
	return out[0], nil
}

// EnqueueBatch enqueues tasks in one request and returns their outcomes
// in the same order. Tasks without an id get one first, so the whole
// batch is safe to send again.
func (c *Client) EnqueueBatch(ctx context.Context, tasks []Task) ([]Enqueued, error) {
	return c.EnqueueWith(ctx, EnqueueOptions{}, tasks...)
}

// EnqueueOptions shape an enqueue request.
type EnqueueOptions struct {
	// W is how many replicas of each task's partition must hold it
	// durably before the enqueue is acknowledged; 0: a majority of its
	// cohort. W=1 answers sooner, and a task acknowledged by one replica
	// is lost only if that replica's disk is, before anti-entropy copied
	// it.
	W int
	// Hint: a task whose cohort the node cannot write is kept on the node
	// (synced) and answered Hinted, instead of failing; the node hands it
	// to the cohort once it can. Tasks with Deps are never hinted; a
	// keyed one whose key another task took meanwhile is retired at its
	// handover (cancelled, naming that task).
	Hint bool
}

// EnqueueWith is EnqueueBatch with options.
func (c *Client) EnqueueWith(ctx context.Context, opts EnqueueOptions, tasks ...Task) ([]Enqueued, error) {
	if opts.W < 0 {
		return nil, fmt.Errorf("%w: enqueue: w=%d is negative", ErrInvalid, opts.W)
	}
	req := &wire.EnqueueRequest{W: opts.W, Hint: opts.Hint, Tasks: make([]wire.EnqueueTask, len(tasks))}
	for i, t := range tasks {
		req.Tasks[i] = wire.EnqueueTask{
			Queue: t.Queue, Priority: t.Priority, Data: t.Data, Deps: t.Deps,
			DelayMs: t.Delay.Milliseconds(), Group: t.Group, Description: t.Description, MaxAttempts: t.MaxAttempts,
			TimeLimitMs: t.TimeLimit.Milliseconds(), Kind: t.Kind, Subtopic: t.Subtopic,
			Key: t.Key, UniqueForMs: t.UniqueFor.Milliseconds(),
		}
		// An id of the client's own makes a retry safe; a key does that
		// already, and only the node knows the key's partition.
		id := t.ID
		if id.IsZero() && t.Key == "" {
			id = c.NewID()
		}
		if !id.IsZero() {
			req.Tasks[i].ID = &id
		}
	}
	var resp *wire.EnqueueResponse
	err := c.do(ctx, "enqueue", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Enqueue(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Enqueued, len(resp.Results))
	for i, r := range resp.Results {
		out[i] = Enqueued{ID: r.ID, Acks: r.Acks, Duplicate: r.Duplicate, Hinted: r.Hinted}
	}
	return out, nil
}

// Info is a task as a node reads it: spec, state ("ready", "claimed",
// "delayed" by its enqueue, "snoozed", "retrying" after a failure,
// "blocked", "completed", "dead", "cancelled"), claims, progress and
// failures.
type Info = wire.TaskView

// Claimed is a task this client claimed: its view, and the claim.
type Claimed struct {
	Info
	// Claim is the claim's id: the fencing token every write under this
	// claim carries. A newer claim of the task supersedes it, and the
	// nodes then refuse it (ErrClaimLost).
	Claim uint32
	// Start is when the claim began, and End when its lease ends unless
	// renewed, by the granting node's clock.
	Start, End time.Time
	// Lease is how long the node granted: the TTL asked for, or the
	// queue's default lease, or the node's, when the claim asked for
	// none.
	Lease time.Duration
}

// ClaimOptions shape a claim.
type ClaimOptions struct {
	// TTL is the lease; 0: the node's default.
	TTL time.Duration
	// Count is the most tasks to claim; 0: one.
	Count int
	// Wait long-polls: the claim waits up to Wait for work instead of
	// answering empty at once.
	Wait time.Duration
}

// Claim claims up to opts.Count ready tasks of queue. It returns none
// (and no error) when the queue had nothing ready within opts.Wait.
func (c *Client) Claim(ctx context.Context, queue string, opts ClaimOptions) ([]Claimed, error) {
	req := &wire.ClaimRequest{Queue: queue, TTLMs: opts.TTL.Milliseconds(), Count: opts.Count, WaitMs: opts.Wait.Milliseconds()}
	var resp *wire.ClaimResponse
	err := c.do(ctx, "claim", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Claim(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return claimedOf(resp.Tasks), nil
}

// claimedOf turns the views of a claim response into Claimed.
func claimedOf(views []wire.TaskView) []Claimed {
	out := make([]Claimed, 0, len(views))
	for _, v := range views {
		cl := Claimed{Info: v}
		if v.Claim != nil {
			cl.Claim = *v.Claim
		}
		for _, c := range v.Claims {
			if c.Claim == cl.Claim {
				cl.Start, cl.End = time.UnixMilli(c.Start), time.UnixMilli(c.End)
				cl.Lease = time.Duration(c.End-c.Start) * time.Millisecond
			}
		}
		out = append(out, cl)
	}
	return out
}

// Renew extends the lease of claim on task id to now+ttl (0: the
// queue's default lease, else the node's), never past the claim's start
// plus the task's time limit, and returns its new end. It fails with
// ErrTimeLimit once the claim ran for the time limit.
func (c *Client) Renew(ctx context.Context, id ID, claim uint32, ttl time.Duration) (time.Time, error) {
	req := &wire.RenewRequest{ID: id, Claim: claim, TTLMs: ttl.Milliseconds()}
	var resp *wire.RenewResponse
	err := c.do(ctx, "renew", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Renew(ctx, req)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(resp.End), nil
}

// Update appends progress entry seq (0, 1, 2, ... within the claim) to
// the claim's history. Sending the same entry again is harmless.
func (c *Client) Update(ctx context.Context, id ID, claim uint32, seq uint64, data []byte) error {
	req := &wire.UpdateRequest{ID: id, Claim: claim, Seq: seq, Data: data}
	return c.do(ctx, "update", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Update(ctx, req)
		return err
	})
}

// Complete completes task id under claim, after the claim's last update.
// Completing it again under the same claim is harmless.
func (c *Client) Complete(ctx context.Context, id ID, claim uint32) error {
	req := &wire.CompleteRequest{ID: id, Claim: claim}
	return c.do(ctx, "complete", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Complete(ctx, req)
		return err
	})
}

// CompleteAndClaim completes task id under claim and, in the same
// request, claims up to opts.Count ready tasks of queue (opts.Wait must
// be 0: the claim does not long-poll). One round trip and one fsync
// serve both: a worker loop's cheapest step. The completion stands even
// when the claim finds nothing (no tasks, no error).
func (c *Client) CompleteAndClaim(ctx context.Context, id ID, claim uint32, queue string, opts ClaimOptions) ([]Claimed, error) {
	req := &wire.CompleteRequest{ID: id, Claim: claim,
		Next: &wire.ClaimRequest{Queue: queue, TTLMs: opts.TTL.Milliseconds(), Count: opts.Count, WaitMs: opts.Wait.Milliseconds()}}
	var resp *wire.CompleteResponse
	err := c.do(ctx, "complete", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Complete(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return claimedOf(resp.Next), nil
}

// Fail ends claim as a failed attempt, with reason for people. The task
// is retried after retryAfter (0: the node's exponential backoff), or is
// dead once it failed its max attempts.
func (c *Client) Fail(ctx context.Context, id ID, claim uint32, reason string, retryAfter time.Duration) error {
	req := &wire.FailRequest{ID: id, Claim: claim, Reason: reason}
	if retryAfter > 0 {
		ms := retryAfter.Milliseconds()
		req.RetryAfterMs = &ms
	}
	return c.do(ctx, "fail", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Fail(ctx, req)
		return err
	})
}

// FailNoRetry ends claim as a failed attempt and the task with it: dead
// at once, whatever its attempts left, with reason for people.
func (c *Client) FailNoRetry(ctx context.Context, id ID, claim uint32, reason string) error {
	req := &wire.FailRequest{ID: id, Claim: claim, Reason: reason, NoRetry: true}
	return c.do(ctx, "fail", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Fail(ctx, req)
		return err
	})
}

// Snooze hands task id back without counting an attempt: it is ready
// again after delay.
func (c *Client) Snooze(ctx context.Context, id ID, claim uint32, delay time.Duration) error {
	req := &wire.SnoozeRequest{ID: id, Claim: claim, DelayMs: delay.Milliseconds()}
	return c.do(ctx, "snooze", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Snooze(ctx, req)
		return err
	})
}

// Requeue makes dead task id ready again. A retry after a lost answer
// may find it no longer dead (task.ErrNotDead): the first one did it.
func (c *Client) Requeue(ctx context.Context, id ID) error {
	req := &wire.RequeueRequest{ID: id}
	return c.do(ctx, "requeue", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Requeue(ctx, req)
		return err
	})
}

// Get reads task id from a majority of its replicas.
func (c *Client) Get(ctx context.Context, id ID) (*Info, error) {
	req := &wire.GetRequest{ID: id}
	var resp *wire.TaskView
	err := c.do(ctx, "get", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Get(ctx, req)
		return err
	})
	return resp, err
}

// Count returns the number of tasks of queue (of every queue: ""), in
// every state.
func (c *Client) Count(ctx context.Context, queue string) (int64, error) {
	return c.count(ctx, &wire.CountRequest{Queue: queue})
}

// CountSubtopic counts the tasks of subtopic in queue ("": in every
// queue), in every state.
func (c *Client) CountSubtopic(ctx context.Context, queue, subtopic string) (int64, error) {
	return c.count(ctx, &wire.CountRequest{Queue: queue, Subtopic: subtopic})
}

func (c *Client) count(ctx context.Context, req *wire.CountRequest) (int64, error) {
	var resp *wire.CountResponse
	err := c.do(ctx, "count", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Count(ctx, req)
		return err
	})
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}
