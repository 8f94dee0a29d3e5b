package node

import (
	"context"

	"github.com/skuldd/skuldd/wire"
)

// QueueGet reads a queue's settings as this node applies them
// (node/queues).
func (n *Node) QueueGet(_ context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.queues.Get(req)
}

// QueueSet changes a queue's settings cluster-wide, through the metadata
// group, and returns them as committed.
func (n *Node) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	s, err := n.queues.Set(ctx, req)
	if err == nil {
		n.log.Info("queue settings changed", "queue", req.Queue, "settings", s)
	}
	return s, err
}

// ScheduleSet creates or replaces a periodic task (node/schedules).
func (n *Node) ScheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.sched.Set(ctx, req)
}

// ScheduleList lists the periodic tasks as this node's copy of the
// metadata group holds them.
func (n *Node) ScheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.sched.List(ctx, req)
}

// ScheduleDelete deletes a periodic task.
func (n *Node) ScheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.sched.Delete(ctx, req)
}

// ShardJoin adds a member to a worker shard set (node/shards).
func (n *Node) ShardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.shards.Join(ctx, req)
}

// ShardRenew renews a shard member's lease.
func (n *Node) ShardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.shards.Renew(ctx, req)
}

// ShardLeave removes a member from a shard set.
func (n *Node) ShardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.shards.Leave(ctx, req)
}

// ShardMembers reads a shard set as this node's copy of the metadata
// group holds it.
func (n *Node) ShardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.shards.Members(ctx, req)
}
