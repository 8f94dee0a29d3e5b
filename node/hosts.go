package node

import (
	"context"
	"time"

	"github.com/skuldd/skuldd/node/deps"
	"github.com/skuldd/skuldd/node/hints"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/node/retrying"
	"github.com/skuldd/skuldd/node/schedules"
	"github.com/skuldd/skuldd/node/shards"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The planes' views of the node: each plane sees only its Host (or
// Source), which these adapters implement over *Node; node/control's is
// in control.go, node/metrics' in metrics.go.

// replicationConfig is the replication plane's part of the node's
// configuration (validated with it).
func (n *Node) replicationConfig() replication.Config {
	return replication.Config{
		Self: n.id, Partitions: n.cfg.Partitions,
		AAE: n.cfg.AAE, AAEInterval: n.cfg.AAEInterval,
		Retention: n.cfg.Retention, GCInterval: n.cfg.GCInterval, GCComponentMax: n.cfg.GCComponentMax,
		TombstoneHorizon: n.cfg.TombstoneHorizon,
		Clock:            n.clock, Log: n.log,
	}
}

// replHost is what the replication plane sees of the node.
type replHost struct{ n *Node }

func (h replHost) Replica(part uint16) *partition.Replica    { return h.n.parts[part] }
func (h replHost) Cohort(part int) []uint64                  { return h.n.partitionCohort(part) }
func (h replHost) AddrOf(id uint64) string                   { return h.n.ms.AddrOf(id) }
func (h replHost) Peers() *peer.Pool                         { return h.n.peers }
func (h replHost) NoteDependents(recs []task.Record)         { h.n.deps.Note(recs) }
func (h replHost) Collected(id task.ID)                      { h.n.deps.Collected(id) }
func (h replHost) Departing() bool                           { return h.n.departing.Load() }
func (h replHost) QueueRetentions() map[string]time.Duration { return h.n.queues.Retentions() }

func (h replHost) LeaderOf(part uint16) uint64 {
	if ls := h.n.leaders(); int(part) < len(ls) {
		return ls[part]
	}
	return 0
}

// depsConfig is the dependency plane's part of the node's configuration.
func (n *Node) depsConfig() deps.Config {
	return deps.Config{Partitions: n.cfg.Partitions, MaxBatch: n.cfg.MaxBatch, CallTimeout: peerCallTimeout, Clock: n.clock, Log: n.log}
}

// scheduleEnqueueTimeout bounds one occurrence's enqueue: the client
// path's retries ride out a failover within it.
const scheduleEnqueueTimeout = 15 * time.Second

func (n *Node) schedulesConfig() schedules.Config {
	return schedules.Config{Self: n.id, Interval: n.cfg.ScheduleInterval, EnqueueTimeout: scheduleEnqueueTimeout,
		Clock: n.clock, Log: n.log}
}

// schedulesHost is what the periodic-task plane sees of the node.
type schedulesHost struct{ n *Node }

// Leads: this node serves, leads the metadata group, and its clock is not ahead
// of the cluster's (it would enqueue occurrences early).
func (h schedulesHost) Leads() bool {
	if !h.n.ready.Load() || h.n.raft.Leader() != h.n.id {
		return false
	}
	drifting, _ := h.n.drifting()
	return !drifting
}

func (h schedulesHost) Schedules() (map[string]raftgroup.Schedule, <-chan struct{}) {
	ch := h.n.raft.Changed()
	return h.n.raft.Meta().Schedules, ch
}

func (h schedulesHost) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	c, err := h.n.coordPlane()
	if err != nil {
		return nil, err
	}
	return retrying.New(retryHost{c.Coordinator(), c, h.n}).Enqueue(ctx, req)
}

func (h schedulesHost) Advance(ctx context.Context, a raftgroup.ScheduleAdvance) error {
	return h.n.raft.AdvanceSchedule(ctx, a)
}

func (h schedulesHost) Set(ctx context.Context, s raftgroup.ScheduleSpec, atMs int64) (raftgroup.Schedule, error) {
	return h.n.raft.SetSchedule(ctx, s, atMs)
}

func (h schedulesHost) Delete(ctx context.Context, name string) (bool, error) {
	return h.n.raft.DeleteSchedule(ctx, name)
}

func (n *Node) shardsConfig() shards.Config {
	return shards.Config{Interval: n.cfg.ShardExpiryInterval, Clock: n.clock, Log: n.log}
}

// shardsHost is what the worker-shard plane sees of the node.
type shardsHost struct{ n *Node }

func (h shardsHost) Leads() bool { return h.n.ready.Load() && h.n.raft.Leader() == h.n.id }

func (h shardsHost) Sets() map[string]raftgroup.ShardSet { return h.n.raft.Meta().Shards }

func (h shardsHost) Change(ctx context.Context, op raftgroup.ShardOp) (raftgroup.ShardSet, error) {
	return h.n.raft.ChangeShards(ctx, op)
}

func (n *Node) hintsConfig() hints.Config {
	return hints.Config{Self: n.id, Partitions: n.cfg.Partitions, Interval: n.cfg.HintInterval, Clock: n.clock, Log: n.log}
}

// hintsHost is what the hints plane sees of the node.
type hintsHost struct{ n *Node }

func (h hintsHost) Replica(part uint16) *partition.Replica { return h.n.parts[part] }
func (h hintsHost) Store() *store.Store                    { return h.n.store }
func (h hintsHost) Replication() *replication.Plane        { return h.n.repl }

func (h hintsHost) Placeable(part uint16, w int) bool {
	c, err := h.n.coordPlane()
	return err == nil && c.Placeable(part, w)
}

func (h hintsHost) HandOverKeyed(ctx context.Context, w int, specs []*task.Spec) error {
	c, err := h.n.coordPlane()
	if err != nil {
		return err
	}
	return c.HandOverKeyed(ctx, w, specs)
}

// depsHost is what the dependency plane sees of the node.
type depsHost struct{ n *Node }

func (h depsHost) Replica(part uint16) *partition.Replica { return h.n.parts[part] }
func (h depsHost) Store() *store.Store                    { return h.n.store }
func (h depsHost) Peers() *peer.Pool                      { return h.n.peers }
func (h depsHost) Replication() *replication.Plane        { return h.n.repl }

func (h depsHost) RouteTo(ctx context.Context, part uint16) (string, error) {
	c, err := h.n.coordPlane()
	if err != nil {
		return "", err
	}
	return c.RouteTo(ctx, part)
}

func (h depsHost) GetAtLeader(ctx context.Context, part uint16, id task.ID) (*wire.TaskView, bool, error) {
	c, err := h.n.coordPlane()
	if err != nil {
		return nil, true, err
	}
	return c.GetAtLeader(ctx, part, id)
}

// pressureHost is what the pressure watch sees of the node.
type pressureHost struct{ n *Node }

func (h pressureHost) SetWALHold(d time.Duration) { h.n.store.SetWALHold(d) }

// ReplicatesWrites reports whether this node leads a partition with
// followers.
func (h pressureHost) ReplicatesWrites() bool {
	for p := range h.n.parts {
		if to, ep := h.n.repl.Followers(uint16(p)); ep > 0 && len(to) > 0 {
			return true
		}
	}
	return false
}

// metaGroup is the metadata group as node/queues sees it: n.raft, which
// Start sets before the node serves a request.
type metaGroup struct{ n *Node }

func (g metaGroup) Meta() raftgroup.Meta     { return g.n.raft.Meta() }
func (g metaGroup) Changed() <-chan struct{} { return g.n.raft.Changed() }
func (g metaGroup) ChangeQueue(ctx context.Context, c raftgroup.QueueChange) (raftgroup.QueueSettings, error) {
	return g.n.raft.ChangeQueue(ctx, c)
}
func (g metaGroup) PutCredential(ctx context.Context, c raftgroup.Credential) error {
	return g.n.raft.PutCredential(ctx, c)
}
func (g metaGroup) RevokeCredential(ctx context.Context, id uint64) (bool, error) {
	return g.n.raft.RevokeCredential(ctx, id)
}
