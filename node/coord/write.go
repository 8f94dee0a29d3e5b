package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// enqueue validates and durably writes a batch of tasks.
func (p *Plane) enqueue(ctx context.Context, fwd bool, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	// The waits count from when this node took the request, its first
	// attempt (StampIDs), over every attempt.
	start := time.Now()
	if !req.Taken.IsZero() && req.Taken.Before(start) {
		start = req.Taken
	}
	resp, err := p.enqueueOnce(ctx, fwd, req, start)
	if err != nil && !fwd && hintable(err) && !p.hintBy(req, start).IsZero() && !hasDeps(req) {
		// A hinted enqueue is answered within its hint wait, hinted or
		// not; one that ended in doubt instead says where its time went
		// (the steps' errors name the nodes they waited for).
		p.log.Info("hinted enqueue ended in doubt, not hinted", "tasks", len(req.Tasks), "first", firstID(req),
			"took", time.Since(start).Round(time.Millisecond), "hint_wait", p.cfg.HintWait, "err", err)
	}
	return resp, err
}

// enqueueOnce routes and writes one enqueue taken at start.
func (p *Plane) enqueueOnce(ctx context.Context, fwd bool, req *wire.EnqueueRequest, start time.Time) (*wire.EnqueueResponse, error) {
	if len(req.Tasks) > 0 && len(req.Tasks) <= p.cfg.MaxBatch && !p.leadsAll() {
		if resp, handled, err := p.enqueueRouted(ctx, fwd, req, start); handled {
			return resp, err
		}
	}
	return p.enqueueLocal(ctx, req, start)
}

// hasDeps reports whether a task of req has deps (it is never hinted).
func hasDeps(req *wire.EnqueueRequest) bool {
	return slices.ContainsFunc(req.Tasks, func(t wire.EnqueueTask) bool { return len(t.Deps) > 0 })
}

// firstID is the id of req's first task, if it has one yet.
func firstID(req *wire.EnqueueRequest) string {
	if len(req.Tasks) == 0 || req.Tasks[0].ID == nil {
		return ""
	}
	return req.Tasks[0].ID.String()
}

// enqueueLocal writes an enqueue whose partitions this node leads, or
// whose tasks it writes to their cohorts itself, taken at start.
func (p *Plane) enqueueLocal(ctx context.Context, req *wire.EnqueueRequest, start time.Time) (*wire.EnqueueResponse, error) {
	if len(req.Tasks) == 0 {
		return nil, fmt.Errorf("%w: no tasks to enqueue", task.ErrInvalid)
	}
	if len(req.Tasks) > p.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: %d tasks in one enqueue, limit %d", task.ErrTooLarge, len(req.Tasks), p.cfg.MaxBatch)
	}
	acks, err := p.acksFor(req.W)
	if err != nil {
		return nil, err
	}
	now := p.now()
	// ids holds each task's id, in request order; batch the distinct tasks
	// to write: one id given twice with the same content is one task (a
	// client retrying inside its own batch), with other content a conflict.
	ids := make([]task.ID, len(req.Tasks))
	batch := make([]partition.NewTask, 0, len(req.Tasks))
	inBatch := make(map[task.ID]bool, len(req.Tasks))
	for i := range req.Tasks {
		nt, err := p.newTask(&req.Tasks[i], req.W, now, inBatch)
		if err != nil {
			return nil, fmt.Errorf("task %d of %d: %w", i+1, len(req.Tasks), err)
		}
		ids[i] = nt.Spec.ID
		if inBatch[nt.Spec.ID] {
			j := slices.IndexFunc(batch, func(o partition.NewTask) bool { return o.Spec.ID == nt.Spec.ID })
			if !partition.SameTask(batch[j].Spec, nt.Spec) {
				return nil, fmt.Errorf("%w: task %d of %d: id %s appears twice in the batch with different content", task.ErrConflict, i+1, len(req.Tasks), nt.Spec.ID)
			}
			continue
		}
		batch = append(batch, nt)
		inBatch[nt.Spec.ID] = true
	}
	// A dep inside the batch must come before its dependent: a later task
	// does not exist yet when this one is written (so no cycle can form).
	written := make(map[task.ID]bool, len(batch))
	keyed := map[task.ID]bool{}
	for i, nt := range batch {
		for _, d := range nt.Spec.Deps {
			if inBatch[d] && !written[d] {
				return nil, fmt.Errorf("task %d of %d: %w: %s comes later in the batch", i+1, len(batch), task.ErrDepNotFound, d)
			}
			if keyed[d] {
				// Its id is another task's if the key is taken.
				return nil, fmt.Errorf("%w: task %d of %d depends on %s, a task with a key of the same enqueue; enqueue it first",
					task.ErrInvalid, i+1, len(batch), d)
			}
		}
		written[nt.Spec.ID] = true
		if nt.Spec.Key != "" {
			keyed[nt.Spec.ID] = true
		}
	}
	// Deps outside the batch must exist; their leaders record the new
	// tasks as waiting on them before the tasks are written, and say which
	// are completed already (docs/design.md, Operations: dependencies).
	if err := p.deps.Link(batch, func(d task.ID) bool { return !inBatch[d] }, true); err != nil {
		return nil, err
	}
	got, dups, hinted, err := p.writeTasks(ctx, batch, now, req.W, writeWait{p.hintBy(req, start), p.spreadBy(start), drawnIDs(req)})
	if err != nil {
		return nil, err
	}
	acks = max(acks, got)
	// Deps inside the batch exist now: record their edges too. A failure
	// here leaves the dependents to the reconcile, not the enqueue failed.
	if err := p.deps.Link(batch, func(d task.ID) bool { return inBatch[d] }, false); err != nil {
		p.log.Warn("recording dependency edges within a batch; the reconcile will catch the completions", "err", err)
	}
	p.deps.CheckNew(batch)
	resp := &wire.EnqueueResponse{Results: make([]wire.EnqueueResult, len(ids))}
	for i, id := range ids {
		resp.Results[i] = wire.EnqueueResult{ID: id, Acks: acks}
		if holder, ok := dups[id]; ok {
			resp.Results[i].ID, resp.Results[i].Duplicate = holder, true
		}
		if hinted[id] {
			resp.Results[i].Acks, resp.Results[i].Hinted = 0, true
		}
	}
	return resp, nil
}

// newTask validates one task of an enqueue and builds its spec. Deps must
// exist, in the store or earlier in the same batch; those already
// completed start out as done. A given id is checked against the store
// (a retry is idempotent) unless a node marked it fresh: the marks are a
// node's (enqueueRouted).
func (p *Plane) newTask(et *wire.EnqueueTask, w int, now int64, inBatch map[task.ID]bool) (partition.NewTask, error) {
	var nt partition.NewTask
	if err := task.ValidateQueue(et.Queue); err != nil {
		return nt, err
	}
	if err := task.ValidateGroup(et.Group); err != nil {
		return nt, err
	}
	if err := task.ValidateLabel("kind", et.Kind); err != nil {
		return nt, err
	}
	if err := task.ValidateLabel("subtopic", et.Subtopic); err != nil {
		return nt, err
	}
	if err := task.ValidateDescription(et.Description); err != nil {
		return nt, err
	}
	if err := task.ValidateData(et.Data, p.cfg.MaxPayload); err != nil {
		return nt, err
	}
	if err := task.ValidateMs("delay", et.DelayMs, p.cfg.MaxDelay); err != nil {
		return nt, err
	}
	if err := task.ValidateMs("time limit", et.TimeLimitMs, p.cfg.MaxDelay); err != nil {
		return nt, err
	}
	if err := task.ValidateKey(et.Key, et.UniqueForMs, p.cfg.MaxDelay); err != nil {
		return nt, err
	}
	if et.Key != "" && len(et.Deps) > 0 {
		return nt, fmt.Errorf("%w: a task with a key cannot have deps", task.ErrInvalid)
	}
	sp := &task.Spec{
		Queue:       et.Queue,
		Priority:    et.Priority,
		Group:       et.Group,
		Description: et.Description,
		MaxAttempts: et.MaxAttempts,
		EnqueuedAt:  now,
		Data:        et.Data,
		TimeLimit:   et.TimeLimitMs,
		Kind:        et.Kind,
		Subtopic:    et.Subtopic,
		Key:         et.Key,
		UniqueFor:   et.UniqueForMs,
	}
	if et.ID != nil {
		if et.ID.IsZero() {
			return nt, fmt.Errorf("%w: the zero id is reserved", task.ErrInvalid)
		}
		if et.Key != "" && p.partOf(*et.ID) != p.keyPart(et.Queue, et.Key) {
			return nt, fmt.Errorf("%w: id %s is not of its key's partition (%d): give a key without an id, or an id of that partition",
				task.ErrInvalid, *et.ID, p.keyPart(et.Queue, et.Key))
		}
		sp.ID, nt.CheckExisting = *et.ID, !et.FreshID
		nt.Hinted = et.Hinted && et.Key != ""
	} else {
		sp.ID = p.newID(et, w)
	}
	if sp.MaxAttempts == 0 {
		sp.MaxAttempts = p.queues.Of(sp.Queue).MaxAttempts
	}
	if sp.MaxAttempts == 0 {
		sp.MaxAttempts = p.cfg.DefaultMaxAttempts
	}
	if sp.TimeLimit == 0 {
		sp.TimeLimit = p.queues.Of(sp.Queue).TimeLimitMs
	}
	if et.DelayMs > 0 {
		sp.NotBefore = now + et.DelayMs
	}
	deps, err := task.NormalizeDeps(et.Deps, sp.ID)
	if err != nil {
		return nt, err
	}
	sp.Deps = deps
	nt.Spec = sp
	return nt, nil
}

// writeWait bounds an enqueue's writes to their cohorts: what a cohort
// has not taken by hintBy (the zero time: never) is hinted here (the
// enqueue asked for it); tasks whose ids this node drew are spread by
// spreadBy (spread).
type writeWait struct {
	hintBy, spreadBy time.Time
	// drawn holds the ids this node drew for the enqueue
	// (wire.EnqueueTask.Drawn): only those are spread.
	drawn map[task.ID]bool
}

// spreadable reports whether ts may be spread (Plane.spread): tasks
// without key or deps, each under an id this node drew, with a spread
// wait set.
func (w writeWait) spreadable(ts []partition.NewTask) bool {
	if w.spreadBy.IsZero() {
		return false
	}
	for _, nt := range ts {
		if nt.Spec.Key != "" || len(nt.Spec.Deps) > 0 || !w.drawn[nt.Spec.ID] || !nt.DupOf.IsZero() {
			return false
		}
	}
	return true
}

// drawnIDs returns the ids of req's tasks that this node drew (nil:
// none).
func drawnIDs(req *wire.EnqueueRequest) map[task.ID]bool {
	var out map[task.ID]bool
	for i := range req.Tasks {
		if t := &req.Tasks[i]; t.Drawn && t.ID != nil {
			if out == nil {
				out = make(map[task.ID]bool, len(req.Tasks))
			}
			out[*t.ID] = true
		}
	}
	return out
}

// writeTasks writes the batch, one store batch per partition, all
// partitions at once so their syncs share fsyncs. It returns the acks and,
// for each task whose key another task holds (not written), that task's
// id: the acks are of that task then, shipped again so that W replicas
// hold it before the answer (its own enqueue may still be in flight).
//
// A task without key or deps is written by this node, the enqueue's
// coordinator, to its cohort directly (writeNew): no leader is needed. A
// task with a key or deps is written by its partition's leader, which
// this node must be (enqueueRouted sent it here): the leader checks the
// key under the lock that orders its writes, and records the deps' state
// in the task's first state, a write of its line.
func (p *Plane) writeTasks(ctx context.Context, batch []partition.NewTask, now int64, w int, wait writeWait) (int, map[task.ID]task.ID, map[task.ID]bool, error) {
	type route struct {
		part   uint16
		direct bool
	}
	byPart := map[route][]partition.NewTask{}
	for _, nt := range batch {
		part := p.partOf(nt.Spec.ID)
		// A client's id reaches here at the partition's leader, or sent
		// on by a coordinator that could not reach it: written directly
		// unless this node leads.
		r := route{part, DirectWrite(nt.Spec.Key, nt.Spec.Deps, !nt.CheckExisting, !p.leads(part))}
		byPart[r] = append(byPart[r], nt)
	}
	var mu sync.Mutex
	var dups map[task.ID]task.ID
	var hinted map[task.ID]bool
	note := func(ts []partition.NewTask, wasHinted bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, nt := range ts {
			if !nt.DupOf.IsZero() {
				if dups == nil {
					dups = map[task.ID]task.ID{}
				}
				dups[nt.Spec.ID] = nt.DupOf
			}
			if wasHinted {
				if hinted == nil {
					hinted = map[task.ID]bool{}
				}
				hinted[nt.Spec.ID] = true
			}
		}
	}
	write := func(r route, ts []partition.NewTask) (int, error) {
		var a int
		var err error
		if r.direct {
			a, err = p.writeNew(ctx, r.part, ts, now, w, wait)
		} else {
			a, err = p.writeAtLeader(ctx, r.part, ts, now, w, wait)
		}
		if errors.Is(err, errHinted) {
			note(ts, true)
			return math.MaxInt, nil
		}
		note(ts, false)
		return a, err
	}
	// One partition: write here, on this goroutine. Several: all at once,
	// so their syncs share fsyncs.
	if len(byPart) == 1 {
		for r, ts := range byPart {
			a, err := write(r, ts)
			return a, dups, hinted, err
		}
	}
	var wg sync.WaitGroup
	var errs []error
	acks := math.MaxInt
	for r, ts := range byPart {
		wg.Go(func() {
			a, err := write(r, ts)
			mu.Lock()
			defer mu.Unlock()
			acks = min(acks, a)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return acks, dups, hinted, errors.Join(errs...)
}

// writeNew writes new tasks of part, without keys or deps, to its cohort
// as their coordinator (replication.Plane.ShipNew), this node's replica
// included when it is a member, and answers once w replicas hold them.
// A task held with other content under its id refuses the write
// (task.ErrConflict); when a retry may meet one (CheckExisting), the
// local replica checks first, so a refusal found here sends nothing on.
// What the cohort has not taken by wait.hintBy is hinted here (when the
// enqueue asked), and tasks whose ids this node drew are spread by
// wait.spreadBy (spread).
func (p *Plane) writeNew(ctx context.Context, part uint16, ts []partition.NewTask, now int64, w int, wait writeWait) (int, error) {
	hint := !wait.hintBy.IsZero()
	if hint && !p.placeable(part, w) {
		// Not worth the wait: the cohort is out of reach now.
		return 0, p.hint(part, ts, w, fmt.Errorf("%w: partition %d: too few of its cohort reachable", wire.ErrUnavailable, part))
	}
	need := p.repl.NeedAcks(part, w)
	recs := make([]task.Record, len(ts))
	checked := false
	for i := range ts {
		recs[i] = task.Record{ID: ts[i].Spec.ID, Spec: ts[i].Spec}
		checked = checked || ts[i].CheckExisting
	}
	member := slices.Contains(p.h.Cohort(int(part)), p.cfg.Self)
	var local partition.Durable
	if member && checked {
		var err error
		if local, err = p.parts[part].EnqueueApply(ts, now); err != nil {
			return 0, err
		}
	}
	s := p.repl.ShipNew(part, need, recs)
	if s.Held() && local == nil {
		var err error
		if local, err = p.parts[part].EnqueueApply(ts, now); err != nil {
			// The followers may take what this replica refused (another
			// task's spec under one id): in doubt, not refused.
			return 0, fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, part, err)
		}
	}
	// Ids this node drew for the enqueue can be spread: no client holds
	// them, and no other task can.
	spread := !hint && wait.spreadable(ts)
	by := wait.hintBy
	if spread {
		by = wait.spreadBy
	}
	acks, err := s.FinishBy(ctx, local, hintDeadline(by))
	switch {
	case err == nil || !hintable(err):
	case hint:
		return 0, p.hint(part, ts, w, err)
	case spread:
		return 0, p.spread(ctx, part, ts, w, need, err)
	}
	return acks, err
}

// writeAtLeader writes new tasks of part, which this node leads, on its
// replica and ships them to the followers: tasks with a key or deps (see
// writeTasks). Enqueue sets DupOf on each whose key another task holds.
//
// Tasks without key or deps whose ids this node drew reach here on a
// retry (a leader's write, not a direct one: the id may be held from the
// first attempt): they are spread as writeNew's are.
func (p *Plane) writeAtLeader(ctx context.Context, part uint16, ts []partition.NewTask, now int64, w int, wait writeWait) (int, error) {
	hint := !wait.hintBy.IsZero()
	spread := !hint && wait.spreadable(ts)
	by := wait.hintBy
	if spread {
		by = wait.spreadBy
	}
	acks, err := p.writeAtLeaderOnce(ctx, part, ts, now, w, hintDeadline(by))
	switch {
	case err == nil || !hintable(err):
	case hint:
		return 0, p.hint(part, ts, w, err)
	case spread:
		return 0, p.spread(ctx, part, ts, w, p.repl.NeedAcks(part, w), err)
	}
	return acks, err
}

// writeAtLeaderOnce is writeAtLeader without hints: its wait for the
// followers ends with ctx or at by (the zero time: with ctx alone).
func (p *Plane) writeAtLeaderOnce(ctx context.Context, part uint16, ts []partition.NewTask, now int64, w int, by time.Time) (int, error) {
	need := p.repl.NeedAcks(part, w)
	var s *replication.Shipment
	to, ep := p.repl.Followers(part)
	if ep == 0 {
		return 0, replication.NotLeading(part)
	}
	if len(to) == 0 {
		return 1, p.parts[part].Enqueue(ts, now)
	}
	checked := false
	for i := range ts {
		if !ts[i].State.IsZero() {
			ts[i].State.Stamp = ep // as the replica stamps it (partition.Replica.Enqueue)
		}
		// A key may be taken: what to ship is known once the
		// replica has checked it.
		checked = checked || ts[i].CheckExisting || ts[i].Spec.Key != ""
	}
	// Ship while the local write syncs, so the two overlap; but a
	// client-supplied id may turn out to conflict with a stored task,
	// and then nothing may reach the followers: write here first.
	if !checked {
		s = p.repl.Ship(part, need, newRecords(ts), nil)
	}
	if err := p.parts[part].Enqueue(ts, now); err != nil {
		return 0, err
	}
	if s == nil {
		// Built now: Enqueue has decided each task's first state (a
		// hinted keyed task whose key was taken is retired).
		recs, err := p.shipRecords(part, ts, newRecords(ts))
		if err != nil {
			return 0, err
		}
		s = p.repl.Ship(part, need, recs, p.repl.WholeRecords(part, recs))
	}
	return s.FinishBy(ctx, nil, by)
}

// newRecords returns the records that ship ts, new tasks: each spec, and
// its first state when it has one. A task without one ships its spec
// alone, as its leader wrote it: a state stamped 0 would read to a
// follower that holds the task already (a repeat of an enqueue, once
// the task was claimed) as one that replaces its newer state, and it
// would refuse the write. (The fault run on 7faaf41 saw every keyed hint
// of a claimed task refused so at its handover.) Each record has its
// own copy of the state: the shipment encodes it while the replica's
// Enqueue writes ts (the race detector saw the two meet in
// TestClusterGC).
func newRecords(ts []partition.NewTask) []task.Record {
	recs := make([]task.Record, len(ts))
	for i := range ts {
		recs[i] = task.Record{ID: ts[i].Spec.ID, Spec: ts[i].Spec}
		if !ts[i].State.IsZero() {
			st := ts[i].State.Clone()
			recs[i].State = &st
		}
	}
	return recs
}

// shipRecords returns what to ship for ts, written to part with records
// recs: each task written, and in place of each whose key another task
// holds, that task's whole record (once, and not if it is written here
// too).
func (p *Plane) shipRecords(part uint16, ts []partition.NewTask, recs []task.Record) ([]task.Record, error) {
	var holders []task.ID
	out := recs[:0:0]
	written := map[task.ID]bool{}
	for i := range ts {
		if ts[i].DupOf.IsZero() {
			out = append(out, recs[i])
			written[ts[i].Spec.ID] = true
		}
	}
	for i := range ts {
		if h := ts[i].DupOf; !h.IsZero() && !written[h] && !slices.Contains(holders, h) {
			holders = append(holders, h)
		}
	}
	if len(holders) == 0 {
		return out, nil
	}
	held, err := p.parts[part].Records(holders)
	if err != nil {
		return nil, fmt.Errorf("enqueue: the tasks holding the keys: %w", err)
	}
	return append(out, held...), nil
}
