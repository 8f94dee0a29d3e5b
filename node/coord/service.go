package coord

import (
	"context"

	"github.com/skuldd/skuldd/wire"
)

// The plane serves the client API through two faces, which differ in how
// a request reached the node, a fact the face states (never the request's
// sender, nor a context value):
//
//   - Coordinator: a client's request, each op tried once (node/retrying
//     retries it). This node coordinates it: it forwards what other
//     leaders must serve. Its enqueues have passed StampIDs, so their
//     FreshID and Hinted marks are this node's.
//   - Forwarded: a peer's coordinator sent the request on. It is served
//     strictly here and never forwarded again (a stale view of the
//     placement costs a retry, never a loop); its marks are that peer's.

// Coordinator returns the plane's client API as this node coordinates it.
func (p *Plane) Coordinator() wire.Service { return face{p: p} }

// Forwarded returns the plane's client API for requests a peer forwarded.
func (p *Plane) Forwarded() wire.Service { return face{p: p, fwd: true} }

// face is one of the plane's faces: fwd, a forwarded request.
type face struct {
	p   *Plane
	fwd bool
}

var _ wire.Service = face{}

func (f face) Ping(ctx context.Context) (*wire.PingResponse, error) { return f.p.ping(ctx) }

func (f face) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	return f.p.enqueue(ctx, f.fwd, req)
}

func (f face) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return f.p.claim(ctx, f.fwd, req)
}

func (f face) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return f.p.renew(ctx, f.fwd, req)
}

func (f face) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return f.p.update(ctx, f.fwd, req)
}

func (f face) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return f.p.complete(ctx, f.fwd, req)
}

func (f face) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return f.p.fail(ctx, f.fwd, req)
}

func (f face) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return f.p.snooze(ctx, f.fwd, req)
}

func (f face) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return f.p.requeue(ctx, f.fwd, req)
}

func (f face) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return f.p.get(ctx, f.fwd, req)
}

func (f face) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	return f.p.list(ctx, f.fwd, req, emit)
}

func (f face) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return f.p.count(ctx, f.fwd, req)
}

func (f face) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return f.p.queueStats(ctx, f.fwd, req)
}

func (f face) Cluster(ctx context.Context) (*wire.ClusterResponse, error) { return f.p.h.Cluster(ctx) }

func (f face) Leave(ctx context.Context) (*wire.LeaveResponse, error) { return f.p.h.Leave(ctx) }

func (f face) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return f.p.gc(ctx, f.fwd, req)
}

func (f face) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return f.p.queueGet(ctx, req)
}

func (f face) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return f.p.queueSet(ctx, req)
}

func (f face) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return f.p.cancel(ctx, f.fwd, req)
}

func (f face) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return f.p.delete(ctx, f.fwd, req)
}

func (f face) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return f.p.requeueDead(ctx, f.fwd, req)
}

func (f face) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return f.p.purgeDead(ctx, f.fwd, req)
}

func (f face) Group(ctx context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return f.p.group(ctx, f.fwd, req)
}

func (f face) GroupCancel(ctx context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	return f.p.groupCancel(ctx, f.fwd, req)
}

func (f face) Hints(ctx context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return f.p.hintList(ctx, req)
}

func (f face) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	return f.p.scheduleSet(ctx, req)
}

func (f face) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	return f.p.scheduleList(ctx, req)
}

func (f face) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	return f.p.scheduleDelete(ctx, req)
}

func (f face) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return f.p.shardJoin(ctx, req)
}

func (f face) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return f.p.shardRenew(ctx, req)
}

func (f face) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return f.p.shardLeave(ctx, req)
}

func (f face) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return f.p.shardMembers(ctx, req)
}
