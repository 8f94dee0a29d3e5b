package node

import (
	"context"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Forwarded returns n's client API as it serves requests a peer
// forwarded (coord.Plane.Forwarded), for tests that play the
// coordinator. Valid after Start.
func Forwarded(n *Node) wire.Service { return n.coord.Load().Forwarded() }

// Coordinator returns n's client API as this node coordinates it,
// each op tried once (coord.Plane.Coordinator, without node/retrying).
// Valid after Start.
func Coordinator(n *Node) wire.Service { return n.coord.Load().Coordinator() }

// HintsOf returns up to limit of the hints n holds. Valid after Start.
func HintsOf(n *Node, limit int) ([]store.Hint, error) { return n.hints.List(limit) }

// TakeOver runs n's handoff of part with cohort, as OpTakeover asks it
// to (control.Control.ServeTakeover), until it wins or ctx ends.
func TakeOver(ctx context.Context, n *Node, part int, cohort []uint64) error {
	return n.ctl.ServeTakeover(ctx, &wire.TakeoverRequest{Part: part, Cohort: cohort})
}

// AddHints keeps specs as hints on n, as an enqueue with w answered
// hinted would (hints.Plane.Add). Valid after Start.
func AddHints(n *Node, specs []*task.Spec, w int) error { return n.hints.Add(specs, w) }

// MetaOf returns n's copy of the metadata group's state. Valid after
// Start.
func MetaOf(n *Node) raftgroup.Meta { return n.raft.Meta() }

// RaftConfig returns the metadata group's voters and learners as n sees
// them. Valid after Start.
func RaftConfig(n *Node) (voters, learners []uint64) { return n.raft.Config() }
