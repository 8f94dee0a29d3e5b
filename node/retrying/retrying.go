package retrying

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Host is the node the retries serve.
type Host interface {
	// The node's operations, each tried once.
	wire.Service
	// Stopping reports whether the node is shutting down: no retry then.
	Stopping() bool
	// StampIDs prepares an enqueue for its retries: it gives each task
	// without an id a new one, marked fresh (EnqueueTask.FreshID), and
	// clears the marks on the others (a node's word, never a client's).
	// The Host's Enqueue trusts the marks: every enqueue reaches it
	// through here. It fails if the node cannot serve.
	StampIDs(req *wire.EnqueueRequest) error
	// Unreachable says why retrying cannot serve what a request needs
	// within the retry time: a partition it needs whose cohort has no
	// majority within this node's reach (no leader can be elected or
	// write there until nodes come back), or the metadata group without
	// a majority of its voters. nil: retrying may help (a failover in
	// progress, a leader not known yet).
	Unreachable(need Need) error
}

// Need is what a request needs to be served, for telling a wait that
// retrying can end (a failover) from one it cannot (a majority gone).
type Need struct {
	// IDs: the partitions of these tasks.
	IDs []task.ID
	// All: every partition (a cluster-wide read).
	All bool
	// Meta: the metadata group (queue settings, schedules, shards).
	Meta bool
}

// none is the need of a request retrying judges by its errors alone.
var none = Need{}

func (n Need) empty() bool { return len(n.IDs) == 0 && !n.All && !n.Meta }

// Service is the retrying client API of a node.
type Service struct{ h Host }

// New returns h's operations with the retry policy.
func New(h Host) Service { return Service{h: h} }

// The retry policy.
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

func retry[T any](ctx context.Context, s Service, need Need, f func() (T, error)) (T, error) {
	return retryOp(ctx, s, false, need, f)
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
func retryWrite[T any](ctx context.Context, s Service, need Need, f func() (T, error)) (T, error) {
	return retryOp(ctx, s, true, need, f)
}

// retryOp runs f until it succeeds or fails for good, retrying what
// failed for a while (transient) up to retryFor; it stops early, with an
// error that says why, once what the request needs is out of reach for
// longer than a retry can wait (Host.Unreachable).
func retryOp[T any](ctx context.Context, s Service, write bool, need Need, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(retryFor)
	pause := retryPause
	var doubt error // the first attempt that ended in doubt
	for {
		v, err := f()
		if write && doubt != nil && err != nil && !transient(err) {
			return v, fmt.Errorf("%w: an earlier attempt of this request may have taken effect (%v); this one was refused: %v", wire.ErrUnavailable, doubt, err)
		}
		if !transient(err) || time.Now().After(deadline) || s.h.Stopping() {
			return v, err
		}
		if !need.empty() {
			if why := s.h.Unreachable(need); why != nil {
				return v, fmt.Errorf("%w: %v (last attempt: %v)", wire.ErrUnavailable, why, err)
			}
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

func (s Service) Ping(ctx context.Context) (*wire.PingResponse, error) { return s.h.Ping(ctx) }

func (s Service) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	// Ids first: every attempt then writes the same tasks (a retry after
	// a write that failed to reach W replicas finds it). On the first
	// attempt they are fresh, so their leaders need not look for an
	// earlier write under them.
	if err := s.h.StampIDs(req); err != nil {
		return nil, err
	}
	var doubt error // the first attempt that ended in doubt
	need := Need{IDs: make([]task.ID, 0, len(req.Tasks))}
	for _, t := range req.Tasks {
		if t.ID != nil {
			need.IDs = append(need.IDs, *t.ID)
		}
	}
	return retryWrite(ctx, s, need, func() (*wire.EnqueueResponse, error) {
		resp, err := s.h.Enqueue(ctx, req)
		for i := range req.Tasks {
			// A retry may find the first attempt's write.
			req.Tasks[i].FreshID = false
		}
		if transient(err) && doubt == nil {
			doubt = err
		}
		if err == nil && doubt != nil {
			if i := duplicateOfAnother(req, resp); i >= 0 {
				// "Duplicate of another task" says this task was not
				// created: a refusal of its id, which an earlier attempt
				// in doubt may have written anyway (a stale leader wrote
				// it on its own replica, whence it spreads; the
				// simulation, seed 644434843489388993). A refusal, which
				// retryWrite answers after doubt as in doubt.
				return nil, permanent{fmt.Errorf("task %s was not created, its key held by %s", *req.Tasks[i].ID, resp.Results[i].ID)}
			}
		}
		return resp, err
	})
}

// duplicateOfAnother returns the index of a task of req whose result
// names another task as its key's holder (-1: none).
func duplicateOfAnother(req *wire.EnqueueRequest, resp *wire.EnqueueResponse) int {
	if resp == nil {
		return -1
	}
	for i, r := range resp.Results {
		if r.Duplicate && i < len(req.Tasks) && req.Tasks[i].ID != nil && r.ID != *req.Tasks[i].ID {
			return i
		}
	}
	return -1
}

func (s Service) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	// A claim asks every leader in turn when this node has no work: it is
	// out of reach as a cluster-wide read is.
	return retry(ctx, s, everywhere, func() (*wire.ClaimResponse, error) { return s.h.Claim(ctx, req) })
}

func (s Service) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return retryWrite(ctx, s, ids(req.ID), func() (*wire.RenewResponse, error) { return s.h.Renew(ctx, req) })
}

func (s Service) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return retryWrite(ctx, s, ids(req.ID), func() (*wire.Ack, error) { return s.h.Update(ctx, req) })
}

func (s Service) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return retryWrite(ctx, s, ids(req.ID), func() (*wire.CompleteResponse, error) { return s.h.Complete(ctx, req) })
}

func (s Service) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return s.h.Fail(ctx, req)
}

func (s Service) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return s.h.Snooze(ctx, req)
}

func (s Service) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return s.h.Requeue(ctx, req)
}

// Cancel and Delete are safe to repeat: a repeat of either is
// acknowledged. A bulk requeue, purge or group cancel is too: what one did
// is no longer dead (or open), so a repeat only counts less.
func (s Service) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return retryWrite(ctx, s, ids(req.ID), func() (*wire.Ack, error) { return s.h.Cancel(ctx, req) })
}

func (s Service) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return retryWrite(ctx, s, ids(req.ID), func() (*wire.Ack, error) { return s.h.Delete(ctx, req) })
}

func (s Service) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return retryWrite(ctx, s, everywhere, func() (*wire.BulkResponse, error) { return s.h.RequeueDead(ctx, req) })
}

func (s Service) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return retryWrite(ctx, s, everywhere, func() (*wire.BulkResponse, error) { return s.h.PurgeDead(ctx, req) })
}

func (s Service) GroupCancel(ctx context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	return retryWrite(ctx, s, everywhere, func() (*wire.BulkResponse, error) { return s.h.GroupCancel(ctx, req) })
}

func (s Service) Group(ctx context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return retry(ctx, s, everywhere, func() (*wire.GroupResponse, error) { return s.h.Group(ctx, req) })
}

func (s Service) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return retry(ctx, s, ids(req.ID), func() (*wire.TaskView, error) { return s.h.Get(ctx, req) })
}

// List is retried only until it has emitted a page: after that a retry
// would repeat tasks.
func (s Service) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	emitted := false
	_, err := retry(ctx, s, everywhere, func() (struct{}, error) {
		err := s.h.List(ctx, req, func(p *wire.ListPage) error { emitted = true; return emit(p) })
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

// metaAttempt bounds one attempt of a metadata-group op: a proposal that
// no quorum commits waits for its context, so without a bound a client
// would wait out its own deadline to learn nothing. An election fits in
// it; a retry follows, unless the group is out of reach.
const metaAttempt = 5 * time.Second

// retryMeta is retry for an op on the metadata group: refused at once
// when the group is out of reach, each attempt bounded by metaAttempt.
// Every such op is safe to repeat (a setting or a schedule set again, a
// shard member's join or leave by its name).
func retryMeta[T any](ctx context.Context, s Service, f func(context.Context) (T, error)) (T, error) {
	if why := s.h.Unreachable(meta); why != nil {
		var zero T
		return zero, fmt.Errorf("%w: %v", wire.ErrUnavailable, why)
	}
	return retry(ctx, s, meta, func() (T, error) {
		actx, cancel := context.WithTimeout(ctx, metaAttempt)
		defer cancel()
		v, err := f(actx)
		if err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			err = fmt.Errorf("%w: the metadata group did not answer within %v (%v)", wire.ErrUnavailable, metaAttempt, err)
		}
		return v, err
	})
}

// everywhere and meta are the needs of cluster-wide and metadata ops.
var (
	everywhere = Need{All: true}
	meta       = Need{Meta: true}
)

// ids is the need of an op on one task.
func ids(id task.ID) Need { return Need{IDs: []task.ID{id}} }

// permanent marks an error retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

func (s Service) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return retry(ctx, s, everywhere, func() (*wire.CountResponse, error) { return s.h.Count(ctx, req) })
}

func (s Service) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return retry(ctx, s, everywhere, func() (*wire.QueuesResponse, error) { return s.h.Queues(ctx, req) })
}

func (s Service) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return s.h.Leave(ctx)
}

func (s Service) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	return s.h.Cluster(ctx)
}

// Hints is the node's own: nothing to retry elsewhere.
func (s Service) Hints(ctx context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return s.h.Hints(ctx, req)
}

func (s Service) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return retry(ctx, s, everywhere, func() (*wire.GCResponse, error) { return s.h.GC(ctx, req) })
}

func (s Service) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return retry(ctx, s, none, func() (*wire.QueueSettings, error) { return s.h.QueueGet(ctx, req) }) // a local read
}

func (s Service) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.QueueSettings, error) { return s.h.QueueSet(ctx, req) })
}

func (s Service) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.ScheduleView, error) { return s.h.ScheduleSet(ctx, req) })
}

func (s Service) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	return retry(ctx, s, none, func() (*wire.ScheduleListResponse, error) { return s.h.ScheduleList(ctx, req) }) // a local read
}

func (s Service) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.ScheduleDeleteResponse, error) { return s.h.ScheduleDelete(ctx, req) })
}

// The shard ops are retried as one: a join or leave is idempotent by
// member, and a renewal repeated renews again (its Stopped only grows).
func (s Service) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.ShardView, error) { return s.h.ShardJoin(ctx, req) })
}

func (s Service) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.ShardView, error) { return s.h.ShardRenew(ctx, req) })
}

func (s Service) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return retryMeta(ctx, s, func(ctx context.Context) (*wire.ShardView, error) { return s.h.ShardLeave(ctx, req) })
}

func (s Service) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return retry(ctx, s, none, func() (*wire.ShardView, error) { return s.h.ShardMembers(ctx, req) }) // a local read
}

var _ wire.Service = Service{}
