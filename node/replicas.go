package node

import (
	"context"
	"fmt"

	"github.com/skuldd/skuldd/node/deps"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

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

func (h replHost) Replica(part uint16) *partition.Replica { return h.n.parts[part] }
func (h replHost) Cohort(part int) []uint64               { return h.n.partitionCohort(part) }
func (h replHost) AddrOf(id uint64) string                { return h.n.addrOf(id) }
func (h replHost) Peers() *peer.Pool                      { return h.n.peers }
func (h replHost) NoteDependents(recs []task.Record)      { h.n.deps.Note(recs) }
func (h replHost) Collected(id task.ID)                   { h.n.deps.Collected(id) }
func (h replHost) Departing() bool                        { return h.n.departing.Load() }

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

// depsHost is what the dependency plane sees of the node.
type depsHost struct{ n *Node }

func (h depsHost) Replica(part uint16) *partition.Replica { return h.n.parts[part] }
func (h depsHost) Store() *store.Store                    { return h.n.store }
func (h depsHost) Peers() *peer.Pool                      { return h.n.peers }
func (h depsHost) Replication() *replication.Plane        { return h.n.repl }

func (h depsHost) RouteTo(ctx context.Context, part uint16) (string, error) {
	return h.n.routeTo(ctx, part)
}

func (h depsHost) GetAtLeader(ctx context.Context, part uint16, id task.ID) (*wire.TaskView, bool, error) {
	return forward[wire.GetRequest, wire.TaskView](ctx, h.n, part, wire.OpGet, &wire.GetRequest{ID: id})
}

// partitionCohort returns part's cohort as the registry has it, from the
// copy refreshMeta keeps (requests never copy the metadata group's state).
// The slice is shared: callers must not modify it.
func (n *Node) partitionCohort(part int) []uint64 {
	pl := n.placement.Load()
	if pl == nil || part >= len(pl.cohorts) {
		return nil
	}
	return pl.cohorts[part]
}

// AAERoot returns the root digest of this node's replica of part, for
// tests and status: equal roots mean equal records.
func (n *Node) AAERoot(part int) (string, error) {
	if part < 0 || part >= n.cfg.Partitions {
		return "", fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, part)
	}
	return n.parts[part].TreeSnapshot().Root().String(), nil
}

// ReplicaState is this node's replica of one partition, as the fault
// suite's convergence check reads it: replicas of a partition that hold
// the same records have the same Root.
type ReplicaState struct {
	Partition int  `json:"partition"`
	Held      bool `json:"held"`
	// LeadingEpoch is the epoch this replica leads at (0: a follower).
	LeadingEpoch uint64 `json:"leading_epoch"`
	// Promised is the highest epoch it promised.
	Promised uint64 `json:"promised"`
	Root     string `json:"root"`
}

// Replicas reports this node's replica of every partition.
func (n *Node) Replicas() ([]ReplicaState, error) {
	out := make([]ReplicaState, len(n.parts))
	for p, r := range n.parts {
		held, err := n.Holds(p)
		if err != nil {
			return nil, err
		}
		prom, _ := r.Promised()
		out[p] = ReplicaState{Partition: p, Held: held, LeadingEpoch: r.Epoch(), Promised: prom, Root: r.TreeSnapshot().Root().String()}
	}
	return out, nil
}
