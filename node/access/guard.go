package access

import (
	"context"

	"github.com/skuldd/skuldd/wire"
)

// Guard returns svc and admin with every request checked (Authorize)
// before it is served, and the credentials' API (wire.AuthService)
// served here, for the admin alone. Each method is written out: a new
// method of wire.Service or wire.AdminService does not compile until it
// is guarded here.
func (r *Registry) Guard(svc wire.Service, admin wire.AdminService) wire.Service {
	return guard{svc, admin, r}
}

// guard is a client API behind the registry's checks.
type guard struct {
	s wire.Service
	a wire.AdminService
	r *Registry
}

var (
	_ wire.Service      = guard{}
	_ wire.AuthService  = guard{}
	_ wire.AdminService = guard{}
)

// allowed runs f once r allows op with req.
func allowed[Req, Resp any](g guard, ctx context.Context, op wire.Op, req *Req, f func(context.Context, *Req) (*Resp, error)) (*Resp, error) {
	if err := g.r.Authorize(ctx, op, req); err != nil {
		return nil, err
	}
	return f(ctx, req)
}

func (g guard) Ping(ctx context.Context) (*wire.PingResponse, error) {
	if err := g.r.Authorize(ctx, wire.OpPing, nil); err != nil {
		return nil, err
	}
	return g.s.Ping(ctx)
}

func (g guard) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	return allowed(g, ctx, wire.OpEnqueue, req, g.s.Enqueue)
}

func (g guard) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return allowed(g, ctx, wire.OpClaim, req, g.s.Claim)
}

func (g guard) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return allowed(g, ctx, wire.OpRenew, req, g.s.Renew)
}

func (g guard) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpUpdate, req, g.s.Update)
}

func (g guard) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return allowed(g, ctx, wire.OpComplete, req, g.s.Complete)
}

func (g guard) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpFail, req, g.s.Fail)
}

func (g guard) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpSnooze, req, g.s.Snooze)
}

func (g guard) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpRequeue, req, g.s.Requeue)
}

func (g guard) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return allowed(g, ctx, wire.OpGet, req, g.s.Get)
}

func (g guard) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	if err := g.r.Authorize(ctx, wire.OpList, req); err != nil {
		return err
	}
	return g.s.List(ctx, req, emit)
}

func (g guard) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return allowed(g, ctx, wire.OpCount, req, g.s.Count)
}

func (g guard) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return allowed(g, ctx, wire.OpQueues, req, g.s.Queues)
}

func (g guard) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	if err := g.r.Authorize(ctx, wire.OpCluster, nil); err != nil {
		return nil, err
	}
	return g.s.Cluster(ctx)
}

func (g guard) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	if err := g.r.Authorize(ctx, wire.OpLeave, nil); err != nil {
		return nil, err
	}
	return g.s.Leave(ctx)
}

func (g guard) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return allowed(g, ctx, wire.OpGC, req, g.s.GC)
}

func (g guard) QueueGet(ctx context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	return allowed(g, ctx, wire.OpQueueGet, req, g.s.QueueGet)
}

func (g guard) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	return allowed(g, ctx, wire.OpQueueSet, req, g.s.QueueSet)
}

func (g guard) Cancel(ctx context.Context, req *wire.CancelRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpCancel, req, g.s.Cancel)
}

func (g guard) Delete(ctx context.Context, req *wire.DeleteRequest) (*wire.Ack, error) {
	return allowed(g, ctx, wire.OpDelete, req, g.s.Delete)
}

func (g guard) RequeueDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return allowed(g, ctx, wire.OpRequeueDead, req, g.s.RequeueDead)
}

func (g guard) PurgeDead(ctx context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return allowed(g, ctx, wire.OpPurgeDead, req, g.s.PurgeDead)
}

func (g guard) Group(ctx context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return allowed(g, ctx, wire.OpGroup, req, g.s.Group)
}

func (g guard) GroupCancel(ctx context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	return allowed(g, ctx, wire.OpGroupCancel, req, g.s.GroupCancel)
}

func (g guard) Hints(ctx context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return allowed(g, ctx, wire.OpHints, req, g.s.Hints)
}

func (g guard) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	return allowed(g, ctx, wire.OpScheduleSet, req, g.s.ScheduleSet)
}

func (g guard) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	return allowed(g, ctx, wire.OpScheduleList, req, g.s.ScheduleList)
}

func (g guard) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	return allowed(g, ctx, wire.OpScheduleDelete, req, g.s.ScheduleDelete)
}

func (g guard) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return allowed(g, ctx, wire.OpShardJoin, req, g.s.ShardJoin)
}

func (g guard) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return allowed(g, ctx, wire.OpShardRenew, req, g.s.ShardRenew)
}

func (g guard) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return allowed(g, ctx, wire.OpShardLeave, req, g.s.ShardLeave)
}

func (g guard) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return allowed(g, ctx, wire.OpShardMembers, req, g.s.ShardMembers)
}

func (g guard) AuthCreate(ctx context.Context, req *wire.AuthCreateRequest) (*wire.CredentialView, error) {
	return allowed(g, ctx, wire.OpAuthCreate, req, g.r.Create)
}

func (g guard) AuthList(ctx context.Context, req *wire.AuthListRequest) (*wire.AuthListResponse, error) {
	return allowed(g, ctx, wire.OpAuthList, req, func(context.Context, *wire.AuthListRequest) (*wire.AuthListResponse, error) {
		return g.r.List(), nil
	})
}

func (g guard) AuthRevoke(ctx context.Context, req *wire.AuthRevokeRequest) (*wire.AuthRevokeResponse, error) {
	return allowed(g, ctx, wire.OpAuthRevoke, req, g.r.Revoke)
}

func (g guard) Upgrade(ctx context.Context, req *wire.UpgradeRequest) (*wire.UpgradeStatus, error) {
	return allowed(g, ctx, wire.OpUpgrade, req, g.a.Upgrade)
}

func (g guard) RemoveNode(ctx context.Context, req *wire.RemoveNodeRequest) (*wire.RemoveNodeResponse, error) {
	return allowed(g, ctx, wire.OpRemoveNode, req, g.a.RemoveNode)
}

func (g guard) Decommission(ctx context.Context, req *wire.DecommissionRequest) (*wire.DecommissionStatus, error) {
	return allowed(g, ctx, wire.OpDecommission, req, g.a.Decommission)
}
