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

// Every op of a face runs inside the plane's gate (gated, served): Close
// waits for it before the node closes what it acts through.

// served runs op, a request-taking operation that is told whether its
// request was forwarded, inside the plane's gate.
func served[Q, R any](f face, ctx context.Context, q Q, op func(*Plane, context.Context, bool, Q) (R, error)) (R, error) {
	return gated(f.p, ctx, q, func(ctx context.Context, q Q) (R, error) { return op(f.p, ctx, f.fwd, q) })
}

func (f face) Ping(ctx context.Context) (*wire.PingResponse, error) {
	return gated(f.p, ctx, struct{}{}, func(ctx context.Context, _ struct{}) (*wire.PingResponse, error) { return f.p.ping(ctx) })
}

func (f face) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	return served(f, ctx, req, (*Plane).enqueue)
}

func (f face) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return served(f, ctx, req, (*Plane).claim)
}

func (f face) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return served(f, ctx, req, (*Plane).renew)
}

func (f face) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).update)
}

func (f face) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return served(f, ctx, req, (*Plane).complete)
}

func (f face) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).fail)
}

func (f face) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).snooze)
}

func (f face) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).requeue)
}

func (f face) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return served(f, ctx, req, (*Plane).get)
}

func (f face) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	_, err := gated(f.p, ctx, req, func(ctx context.Context, req *wire.ListRequest) (struct{}, error) {
		return struct{}{}, f.p.list(ctx, f.fwd, req, emit)
	})
	return err
}

func (f face) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return served(f, ctx, req, (*Plane).count)
}

func (f face) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return served(f, ctx, req, (*Plane).queueStats)
}

func (f face) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	return gated(f.p, ctx, struct{}{}, func(ctx context.Context, _ struct{}) (*wire.ClusterResponse, error) { return f.p.h.Cluster(ctx) })
}

func (f face) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return gated(f.p, ctx, struct{}{}, func(ctx context.Context, _ struct{}) (*wire.LeaveResponse, error) { return f.p.h.Leave(ctx) })
}

func (f face) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return served(f, ctx, req, (*Plane).gc)
}

func (f face) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return gated(f.p, ctx, req, f.p.queueGet)
}

func (f face) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return gated(f.p, ctx, req, f.p.queueSet)
}

func (f face) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).cancel)
}

func (f face) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return served(f, ctx, req, (*Plane).delete)
}

func (f face) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return served(f, ctx, req, (*Plane).requeueDead)
}

func (f face) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return served(f, ctx, req, (*Plane).purgeDead)
}

func (f face) Group(ctx context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return served(f, ctx, req, (*Plane).group)
}

func (f face) GroupCancel(ctx context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	return served(f, ctx, req, (*Plane).groupCancel)
}

func (f face) Hints(ctx context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return gated(f.p, ctx, req, f.p.hintList)
}

func (f face) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	return gated(f.p, ctx, req, f.p.scheduleSet)
}

func (f face) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	return gated(f.p, ctx, req, f.p.scheduleList)
}

func (f face) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	return gated(f.p, ctx, req, f.p.scheduleDelete)
}

func (f face) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return gated(f.p, ctx, req, f.p.shardJoin)
}

func (f face) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return gated(f.p, ctx, req, f.p.shardRenew)
}

func (f face) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return gated(f.p, ctx, req, f.p.shardLeave)
}

func (f face) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return gated(f.p, ctx, req, f.p.shardMembers)
}
