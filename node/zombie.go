package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Zombies (DESIGN.md, Topology): a node that a move took out of a
// partition's cohort keeps its copy until the partition's leader, serving
// with the new cohort, releases it. The leader serves only after a
// majority of the new cohort holds the data (the handoff's carry: see
// carry.go), so by then the zombie's copy adds nothing. Each node asks
// for its own zombies on an interval, so a lost answer or a restart only
// delays a release.

// zombieLoop releases this node's zombie partitions.
func (n *Node) zombieLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ZombieCheck)
	defer t.Stop()
	// outAt is the registry epoch at which a partition was first seen
	// without this node: a release waits for a second look at the same
	// epoch, so a cohort in the middle of changing is left alone.
	outAt := map[uint16]uint64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pl := n.placement.Load()
		if pl == nil || n.departing.Load() {
			continue
		}
		for p := range pl.cohorts {
			part := uint16(p)
			if !n.zombie(pl, part) {
				delete(outAt, part)
				continue
			}
			if has, err := n.store.HasTasks(part); err != nil || !has {
				delete(outAt, part)
				continue
			}
			ep, seen := outAt[part]
			if !seen || ep != pl.epochs[p] {
				outAt[part] = pl.epochs[p]
				continue
			}
			if err := n.release(ctx, part); err != nil {
				n.log.Debug("zombie release refused; will ask again", "partition", part, "err", err)
				continue
			}
			delete(outAt, part)
		}
	}
}

// zombie reports whether the registry has part led by another node with a
// cohort without this one.
func (n *Node) zombie(pl *placementView, part uint16) bool {
	c := pl.cohorts[part]
	l := pl.leaders[part]
	return len(c) > 0 && !slices.Contains(c, n.id) && l != 0 && l != n.id && !n.leads(part)
}

// release asks part's leader whether this node may drop its copy, and
// drops it if so.
func (n *Node) release(ctx context.Context, part uint16) error {
	pl := n.placement.Load()
	addr := n.addrOf(pl.leaders[part])
	if addr == "" {
		return fmt.Errorf("%w: leader of partition %d unknown", wire.ErrUnavailable, part)
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	if err := n.peers.Call(cctx, addr, wire.OpRelease, &wire.ReleaseRequest{Part: part, Node: n.id}, nil); err != nil {
		return err
	}
	// Look again: the registry may have put this node back meanwhile.
	if now := n.placement.Load(); now.epochs[part] != pl.epochs[part] || !n.zombie(now, part) {
		return fmt.Errorf("%w: partition %d changed while asking", wire.ErrUnavailable, part)
	}
	if err := n.parts[part].Release(); err != nil {
		return err
	}
	n.log.Info("released a partition this node no longer holds for its cohort", "partition", part, "epoch", pl.epochs[part])
	return nil
}

// serveRelease is OpRelease at a partition's leader: yes if it leads the
// partition (so a majority of its cohort holds the data) and the asker is
// not in that cohort.
func (n *Node) serveRelease(peer uint64, r *wire.ReleaseRequest) error {
	if int(r.Part) >= len(n.parts) {
		return fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	if peer != 0 && peer != r.Node {
		return fmt.Errorf("%w: node %d asks to release for node %d", task.ErrInvalid, peer, r.Node)
	}
	if !n.leads(r.Part) {
		return replication.NotLeading(r.Part)
	}
	if slices.Contains(n.partitionCohort(int(r.Part)), r.Node) {
		return fmt.Errorf("%w: node %d is in partition %d's cohort", task.ErrInvalid, r.Node, r.Part)
	}
	return nil
}

// Holds reports whether this node's store holds tasks of partition part:
// a cohort member's copy, or a zombie not yet released.
func (n *Node) Holds(part int) (bool, error) {
	if part < 0 || part >= len(n.parts) {
		return false, fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, part)
	}
	return n.store.HasTasks(uint16(part))
}
