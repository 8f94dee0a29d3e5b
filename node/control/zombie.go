package control

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Zombies (docs/design.md, Topology): a node that a move took out of a
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
// drops it if so. The answer holds for the copy as it was when asked (its
// tree root): a copy that changed since is kept for the next ask.
func (c *Control) release(ctx context.Context, part uint16) error {
	pl, _ := c.host.Placement()
	addr := c.host.AddrOf(pl.Leaders[part])
	if addr == "" {
		return fmt.Errorf("%w: leader of partition %d unknown", wire.ErrUnavailable, part)
	}
	root := c.host.Replica(int(part)).Root()
	// The pool bounds the call.
	if err := c.host.Peers().Call(ctx, addr, wire.OpRelease, &wire.ReleaseRequest{Part: part, Node: c.cfg.Self, Root: root[:]}, nil); err != nil {
		return err
	}
	// Look again: the registry may have put this node back meanwhile.
	if now, _ := c.host.Placement(); now.Epochs[part] != pl.Epochs[part] || !c.zombie(now, int(part)) {
		return fmt.Errorf("%w: partition %d changed while asking", wire.ErrUnavailable, part)
	}
	// Only at the epoch the decision was made at: a replica that promised
	// a newer one may be a sealed member of a handoff in flight.
	if err := c.host.Replica(int(part)).ReleaseAt(pl.Epochs[part], root); err != nil {
		return err
	}
	c.log.Info("released a partition this node no longer holds for its cohort", "partition", part, "epoch", pl.Epochs[part])
	return nil
}

// ServeRelease is OpRelease at a partition's leader: yes if it leads the
// partition (so a majority of its cohort holds the data), the asker, peer
// (0: this node), is not in that cohort, and it has gathered the asker's
// copy as it was when asked (its tree root) while leading at the epoch it
// leads at now (gathered).
func (c *Control) ServeRelease(ctx context.Context, peer uint64, r *wire.ReleaseRequest) error {
	if int(r.Part) >= c.host.Partitions() {
		return fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	if peer != 0 && peer != r.Node {
		return fmt.Errorf("%w: node %d asks to release for node %d", task.ErrInvalid, peer, r.Node)
	}
	if len(r.Root) != antientropy.DigestLen {
		return fmt.Errorf("%w: release of partition %d: tree root of %d bytes, want %d", task.ErrInvalid, r.Part, len(r.Root), antientropy.DigestLen)
	}
	if !c.leads(int(r.Part)) {
		return fmt.Errorf("%w: node %d does not lead partition %d; ask its leader", wire.ErrUnavailable, c.cfg.Self, r.Part)
	}
	if slices.Contains(c.cohort(int(r.Part)), r.Node) {
		return fmt.Errorf("%w: node %d is in partition %d's cohort", task.ErrInvalid, r.Node, r.Part)
	}
	var root antientropy.Digest
	copy(root[:], r.Root)
	return c.gathered(gatherKey{part: r.Part, node: r.Node}, c.host.Replica(int(r.Part)).Epoch(), root)
}

// Gathering a zombie's copy. A gather is a whole anti-entropy pass with
// the zombie, as long as the partition is large, so it runs in the
// background, bounded (gatherTimeout, gatherParallel), and the zombie
// asks again (every ZombieCheck) until one has finished:
//
//   - A gather started after the zombie asked with tree root R pulled all
//     the copy held at R. The yes is for a later ask with the same R (the
//     copy has not changed since), and the zombie releases only if its
//     root is still R (partition.Replica.ReleaseAt): so whatever the copy
//     holds when dropped, the leader holds too. A copy that changed (a
//     write merged there, by a coordinator that still takes it for a
//     cohort member) is gathered again.
//   - It counts only if this node led at one epoch throughout, the one it
//     leads at when it says yes: what it gathered is then in the line of
//     writes it leads, which the next handoff carries.

// gatherKey names a zombie's copy: its partition and node.
type gatherKey struct {
	part uint16
	node uint64
}

// gatherRun is one gather of a zombie's copy.
type gatherRun struct {
	epoch uint64             // the epoch this node led at when it started
	root  antientropy.Digest // the copy's tree root when the zombie asked
	done  bool
	err   error // the gather's outcome, once done
}

// gatherRuns is the last gather of each zombie's copy, and how many run.
// INVARIANT: running is the number of runs in by that are not done, at
// most gatherParallel.
type gatherRuns struct {
	sync.Mutex
	ctx     context.Context // Start's; nil before it: nothing is gathered
	by      map[gatherKey]*gatherRun
	running int
}

// startGathers lets gathers run, until ctx ends.
func (c *Control) startGathers(ctx context.Context) {
	c.gathers.Lock()
	c.gathers.ctx = ctx
	c.gathers.Unlock()
}

// gathered says yes (nil) when a gather of k's copy at root, started while
// this node led at ep, has finished while it still leads at ep. Otherwise
// it starts one, unless one of k runs or gatherParallel do, and says not
// yet (wire.ErrUnavailable).
func (c *Control) gathered(k gatherKey, ep uint64, root antientropy.Digest) error {
	c.gathers.Lock()
	defer c.gathers.Unlock()
	g := c.gathers.by[k]
	switch {
	case g != nil && !g.done:
		return fmt.Errorf("%w: partition %d: gathering node %d's copy; ask again", wire.ErrUnavailable, k.part, k.node)
	case g != nil && g.epoch == ep && g.root == root && g.err == nil:
		return nil
	case c.gathers.ctx == nil:
		return fmt.Errorf("%w: partition %d: node %d is starting", wire.ErrUnavailable, k.part, c.cfg.Self)
	case c.gathers.running >= gatherParallel:
		return fmt.Errorf("%w: partition %d: %d gathers of zombies' copies running; ask again", wire.ErrUnavailable, k.part, c.gathers.running)
	}
	g = &gatherRun{epoch: ep, root: root}
	c.gathers.by[k] = g
	c.gathers.running++
	ctx := c.gathers.ctx
	c.wg.Go(func() { c.gather(ctx, k, g) })
	return fmt.Errorf("%w: partition %d: gathering node %d's copy; ask again", wire.ErrUnavailable, k.part, k.node)
}

// gather runs g, the gather of k's copy, and records its outcome.
func (c *Control) gather(ctx context.Context, k gatherKey, g *gatherRun) {
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	err := c.host.Gather(ctx, k.part, k.node)
	if err == nil {
		if now := c.host.Replica(int(k.part)).Epoch(); now != g.epoch {
			err = fmt.Errorf("leadership changed while gathering (epoch %d, now %d)", g.epoch, now)
		}
	}
	if err != nil {
		c.log.Debug("gather of a zombie's copy failed; its next ask starts another", "partition", k.part, "zombie", k.node, "err", err)
	}
	c.gathers.Lock()
	g.done, g.err = true, err
	c.gathers.running--
	c.gathers.Unlock()
}
