package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Zombies (DESIGN.md, Topology): a node that a move took out of a
// partition's cohort keeps its copy until the partition's leader, serving
// with the new cohort, releases it. The leader serves only after a
// majority of the new cohort holds the data (the handoff's carry), so by
// then the zombie's copy adds nothing the handoff did not carry, but for
// one kind of write: an enqueue with w=1 that the zombie acknowledged
// alone while it still took itself for the leader (paused, or cut off,
// while the others took over). An acknowledged write is never lost, so
// the leader gathers the zombie's copy (the specs, edges and tombstones
// it holds; its states are orphans) before it says yes. Each node asks
// for its own zombies on an interval, so a lost answer or a restart only
// delays a release.

// Zombie reports whether this node (self) holds a zombie of a partition
// the registry has led by leader with cohort: another node leads it, this
// one is not in its cohort, and this node's replica does not lead it.
func Zombie(self uint64, cohort []uint64, leader uint64, leading bool) bool {
	return len(cohort) > 0 && !slices.Contains(cohort, self) && leader != 0 && leader != self && !leading
}

// ZombieCandidate is one partition as the zombie planner sees it.
type ZombieCandidate struct {
	Part uint16
	// Zombie: Zombie holds for the partition now.
	Zombie bool
	// Holds: the store holds tasks of the partition (read for zombies
	// only; false when the read failed).
	Holds bool
	// Epoch is the registry's epoch of the partition.
	Epoch uint64
}

// PlanZombies returns the zombies to release now and the out-at map for
// the next plan. outAt holds the registry epoch at which a partition was
// first seen without this node: a release waits for a second look at the
// same epoch, so a cohort in the middle of changing is left alone. A
// partition that is no zombie, or whose store holds nothing, is
// forgotten.
func PlanZombies(parts []ZombieCandidate, outAt map[uint16]uint64) (release []uint16, next map[uint16]uint64) {
	next = make(map[uint16]uint64, len(outAt))
	for _, p := range parts {
		if !p.Zombie || !p.Holds {
			continue
		}
		ep, seen := outAt[p.Part]
		next[p.Part] = p.Epoch
		if seen && ep == p.Epoch {
			release = append(release, p.Part)
		}
	}
	return release, next
}

// zombieLoop releases this node's zombie partitions.
func (c *Control) zombieLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ZombieCheck)
	defer t.Stop()
	outAt := map[uint16]uint64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pl, ok := c.host.Placement()
		if !ok || c.host.Departing() {
			continue
		}
		parts := make([]ZombieCandidate, len(pl.Cohorts))
		for p := range pl.Cohorts {
			zc := ZombieCandidate{Part: uint16(p), Zombie: c.zombie(pl, p), Epoch: pl.Epochs[p]}
			if zc.Zombie {
				has, err := c.host.HasTasks(zc.Part)
				zc.Holds = err == nil && has
			}
			parts[p] = zc
		}
		var release []uint16
		release, outAt = PlanZombies(parts, outAt)
		for _, part := range release {
			if err := c.release(ctx, part); err != nil {
				c.log.Debug("zombie release refused; will ask again", "partition", part, "err", err)
				continue
			}
			delete(outAt, part)
		}
	}
}

// zombie is Zombie for part by pl and this node's replica.
func (c *Control) zombie(pl Placement, part int) bool {
	return Zombie(c.cfg.Self, pl.Cohorts[part], pl.Leaders[part], c.leads(part))
}

// release asks part's leader whether this node may drop its copy, and
// drops it if so.
func (c *Control) release(ctx context.Context, part uint16) error {
	pl, _ := c.host.Placement()
	addr := c.host.AddrOf(pl.Leaders[part])
	if addr == "" {
		return fmt.Errorf("%w: leader of partition %d unknown", wire.ErrUnavailable, part)
	}
	// The pool bounds the call.
	if err := c.host.Peers().Call(ctx, addr, wire.OpRelease, &wire.ReleaseRequest{Part: part, Node: c.cfg.Self}, nil); err != nil {
		return err
	}
	// Look again: the registry may have put this node back meanwhile.
	if now, _ := c.host.Placement(); now.Epochs[part] != pl.Epochs[part] || !c.zombie(now, int(part)) {
		return fmt.Errorf("%w: partition %d changed while asking", wire.ErrUnavailable, part)
	}
	// Only at the epoch the decision was made at: a replica that promised
	// a newer one may be a sealed member of a handoff in flight.
	if err := c.host.Replica(int(part)).ReleaseAt(pl.Epochs[part]); err != nil {
		return err
	}
	c.log.Info("released a partition this node no longer holds for its cohort", "partition", part, "epoch", pl.Epochs[part])
	return nil
}

// ServeRelease is OpRelease at a partition's leader: yes if it leads the
// partition (so a majority of its cohort holds the data), the asker, peer
// (0: this node), is not in that cohort, and it gathered what the asker's
// copy holds that counts (Host.Gather) while still leading at the same
// epoch.
func (c *Control) ServeRelease(ctx context.Context, peer uint64, r *wire.ReleaseRequest) error {
	if int(r.Part) >= c.host.Partitions() {
		return fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	if peer != 0 && peer != r.Node {
		return fmt.Errorf("%w: node %d asks to release for node %d", task.ErrInvalid, peer, r.Node)
	}
	if !c.leads(int(r.Part)) {
		return fmt.Errorf("%w: node %d does not lead partition %d; ask its leader", wire.ErrUnavailable, c.cfg.Self, r.Part)
	}
	if slices.Contains(c.cohort(int(r.Part)), r.Node) {
		return fmt.Errorf("%w: node %d is in partition %d's cohort", task.ErrInvalid, r.Node, r.Part)
	}
	ep := c.host.Replica(int(r.Part)).Epoch()
	if err := c.host.Gather(ctx, r.Part, r.Node); err != nil {
		return fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, r.Part, err)
	}
	if now := c.host.Replica(int(r.Part)).Epoch(); now != ep {
		return fmt.Errorf("%w: partition %d: leadership changed while gathering node %d's copy", wire.ErrUnavailable, r.Part, r.Node)
	}
	return nil
}
