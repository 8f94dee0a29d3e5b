package replication

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Garbage collection (docs/design.md, Storage). Every GCInterval each leader
// scans the partitions it leads for tasks ended (completed or cancelled)
// more than Retention ago, or their queue's own retention where it has
// one (Host.QueueRetentions): the candidates. A candidate goes only with its whole dependency
// component: the tasks reachable from it over dependency edges, both
// ways, in any partition. The leader walks the component, asking each
// member's leader what it holds (OpGCInfo), and collects its own members
// only if every member is completed before the cutoff, already collected,
// or unknown (a dependent whose enqueue failed after its edge was
// written). Each leader collects the members of its own partitions (every
// member is a candidate of its own leader's pass), so a component spread
// over several leaders goes partition by partition; a member collected
// before the others reads as collected to their checks, which is as good
// as completed.
//
// A collection writes tombstones in place of the tasks (partition.Collect)
// and ships them to the cohort; a replica that misses them gets them from
// anti-entropy, and merges never resurrect a tombstoned task. Collect
// re-checks, under the partition's lock, that no member gained a
// dependent since the walk (ErrEdgesChanged): a dependent enqueued later
// finds the tombstone and starts with the dep done (AddDependents:
// ErrCollected). What is left is a race across partitions: a dependent
// added to one member between another leader's collection of its own
// members and the walk of this one; the new task still runs (its dep is
// done), and the rest of the component waits for it.
//
// Tombstones are dropped after TombstoneHorizon (partition.ExpireTombs),
// which must be longer than any replica can stay apart from its cohort.

// Garbage-collection bounds.
const (
	// gcScanStates bounds the task states one background pass reads per
	// partition; the next pass resumes where it stopped, so a partition
	// of any size is covered over passes without a long stall.
	gcScanStates = 100_000
	// gcCandidates bounds the candidates one scan returns.
	gcCandidates = 10_000
	// gcLookupIDs bounds the ids of one OpGCInfo request.
	gcLookupIDs = 1024
	// gcCollectIDs bounds the tasks of one Collect call (one store batch).
	gcCollectIDs = 1024
	// tombExpireInterval is how often a node drops the tombstones past
	// the horizon from every replica it holds: a scan of every tombstone,
	// which the horizon (days) makes pointless to run more often.
	tombExpireInterval = time.Hour
)

// GCLoop runs background passes over the partitions this node leads and
// expires old tombstones.
func (p *Plane) GCLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.GCInterval)
	defer t.Stop()
	cursors := map[uint16]task.ID{}
	var expired time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.host.Departing() {
			continue
		}
		// Tombstones expire whether or not this node collects: it may
		// hold tombstones its peers sent.
		if p.cfg.Retention > 0 {
			resp, err := p.gcPass(ctx, false, cursors)
			if err != nil && ctx.Err() == nil {
				p.log.Warn("garbage collection pass failed", "err", err)
			}
			if resp != nil && resp.Collected > 0 {
				p.log.Info("garbage collected", "tasks", resp.Collected, "held", resp.Held, "unreached", resp.Unreached)
			}
		}
		if time.Since(expired) >= tombExpireInterval {
			expired = time.Now()
			p.expireTombs()
		}
	}
}

// expireTombs drops the tombstones older than the horizon from every
// replica here.
func (p *Plane) expireTombs() {
	before := p.now() - p.cfg.TombstoneHorizon.Milliseconds()
	for part := range p.cfg.Partitions {
		r := p.host.Replica(uint16(part))
		k, err := r.ExpireTombs(before)
		p.stats.GCExpired.Add(int64(k))
		if err != nil {
			p.log.Warn("expiring tombstones failed", "partition", r.Part(), "err", err)
		}
	}
}

// AddGC adds r's counts to into.
func AddGC(into, r *wire.GCResponse) {
	into.Partitions += r.Partitions
	into.Candidates += r.Candidates
	into.Collectable += r.Collectable
	into.Collected += r.Collected
	into.Held += r.Held
	into.Unreached += r.Unreached
	for _, q := range r.Queues {
		i := slices.IndexFunc(into.Queues, func(x wire.GCQueue) bool { return x.Queue == q.Queue })
		if i < 0 {
			into.Queues = append(into.Queues, q)
		} else {
			into.Queues[i].Tasks += q.Tasks
		}
	}
	sortGCQueues(into.Queues)
	for _, id := range r.Sample {
		if len(into.Sample) < wire.GCSample {
			into.Sample = append(into.Sample, id)
		}
	}
}

// sortGCQueues orders per-queue counts by queue name.
func sortGCQueues(qs []wire.GCQueue) {
	slices.SortFunc(qs, func(a, b wire.GCQueue) int { return strings.Compare(a.Queue, b.Queue) })
}

// GCPass runs a whole pass now over the partitions this node leads
// (every partition scanned whole), or a dry run that only counts: the
// client op's part on this node.
func (p *Plane) GCPass(ctx context.Context, dry bool) (*wire.GCResponse, error) {
	return p.gcPass(ctx, dry, nil)
}

// gcPass runs one pass over the partitions this node leads, one pass at
// a time. With cursors (the background loop) each partition's scan is
// bounded by gcScanStates and resumes from its cursor; without, every
// partition is scanned whole. dry only counts.
func (p *Plane) gcPass(ctx context.Context, dry bool, cursors map[uint16]task.ID) (*wire.GCResponse, error) {
	p.gcMu.Lock()
	defer p.gcMu.Unlock()
	g := &gcRun{
		p: p, ctx: ctx, dry: dry, now: p.now(),
		resp:    &wire.GCResponse{DryRun: dry, Queues: []wire.GCQueue{}, Sample: []task.ID{}},
		decided: map[task.ID]bool{},
		queues:  map[string]int64{},
		retain:  p.host.QueueRetentions(),
	}
	g.cutoff = g.now - p.cfg.Retention.Milliseconds()
	g.resp.Cutoff = g.cutoff
	// The scan takes every task ended before the earliest cutoff of any
	// queue; each candidate then meets its own queue's.
	g.scanCutoff = g.cutoff
	for _, d := range g.retain {
		g.scanCutoff = max(g.scanCutoff, g.now-d.Milliseconds())
	}
	p.stats.GCPasses.Add(1)
	var errs []error
	for i := range p.cfg.Partitions {
		part := uint16(i)
		if !p.leads(part) {
			continue
		}
		g.resp.Partitions++
		if err := g.partition(part, cursors); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	for q, k := range g.queues {
		g.resp.Queues = append(g.resp.Queues, wire.GCQueue{Queue: q, Tasks: k})
	}
	sortGCQueues(g.resp.Queues)
	p.stats.GCCollected.Add(g.resp.Collected)
	p.stats.GCHeld.Add(g.resp.Held)
	return g.resp, errors.Join(errs...)
}

// gcRun is one pass.
type gcRun struct {
	p   *Plane
	ctx context.Context
	dry bool
	now int64
	// cutoff is the node's: tasks of a queue without a retention of its
	// own (retain) that ended before it may go. scanCutoff is the latest
	// cutoff of any queue: what the partition scans take.
	cutoff, scanCutoff int64
	retain             map[string]time.Duration
	resp               *wire.GCResponse
	queues             map[string]int64
	// decided holds the tasks of components (of more than one task) this
	// pass already judged, so a component met again from another of its
	// members is not walked twice. Tasks without edges are never in it:
	// its size follows the tasks with dependencies, not all tasks.
	decided map[task.ID]bool
}

// partition scans part for candidates and collects what may go.
func (g *gcRun) partition(part uint16, cursors map[uint16]task.ID) error {
	r := g.p.host.Replica(part)
	from, scan := task.ID{}, 0
	if cursors != nil {
		from, scan = cursors[part], gcScanStates
	}
	for {
		cands, next, more, err := r.CollectableFrom(from, g.scanCutoff, gcCandidates, scan)
		if err != nil {
			return err
		}
		if err := g.candidates(part, cands); err != nil {
			return err
		}
		if cursors != nil {
			if more {
				cursors[part] = next
			} else {
				delete(cursors, part)
			}
			return nil
		}
		if !more {
			return nil
		}
		from = next
	}
}

// candidates judges the candidates of part and collects the collectable.
// A group that fails to collect (a leadership change, a store error) is
// counted as unreached and left to the next pass; the others go on.
func (g *gcRun) candidates(part uint16, cands []partition.Candidate) error {
	// Tasks with no edge either way are components of one: they go
	// together, in batches, and no other walk meets them (decided holds
	// only members of larger components). The others are walked one
	// component at a time.
	var alone []partition.GCInfo
	for _, c := range cands {
		if err := g.ctx.Err(); err != nil {
			return err
		}
		if !g.old(c.Queue, c.CompletedAt) {
			continue // its queue keeps it longer
		}
		g.resp.Candidates++
		if g.decided[c.ID] {
			continue
		}
		if len(c.Deps) == 0 && len(c.Dependents) == 0 {
			alone = append(alone, partition.GCInfo{ID: c.ID, Queue: c.Queue, Status: partition.GCCompleted, CompletedAt: c.CompletedAt})
			continue
		}
		members, verdict := g.component(c)
		for id := range members {
			g.decided[id] = true
		}
		switch verdict {
		case gcHeld:
			g.resp.Held++
			continue
		case gcUnreached:
			g.resp.Unreached++
			continue
		}
		// Collect this leader's members (of this partition and of other
		// partitions led here); other leaders collect theirs.
		byPart := map[uint16][]partition.GCInfo{}
		for _, m := range members {
			if p := g.p.partOf(m.ID); m.Status == partition.GCCompleted && g.p.leads(p) {
				byPart[p] = append(byPart[p], m)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(byPart)) {
			for chunk := range slices.Chunk(byPart[p], gcCollectIDs) {
				g.collect(p, chunk, false)
			}
		}
	}
	for chunk := range slices.Chunk(alone, gcCollectIDs) {
		g.collect(part, chunk, true)
	}
	return nil
}

// old reports whether a task of queue that ended at endedAt is past its
// queue's retention.
func (g *gcRun) old(queue string, endedAt int64) bool {
	cutoff := g.cutoff
	if d, ok := g.retain[queue]; ok {
		cutoff = g.now - d.Milliseconds()
	}
	return endedAt < cutoff
}

// gcVerdict is what the walk of a component found.
type gcVerdict int

const (
	gcCollectable gcVerdict = iota
	gcHeld                  // an open or recent member, or too large
	gcUnreached             // a member's leader did not answer
)

// component walks c's dependency component and judges it: collectable
// when every member is completed before the cutoff, collected, or
// unknown. It returns the members it saw, and on a verdict other than
// collectable the ids it was about to look at too (as GCUnknown), so the
// pass does not walk the component again from them.
func (g *gcRun) component(c partition.Candidate) (map[task.ID]partition.GCInfo, gcVerdict) {
	members := map[task.ID]partition.GCInfo{c.ID: {
		ID: c.ID, Queue: c.Queue, Status: partition.GCCompleted, CompletedAt: c.CompletedAt, Deps: c.Deps, Dependents: c.Dependents,
	}}
	var frontier []task.ID
	queued := map[task.ID]bool{}
	next := func(m partition.GCInfo) bool {
		for _, ids := range [][]task.ID{m.Deps, m.Dependents} {
			for _, id := range ids {
				if _, seen := members[id]; seen || queued[id] {
					continue
				}
				if len(members)+len(frontier) >= g.p.cfg.GCComponentMax {
					return false
				}
				queued[id] = true
				frontier = append(frontier, id)
			}
		}
		return true
	}
	stop := func(v gcVerdict) (map[task.ID]partition.GCInfo, gcVerdict) {
		for _, id := range frontier {
			if _, seen := members[id]; !seen {
				members[id] = partition.GCInfo{ID: id}
			}
		}
		return members, v
	}
	tooLarge := func() (map[task.ID]partition.GCInfo, gcVerdict) {
		g.p.log.Warn("dependency component too large to garbage-collect; held", "task", c.ID, "over", g.p.cfg.GCComponentMax)
		return stop(gcHeld)
	}
	if !next(members[c.ID]) {
		return tooLarge()
	}
	for len(frontier) > 0 {
		infos, err := g.p.GCLookup(g.ctx, frontier)
		if err != nil {
			g.p.log.Debug("garbage collection: a component's member could not be looked up", "task", c.ID, "err", err)
			return stop(gcUnreached)
		}
		frontier = frontier[:0]
		clear(queued)
		// All of this round are members before any is judged, so none
		// is queued again as another's neighbour.
		for _, m := range infos {
			members[m.ID] = m
		}
		for _, m := range infos {
			if m.Status == partition.GCOpen || m.Status == partition.GCCompleted && !g.old(m.Queue, m.CompletedAt) {
				return stop(gcHeld)
			}
			if m.Status == partition.GCCompleted && !next(m) {
				return tooLarge()
			}
		}
	}
	return members, gcCollectable
}

// collect collects the completed tasks ms of part, led here, each with
// the dependents count its walk saw; alone: each task is a component of
// its own, so one that gained a dependent is held alone, not with the
// rest. A dry run only counts.
func (g *gcRun) collect(part uint16, ms []partition.GCInfo, alone bool) {
	if !g.dry {
		k, err := g.p.collectHere(g.ctx, part, ms)
		switch {
		case errors.Is(err, partition.ErrEdgesChanged) && alone && len(ms) > 1:
			// One of them gained a dependent: collect the others one by
			// one.
			for _, m := range ms {
				g.collect(part, []partition.GCInfo{m}, true)
			}
			return
		case errors.Is(err, partition.ErrEdgesChanged):
			g.resp.Held++
			return
		case err != nil:
			g.p.log.Debug("garbage collection: collect failed; the next pass tries again", "partition", part, "tasks", len(ms), "err", err)
			g.resp.Unreached++
			return
		}
		g.resp.Collected += int64(k)
	}
	g.resp.Collectable += int64(len(ms))
	for _, m := range ms {
		if m.Queue != "" {
			g.queues[m.Queue]++
		}
		if g.dry && len(g.resp.Sample) < wire.GCSample {
			g.resp.Sample = append(g.resp.Sample, m.ID)
		}
	}
}

// collectHere collects tasks ms of part, which this node leads, and ships
// their tombstones to the cohort. It returns how many it collected. A
// follower the tombstones do not reach gets them from anti-entropy.
func (p *Plane) collectHere(ctx context.Context, part uint16, ms []partition.GCInfo) (int, error) {
	ids := make([]task.ID, len(ms))
	edges := make(map[task.ID]int, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
		edges[m.ID] = len(m.Dependents)
	}
	now := p.now()
	d, err := p.host.Replica(part).Collect(ids, edges, now)
	if err != nil {
		return 0, err
	}
	if err := d.Wait(); err != nil {
		return 0, err // not even durable here
	}
	for _, id := range ids {
		p.host.Collected(id)
	}
	// The tombstones as written: each says how its task ended.
	recs, err := p.host.Replica(part).Records(ids)
	if err != nil {
		p.log.Warn("garbage collection: reading the tombstones to ship; anti-entropy will spread them", "partition", part, "err", err)
		return len(ids), nil
	}
	if _, err := p.Ship(part, p.NeedAcks(part, 0), recs, nil).Finish(ctx, nil); err != nil {
		p.log.Warn("garbage collection: tombstones not acknowledged by a majority; anti-entropy will spread them",
			"partition", part, "tasks", len(ids), "err", err)
	}
	return len(ids), nil
}

// GCLookup asks what the leaders of ids' partitions hold of them: this
// node's replicas for the partitions it leads, OpGCInfo for the others.
func (p *Plane) GCLookup(ctx context.Context, ids []task.ID) ([]partition.GCInfo, error) {
	byAddr := map[string][]task.ID{}
	var out []partition.GCInfo
	for _, id := range ids {
		part := p.partOf(id)
		if p.leads(part) {
			infos, err := p.host.Replica(part).GCInfo([]task.ID{id})
			if err != nil {
				return nil, err
			}
			out = append(out, infos...)
			continue
		}
		addr, err := p.leaderAddr(part)
		if err != nil {
			return nil, err
		}
		byAddr[addr] = append(byAddr[addr], id)
	}
	for _, addr := range slices.Sorted(maps.Keys(byAddr)) {
		// A leader answers a prefix of what it is asked when the answer
		// would outgrow a page; ask again for the rest.
		for rest := byAddr[addr]; len(rest) > 0; {
			chunk := rest[:min(len(rest), gcLookupIDs)]
			var resp wire.GCInfoResponse
			if err := p.host.Peers().Call(ctx, addr, wire.OpGCInfo, &wire.GCInfoRequest{IDs: chunk}, &resp); err != nil {
				return nil, fmt.Errorf("garbage-collection lookup at %s: %w", addr, err)
			}
			if len(resp.Tasks) == 0 || len(resp.Tasks) > len(chunk) {
				return nil, fmt.Errorf("garbage-collection lookup at %s: %d answers to %d ids", addr, len(resp.Tasks), len(chunk))
			}
			for i, t := range resp.Tasks {
				if t.ID != chunk[i] || t.Status > uint8(partition.GCCollectedCancelled) {
					return nil, fmt.Errorf("garbage-collection lookup at %s: bad answer for %s", addr, chunk[i])
				}
				out = append(out, partition.GCInfo{
					ID: t.ID, Queue: t.Queue, Status: partition.GCStatus(t.Status), CompletedAt: t.CompletedAt, Deps: t.Deps, Dependents: t.Dependents,
				})
			}
			rest = rest[len(resp.Tasks):]
		}
	}
	return out, nil
}

// leaderAddr returns the address of part's leader, another node.
func (p *Plane) leaderAddr(part uint16) (string, error) {
	leader := p.host.LeaderOf(part)
	if leader == 0 || leader == p.cfg.Self {
		return "", fmt.Errorf("%w: partition %d has no leader right now", wire.ErrUnavailable, part)
	}
	addr := p.host.AddrOf(leader)
	if addr == "" {
		return "", fmt.Errorf("%w: the address of node %d, leader of partition %d, is unknown", wire.ErrUnavailable, leader, part)
	}
	return addr, nil
}

// serveGCInfo is OpGCInfo: what this leader holds of the ids asked, all
// of partitions it leads.
func (p *Plane) serveGCInfo(r *wire.GCInfoRequest) (*wire.GCInfoResponse, error) {
	if len(r.IDs) > gcLookupIDs {
		return nil, fmt.Errorf("%w: %d ids in one garbage-collection lookup (at most %d)", task.ErrInvalid, len(r.IDs), gcLookupIDs)
	}
	resp := &wire.GCInfoResponse{Tasks: make([]wire.GCTask, len(r.IDs))}
	size := 0
	for i, id := range r.IDs {
		if err := id.Check(); err != nil {
			return nil, err
		}
		part := p.partOf(id)
		if !p.leads(part) {
			return nil, fmt.Errorf("%w: node %d does not lead partition %d", wire.ErrUnavailable, p.cfg.Self, part)
		}
		infos, err := p.host.Replica(part).GCInfo([]task.ID{id})
		if err != nil {
			return nil, err
		}
		m := infos[0]
		// Stop before the answer outgrows a page (a task with very many
		// dependents): the asker asks again for the rest. The first task
		// is always answered.
		size += gcTaskBytes + task.IDLen*(len(m.Deps)+len(m.Dependents))
		if i > 0 && size > exportPageBytes {
			resp.Tasks = resp.Tasks[:i]
			break
		}
		resp.Tasks[i] = wire.GCTask{ID: m.ID, Queue: m.Queue, Status: uint8(m.Status), CompletedAt: m.CompletedAt, Deps: m.Deps, Dependents: m.Dependents}
	}
	return resp, nil
}

// gcTaskBytes bounds the encoding of a GCTask without its edges.
const gcTaskBytes = 64
