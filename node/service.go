package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/coord"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The node implements wire.Service for the QUIC and HTTP front ends.
var _ wire.Service = (*Node)(nil)

// Limits of single requests.
const (
	// maxClaimCount bounds the tasks one claim may take.
	maxClaimCount = 1000
	// listPageSize is the number of tasks per streamed list frame.
	listPageSize = 256
	// maxClaimRaces bounds how often a claim picks again after the
	// partition it picked stepped down or its task stopped being
	// claimable.
	maxClaimRaces = 16
)

func (n *Node) now() int64 { return clock.UnixMilli(n.clock) }

func (n *Node) partOf(id task.ID) uint16 { return ring.PartitionOf(id[:], n.cfg.Partitions) }

// keyPart returns the partition of queue's tasks with unique key key.
func (n *Node) keyPart(queue, key string) uint16 {
	return ring.KeyPartition(queue, key, n.cfg.Partitions)
}

// keyedIDTries bounds the draws of keyedID: each hits the key's partition
// with probability 1/P, so 64·P draws miss with probability e^-64.
const keyedIDTries = 64

// newID returns a new id for et, enqueued with w: of its key's
// partition when it has a key, else of a partition that can take it
// (placeID).
func (n *Node) newID(et *wire.EnqueueTask, w int) task.ID {
	if et.Key == "" {
		return n.placeID(w)
	}
	want := n.keyPart(et.Queue, et.Key)
	id := n.ids.Next()
	for range keyedIDTries * n.cfg.Partitions {
		if n.partOf(id) == want {
			return id
		}
		id = n.ids.Next()
	}
	// Not reached in practice; newTask refuses an id of another
	// partition, so a miss cannot break the key's uniqueness.
	return id
}

// replicaOf returns the replica of id's partition.
func (n *Node) replicaOf(id task.ID) *partition.Replica { return n.parts[n.partOf(id)] }

func (n *Node) checkServing() error {
	if n.stopping.Load() {
		return wire.ErrShuttingDown
	}
	if !n.ready.Load() {
		return fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	return nil
}

// leadsAll reports whether this node leads every partition (a one-node
// cluster): requests then never need routing.
func (n *Node) leadsAll() bool {
	for _, r := range n.parts {
		if r.Epoch() == 0 {
			return false
		}
	}
	return true
}

// cohortSize is the number of replicas of every partition: N capped by the
// number of members. metaLoop keeps it current.
func (n *Node) cohortSize() int { return int(n.cohort.Load()) }

// acksFor checks a requested W against the cohort and returns the number
// of durable acks the write needs.
func (n *Node) acksFor(w int) (int, error) {
	size := n.cohortSize()
	switch {
	case w < 0:
		return 0, fmt.Errorf("%w: w=%d is negative", task.ErrInvalid, w)
	case w == 0:
		return ring.Majority(size), nil
	case w > size:
		return 0, fmt.Errorf("%w: w=%d exceeds the partition's cohort of %d replica(s)", task.ErrInvalid, w, size)
	}
	return w, nil
}

// Ping answers a liveness probe.
func (n *Node) Ping(context.Context) (*wire.PingResponse, error) {
	return &wire.PingResponse{NodeID: n.id, Time: n.now()}, nil
}

// Enqueue validates and durably writes a batch of tasks.
func (n *Node) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if len(req.Tasks) > 0 && len(req.Tasks) <= n.cfg.MaxBatch && !n.leadsAll() {
		if resp, handled, err := n.enqueueRouted(ctx, req); handled {
			return resp, err
		}
	}
	return n.enqueueLocal(ctx, req)
}

// enqueueLocal writes an enqueue whose partitions this node leads.
func (n *Node) enqueueLocal(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	if len(req.Tasks) == 0 {
		return nil, fmt.Errorf("%w: no tasks to enqueue", task.ErrInvalid)
	}
	if len(req.Tasks) > n.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: %d tasks in one enqueue, limit %d", task.ErrTooLarge, len(req.Tasks), n.cfg.MaxBatch)
	}
	acks, err := n.acksFor(req.W)
	if err != nil {
		return nil, err
	}
	now := n.now()
	// ids holds each task's id, in request order; batch the distinct tasks
	// to write: one id given twice with the same content is one task (a
	// client retrying inside its own batch), with other content a conflict.
	ids := make([]task.ID, len(req.Tasks))
	batch := make([]partition.NewTask, 0, len(req.Tasks))
	inBatch := make(map[task.ID]bool, len(req.Tasks))
	trust := trustsFreshIDs(ctx)
	for i := range req.Tasks {
		nt, err := n.newTask(&req.Tasks[i], req.W, now, inBatch, trust)
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
	// are completed already (DESIGN.md, Operations: dependencies).
	if err := n.deps.Link(batch, func(d task.ID) bool { return !inBatch[d] }, true); err != nil {
		return nil, err
	}
	hint := n.hinted(req)
	got, dups, hinted, err := n.writeTasks(ctx, batch, now, req.W, hint)
	if err != nil {
		return nil, err
	}
	acks = max(acks, got)
	// Deps inside the batch exist now: record their edges too. A failure
	// here leaves the dependents to the reconcile, not the enqueue failed.
	if err := n.deps.Link(batch, func(d task.ID) bool { return inBatch[d] }, false); err != nil {
		n.log.Warn("recording dependency edges within a batch; the reconcile will catch the completions", "err", err)
	}
	n.deps.CheckNew(batch)
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
// (a retry is idempotent) unless a node says it is fresh and trustFresh.
func (n *Node) newTask(et *wire.EnqueueTask, w int, now int64, inBatch map[task.ID]bool, trustFresh bool) (partition.NewTask, error) {
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
	if err := task.ValidateData(et.Data, n.cfg.MaxPayload); err != nil {
		return nt, err
	}
	if err := task.ValidateMs("delay", et.DelayMs, n.cfg.MaxDelay); err != nil {
		return nt, err
	}
	if err := task.ValidateMs("time limit", et.TimeLimitMs, n.cfg.MaxDelay); err != nil {
		return nt, err
	}
	if err := task.ValidateKey(et.Key, et.UniqueForMs, n.cfg.MaxDelay); err != nil {
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
		if et.Key != "" && n.partOf(*et.ID) != n.keyPart(et.Queue, et.Key) {
			return nt, fmt.Errorf("%w: id %s is not of its key's partition (%d): give a key without an id, or an id of that partition",
				task.ErrInvalid, *et.ID, n.keyPart(et.Queue, et.Key))
		}
		sp.ID, nt.CheckExisting = *et.ID, !(et.FreshID && trustFresh)
		nt.Hinted = et.Hinted && trustFresh && et.Key != "" // a node's word, never a client's
	} else {
		sp.ID = n.newID(et, w)
	}
	if sp.MaxAttempts == 0 {
		sp.MaxAttempts = n.queues.Of(sp.Queue).MaxAttempts
	}
	if sp.MaxAttempts == 0 {
		sp.MaxAttempts = n.cfg.DefaultMaxAttempts
	}
	if sp.TimeLimit == 0 {
		sp.TimeLimit = n.queues.Of(sp.Queue).TimeLimitMs
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
func (n *Node) writeTasks(ctx context.Context, batch []partition.NewTask, now int64, w int, hint bool) (int, map[task.ID]task.ID, map[task.ID]bool, error) {
	type route struct {
		part   uint16
		direct bool
	}
	byPart := map[route][]partition.NewTask{}
	for _, nt := range batch {
		part := n.partOf(nt.Spec.ID)
		// A client's id reaches here at the partition's leader, or sent
		// on by a coordinator that could not reach it: written directly
		// unless this node leads.
		r := route{part, coord.DirectWrite(nt.Spec.Key, nt.Spec.Deps, !nt.CheckExisting, !n.leads(part))}
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
			a, err = n.writeNew(ctx, r.part, ts, now, w, hint)
		} else {
			a, err = n.writeAtLeader(ctx, r.part, ts, now, w, hint)
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

// errHinted is writeNew's and writeAtLeader's word that the tasks were
// hinted (node/hints) rather than written to W replicas.
var errHinted = errors.New("hinted")

// hintable reports whether a write of a hinted enqueue that failed with
// err is hinted instead: it could not reach W replicas (in doubt), which
// a hint then settles; a refusal stays a refusal.
func hintable(err error) bool {
	return errors.Is(err, wire.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// hint keeps ts, tasks without deps, as hints (node/hints), enqueued
// with w, and returns errHinted once they are durable. A task with deps,
// or one whose key this leader found held (partition.NewTask.DupOf), is
// never hinted (its first state records which deps were done, its
// leader's write): err, the write's failure, then stands. A keyed hint is
// handed to the key's leader, which retires it if the key was taken
// meanwhile (wire.EnqueueTask.Hinted).
func (n *Node) hint(ts []partition.NewTask, w int, err error) error {
	specs := make([]*task.Spec, len(ts))
	for i := range ts {
		if len(ts[i].Spec.Deps) > 0 || !ts[i].DupOf.IsZero() {
			// A duplicate's answer names its key's holder, which this
			// leader could not ship to W replicas: in doubt, not hinted
			// (found by the simulation, seed 87: an answer both hinted
			// and duplicate, whose task the handover then created).
			return err
		}
		specs[i] = ts[i].Spec
	}
	if herr := n.hints.Add(specs, w); herr != nil {
		return fmt.Errorf("%w; hinting it failed too: %v", err, herr)
	}
	return errHinted
}

// hintWait bounds a write that may be hinted: ctx, or with hint, at most
// HintWait of it, after which the tasks are hinted instead.
func (n *Node) hintWait(ctx context.Context, hint bool) (context.Context, context.CancelFunc) {
	if !hint {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, n.cfg.HintWait)
}

// hinted reports whether req's tasks are hinted when their cohort cannot
// be written: the request asks for it (wire.EnqueueRequest.Hint), or the
// queue of each of its tasks does (its "hint" setting).
func (n *Node) hinted(req *wire.EnqueueRequest) bool {
	if req.Hint {
		return true
	}
	for i := range req.Tasks {
		if !n.queues.Of(req.Tasks[i].Queue).Hint {
			return false
		}
	}
	return len(req.Tasks) > 0
}

// leaderOutOfReach reports whether part's leader, as the registry names
// it, is not this node and cannot be counted on to answer now: none
// is known, gossip does not hold it alive, or a replication request to
// it went unanswered (replication.Plane.Reachable).
func (n *Node) leaderOutOfReach(part uint16) bool {
	ls := n.leaders()
	if int(part) >= len(ls) || ls[part] == 0 {
		return true
	}
	l := ls[part]
	return l != n.id && !(n.ms.Alive(l) && n.repl.Reachable(l))
}

// writeNew writes new tasks of part, without keys or deps, to its cohort
// as their coordinator (replication.Plane.ShipNew), this node's replica
// included when it is a member, and answers once w replicas hold them.
// A task held with other content under its id refuses the write
// (task.ErrConflict); when a retry may meet one (CheckExisting), the
// local replica checks first, so a refusal found here sends nothing on.
func (n *Node) writeNew(ctx context.Context, part uint16, ts []partition.NewTask, now int64, w int, hint bool) (int, error) {
	if hint && !n.placeable(part, w) {
		// Not worth the wait: the cohort is out of reach now.
		return 0, n.hint(ts, w, fmt.Errorf("%w: partition %d: too few of its cohort reachable", wire.ErrUnavailable, part))
	}
	need := n.repl.NeedAcks(part, w)
	recs := make([]task.Record, len(ts))
	checked := false
	for i := range ts {
		recs[i] = task.Record{ID: ts[i].Spec.ID, Spec: ts[i].Spec}
		checked = checked || ts[i].CheckExisting
	}
	member := slices.Contains(n.partitionCohort(int(part)), n.id)
	var local partition.Durable
	if member && checked {
		var err error
		if local, err = n.parts[part].EnqueueApply(ts, now); err != nil {
			return 0, err
		}
	}
	s := n.repl.ShipNew(part, need, recs)
	if s.Held() && local == nil {
		var err error
		if local, err = n.parts[part].EnqueueApply(ts, now); err != nil {
			// The followers may take what this replica refused (another
			// task's spec under one id): in doubt, not refused.
			return 0, fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, part, err)
		}
	}
	wctx, cancel := n.hintWait(ctx, hint)
	defer cancel()
	acks, err := s.Finish(wctx, local)
	if err != nil && hint && hintable(err) {
		return 0, n.hint(ts, w, err)
	}
	return acks, err
}

// writeAtLeader writes new tasks of part, which this node leads, on its
// replica and ships them to the followers: tasks with a key or deps (see
// writeTasks). Enqueue sets DupOf on each whose key another task holds.
func (n *Node) writeAtLeader(ctx context.Context, p uint16, ts []partition.NewTask, now int64, w int, hint bool) (int, error) {
	wctx, cancel := n.hintWait(ctx, hint)
	defer cancel()
	acks, err := n.writeAtLeaderOnce(wctx, p, ts, now, w)
	if err != nil && hint && hintable(err) {
		return 0, n.hint(ts, w, err)
	}
	return acks, err
}

// writeAtLeaderOnce is writeAtLeader without hints.
func (n *Node) writeAtLeaderOnce(ctx context.Context, p uint16, ts []partition.NewTask, now int64, w int) (int, error) {
	need := n.repl.NeedAcks(p, w)
	var s *replication.Shipment
	to, ep := n.repl.Followers(p)
	if ep == 0 {
		return 0, replication.NotLeading(p)
	}
	if len(to) == 0 {
		return 1, n.parts[p].Enqueue(ts, now)
	}
	recs := make([]task.Record, len(ts))
	checked := false
	for i := range ts {
		if !ts[i].State.IsZero() {
			ts[i].State.Stamp = ep // as the replica stamps it (partition.Replica.Enqueue)
		}
		// The record's own copy of the state: the shipment encodes it
		// while the replica's Enqueue writes ts (the race detector saw
		// the two meet in TestClusterGC).
		st := ts[i].State.Clone()
		recs[i] = task.Record{ID: ts[i].Spec.ID, Spec: ts[i].Spec, State: &st}
		// A key may be taken: what to ship is known once the
		// replica has checked it.
		checked = checked || ts[i].CheckExisting || ts[i].Spec.Key != ""
	}
	// Ship while the local write syncs, so the two overlap; but a
	// client-supplied id may turn out to conflict with a stored task,
	// and then nothing may reach the followers: write here first.
	if !checked {
		s = n.repl.Ship(p, need, recs, nil)
	}
	if err := n.parts[p].Enqueue(ts, now); err != nil {
		return 0, err
	}
	if s == nil {
		var err error
		if recs, err = n.shipRecords(p, ts, recs); err != nil {
			return 0, err
		}
		s = n.repl.Ship(p, need, recs, nil)
	}
	return s.Finish(ctx, nil)
}

// shipRecords returns what to ship for ts, written to part with records
// recs: each task written, and in place of each whose key another task
// holds, that task's whole record (once, and not if it is written here
// too).
func (n *Node) shipRecords(part uint16, ts []partition.NewTask, recs []task.Record) ([]task.Record, error) {
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
	held, err := n.parts[part].Records(holders)
	if err != nil {
		return nil, fmt.Errorf("enqueue: the tasks holding the keys: %w", err)
	}
	return append(out, held...), nil
}

// handOverKeyed hands hinted keyed tasks (node/hints) to their key's
// leader, as an enqueue marked Hinted (this node's word): the leader
// checks the key under the lock that orders its writes and retires a
// task whose key was taken meanwhile (partition.NewTask.Hinted). It
// returns nil once W replicas hold every task.
func (n *Node) handOverKeyed(ctx context.Context, w int, specs []*task.Spec) error {
	now := n.now()
	req := &wire.EnqueueRequest{W: w, Tasks: make([]wire.EnqueueTask, len(specs))}
	for i, sp := range specs {
		id := sp.ID
		req.Tasks[i] = wire.EnqueueTask{
			ID: &id, Queue: sp.Queue, Priority: sp.Priority, Data: sp.Data, Group: sp.Group, Description: sp.Description,
			MaxAttempts: sp.MaxAttempts, TimeLimitMs: sp.TimeLimit, Kind: sp.Kind, Subtopic: sp.Subtopic,
			Key: sp.Key, UniqueForMs: sp.UniqueFor, DelayMs: max(sp.NotBefore-now, 0), Hinted: true,
		}
	}
	ctx = withFresh(ctx) // the Hinted flags are this node's
	resp, handled, err := n.enqueueRouted(ctx, req)
	if !handled {
		resp, err = n.enqueueLocal(ctx, req)
	}
	if err != nil {
		return err
	}
	for _, r := range resp.Results {
		if r.Hinted {
			return fmt.Errorf("%w: task %s: its leader could not take it", wire.ErrUnavailable, r.ID)
		}
	}
	return nil
}
