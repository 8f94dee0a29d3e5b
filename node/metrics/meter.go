package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skuldd/skuldd/wire"
)

// latencyBuckets are the upper bounds of the request-latency histogram,
// in seconds: durable writes take about a millisecond, long polls up to
// MaxWait.
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// codeOK is the code label of a request that succeeded.
const codeOK = "ok"

// observe records one request of op that took d and ended with err.
func (m *Metrics) observe(op wire.Op, d time.Duration, err error) {
	if err == nil {
		cached(&m.okCounts, op, func() prometheus.Counter { return m.requests.WithLabelValues(op.String(), codeOK) }).Inc()
	} else {
		m.requests.WithLabelValues(op.String(), wire.CodeOf(err).Name()).Inc()
	}
	cached(&m.latencies, op, func() prometheus.Observer { return m.latency.WithLabelValues(op.String()) }).Observe(d.Seconds())
}

// opCacheSize bounds the ops whose series observe keeps at hand: the
// client ops (below the peer ops' 100).
const opCacheSize = 64

// cached returns op's series from cache, made by mk and kept at its first
// use: a label lookup hashes the label values under the vector's lock,
// on every request otherwise (measured: about 1.5% of a node's CPU under
// claim+complete load). A series still appears in the exposition when
// its first request does, as without the cache.
func cached[T any](cache *[opCacheSize]atomic.Pointer[T], op wire.Op, mk func() T) T {
	if int(op) >= opCacheSize {
		return mk()
	}
	if p := cache[op].Load(); p != nil {
		return *p
	}
	v := mk()
	cache[op].Store(&v)
	return v
}

// Meter returns s with every request counted and timed in
// skuldd_requests_total and skuldd_request_duration_seconds, by op (and
// outcome code).
func (m *Metrics) Meter(s wire.Service) wire.Service { return metered{s, m} }

// metered is a client API with every request counted and timed.
type metered struct {
	s wire.Service
	m *Metrics
}

func meter[T any](m *Metrics, op wire.Op, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	m.observe(op, time.Since(start), err)
	return v, err
}

func (m metered) Ping(ctx context.Context) (*wire.PingResponse, error) {
	return meter(m.m, wire.OpPing, func() (*wire.PingResponse, error) { return m.s.Ping(ctx) })
}

func (m metered) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	resp, err := meter(m.m, wire.OpEnqueue, func() (*wire.EnqueueResponse, error) { return m.s.Enqueue(ctx, req) })
	if err == nil {
		m.m.observeEnqueued(req, resp)
	}
	return resp, err
}

// Claim is timed without its long-poll wait, which goes to
// skuldd_claim_wait_seconds: an idle worker's claim waits its whole wait
// by design, and a latency alert must not fire on it.
func (m metered) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	start := time.Now()
	resp, err := m.s.Claim(ctx, req)
	d := time.Since(start)
	if err == nil {
		if resp.Waited > 0 {
			m.m.claimWait.Observe(resp.Waited.Seconds())
		}
		d = max(d-resp.Waited, 0)
		m.m.observeClaimed(resp.Tasks)
	}
	m.m.observe(wire.OpClaim, d, err)
	return resp, err
}

func (m metered) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return meter(m.m, wire.OpRenew, func() (*wire.RenewResponse, error) { return m.s.Renew(ctx, req) })
}

func (m metered) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpUpdate, func() (*wire.Ack, error) { return m.s.Update(ctx, req) })
}

func (m metered) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	resp, err := meter(m.m, wire.OpComplete, func() (*wire.CompleteResponse, error) { return m.s.Complete(ctx, req) })
	if err == nil {
		m.m.observeClaimed(resp.Next)
	}
	return resp, err
}

func (m metered) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpFail, func() (*wire.Ack, error) { return m.s.Fail(ctx, req) })
}

func (m metered) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpSnooze, func() (*wire.Ack, error) { return m.s.Snooze(ctx, req) })
}

func (m metered) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpRequeue, func() (*wire.Ack, error) { return m.s.Requeue(ctx, req) })
}

func (m metered) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpCancel, func() (*wire.Ack, error) { return m.s.Cancel(ctx, req) })
}

func (m metered) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return meter(m.m, wire.OpDelete, func() (*wire.Ack, error) { return m.s.Delete(ctx, req) })
}

func (m metered) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return meter(m.m, wire.OpRequeueDead, func() (*wire.BulkResponse, error) { return m.s.RequeueDead(ctx, req) })
}

func (m metered) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return meter(m.m, wire.OpPurgeDead, func() (*wire.BulkResponse, error) { return m.s.PurgeDead(ctx, req) })
}

func (m metered) Group(ctx context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return meter(m.m, wire.OpGroup, func() (*wire.GroupResponse, error) { return m.s.Group(ctx, req) })
}

func (m metered) GroupCancel(ctx context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	return meter(m.m, wire.OpGroupCancel, func() (*wire.BulkResponse, error) { return m.s.GroupCancel(ctx, req) })
}

func (m metered) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return meter(m.m, wire.OpGet, func() (*wire.TaskView, error) { return m.s.Get(ctx, req) })
}

func (m metered) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	_, err := meter(m.m, wire.OpList, func() (struct{}, error) { return struct{}{}, m.s.List(ctx, req, emit) })
	return err
}

func (m metered) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return meter(m.m, wire.OpCount, func() (*wire.CountResponse, error) { return m.s.Count(ctx, req) })
}

func (m metered) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return meter(m.m, wire.OpQueues, func() (*wire.QueuesResponse, error) { return m.s.Queues(ctx, req) })
}

func (m metered) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return meter(m.m, wire.OpLeave, func() (*wire.LeaveResponse, error) { return m.s.Leave(ctx) })
}

func (m metered) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	return meter(m.m, wire.OpCluster, func() (*wire.ClusterResponse, error) { return m.s.Cluster(ctx) })
}

func (m metered) Hints(ctx context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return meter(m.m, wire.OpHints, func() (*wire.HintsResponse, error) { return m.s.Hints(ctx, req) })
}

func (m metered) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return meter(m.m, wire.OpGC, func() (*wire.GCResponse, error) { return m.s.GC(ctx, req) })
}
func (m metered) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return meter(m.m, wire.OpQueueGet, func() (*wire.QueueSettings, error) { return m.s.QueueGet(ctx, req) })
}
func (m metered) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return meter(m.m, wire.OpQueueSet, func() (*wire.QueueSettings, error) { return m.s.QueueSet(ctx, req) })
}

func (m metered) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	return meter(m.m, wire.OpScheduleSet, func() (*wire.ScheduleView, error) { return m.s.ScheduleSet(ctx, req) })
}
func (m metered) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	return meter(m.m, wire.OpScheduleList, func() (*wire.ScheduleListResponse, error) { return m.s.ScheduleList(ctx, req) })
}
func (m metered) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	return meter(m.m, wire.OpScheduleDelete, func() (*wire.ScheduleDeleteResponse, error) { return m.s.ScheduleDelete(ctx, req) })
}

func (m metered) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return meter(m.m, wire.OpShardJoin, func() (*wire.ShardView, error) { return m.s.ShardJoin(ctx, req) })
}
func (m metered) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return meter(m.m, wire.OpShardRenew, func() (*wire.ShardView, error) { return m.s.ShardRenew(ctx, req) })
}
func (m metered) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return meter(m.m, wire.OpShardLeave, func() (*wire.ShardView, error) { return m.s.ShardLeave(ctx, req) })
}
func (m metered) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return meter(m.m, wire.OpShardMembers, func() (*wire.ShardView, error) { return m.s.ShardMembers(ctx, req) })
}

var _ wire.Service = metered{}
