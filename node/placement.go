package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/control"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/wire"
)

// Placement and failover (DESIGN.md, Topology and Partition leaders).
//
// Failover: every node watches the leaders of the partitions whose cohort
// it is in. When gossip says a leader is dead (or left), the first live
// member of the cohort, in cohort order, runs the handoff with the same
// cohort and leads; the dead member stays in the cohort (its writes count
// as missing acks) until placement replaces it. A node that sees most of a
// cohort dead is the one cut off: it takes nothing over, fences the
// partitions of that cohort it leads (fenceCutOff: no claims), and steps
// down when the registry shows it a newer leader (stepDownSuperseded).
//
// Placement: the metadata leader compares every partition's cohort with
// ring's cohort over the live members, once membership has been quiet for
// PlacementSettle, and moves the partitions that differ, a few at a time.
// A move is two-phase: the current leader first takes the union of the old
// and new cohort (new members then receive every new write), each new
// member copies the partition from the leader (a resumable paged
// transfer), and then the new cohort's first member takes over with the
// new cohort. Members that leave the cohort keep their data (zombies)
// until a later release.

// Placement and failover timing.
const (
	// failoverInterval is how often a node checks the leaders of its
	// cohorts.
	failoverInterval = 100 * time.Millisecond
	// placementInterval is how often the metadata leader checks placement.
	placementInterval = 500 * time.Millisecond
	// maxMoves bounds the partitions moving at once.
	maxMoves = 4
	// moveTimeout bounds one partition move.
	moveTimeout = 5 * time.Minute
	// fenceLiftSettle is how long a fenced leader waits, once gossip shows
	// a majority of the cohort again, before it grants claims: time for
	// the metadata group to bring it the registry's news (a newer leader
	// chosen while it was cut off, on which it steps down) first.
	fenceLiftSettle = time.Second
)

// failoverLoop takes over partitions whose leader died.
func (n *Node) failoverLoop(ctx context.Context) {
	t := time.NewTicker(failoverInterval)
	defer t.Stop()
	var mu sync.Mutex
	running := map[int]bool{}
	absentSince := map[uint64]time.Time{}
	gone := map[uint64]bool{}
	backSince := map[uint16]time.Time{} // fenced partitions whose majority is back
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		members := n.member.Members() // one view per tick
		n.dropGone(gone, members)
		states := n.statesOf(members)
		meta := n.raft.Meta()
		n.stepDownSuperseded(meta)
		n.fenceCutOff(states, backSince, time.Now())
		if drifting, _ := n.drifting(); n.departing.Load() || drifting {
			continue // leaving, or a clock ahead: take nothing over
		}
		parts := make([]control.Partition, 0, len(meta.Partitions))
		mu.Lock()
		for p, pi := range meta.Partitions {
			cp := control.Partition{
				Part: p, Leader: pi.Leader, Epoch: pi.Epoch, Cohort: pi.Cohort,
				Leading: n.parts[p].Epoch() != 0, Handoff: n.leadRuns[p].Load() > 0,
				Running: running[p],
			}
			if pi.Leader == n.id {
				// The planner reads the promise only then; it takes the
				// replica's lock, which writes hold.
				cp.Promised, cp.PromisedTo = n.parts[p].Promised()
			}
			parts = append(parts, cp)
		}
		mu.Unlock()
		var plan []control.Takeover
		plan, absentSince = control.PlanFailover(control.FailoverInput{
			Self: n.id, Partitions: parts, States: states, AbsentSince: absentSince,
			Now: time.Now(), DeadGrace: n.cfg.DeadVoterGrace,
		})
		for _, tk := range plan {
			p := tk.Part
			mu.Lock()
			if running[p] {
				mu.Unlock()
				continue
			}
			running[p] = true
			mu.Unlock()
			cohort, old := tk.Cohort, tk.Old
			// The takeover goes on only while its reasons hold: the
			// registry still names the leader it replaces, gossip still
			// holds that one dead, and this node sees a majority.
			still := func() error {
				if old == n.id {
					return nil // the registry's own choice: lead
				}
				if ls := n.leaders(); p >= len(ls) || ls[p] != old {
					return fmt.Errorf("partition %d has another leader now", p)
				}
				st := n.gossipStates()
				if s := st[old]; s == member.Alive || s == member.Suspect {
					return fmt.Errorf("its leader, node %d, is back", old)
				}
				if !control.LiveMajority(cohort, st) {
					return fmt.Errorf("this node is cut off from most of the cohort %v", cohort)
				}
				return nil
			}
			n.wg.Go(func() {
				defer func() { mu.Lock(); delete(running, p); mu.Unlock() }()
				cctx, cancel := context.WithTimeout(ctx, n.cfg.StartTimeout)
				defer cancel()
				n.log.Warn("partition leader gone: taking over", "partition", p, "old_leader", old, "cohort", cohort)
				if err := n.lead(cctx, p, cohort, still); err != nil {
					n.log.Warn("takeover failed", "partition", p, "err", err)
				}
			})
		}
	}
}

// fenceCutOff stops this node granting claims in each partition it leads
// whose cohort it cannot reach a majority of, and lets them resume when it
// can again. Gossip decides, the same verdict (dead) on which the other
// side of a network split takes the partition over: then the two sides
// agree about who may grant. A claim granted while cut off could never be
// acknowledged (it needs a majority), but its record would stay here and
// come back with anti-entropy after the split heals, costing its task an
// attempt nobody made. The fence keeps the partition's leadership and its
// heads (enqueues with a smaller w still succeed; the handoff of the other
// side, or the stale-epoch answer of a follower, ends the leadership); it
// only keeps its heads out of claims and summaries.
//
// The fence lifts fenceLiftSettle after the majority is back (backSince
// holds since when, per partition), so that a leader the other side
// replaced meanwhile learns so from the registry and steps down
// (stepDownSuperseded) before it grants a claim.
func (n *Node) fenceCutOff(states map[uint64]member.State, backSince map[uint16]time.Time, now time.Time) {
	for p := range n.parts {
		part := uint16(p)
		leads := n.leads(part)
		var cohort []uint64
		if leads {
			cohort = n.partitionCohort(p)
		}
		switch {
		case leads && !control.LiveMajority(cohort, states):
			delete(backSince, part)
			if n.heads.fence(part, true) {
				n.log.Warn("partition leader cut off from a majority of its cohort: granting no claims until it is back", "partition", p, "cohort", cohort)
			}
		case !n.heads.isFenced(part):
			delete(backSince, part)
		case !leads:
			delete(backSince, part)
			n.heads.fence(part, false) // nothing to grant from either way
		default:
			since, ok := backSince[part]
			if !ok {
				backSince[part] = now
				continue
			}
			if now.Sub(since) < fenceLiftSettle {
				continue
			}
			delete(backSince, part)
			n.heads.fence(part, false)
			n.log.Info("partition leader reaches a majority of its cohort again: granting claims", "partition", p)
		}
	}
}

// stepDownSuperseded makes this node stop leading each partition the
// registry says another node leads at a newer epoch: the other side of a
// split took it over while this node was cut off. (A follower's
// stale-epoch answer does the same at the next write; this does it
// without one, before the node grants anything.) The registry's epoch
// only grows past this node's after a handoff that did not make this
// node the leader, so a leader never steps down on it by mistake; a
// stale registry view shows an older epoch, and nothing happens.
func (n *Node) stepDownSuperseded(meta raftgroup.Meta) {
	for p, pi := range meta.Partitions {
		if p >= len(n.parts) || pi.Leader == n.id {
			continue
		}
		if ep := n.parts[p].Epoch(); ep != 0 && pi.Epoch > ep {
			n.log.Warn("stepping down: the registry names a newer leader", "partition", p, "epoch", ep, "registry_epoch", pi.Epoch, "leader", pi.Leader)
			n.parts[p].Resign()
		}
	}
}

// dropGone closes the peer connections of the members gossip has newly
// declared dead or gone (peerPool.drop), so that requests waiting on one
// (a claim or an enqueue forwarded to a leader that crashed) fail over
// now rather than at their deadline. gone carries the verdicts from call
// to call, so each one drops once.
func (n *Node) dropGone(gone map[uint64]bool, members []member.Peer) {
	for _, p := range members {
		if p.State != member.Dead && p.State != member.Left {
			delete(gone, p.ID)
			continue
		}
		if !gone[p.ID] && p.Addr != "" {
			n.log.Info("peer gone: closing its connection", "peer", p.ID, "addr", p.Addr, "state", p.State)
			n.peers.Drop(p.Addr)
		}
		gone[p.ID] = true
	}
}

// gossipStates maps node ids to their gossip state.
func (n *Node) gossipStates() map[uint64]member.State {
	return n.statesOf(n.member.Members())
}

// statesOf is gossipStates over a member list already read.
func (n *Node) statesOf(members []member.Peer) map[uint64]member.State {
	out := make(map[uint64]member.State, len(members))
	for _, p := range members {
		out[p.ID] = p.State
	}
	out[n.id] = member.Alive
	return out
}

// gossipAlive reports whether gossip holds node id alive (this node
// always is), as gossipStates would, for one node.
func (n *Node) gossipAlive(id uint64) bool {
	if id == n.id {
		return true
	}
	_, st, ok := n.member.Lookup(id)
	return ok && st == member.Alive
}

// placementLoop runs on every node and acts only on the metadata leader.
func (n *Node) placementLoop(ctx context.Context) {
	t := time.NewTicker(placementInterval)
	defer t.Stop()
	var mu sync.Mutex
	moving := map[int]bool{}
	var lastChange time.Time
	var lastAlive []uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.raft.Leader() != n.id || n.departing.Load() {
			continue
		}
		meta := n.raft.Meta()
		if meta.Config == nil {
			continue
		}
		states := n.gossipStates()
		var alive []uint64
		unsettled := false
		for id := range meta.Members {
			switch states[id] {
			case member.Alive:
				alive = append(alive, id)
			case member.Suspect:
				unsettled = true
			}
		}
		slices.Sort(alive)
		now := time.Now()
		if !slices.Equal(alive, lastAlive) {
			lastAlive, lastChange = alive, now
			continue
		}
		if unsettled || now.Sub(lastChange) < n.cfg.PlacementSettle || len(alive) == 0 {
			continue
		}
		for p, pi := range meta.Partitions {
			if pi.Leader == 0 || states[pi.Leader] != member.Alive {
				continue // failover first
			}
			want := ring.Cohort(p, alive, meta.Config.Replicas)
			// The ring's first member leads: moves end that way, and a
			// partition that failed over goes back to it once it is up
			// again, so leadership stays spread.
			if sameSet(want, pi.Cohort) && pi.Leader == want[0] {
				continue
			}
			mu.Lock()
			if moving[p] || len(moving) >= maxMoves {
				mu.Unlock()
				continue
			}
			moving[p] = true
			mu.Unlock()
			from := slices.Clone(pi.Cohort)
			leader := pi.Leader
			n.wg.Go(func() {
				defer func() { mu.Lock(); delete(moving, p); mu.Unlock() }()
				mctx, cancel := context.WithTimeout(ctx, moveTimeout)
				defer cancel()
				if err := n.move(mctx, p, leader, from, want); err != nil {
					n.log.Warn("partition move failed; will retry", "partition", p, "from", from, "to", want, "err", err)
					return
				}
				n.log.Info("partition moved", "partition", p, "from", from, "to", want)
			})
		}
	}
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// move changes part's cohort from `from` (led by leader) to `to`.
func (n *Node) move(ctx context.Context, part int, leader uint64, from, to []uint64) error {
	union := slices.Clone(from)
	var added []uint64
	for _, id := range to {
		if !slices.Contains(union, id) {
			union = append(union, id)
			added = append(added, id)
		}
	}
	// Phase 1: the leader takes the union, so the new members get every
	// write from now on.
	if len(added) > 0 {
		// Keep the leader first: ring order puts the preferred leader
		// first, and a takeover keeps whoever runs it as leader.
		if err := n.askTakeover(ctx, leader, part, union); err != nil {
			return fmt.Errorf("widen cohort: %w", err)
		}
		// Phase 2: the new members copy what was written before.
		for _, id := range added {
			if err := n.askPull(ctx, id, part, leader); err != nil {
				return fmt.Errorf("copy to node %d: %w", id, err)
			}
		}
	}
	// Phase 3: the new cohort's first member leads the new cohort.
	if err := n.askTakeover(ctx, to[0], part, to); err != nil {
		return fmt.Errorf("hand over: %w", err)
	}
	return nil
}

// askTakeover makes node lead part with cohort.
func (n *Node) askTakeover(ctx context.Context, node uint64, part int, cohort []uint64) error {
	if node == n.id {
		return n.lead(ctx, part, cohort, nil)
	}
	addr := n.addrOf(node)
	if addr == "" {
		return fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, node)
	}
	return n.forwardCall(ctx, addr, wire.OpTakeover, &wire.TakeoverRequest{Part: part, Cohort: cohort}, nil)
}

// askPull makes node copy part from node from.
func (n *Node) askPull(ctx context.Context, node uint64, part int, from uint64) error {
	req := &wire.PullRequest{Part: part, From: from}
	if node == n.id {
		_, err := n.servePull(ctx, req)
		return err
	}
	addr := n.addrOf(node)
	if addr == "" {
		return fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, node)
	}
	return n.forwardCall(ctx, addr, wire.OpPull, req, nil)
}

// serveTakeover runs the handoff for a partition with the given cohort,
// with this node as leader.
func (n *Node) serveTakeover(ctx context.Context, req *wire.TakeoverRequest) error {
	if n.departing.Load() {
		return fmt.Errorf("%w: node %d is leaving the cluster", wire.ErrUnavailable, n.id)
	}
	if req.Part < 0 || req.Part >= len(n.parts) {
		return wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	uniq := slices.Clone(req.Cohort)
	slices.Sort(uniq)
	if !slices.Contains(req.Cohort, n.id) || len(req.Cohort) > raftgroup.MaxCohort || len(slices.Compact(uniq)) != len(req.Cohort) {
		return wire.Errorf(wire.CodeInvalid, "takeover: cohort %v", req.Cohort)
	}
	// The requester gives up after moveTimeout; so does the takeover.
	ctx, cancel := context.WithTimeout(ctx, takeoverTimeout)
	defer cancel()
	return n.lead(ctx, req.Part, req.Cohort, nil)
}

// takeoverTimeout bounds a takeover another node asked for.
const takeoverTimeout = time.Minute

// servePull copies a partition from its leader into this replica.
func (n *Node) servePull(ctx context.Context, req *wire.PullRequest) (*wire.PullResponse, error) {
	if req.Part < 0 || req.Part >= len(n.parts) {
		return nil, wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	addr := n.addrOf(req.From)
	if addr == "" {
		return nil, fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, req.From)
	}
	began := time.Now()
	k, err := n.repl.PullPartition(ctx, addr, req.From, uint16(req.Part))
	if err != nil {
		return nil, err
	}
	n.log.Info("partition copied", "partition", req.Part, "from", req.From, "records", k, "took", time.Since(began).Round(time.Millisecond))
	return &wire.PullResponse{Records: k}, nil
}

// handOffTimeout bounds handing off the partitions at a graceful stop.
// With ShutdownTimeout and LeaveTimeout it bounds the whole stop (27 s by
// default): scripts/cluster.sh and the systemd unit wait longer than that
// before they kill.
const handOffTimeout = 15 * time.Second

// handOff gives the leadership of every partition this node leads to the
// next live member of its cohort, so clients see no failover when the node
// stops on purpose. With named, it also gives away the partitions the
// registry names it for but that it does not lead (a node that restarted
// drifting leads none of them). It returns how many moved and how many
// could not.
func (n *Node) handOff(ctx context.Context, named bool) (moved, failed int) {
	meta := n.raft.Meta()
	states := n.gossipStates()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxMoves)
	for p, pi := range meta.Partitions {
		// The replica's own view decides: a partition handed off makes it
		// step down at once, while this node's copy of the registry may
		// lag.
		if !n.leads(uint16(p)) && !(named && pi.Leader == n.id) || len(pi.Cohort) < 2 {
			continue
		}
		succ := uint64(0)
		for _, id := range pi.Cohort {
			if id != n.id && states[id] == member.Alive {
				succ = id
				break
			}
		}
		if succ == 0 {
			mu.Lock() // the hand-offs already started count under mu too
			failed++
			mu.Unlock()
			continue
		}
		cohort := slices.Clone(pi.Cohort)
		ep := n.parts[p].Epoch()
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := n.askTakeover(ctx, succ, p, cohort)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				n.log.Warn("hand-off failed", "partition", p, "to", succ, "err", err)
				failed++
				return
			}
			// The successor leads at a newer epoch: stop leading now,
			// not when its promise or the registry reaches this node
			// (a majority of promises need not include this one).
			n.parts[p].ResignAt(ep)
			moved++
		})
	}
	wg.Wait()
	return moved, failed
}

// handOffAll hands off until this node leads nothing: a takeover that was
// already running when the node started departing may still make it a
// leader once.
func (n *Node) handOffAll(ctx context.Context) (moved, failed int) {
	for {
		m, f := n.handOff(ctx, false)
		moved += m
		if m == 0 || ctx.Err() != nil {
			return moved, failed + f
		}
	}
}

// Leave hands this node's partitions to other members and then stops the
// node (Leaving is closed; the process exits).
func (n *Node) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	n.departing.Store(true)
	ctx, cancel := context.WithTimeout(ctx, handOffTimeout)
	defer cancel()
	moved, failed := n.handOffAll(ctx)
	n.log.Info("leaving the cluster", "handed_off", moved, "failed", failed)
	n.leaveOnce.Do(func() { close(n.leaving) })
	return &wire.LeaveResponse{HandedOff: moved, Failed: failed}, nil
}

// Leaving is closed once a client asked the node to leave (ctl leave):
// the process then closes the node and exits.
func (n *Node) Leaving() <-chan struct{} { return n.leaving }
