package coord

import (
	"context"
	"fmt"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The client ops beside the tasks': a node's queues' settings, the
// periodic tasks and worker shards (each in the metadata group, through
// its plane), the hints held here, garbage collection, and the node's own
// (ping, cluster, leave).

// ping answers a liveness probe.
func (p *Plane) ping(context.Context) (*wire.PingResponse, error) {
	return &wire.PingResponse{NodeID: p.cfg.Self, Time: p.now()}, nil
}

// queueGet reads a queue's settings as this node applies them
// (node/queues).
func (p *Plane) queueGet(_ context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.queues.Get(req)
}

// queueSet changes a queue's settings cluster-wide, through the metadata
// group, and returns them as committed.
func (p *Plane) queueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	s, err := p.queues.Set(ctx, req)
	if err == nil {
		p.log.Info("queue settings changed", "queue", req.Queue, "settings", s)
	}
	return s, err
}

// scheduleSet creates or replaces a periodic task (node/schedules).
func (p *Plane) scheduleSet(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.sched.Set(ctx, req)
}

// scheduleList lists the periodic tasks as this node's copy of the
// metadata group holds them.
func (p *Plane) scheduleList(ctx context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.sched.List(ctx, req)
}

// scheduleDelete deletes a periodic task.
func (p *Plane) scheduleDelete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.sched.Delete(ctx, req)
}

// shardJoin adds a member to a worker shard set (node/shards).
func (p *Plane) shardJoin(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.shards.Join(ctx, req)
}

// shardRenew renews a shard member's lease.
func (p *Plane) shardRenew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.shards.Renew(ctx, req)
}

// shardLeave removes a member from a shard set.
func (p *Plane) shardLeave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.shards.Leave(ctx, req)
}

// shardMembers reads a shard set as this node's copy of the metadata
// group holds it.
func (p *Plane) shardMembers(ctx context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	return p.shards.Members(ctx, req)
}

// hintsDefaultLimit is how many hints a listing shows when it names no
// limit; hintsMaxLimit bounds what it may name.
const (
	hintsDefaultLimit = 100
	hintsMaxLimit     = 10_000
)

// hintList lists the hinted enqueues this node holds (ctl hints).
func (p *Plane) hintList(_ context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	limit := req.Limit
	switch {
	case limit < 0 || limit > hintsMaxLimit:
		return nil, fmt.Errorf("%w: limit %d: want 0 (%d) to %d", task.ErrInvalid, limit, hintsDefaultLimit, hintsMaxLimit)
	case limit == 0:
		limit = hintsDefaultLimit
	}
	hs, err := p.hints.List(limit)
	if err != nil {
		return nil, err
	}
	st := p.hints.Stats()
	resp := &wire.HintsResponse{Node: p.cfg.Self, Pending: st.Pending, Handed: st.Handed, OldestAt: st.OldestAt, Hints: make([]wire.HintView, len(hs))}
	for i, h := range hs {
		resp.Hints[i] = wire.HintView{ID: h.Spec.ID, Queue: h.Spec.Queue, Partition: p.partOf(h.Spec.ID), At: h.At, W: h.W}
	}
	return resp, nil
}

// gc is the client op: a whole pass now over every partition of the
// cluster (each leader its own), or a dry run of one.
func (p *Plane) gc(ctx context.Context, fwd bool, req *wire.GCRequest) (*wire.GCResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if p.cfg.Retention == 0 {
		return nil, fmt.Errorf("%w: garbage collection is disabled on this node (--retention 0)", task.ErrInvalid)
	}
	p.h.CatchUp()
	resp, err := p.repl.GCPass(ctx, req.DryRun)
	if err != nil {
		return nil, err
	}
	err = fanOutAll(ctx, p, fwd, wire.OpGC, req, func(r *wire.GCResponse) { replication.AddGC(resp, r) })
	if err != nil {
		return nil, err
	}
	return resp, nil
}
