package deps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// set holds the ids of tasks that other tasks wait on, so a completion
// reads the reverse edges only when there are some: most tasks are no
// one's dependency, and an edge scan costs an iterator. Safe for
// concurrent use.
//
// It holds what this node's replicas hold: Load reads every stored edge,
// a leader adds a dep before it writes the dep's edges (addDependentsHere),
// and a follower adds the deps whose edges it merges, so a new leader
// knows them too. Ordering: the edges are written, and the completion
// read, under the dep's replica lock, after the add here; a completion
// writes itself under that lock before it looks here. So either the
// completer sees the dep here and reads the edge, or the enqueuer sees the
// completion: a notice is never lost between them.
type set struct {
	mu  sync.Mutex
	ids map[task.ID]struct{}
}

func newSet() *set { return &set{ids: map[task.ID]struct{}{}} }

func (d *set) add(id task.ID) {
	d.mu.Lock()
	d.ids[id] = struct{}{}
	d.mu.Unlock()
}

// take reports whether id is a dependency and forgets it: a completed task
// completes once, so its dependents are told once; a dependent enqueued
// later finds the completion itself.
func (d *set) take(id task.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.ids[id]
	delete(d.ids, id)
	return ok
}

// Dependencies across partitions (docs/design.md, Operations: dependencies).
// The reverse edge "T waits on D" lives in D's partition, written by D's
// leader and replicated to D's cohort with D's record, so whichever node
// leads D when it completes can read who waits on it. The protocol:
//
//  1. An enqueue of T asks the leader of each dep D outside its batch to
//     record the edge (OpDependents); under D's replica lock that leader
//     writes the edge and reads D's completion, so a completion of D
//     either precedes the edge (and T starts with D done) or follows it
//     (and finds the edge). Deps inside the batch get their edges once
//     the batch is written.
//  2. A completion of D, at D's leader, reads D's edges and tells each
//     dependent's leader (OpDepDone), which marks D done on the task and
//     replicates that.
//  3. What a crash or a partition loses in between (a notice sent to a
//     leader that moved, an edge written after the completion read) the
//     enqueue's re-check (CheckNew) and the periodic reconcile of
//     blocked tasks (Reconcile) find.

// Link records, at each dep's leader, the tasks of batch that wait on
// it, for the deps pick selects; with markDone it adds the deps found
// completed to the tasks' DepsDone (before the tasks are written). An
// unknown dep fails with task.ErrDepNotFound.
func (p *Plane) Link(batch []partition.NewTask, pick func(task.ID) bool, markDone bool) error {
	waiting := map[task.ID][]int{} // dep -> indexes into batch
	var order []task.ID
	for i, nt := range batch {
		for _, d := range nt.Spec.Deps {
			if !pick(d) {
				continue
			}
			if _, ok := waiting[d]; !ok {
				order = append(order, d)
			}
			waiting[d] = append(waiting[d], i)
		}
	}
	for _, d := range order {
		ids := make([]task.ID, len(waiting[d]))
		for k, i := range waiting[d] {
			ids[k] = batch[i].Spec.ID
		}
		done, err := p.addDependents(d, ids)
		if err != nil {
			return err
		}
		if done && markDone {
			for _, i := range waiting[d] {
				batch[i].State.AddDepDone(d)
			}
		}
	}
	return nil
}

// addDependents records at dep's leader that dependents wait on dep and
// reports whether dep is completed.
func (p *Plane) addDependents(dep task.ID, dependents []task.ID) (bool, error) {
	// A context of its own: the request being served may be a forwarded
	// one, which must not be forwarded again, and this is another
	// partition's business.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
	defer cancel()
	addr, err := p.host.RouteTo(ctx, p.partOf(dep))
	if err != nil {
		return false, err
	}
	if addr == "" {
		return p.addDependentsHere(ctx, dep, dependents)
	}
	var resp wire.DependentsResponse
	if err := p.host.Peers().Call(ctx, addr, wire.OpDependents, &wire.DependentsRequest{Dep: dep, Dependents: dependents}, &resp); err != nil {
		return false, fmt.Errorf("recording dependents of %s at its leader: %w", dep, err)
	}
	return resp.Completed, nil
}

// addDependentsHere is addDependents at dep's leader: the edges are
// written, replicated to a majority of dep's cohort, and then relied on.
func (p *Plane) addDependentsHere(ctx context.Context, dep task.ID, dependents []task.ID) (bool, error) {
	part := p.partOf(dep)
	to, ep := p.host.Replication().Followers(part)
	if ep == 0 {
		return false, replication.NotLeading(part)
	}
	p.set.add(dep) // before the edges are written: see set
	done, d, err := p.host.Replica(part).AddDependents(dep, dependents)
	if errors.Is(err, task.ErrNotFound) {
		// An enqueue written to the cohort directly may not have reached
		// this replica yet: look for it there before refusing.
		if found, rerr := p.host.Replication().ReadMissing(ctx, part, dep); rerr != nil {
			return false, fmt.Errorf("%w: dep %s not found here; looking for it on the cohort: %v", wire.ErrUnavailable, dep, rerr)
		} else if found {
			done, d, err = p.host.Replica(part).AddDependents(dep, dependents)
		}
	}
	if errors.Is(err, partition.ErrCollected) {
		// Completed and collected: the dependents start with it done, and
		// no edge is kept for a task that is gone.
		p.set.take(dep)
		return true, nil
	}
	if errors.Is(err, task.ErrNotFound) {
		return false, fmt.Errorf("%w: %s", task.ErrDepNotFound, dep)
	}
	if err != nil {
		return false, err
	}
	if done {
		// Completed already: the new dependents start with it done, and
		// no completion is left to notify them.
		p.set.take(dep)
	}
	if len(to) == 0 {
		return done, d.Wait()
	}
	rec := task.Record{ID: dep, Dependents: dependents}
	if _, err := p.host.Replication().Ship(part, p.host.Replication().NeedAcks(part, 0), []task.Record{rec}, p.host.Replication().WholeRecord(part, dep)).Finish(ctx, d); err != nil {
		return false, err
	}
	return done, nil
}

// serveDependents is OpDependents at dep's leader.
func (p *Plane) serveDependents(ctx context.Context, r *wire.DependentsRequest) (*wire.DependentsResponse, error) {
	if len(r.Dependents) == 0 || len(r.Dependents) > p.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: %d dependents in one request", task.ErrInvalid, len(r.Dependents))
	}
	done, err := p.addDependentsHere(ctx, r.Dep, r.Dependents)
	if err != nil {
		return nil, err
	}
	return &wire.DependentsResponse{Completed: done}, nil
}

// notifyDependents tells every task waiting on dep, which just completed
// here, that it did: the tasks of partitions led here directly, the others
// through their leaders, in the background. A notice that fails (a link
// down for a moment, a partition between leaders) is sent again, after
// depNoticeBackoff and then twice as long each time, depNoticeAttempts
// times in all; past that the reconcile of blocked tasks catches it.
func (p *Plane) notifyDependents(dep task.ID) {
	byPart := map[uint16][]task.ID{}
	err := p.host.Store().Dependents(p.partOf(dep), dep, func(id task.ID) bool {
		part := p.partOf(id)
		byPart[part] = append(byPart[part], id)
		return true
	})
	if err != nil {
		p.cfg.Log.Warn("reading dependents", "dep", dep, "err", err)
	}
	remote := p.markLedDepDone(dep, byPart)
	if len(remote) == 0 {
		return
	}
	p.wg.Go(func() {
		pause := depNoticeBackoff
		for attempt := 1; len(remote) > 0; attempt++ {
			remote = p.sendDepDone(dep, remote)
			if len(remote) == 0 {
				return
			}
			if attempt == depNoticeAttempts {
				p.cfg.Log.Warn("dependency notice to another leader failed; the reconcile will retry", "dep", dep, "partitions", len(remote), "attempts", attempt)
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(pause):
			}
			pause *= 2
		}
	})
}

// Dependency notice retries (notifyDependents).
const (
	depNoticeAttempts = 4
	depNoticeBackoff  = 250 * time.Millisecond
)

// markLedDepDone marks dep done on the tasks of byPart whose partitions
// this node leads, and returns the others.
func (p *Plane) markLedDepDone(dep task.ID, byPart map[uint16][]task.ID) map[uint16][]task.ID {
	rest := map[uint16][]task.ID{}
	for part, ids := range byPart {
		if p.leads(part) {
			p.markDepDone(dep, ids)
		} else {
			rest[part] = ids
		}
	}
	return rest
}

// sendDepDone tells the leaders of byPart's partitions (this node for
// those it leads now) that dep completed, and returns the partitions it
// could not tell.
func (p *Plane) sendDepDone(dep task.ID, byPart map[uint16][]task.ID) map[uint16][]task.ID {
	left := map[uint16][]task.ID{}
	byAddr := map[string][]uint16{}
	for part, ids := range p.markLedDepDone(dep, byPart) {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
		addr, err := p.host.RouteTo(ctx, part)
		cancel()
		if err != nil || addr == "" {
			p.cfg.Log.Debug("dependency notice: no leader to tell yet", "dep", dep, "partition", part, "err", err)
			left[part] = ids
			continue
		}
		byAddr[addr] = append(byAddr[addr], part)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, parts := range byAddr {
		var ids []task.ID
		for _, part := range parts {
			ids = append(ids, byPart[part]...)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
			defer cancel()
			if err := p.host.Peers().Call(ctx, addr, wire.OpDepDone, &wire.DepDoneRequest{Dep: dep, Tasks: ids}, nil); err != nil {
				p.cfg.Log.Debug("dependency notice to another leader failed", "dep", dep, "to", addr, "tasks", len(ids), "err", err)
				mu.Lock()
				for _, part := range parts {
					left[part] = byPart[part]
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return left
}

// markDepDone marks dep done on ids, tasks of partitions this node leads,
// and replicates each change.
func (p *Plane) markDepDone(dep task.ID, ids []task.ID) {
	now := p.now()
	for _, id := range ids {
		part := p.partOf(id)
		wr, err := p.host.Replica(part).DepDoneApply(id, dep, now)
		if err != nil {
			// Not found: an enqueue that recorded its edges and then
			// failed; nothing waits.
			if !errors.Is(err, task.ErrNotFound) {
				p.cfg.Log.Warn("dependency notice", "task", id, "dep", dep, "err", err)
			}
			continue
		}
		p.host.Replication().ReplicateQuietly(part, wr)
	}
}

// serveDepDone is OpDepDone at a dependent's leader.
func (p *Plane) serveDepDone(r *wire.DepDoneRequest) error {
	if len(r.Tasks) > p.cfg.MaxBatch {
		return fmt.Errorf("%w: %d tasks in one notice", task.ErrInvalid, len(r.Tasks))
	}
	var mine []task.ID
	var errs []error
	for _, id := range r.Tasks {
		if part := p.partOf(id); !p.leads(part) {
			errs = append(errs, replication.NotLeading(part))
			continue
		}
		mine = append(mine, id)
	}
	p.markDepDone(r.Dep, mine)
	return errors.Join(errs...)
}

// Note adds to the set the tasks that merged records name
// dependents of, so this replica notifies them if it comes to lead, and
// drops the ones the records show completed (or collected): their leader told the
// dependents (or the reconcile will), so the set does not grow with every
// dependency this replica ever held.
func (p *Plane) Note(recs []task.Record) {
	for _, r := range recs {
		switch {
		case r.Tomb != 0 || r.State != nil && r.State.Completion != nil:
			p.set.take(r.ID)
		case len(r.Dependents) > 0:
			p.set.add(r.ID)
		}
	}
}
