package node

import (
	"fmt"

	"github.com/skuldd/skuldd/node/hints"
	"github.com/skuldd/skuldd/task"
)

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

// HintStats returns this node's hinted enqueues' figures (node/hints):
// what is pending here, and what was handed over since start.
func (n *Node) HintStats() hints.Stats {
	if n.hints == nil {
		return hints.Stats{}
	}
	return n.hints.Stats()
}
