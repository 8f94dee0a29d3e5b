package client

import (
	"context"

	"github.com/skuldd/skuldd/wire"
)

// Task control: what an operator does to tasks no worker will finish.

// Cancel ends task id, if it is not completed, as cancelled: it is never
// claimed again, and its live claim is superseded (the worker's next
// renewal, update or completion fails with ErrCancelled, and a Worker
// cancels the handler's context). Tasks that depend on it stay blocked.
// A repeat succeeds; a completed task fails with ErrCompleted.
func (c *Client) Cancel(ctx context.Context, id ID, reason string) error {
	req := &wire.CancelRequest{ID: id, Reason: reason}
	return c.do(ctx, "cancel", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Cancel(ctx, req)
		return err
	})
}

// CancelClaim cancels task id as the holder of claim does (a handler
// cancelling its own task): fenced like Fail, it is refused
// (ErrClaimLost) unless claim is the task's latest, not ended.
func (c *Client) CancelClaim(ctx context.Context, id ID, claim uint32, reason string) error {
	req := &wire.CancelRequest{ID: id, Reason: reason, Claim: &claim}
	return c.do(ctx, "cancel", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Cancel(ctx, req)
		return err
	})
}

// Delete deletes task id: it reads as not found afterwards. A live claim
// is superseded as by Cancel. A task others depend on can be deleted only
// once completed (ErrConflict: cancel it instead). A repeat succeeds.
func (c *Client) Delete(ctx context.Context, id ID) error {
	req := &wire.DeleteRequest{ID: id}
	return c.do(ctx, "delete", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.Delete(ctx, req)
		return err
	})
}

// BulkResult is what a bulk op did: how many tasks a requeue or purge of
// dead tasks, or a group cancel, acted on, how many it left (see
// Client.PurgeDead, Client.CancelGroup), and the first reasons why.
type BulkResult = wire.BulkResponse

// DeadResult is the BulkResult of a bulk requeue or purge.
type DeadResult = BulkResult

// RequeueDead makes every dead task of queue ready again, cluster-wide.
func (c *Client) RequeueDead(ctx context.Context, queue string) (*DeadResult, error) {
	return c.dead(ctx, "requeue-dead", queue, (*wire.Client).RequeueDead)
}

// PurgeDead deletes every dead task of queue, cluster-wide, except those
// other tasks depend on (counted as skipped: deleting one would release
// its dependents).
func (c *Client) PurgeDead(ctx context.Context, queue string) (*DeadResult, error) {
	return c.dead(ctx, "purge-dead", queue, (*wire.Client).PurgeDead)
}

func (c *Client) dead(ctx context.Context, op, queue string,
	call func(*wire.Client, context.Context, *wire.DeadRequest) (*wire.BulkResponse, error),
) (*DeadResult, error) {
	req := &wire.DeadRequest{Queue: queue}
	var resp *wire.BulkResponse
	err := c.do(ctx, op, func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = call(cl, ctx, req)
		return err
	})
	return resp, err
}

// GroupStats is a task group's counts by state, cluster-wide (of the
// tasks kept: garbage collection removes ended ones after the retention),
// with Completed out of Total its progress, and Failures its first dead
// tasks with their last failure.
type GroupStats = wire.GroupResponse

// Group reads the counts of task group group (the label Task.Group) and
// up to dead of its dead tasks, lowest id first (0: 10; at most 1000).
// It reads only the group's tasks, from an index each partition's leader
// keeps. An unknown group has all counts zero.
func (c *Client) Group(ctx context.Context, group string, dead int) (*GroupStats, error) {
	req := &wire.GroupRequest{Group: group, Dead: dead}
	var resp *wire.GroupResponse
	err := c.do(ctx, "group", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Group(ctx, req)
		return err
	})
	return resp, err
}

// CancelGroup cancels every task of group that is not ended, cluster-wide,
// with reason, as Cancel does one: workers holding them lose their claims,
// tasks that depend on them stay blocked. Tasks that ended meanwhile are
// counted as skipped. A task enqueued into the group while it runs may be
// missed; a repeat cancels it. On an error some tasks may be cancelled
// already; a repeat finishes the work.
func (c *Client) CancelGroup(ctx context.Context, group, reason string) (*BulkResult, error) {
	req := &wire.GroupCancelRequest{Group: group, Reason: reason}
	var resp *wire.BulkResponse
	err := c.do(ctx, "group-cancel", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.GroupCancel(ctx, req)
		return err
	})
	return resp, err
}
