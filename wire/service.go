package wire

import (
	"context"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Service is the client API a node serves, over QUIC (ServiceHandler) and
// over HTTP (package httpapi). Methods are called concurrently; a request
// value is owned by the call.
type Service interface {
	Ping(ctx context.Context) (*PingResponse, error)
	Enqueue(ctx context.Context, req *EnqueueRequest) (*EnqueueResponse, error)
	Claim(ctx context.Context, req *ClaimRequest) (*ClaimResponse, error)
	Renew(ctx context.Context, req *RenewRequest) (*RenewResponse, error)
	Update(ctx context.Context, req *UpdateRequest) (*Ack, error)
	Complete(ctx context.Context, req *CompleteRequest) (*CompleteResponse, error)
	Fail(ctx context.Context, req *FailRequest) (*Ack, error)
	Snooze(ctx context.Context, req *SnoozeRequest) (*Ack, error)
	Requeue(ctx context.Context, req *RequeueRequest) (*Ack, error)
	Get(ctx context.Context, req *GetRequest) (*TaskView, error)
	// List calls emit with each page, in order; an error from emit ends
	// the listing with that error.
	List(ctx context.Context, req *ListRequest, emit func(*ListPage) error) error
	Count(ctx context.Context, req *CountRequest) (*CountResponse, error)
	Queues(ctx context.Context, req *QueuesRequest) (*QueuesResponse, error)
	Cluster(ctx context.Context) (*ClusterResponse, error)
	// Leave hands the node's partitions to other members and shuts it
	// down.
	Leave(ctx context.Context) (*LeaveResponse, error)
	// GC runs a garbage-collection pass (or a dry run) over the cluster.
	GC(ctx context.Context, req *GCRequest) (*GCResponse, error)
	// QueueGet reads a queue's settings; QueueSet changes them
	// cluster-wide and returns them.
	QueueGet(ctx context.Context, req *QueueGetRequest) (*QueueSettings, error)
	QueueSet(ctx context.Context, req *QueueSetRequest) (*QueueSettings, error)
	// Cancel and Delete control one task; RequeueDead and PurgeDead
	// requeue or delete every dead task of a queue, cluster-wide.
	Cancel(ctx context.Context, req *CancelRequest) (*Ack, error)
	Delete(ctx context.Context, req *DeleteRequest) (*Ack, error)
	RequeueDead(ctx context.Context, req *DeadRequest) (*BulkResponse, error)
	PurgeDead(ctx context.Context, req *DeadRequest) (*BulkResponse, error)
	// Group reads a task group's counts, cluster-wide; GroupCancel
	// cancels each of its tasks that is not ended.
	Group(ctx context.Context, req *GroupRequest) (*GroupResponse, error)
	GroupCancel(ctx context.Context, req *GroupCancelRequest) (*BulkResponse, error)
	// Hints lists the hinted enqueues the answering node holds.
	Hints(ctx context.Context, req *HintsRequest) (*HintsResponse, error)
	// ScheduleSet, ScheduleList and ScheduleDelete manage the periodic
	// tasks (kept in the metadata group).
	ScheduleSet(ctx context.Context, req *ScheduleSetRequest) (*ScheduleView, error)
	ScheduleList(ctx context.Context, req *ScheduleListRequest) (*ScheduleListResponse, error)
	ScheduleDelete(ctx context.Context, req *ScheduleDeleteRequest) (*ScheduleDeleteResponse, error)
	// ShardJoin, ShardRenew, ShardLeave and ShardMembers are the worker
	// shards (kept in the metadata group).
	ShardJoin(ctx context.Context, req *ShardJoinRequest) (*ShardView, error)
	ShardRenew(ctx context.Context, req *ShardRenewRequest) (*ShardView, error)
	ShardLeave(ctx context.Context, req *ShardLeaveRequest) (*ShardView, error)
	ShardMembers(ctx context.Context, req *ShardMembersRequest) (*ShardView, error)
}

// ServiceHandler serves svc over the QUIC transport: it decodes each
// request body by op, calls the method, and writes the response (or the
// error with its code). A body that does not decode is CodeBadFrame; an op
// it does not know is CodeUnknownOp.
func ServiceHandler(svc Service) Handler {
	return HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
		if req.Op == OpList {
			var lr ListRequest
			if err := decodeBody(req, &lr); err != nil {
				_ = w.Error(err)
				return
			}
			if err := svc.List(ctx, &lr, func(p *ListPage) error { return w.Send(p) }); err != nil {
				_ = w.Error(err)
				return
			}
			_ = w.Reply(nil)
			return
		}
		resp, handled, err := authDispatch(ctx, svc, req)
		if !handled {
			resp, handled, err = adminDispatch(ctx, svc, req)
		}
		if !handled {
			resp, err = dispatch(ctx, svc, req)
		}
		if err != nil {
			_ = w.Error(err)
			return
		}
		_ = w.Reply(resp)
	})
}

// call decodes a request body of type Req and calls fn with it.
func call[Req, Resp any](ctx context.Context, req *Request, fn func(context.Context, *Req) (*Resp, error)) (any, error) {
	var r Req
	if err := decodeBody(req, &r); err != nil {
		return nil, err
	}
	return fn(ctx, &r)
}

func dispatch(ctx context.Context, svc Service, req *Request) (any, error) {
	switch req.Op {
	case OpPing:
		return svc.Ping(ctx)
	case OpEnqueue:
		return call(ctx, req, svc.Enqueue)
	case OpClaim:
		return call(ctx, req, svc.Claim)
	case OpRenew:
		return call(ctx, req, svc.Renew)
	case OpUpdate:
		return call(ctx, req, svc.Update)
	case OpComplete:
		return call(ctx, req, svc.Complete)
	case OpFail:
		return call(ctx, req, svc.Fail)
	case OpSnooze:
		return call(ctx, req, svc.Snooze)
	case OpRequeue:
		return call(ctx, req, svc.Requeue)
	case OpGet:
		return call(ctx, req, svc.Get)
	case OpCount:
		return call(ctx, req, svc.Count)
	case OpQueues:
		return call(ctx, req, svc.Queues)
	case OpCluster:
		return svc.Cluster(ctx)
	case OpLeave:
		return svc.Leave(ctx)
	case OpGC:
		return call(ctx, req, svc.GC)
	case OpQueueGet:
		return call(ctx, req, svc.QueueGet)
	case OpQueueSet:
		return call(ctx, req, svc.QueueSet)
	case OpCancel:
		return call(ctx, req, svc.Cancel)
	case OpDelete:
		return call(ctx, req, svc.Delete)
	case OpRequeueDead:
		return call(ctx, req, svc.RequeueDead)
	case OpPurgeDead:
		return call(ctx, req, svc.PurgeDead)
	case OpGroup:
		return call(ctx, req, svc.Group)
	case OpGroupCancel:
		return call(ctx, req, svc.GroupCancel)
	case OpHints:
		return call(ctx, req, svc.Hints)
	case OpScheduleSet:
		return call(ctx, req, svc.ScheduleSet)
	case OpScheduleList:
		return call(ctx, req, svc.ScheduleList)
	case OpScheduleDelete:
		return call(ctx, req, svc.ScheduleDelete)
	case OpShardJoin:
		return call(ctx, req, svc.ShardJoin)
	case OpShardRenew:
		return call(ctx, req, svc.ShardRenew)
	case OpShardLeave:
		return call(ctx, req, svc.ShardLeave)
	case OpShardMembers:
		return call(ctx, req, svc.ShardMembers)
	}
	return nil, Errorf(CodeUnknownOp, "unknown op %d", uint16(req.Op))
}

func decodeBody(req *Request, v any) error {
	if len(req.Body) == 0 {
		return nil // an empty body is the zero request; validation rejects what it lacks
	}
	if err := Unmarshal(req.Body, v); err != nil {
		return Errorf(CodeBadFrame, "%s: bad request body: %v", req.Op, err)
	}
	return nil
}

// Caller is what a Client sends its calls over: a *Conn, or a peer
// connection of another transport (node/peer).
type Caller interface {
	Call(ctx context.Context, op Op, req, resp any) error
	Stream(ctx context.Context, op Op, req any, each func(body cbor.RawMessage) error) error
	Close() error
}

// Client is the client side of Service over a Caller: the typed calls the
// Go client, ctl and bench use.
type Client struct{ c Caller }

// NewClient wraps c.
func NewClient(c Caller) *Client { return &Client{c: c} }

// Conn returns the underlying connection.
func (cl *Client) Conn() Caller { return cl.c }

// Close closes the connection.
func (cl *Client) Close() error { return cl.c.Close() }

func invoke[Resp any](ctx context.Context, cl *Client, op Op, req any) (*Resp, error) {
	resp := new(Resp)
	if err := cl.c.Call(ctx, op, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func (cl *Client) Ping(ctx context.Context) (*PingResponse, error) {
	return invoke[PingResponse](ctx, cl, OpPing, nil)
}
func (cl *Client) Enqueue(ctx context.Context, req *EnqueueRequest) (*EnqueueResponse, error) {
	return invoke[EnqueueResponse](ctx, cl, OpEnqueue, req)
}
func (cl *Client) Claim(ctx context.Context, req *ClaimRequest) (*ClaimResponse, error) {
	return invoke[ClaimResponse](ctx, cl, OpClaim, req)
}
func (cl *Client) Renew(ctx context.Context, req *RenewRequest) (*RenewResponse, error) {
	return invoke[RenewResponse](ctx, cl, OpRenew, req)
}
func (cl *Client) Update(ctx context.Context, req *UpdateRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpUpdate, req)
}
func (cl *Client) Complete(ctx context.Context, req *CompleteRequest) (*CompleteResponse, error) {
	return invoke[CompleteResponse](ctx, cl, OpComplete, req)
}
func (cl *Client) Fail(ctx context.Context, req *FailRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpFail, req)
}
func (cl *Client) Snooze(ctx context.Context, req *SnoozeRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpSnooze, req)
}
func (cl *Client) Requeue(ctx context.Context, req *RequeueRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpRequeue, req)
}
func (cl *Client) Get(ctx context.Context, req *GetRequest) (*TaskView, error) {
	return invoke[TaskView](ctx, cl, OpGet, req)
}
func (cl *Client) Count(ctx context.Context, req *CountRequest) (*CountResponse, error) {
	return invoke[CountResponse](ctx, cl, OpCount, req)
}
func (cl *Client) Queues(ctx context.Context, req *QueuesRequest) (*QueuesResponse, error) {
	return invoke[QueuesResponse](ctx, cl, OpQueues, req)
}

// Cluster returns the node's view of the cluster.
func (cl *Client) Cluster(ctx context.Context) (*ClusterResponse, error) {
	return invoke[ClusterResponse](ctx, cl, OpCluster, nil)
}

// List streams pages to emit.
func (cl *Client) List(ctx context.Context, req *ListRequest, emit func(*ListPage) error) error {
	return cl.c.Stream(ctx, OpList, req, func(body cbor.RawMessage) error {
		var p ListPage
		if err := Unmarshal(body, &p); err != nil {
			return fmt.Errorf("list: bad page: %w", err)
		}
		return emit(&p)
	})
}

// Leave asks the node to hand off its partitions and shut down.
func (cl *Client) Leave(ctx context.Context) (*LeaveResponse, error) {
	return invoke[LeaveResponse](ctx, cl, OpLeave, nil)
}

// GC runs a garbage-collection pass, or with DryRun reports what one
// would collect.
func (cl *Client) GC(ctx context.Context, req *GCRequest) (*GCResponse, error) {
	return invoke[GCResponse](ctx, cl, OpGC, req)
}

// QueueGet reads a queue's settings.
func (cl *Client) QueueGet(ctx context.Context, req *QueueGetRequest) (*QueueSettings, error) {
	return invoke[QueueSettings](ctx, cl, OpQueueGet, req)
}

// QueueSet changes a queue's settings.
func (cl *Client) QueueSet(ctx context.Context, req *QueueSetRequest) (*QueueSettings, error) {
	return invoke[QueueSettings](ctx, cl, OpQueueSet, req)
}

// Cancel cancels a task.
func (cl *Client) Cancel(ctx context.Context, req *CancelRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpCancel, req)
}

// Delete deletes a task.
func (cl *Client) Delete(ctx context.Context, req *DeleteRequest) (*Ack, error) {
	return invoke[Ack](ctx, cl, OpDelete, req)
}

// RequeueDead requeues every dead task of a queue.
func (cl *Client) RequeueDead(ctx context.Context, req *DeadRequest) (*BulkResponse, error) {
	return invoke[BulkResponse](ctx, cl, OpRequeueDead, req)
}

// PurgeDead deletes every dead task of a queue.
func (cl *Client) PurgeDead(ctx context.Context, req *DeadRequest) (*BulkResponse, error) {
	return invoke[BulkResponse](ctx, cl, OpPurgeDead, req)
}

// Group reads a task group's counts.
func (cl *Client) Group(ctx context.Context, req *GroupRequest) (*GroupResponse, error) {
	return invoke[GroupResponse](ctx, cl, OpGroup, req)
}

// GroupCancel cancels every task of a group that is not ended.
func (cl *Client) GroupCancel(ctx context.Context, req *GroupCancelRequest) (*BulkResponse, error) {
	return invoke[BulkResponse](ctx, cl, OpGroupCancel, req)
}

// Hints lists the hinted enqueues the node holds.
func (cl *Client) Hints(ctx context.Context, req *HintsRequest) (*HintsResponse, error) {
	return invoke[HintsResponse](ctx, cl, OpHints, req)
}

// ScheduleSet creates or replaces a periodic task.
func (cl *Client) ScheduleSet(ctx context.Context, req *ScheduleSetRequest) (*ScheduleView, error) {
	return invoke[ScheduleView](ctx, cl, OpScheduleSet, req)
}

// ScheduleList lists the periodic tasks.
func (cl *Client) ScheduleList(ctx context.Context, req *ScheduleListRequest) (*ScheduleListResponse, error) {
	return invoke[ScheduleListResponse](ctx, cl, OpScheduleList, req)
}

// ScheduleDelete deletes a periodic task.
func (cl *Client) ScheduleDelete(ctx context.Context, req *ScheduleDeleteRequest) (*ScheduleDeleteResponse, error) {
	return invoke[ScheduleDeleteResponse](ctx, cl, OpScheduleDelete, req)
}

// ShardJoin joins a shard set.
func (cl *Client) ShardJoin(ctx context.Context, req *ShardJoinRequest) (*ShardView, error) {
	return invoke[ShardView](ctx, cl, OpShardJoin, req)
}

// ShardRenew renews a member's lease.
func (cl *Client) ShardRenew(ctx context.Context, req *ShardRenewRequest) (*ShardView, error) {
	return invoke[ShardView](ctx, cl, OpShardRenew, req)
}

// ShardLeave leaves a shard set.
func (cl *Client) ShardLeave(ctx context.Context, req *ShardLeaveRequest) (*ShardView, error) {
	return invoke[ShardView](ctx, cl, OpShardLeave, req)
}

// ShardMembers reads a shard set.
func (cl *Client) ShardMembers(ctx context.Context, req *ShardMembersRequest) (*ShardView, error) {
	return invoke[ShardView](ctx, cl, OpShardMembers, req)
}

// Export streams a partition's records (a peer op: only on a Conn from
// Server.DialPeer).
func (cl *Client) Export(ctx context.Context, req *ExportRequest, each func(*ExportPage) error) error {
	return cl.c.Stream(ctx, OpExport, req, func(body cbor.RawMessage) error {
		var p ExportPage
		if err := Unmarshal(body, &p); err != nil {
			return fmt.Errorf("export: bad page: %w", err)
		}
		return each(&p)
	})
}

var _ Service = (*Client)(nil)
