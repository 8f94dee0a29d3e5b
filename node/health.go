package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/node/listen"
	"github.com/skuldd/skuldd/node/retrying"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/wire"
)

// The node's probes (GET /healthz and /readyz). Liveness says whether the
// process should be restarted: only a stopping node is not alive, since a
// restart cures none of the reasons a running node cannot serve (a peer
// out of reach, a clock the cluster does not trust). Readiness says
// whether it should be sent requests now, and lists every reason it
// should not: a load balancer or a systemd unit waits on it.

func (n *Node) probes() listen.Probes {
	return listen.Probes{Live: n.live, Ready: n.readiness}
}

// live reports why the node is not alive: it is stopping.
func (n *Node) live() error {
	if n.stopping.Load() {
		return wire.ErrShuttingDown
	}
	return nil
}

// readiness lists why the node cannot serve requests now (none: it can):
// it is stopping or starting; its clock is not trusted; it cannot reach a
// majority of the metadata group's voters, or the group has no leader;
// a partition the registry says it leads has no leader here, or it
// cannot reach a majority of that partition's cohort. Reachability is
// gossip's: a peer counts until gossip finds it dead (seconds).
func (n *Node) readiness() []string {
	switch {
	case n.stopping.Load():
		return []string{"shutting down"}
	case !n.ready.Load():
		return []string{"starting"}
	}
	var reasons []string
	if drifting, why := n.drifting(); drifting {
		reasons = append(reasons, "this node's clock is not trusted: "+why)
	}
	voters, _ := n.raft.Config()
	if reach := n.reachable(voters); reach <= len(voters)/2 {
		reasons = append(reasons, fmt.Sprintf("metadata group: this node reaches %d of its %d voters, not a majority", reach, len(voters)))
	} else if n.raft.Leader() == 0 {
		reasons = append(reasons, "metadata group: no leader")
	}
	var leaderless, cutOff []string
	meta := n.raft.Meta()
	for _, r := range n.parts {
		p := int(r.Part())
		if p >= len(meta.Partitions) || meta.Partitions[p].Leader != n.id {
			continue
		}
		if r.Epoch() == 0 {
			leaderless = append(leaderless, fmt.Sprint(p))
			continue
		}
		cohort := n.partitionCohort(p)
		if reach := n.reachable(cohort); reach <= len(cohort)/2 {
			cutOff = append(cutOff, fmt.Sprintf("%d (%d of %d)", p, reach, len(cohort)))
		}
	}
	if len(leaderless) > 0 {
		reasons = append(reasons, "partitions this node should lead but does not yet: "+strings.Join(leaderless, ", "))
	}
	if len(cutOff) > 0 {
		reasons = append(reasons, "partitions this node leads without a majority of their cohort in reach: "+strings.Join(cutOff, ", "))
	}
	return reasons
}

// reachable counts the nodes of ids this node reaches: itself, and the
// peers gossip says are alive.
func (n *Node) reachable(ids []uint64) int {
	c := 0
	for _, id := range ids {
		if id == n.id || n.ms.Alive(id) {
			c++
		}
	}
	return c
}

// Readiness lists why the node cannot serve requests now (none: it can),
// as GET /readyz reports it: for the process's own readiness signals
// (systemd's notify protocol).
func (n *Node) Readiness() []string { return n.readiness() }

// unreachable says why retrying cannot serve need: a partition it needs
// whose cohort has no majority within this node's reach, or the metadata
// group without a majority of its voters in reach (retrying.Host).
// Reachability is gossip's, as for readiness.
func (n *Node) unreachable(need retrying.Need) error {
	if need.Meta {
		voters, _ := n.raft.Config()
		if reach := n.reachable(voters); reach <= len(voters)/2 {
			return fmt.Errorf("the metadata group has %d of its %d voters within this node's reach (%s not answering); it needs a majority",
				reach, len(voters), n.downList(voters))
		}
	}
	var parts []int
	switch {
	case need.All:
		for p := range n.cfg.Partitions {
			parts = append(parts, p)
		}
	default:
		for _, id := range need.IDs {
			if p := int(ring.PartitionOf(id[:], n.cfg.Partitions)); !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	for _, p := range parts {
		cohort := n.partitionCohort(p)
		if len(cohort) == 0 {
			continue // not placed yet: a retry may find it placed
		}
		if reach := n.reachable(cohort); reach <= len(cohort)/2 {
			return fmt.Errorf("partition %d has %d of its %d replicas within this node's reach (%s not answering); it needs a majority",
				p, reach, len(cohort), n.downList(cohort))
		}
	}
	return nil
}

// downList names the nodes of ids this node does not reach, by address
// where gossip knows it.
func (n *Node) downList(ids []uint64) string {
	var down []string
	for _, id := range ids {
		if id == n.id || n.ms.Alive(id) {
			continue
		}
		if addr := n.ms.AddrOf(id); addr != "" {
			down = append(down, addr)
		} else {
			down = append(down, fmt.Sprintf("node %d", id))
		}
	}
	return strings.Join(down, ", ")
}
