package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// Retiring nodes (docs/design.md, Retiring nodes). `ctl decommission`
// marks a live node retiring in the metadata group: placement then moves
// each of its partitions to ring's cohort over the other members (the
// usual two-phase move: copy first, then hand over), while the node
// serves. Once no cohort names it and it votes no more, the node leaves
// (ctl leave) and is removed; the metadata group's voter planner replaces it as a voter
// first (a retiring voter counts as dead past its grace), so that its
// leaving costs the group no quorum. `ctl remove` forgets a node that is gone for good: it waits
// until placement refilled every cohort that named it (placement counts
// only live members, so a dead node's partitions move on their own),
// takes it out of the metadata group's raft configuration, and removes it
// from the registry for good: its id never registers again, and peers
// refuse its connections (admitPeer). Both need version.MemberRemoval.

// removePoll is how often a removal looks again at the cohorts it waits
// for placement to refill.
const removePoll = 100 * time.Millisecond

// naming returns the partitions whose cohort names node id.
func naming(meta raftgroup.Meta, id uint64) []int {
	out := []int{} // JSON [] when none, not null
	for p, pi := range meta.Partitions {
		if slices.Contains(pi.Cohort, id) {
			out = append(out, p)
		}
	}
	return out
}

// gossipState is gossip's view of node id (Dead when gossip does not know
// it).
func (n *Node) gossipState(id uint64) member.State {
	if g := n.ms.Gossip(); g != nil {
		if _, st, ok := g.Lookup(id); ok {
			return st
		}
	}
	return member.Dead
}

// retirable checks what removing or retiring node id needs: the cluster
// version, and a member (or one removed already).
func (n *Node) retirable(meta raftgroup.Meta, id uint64, what string) error {
	if err := version.MemberRemoval.Check(meta.Version()); err != nil {
		return err
	}
	if meta.Removed[id] {
		return nil
	}
	if _, ok := meta.Members[id]; !ok {
		return wire.Errorf(wire.CodeNotFound, "%s: node %d is not a member of the cluster", what, id)
	}
	return nil
}

// RemoveNode implements wire.AdminService.
func (a adminAPI) RemoveNode(ctx context.Context, req *wire.RemoveNodeRequest) (*wire.RemoveNodeResponse, error) {
	n := a.n
	if err := n.serving(); err != nil {
		return nil, err
	}
	id := req.Node
	meta := n.raft.Meta()
	if err := n.retirable(meta, id, "remove"); err != nil {
		return nil, err
	}
	if meta.Removed[id] {
		return &wire.RemoveNodeResponse{Node: id}, nil
	}
	if id == n.id {
		return nil, wire.Errorf(wire.CodeInvalid, "remove: node %d is the node asked: ask another one (or ctl decommission it)", id)
	}
	if st := n.gossipState(id); st == member.Alive || st == member.Suspect {
		return nil, wire.Errorf(wire.CodeConflict, "remove: node %d is %s: stop it first, or move its partitions away while it runs with ctl decommission", id, st)
	}
	named := naming(meta, id)
	for left := named; len(left) > 0; left = naming(n.raft.Meta(), id) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: remove node %d: the cohorts of partitions %v still name it: placement refills them once it has been down for --placement-settle (a partition with no other live replica needs ctl recover partition)",
				wire.ErrUnavailable, id, left)
		case <-time.After(removePoll):
		}
	}
	voters, learners := n.raft.Config()
	if slices.Contains(voters, id) || slices.Contains(learners, id) {
		if err := n.raft.Remove(ctx, id); err != nil && !errors.Is(err, raftgroup.ErrNotMember) {
			return nil, fmt.Errorf("remove node %d from the metadata group: %w", id, err)
		}
	}
	found, err := n.raft.RemoveMember(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("remove node %d: %w", id, err)
	}
	n.log.Info("node removed from the cluster", "peer", id, "refilled", len(named))
	return &wire.RemoveNodeResponse{Node: id, Refilled: len(named), Removed: found}, nil
}

// Decommission implements wire.AdminService.
func (a adminAPI) Decommission(ctx context.Context, req *wire.DecommissionRequest) (*wire.DecommissionStatus, error) {
	n := a.n
	if err := n.serving(); err != nil {
		return nil, err
	}
	id := req.Node
	meta := n.raft.Meta()
	if err := n.retirable(meta, id, "decommission"); err != nil {
		return nil, err
	}
	if meta.Removed[id] {
		return nil, wire.Errorf(wire.CodeNotFound, "decommission: node %d was removed already", id)
	}
	if !req.Cancel && !meta.Retiring[id] {
		// Placement puts each partition on Replicas live members that are
		// not retiring: refuse what would leave fewer.
		var stay int
		for mid := range meta.Members {
			if mid != id && !meta.Retiring[mid] && (mid == n.id || n.gossipState(mid) == member.Alive) {
				stay++
			}
		}
		if stay < meta.Config.Replicas {
			return nil, wire.Errorf(wire.CodeConflict, "decommission: node %d would leave %d live members for %d replicas of each partition: add a node first",
				id, stay, meta.Config.Replicas)
		}
	}
	if meta.Retiring[id] == req.Cancel {
		if _, err := n.raft.Retire(ctx, id, !req.Cancel); err != nil {
			return nil, fmt.Errorf("decommission node %d: %w", id, err)
		}
		n.log.Info("node retiring", "peer", id, "retiring", !req.Cancel)
		meta = n.raft.Meta()
	}
	voters, _ := n.raft.Config()
	st := &wire.DecommissionStatus{Node: id, Addr: meta.Members[id].Addr, Retiring: meta.Retiring[id], Remaining: naming(meta, id),
		Voter: slices.Contains(voters, id)}
	if !req.Leave || req.Cancel || !st.Done() {
		return st, nil
	}
	if id == n.id {
		if _, err := n.Leave(ctx); err != nil {
			return nil, fmt.Errorf("decommission node %d: leave: %w", id, err)
		}
	} else if err := n.peers.Call(ctx, n.peerAddr(id, st.Addr), wire.OpLeave, nil, &wire.LeaveResponse{}); err != nil && !errors.Is(err, wire.ErrShuttingDown) {
		// shutting_down: the node began leaving before its answer left
		// (seen by hand: ctl then reported a failure and removed nothing).
		return nil, fmt.Errorf("decommission node %d: ask it to leave: %w", id, err)
	}
	n.log.Info("decommissioned node leaves", "peer", id)
	st.Left = true
	return st, nil
}

// peerAddr is where node id is reached: gossip's address, else the
// registry's (addr).
func (n *Node) peerAddr(id uint64, addr string) string {
	if a := n.ms.AddrOf(id); a != "" {
		return a
	}
	return addr
}

// refusalWatch is the peer transport of a node that remembers why a peer
// last refused it (wire.ErrPeerRefused: it was removed from the cluster,
// or its build is older than the cluster's version), so that a start
// that finds nobody to talk to says why.
type refusalWatch struct {
	peer.Transport
	last *atomic.Pointer[string]
}

func (w refusalWatch) Dial(ctx context.Context, addr string) (peer.Conn, error) {
	c, err := w.Transport.Dial(ctx, addr)
	if errors.Is(err, wire.ErrPeerRefused) {
		why := err.Error()
		w.last.Store(&why)
	}
	return c, err
}
