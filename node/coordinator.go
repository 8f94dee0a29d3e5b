package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// coordinator is the client API as clients see it (QUIC and HTTP): the
// Node's operations, retried while the cluster moves under them. A
// partition between leaders (a failover, a cohort move) answers
// "unavailable" or "stale epoch" for a moment; the coordinating node
// retries the operations that are safe to repeat, so clients see the
// move as a slower request rather than an error.
//
// Safe to repeat: reads, claims (a claim that was not acknowledged only
// expires), enqueues (every task gets its id before the first attempt,
// and a repeated id is idempotent), renew, update (keyed by claim and
// seq) and complete (a repeated completion by the same claim succeeds).
// Fail, snooze and requeue are not retried: a repeat could report an
// error for a write that took effect.
//
// Requests peers forward are served by the Node itself, never retried
// there: the forwarding node retries.
type coordinator struct{ n *Node }

// Retry policy of the coordinator.
const (
	// retryFor bounds the time spent retrying one request: a failover
	// (dead detection plus handoff) fits in it.
	retryFor = 10 * time.Second
	// retryPause is the first pause between attempts; it doubles up to
	// retryPauseMax.
	retryPause    = 20 * time.Millisecond
	retryPauseMax = 500 * time.Millisecond
)

// transient reports whether err is worth retrying: no leader, not enough
// replicas, or a leader that lost its epoch.
func transient(err error) bool {
	var p permanent
	if err == nil || errors.As(err, &p) {
		return false
	}
	switch wire.CodeOf(err) {
	case wire.CodeUnavailable, wire.CodeEpoch:
		return !errors.Is(err, wire.ErrShuttingDown)
	}
	return false
}

func retry[T any](ctx context.Context, n *Node, f func() (T, error)) (T, error) {
	return retryOp(ctx, n, false, f)
}

// retryWrite is retry for a write. Once an attempt ended in doubt (a
// transient error: it may have reached the leader and taken effect, its
// answer lost), a later attempt's refusal no longer proves that the write
// took effect nowhere: the first attempt may have applied it, and even be
// why the later one is refused (an update applied, then the task
// completed, then the retry refused as completed). Such a refusal is
// answered as unavailable, an outcome in doubt, with the refusal as its
// detail: a client that takes a refusal as "it never happened" is then
// never wrong.
func retryWrite[T any](ctx context.Context, n *Node, f func() (T, error)) (T, error) {
	return retryOp(ctx, n, true, f)
}

func retryOp[T any](ctx context.Context, n *Node, write bool, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(retryFor)
	pause := retryPause
	var doubt error // the first attempt that ended in doubt
	for {
		v, err := f()
		if write && doubt != nil && err != nil && !transient(err) {
			return v, fmt.Errorf("%w: an earlier attempt of this request may have taken effect (%v); this one was refused: %v", wire.ErrUnavailable, doubt, err)
		}
		if !transient(err) || time.Now().After(deadline) || n.stopping.Load() {
			return v, err
		}
		if doubt == nil {
			doubt = err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
		pause = min(2*pause, retryPauseMax)
	}
}

func (c coordinator) Ping(ctx context.Context) (*wire.PingResponse, error) { return c.n.Ping(ctx) }

func (c coordinator) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	n := c.n
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	for i := range req.Tasks {
		req.Tasks[i].FreshID = false // a node's word, never a client's
	}
	// Ids first: every attempt then writes the same tasks (a retry after
	// a write that failed to reach W replicas finds it). On the first
	// attempt they are fresh, so their leaders need not look for an
	// earlier write under them.
	for i := range req.Tasks {
		if req.Tasks[i].ID == nil {
			id := n.localID()
			req.Tasks[i].ID, req.Tasks[i].FreshID = &id, true
		}
	}
	return retryWrite(ctx, n, func() (*wire.EnqueueResponse, error) {
		resp, err := n.Enqueue(withFresh(ctx), req)
		for i := range req.Tasks {
			// A retry may find the first attempt's write.
			req.Tasks[i].FreshID = false
		}
		return resp, err
	})
}

func (c coordinator) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return retry(ctx, c.n, func() (*wire.ClaimResponse, error) { return c.n.Claim(ctx, req) })
}

func (c coordinator) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return retryWrite(ctx, c.n, func() (*wire.RenewResponse, error) { return c.n.Renew(ctx, req) })
}

func (c coordinator) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return retryWrite(ctx, c.n, func() (*wire.Ack, error) { return c.n.Update(ctx, req) })
}

func (c coordinator) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return retryWrite(ctx, c.n, func() (*wire.CompleteResponse, error) { return c.n.Complete(ctx, req) })
}

func (c coordinator) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return c.n.Fail(ctx, req)
}

func (c coordinator) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return c.n.Snooze(ctx, req)
}

func (c coordinator) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return c.n.Requeue(ctx, req)
}

// Cancel and Delete are safe to repeat: a repeat of either is
// acknowledged. A bulk requeue or purge is too: what one did is no longer
// dead, so a repeat only counts less.
func (c coordinator) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return retryWrite(ctx, c.n, func() (*wire.Ack, error) { return c.n.Cancel(ctx, req) })
}

func (c coordinator) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return retryWrite(ctx, c.n, func() (*wire.Ack, error) { return c.n.Delete(ctx, req) })
}

func (c coordinator) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.DeadResponse, error) {
	return retryWrite(ctx, c.n, func() (*wire.DeadResponse, error) { return c.n.RequeueDead(ctx, req) })
}

func (c coordinator) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.DeadResponse, error) {
	return retryWrite(ctx, c.n, func() (*wire.DeadResponse, error) { return c.n.PurgeDead(ctx, req) })
}

func (c coordinator) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return retry(ctx, c.n, func() (*wire.TaskView, error) { return c.n.Get(ctx, req) })
}

// List is retried only until it has emitted a page: after that a retry
// would repeat tasks.
func (c coordinator) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	emitted := false
	_, err := retry(ctx, c.n, func() (struct{}, error) {
		err := c.n.List(ctx, req, func(p *wire.ListPage) error { emitted = true; return emit(p) })
		if emitted && err != nil {
			return struct{}{}, permanent{err}
		}
		return struct{}{}, err
	})
	var p permanent
	if errors.As(err, &p) {
		return p.err
	}
	return err
}

// permanent marks an error retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

func (c coordinator) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return retry(ctx, c.n, func() (*wire.CountResponse, error) { return c.n.Count(ctx, req) })
}

func (c coordinator) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return retry(ctx, c.n, func() (*wire.QueuesResponse, error) { return c.n.Queues(ctx, req) })
}

func (c coordinator) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return c.n.Leave(ctx)
}

func (c coordinator) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	return c.n.Cluster(ctx)
}

func (c coordinator) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return retry(ctx, c.n, func() (*wire.GCResponse, error) { return c.n.GC(ctx, req) })
}

func (c coordinator) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return retry(ctx, c.n, func() (*wire.QueueSettings, error) { return c.n.QueueGet(ctx, req) })
}

func (c coordinator) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return retry(ctx, c.n, func() (*wire.QueueSettings, error) { return c.n.QueueSet(ctx, req) })
}

var _ wire.Service = coordinator{}
