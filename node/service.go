package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
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

// checkMs checks a duration in ms from a request: not negative, not over maxD.
func checkMs(what string, v int64, maxD time.Duration) error {
	if v < 0 {
		return fmt.Errorf("%w: %s %dms is negative", task.ErrInvalid, what, v)
	}
	if v > maxD.Milliseconds() {
		return fmt.Errorf("%w: %s %dms exceeds the limit of %v", task.ErrInvalid, what, v, maxD)
	}
	return nil
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
		nt, err := n.newTask(&req.Tasks[i], now, inBatch, trust)
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
	for i, nt := range batch {
		for _, d := range nt.Spec.Deps {
			if inBatch[d] && !written[d] {
				return nil, fmt.Errorf("task %d of %d: %w: %s comes later in the batch", i+1, len(batch), task.ErrDepNotFound, d)
			}
		}
		written[nt.Spec.ID] = true
	}
	// Deps outside the batch must exist; their leaders record the new
	// tasks as waiting on them before the tasks are written, and say which
	// are completed already (DESIGN.md, Operations: dependencies).
	if err := n.linkDeps(batch, func(d task.ID) bool { return !inBatch[d] }, true); err != nil {
		return nil, err
	}
	got, err := n.writeTasks(ctx, batch, now, req.W)
	if err != nil {
		return nil, err
	}
	acks = max(acks, got)
	// Deps inside the batch exist now: record their edges too. A failure
	// here leaves the dependents to the reconcile, not the enqueue failed.
	if err := n.linkDeps(batch, func(d task.ID) bool { return inBatch[d] }, false); err != nil {
		n.log.Warn("recording dependency edges within a batch; the reconcile will catch the completions", "err", err)
	}
	n.checkNewDeps(batch)
	resp := &wire.EnqueueResponse{Results: make([]wire.EnqueueResult, len(ids))}
	for i, id := range ids {
		resp.Results[i] = wire.EnqueueResult{ID: id, Acks: acks}
	}
	return resp, nil
}

// newTask validates one task of an enqueue and builds its spec. Deps must
// exist, in the store or earlier in the same batch; those already
// completed start out as done. A given id is checked against the store
// (a retry is idempotent) unless a node says it is fresh and trustFresh.
func (n *Node) newTask(et *wire.EnqueueTask, now int64, inBatch map[task.ID]bool, trustFresh bool) (partition.NewTask, error) {
	var nt partition.NewTask
	if err := task.ValidateQueue(et.Queue); err != nil {
		return nt, err
	}
	if err := task.ValidateGroup(et.Group); err != nil {
		return nt, err
	}
	if err := task.ValidateDescription(et.Description); err != nil {
		return nt, err
	}
	if err := task.ValidateData(et.Data, n.cfg.MaxPayload); err != nil {
		return nt, err
	}
	if err := checkMs("delay", et.DelayMs, n.cfg.MaxDelay); err != nil {
		return nt, err
	}
	sp := &task.Spec{
		Queue:       et.Queue,
		Priority:    et.Priority,
		Group:       et.Group,
		Description: et.Description,
		MaxAttempts: et.MaxAttempts,
		EnqueuedAt:  now,
		Data:        et.Data,
	}
	if et.ID != nil {
		if et.ID.IsZero() {
			return nt, fmt.Errorf("%w: the zero id is reserved", task.ErrInvalid)
		}
		sp.ID, nt.CheckExisting = *et.ID, !(et.FreshID && trustFresh)
	} else {
		sp.ID = n.ids.Next()
	}
	if sp.MaxAttempts == 0 {
		sp.MaxAttempts = n.cfg.DefaultMaxAttempts
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

// depState reports whether dep exists and is completed.
func (n *Node) depState(dep task.ID) (completed bool, err error) {
	part := n.partOf(dep)
	// A collected task was completed, and a tombstone is forever (up to
	// the horizon): a local one is the truth.
	if _, tomb, err := n.store.Tomb(part, dep); err == nil && tomb {
		return true, nil
	}
	if !n.leads(part) {
		// Asked of the dep's leader: a follower's copy may hold a
		// completion no majority acknowledged (partition's "Epochs and
		// orphans"), which must not make a dependent ready.
		ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
		defer cancel()
		v, handled, err := forward[wire.GetRequest, wire.TaskView](ctx, n, part, wire.OpGet, &wire.GetRequest{ID: dep})
		if handled {
			if errors.Is(err, task.ErrNotFound) {
				// Collected reads as not found; the leader's tombstone
				// says it completed.
				if infos, lerr := n.repl.GCLookup(ctx, []task.ID{dep}); lerr == nil && len(infos) == 1 && infos[0].Status == partition.GCCollected {
					return true, nil
				}
				return false, fmt.Errorf("%w: %s", task.ErrDepNotFound, dep)
			}
			if err != nil {
				return false, err
			}
			return v.State == task.Completed.String(), nil
		}
	}
	if _, err := n.store.Spec(part, dep); errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("%w: %s", task.ErrDepNotFound, dep)
	} else if err != nil {
		return false, err
	}
	st, _, err := n.store.State(part, dep)
	if err != nil {
		return false, err
	}
	return st.Completion != nil, nil
}

// writeTasks writes the batch, one store batch per partition, all
// partitions at once so their syncs share fsyncs.
func (n *Node) writeTasks(ctx context.Context, batch []partition.NewTask, now int64, w int) (int, error) {
	byPart := map[uint16][]partition.NewTask{}
	for _, nt := range batch {
		p := n.partOf(nt.Spec.ID)
		byPart[p] = append(byPart[p], nt)
	}
	// One partition: write here, on this goroutine. Several: all at once,
	// so their syncs share fsyncs.
	write := func(p uint16, ts []partition.NewTask) (int, error) {
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
			recs[i] = task.Record{ID: ts[i].Spec.ID, Spec: ts[i].Spec, State: &ts[i].State}
			checked = checked || ts[i].CheckExisting
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
			s = n.repl.Ship(p, need, recs, nil)
		}
		return s.Finish(ctx, nil)
	}
	if len(byPart) == 1 {
		for p, ts := range byPart {
			return write(p, ts)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	acks := math.MaxInt
	for p, ts := range byPart {
		wg.Go(func() {
			a, err := write(p, ts)
			mu.Lock()
			defer mu.Unlock()
			acks = min(acks, a)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return acks, errors.Join(errs...)
}

// checkNewDeps runs after new tasks are durable: a dep that completed
// between the pre-check and the write of the reverse edge is caught here
// (the dep's completer reads edges after writing its completion; the
// enqueuer reads completions after writing its edges, so one of them sees
// the other).
func (n *Node) checkNewDeps(batch []partition.NewTask) {
	now := n.now()
	for _, nt := range batch {
		for _, d := range nt.Spec.Deps {
			if slices.Contains(nt.State.DepsDone, d) {
				continue
			}
			done, err := n.depState(d)
			if err != nil || !done {
				continue
			}
			if err := n.replicaOf(nt.Spec.ID).DepDone(nt.Spec.ID, d, now); err != nil {
				n.log.Warn("marking dependency done", "task", nt.Spec.ID, "dep", d, "err", err)
			}
		}
	}
}

// Claim takes up to Count of the queue's best ready tasks, waiting up to
// WaitMs for the first one.
func (n *Node) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	ttl, count, err := n.claimParams(req)
	if err != nil {
		return nil, err
	}
	var deadline <-chan time.Time
	if req.WaitMs > 0 {
		t := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	resp := &wire.ClaimResponse{Tasks: []wire.TaskView{}}
	for pass := 0; ; pass++ {
		wake := n.heads.readyChan(req.Queue)
		if tasks, ok := n.claimRouted(ctx, req, count); ok {
			resp.Tasks = append(resp.Tasks, tasks...)
			return resp, nil
		}
		c, err := n.claimBatch(req.Queue, ttl, count)
		if err != nil {
			return nil, err
		}
		tasks, err := c.wait(ctx)
		if err != nil {
			return nil, err
		}
		resp.Tasks = append(resp.Tasks, tasks...)
		if len(resp.Tasks) == 0 {
			more, err := n.claimElsewhere(ctx, req, count, pass > 0)
			if err != nil && deadline == nil {
				return nil, err
			}
			resp.Tasks = append(resp.Tasks, more...)
		}
		if len(resp.Tasks) > 0 || deadline == nil {
			return resp, nil
		}
		var poll <-chan time.Time
		if !isForwarded(ctx) && !n.leadsAll() {
			t := time.NewTimer(claimPollInterval)
			poll = t.C
			defer t.Stop()
		}
		select {
		case <-wake:
		case <-poll:
		case <-deadline:
			return resp, nil
		case <-ctx.Done():
			return resp, nil
		case <-n.stopc:
			return resp, nil // nothing claimed: the client tries again, elsewhere
		}
	}
}

// claimParams validates a claim request and returns its lease (ms) and
// count with the defaults applied.
func (n *Node) claimParams(req *wire.ClaimRequest) (ttl int64, count int, err error) {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return 0, 0, err
	}
	ttl = req.TTLMs
	if ttl == 0 {
		ttl = n.cfg.DefaultTTL.Milliseconds()
	}
	if ttl <= 0 || ttl > n.cfg.MaxTTL.Milliseconds() {
		return 0, 0, fmt.Errorf("%w: ttl %dms: want 1ms..%v", task.ErrInvalid, ttl, n.cfg.MaxTTL)
	}
	count = max(req.Count, 1)
	if req.Count < 0 || count > maxClaimCount {
		return 0, 0, fmt.Errorf("%w: count %d: want 1..%d", task.ErrInvalid, req.Count, maxClaimCount)
	}
	if err := checkMs("wait", req.WaitMs, n.cfg.MaxWait); err != nil {
		return 0, 0, err
	}
	return ttl, count, nil
}

// claimBatch claims up to count of queue's best ready tasks without
// waiting: the caller waits on the returned writes (waitAll) before
// answering, so the claims of one request share one fsync. An error after
// some claims were applied ends the batch early with what it has (those
// claims stand and must be answered); an error before any is returned.
func (n *Node) claimBatch(queue string, ttl int64, count int) (*claimed, error) {
	c := &claimed{n: n}
	if drifting, _ := n.drifting(); drifting {
		return c, nil // no lease by a clock that is ahead: the others grant
	}
	for len(c.views) < count {
		g, p, err := n.claimOneApply(queue, ttl)
		err = leaderErr(err)
		if err != nil {
			if len(c.views) == 0 {
				return nil, err
			}
			n.log.Warn("claim stopped early", "queue", queue, "claimed", len(c.views), "err", err)
			break
		}
		if g == nil {
			break
		}
		c.views = append(c.views, n.grantedView(g))
		c.pending = append(c.pending, p)
		part := n.partOf(g.Spec.ID)
		var s *replication.Shipment
		if to, ep := n.repl.Followers(part); len(to) > 0 || ep == 0 {
			st := g.State
			id := g.Spec.ID
			// The spec without payload lets a follower index the claim
			// without reading the spec back (task.Record.Meta).
			meta := *g.Spec
			meta.Data = nil
			s = n.repl.Ship(part, n.repl.NeedAcks(part, 0), []task.Record{{ID: id, State: &st, Meta: &meta}}, n.repl.WholeRecord(part, id))
		}
		c.ships = append(c.ships, s)
	}
	return c, nil
}

// claimed is what claimBatch granted: applied locally, shipped to the
// followers, not yet acknowledged.
type claimed struct {
	n       *Node
	views   []wire.TaskView
	pending []*store.Pending
	ships   []*replication.Shipment
}

// wait waits until every claim is durable here and on enough replicas,
// and returns the claims that are; a claim that could not be replicated
// is left to expire (nobody was told of it).
func (c *claimed) wait(ctx context.Context) ([]wire.TaskView, error) {
	if c == nil {
		return nil, nil
	}
	if err := waitAll(c.pending); err != nil {
		return nil, err
	}
	out := c.views[:0]
	var firstErr error
	for i, v := range c.views {
		if s := c.ships[i]; s != nil {
			if _, err := s.Finish(ctx, nil); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				c.n.releaseUnanswered(v.ID, *v.Claim)
				continue
			}
			// A lease that ran out while its replication was slow is
			// nobody's: the task may already be claimed again.
			if len(v.Claims) > 0 && v.Claims[len(v.Claims)-1].End <= c.n.now() {
				continue
			}
		}
		out = append(out, v)
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// releaseUnanswered ends claim idx of task id, which this leader granted
// and will not answer (too few replicas held it), as a snooze that takes
// effect now: the task is ready again at once and the claim costs it no
// attempt, since nobody ever held it. Best effort, in the background: a
// leader that stepped down meanwhile cannot write it, and then the claim
// either stays an orphan (no handoff carries it) or expires.
func (n *Node) releaseUnanswered(id task.ID, idx uint32) {
	n.wg.Go(func() {
		part := n.partOf(id)
		if !n.leads(part) {
			return
		}
		wr, err := n.parts[part].SnoozeApply(id, idx, 0, n.now())
		if err != nil {
			n.log.Debug("releasing a claim nobody was answered", "task", id, "claim", idx, "err", err)
			return
		}
		n.repl.ReplicateQuietly(part, wr)
	})
}

// waitAll waits until every write in ps is durable.
func waitAll(ps []*store.Pending) error {
	for _, p := range ps {
		if err := p.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// claimOneApply claims the best ready task of queue across the partitions
// this node leads, without waiting for the fsync: the caller waits on the
// pending write before acknowledging the claim. Picks of one queue are
// serialised by the queue's pick lock, so concurrent claims take tasks in
// exact (priority, id) order; the pick only moves the task out of the
// ready index (Reserve), and the store work and the fsync happen after the
// lock is released, so claims overlap them.
func (n *Node) claimOneApply(queue string, ttl int64) (*partition.Granted, *store.Pending, error) {
	n.catchUp()
	pick := n.heads.pickLock(queue)
	for range maxClaimRaces {
		pick.Lock()
		part, _, ok := n.heads.best(queue)
		if !ok {
			pick.Unlock()
			return nil, nil, nil
		}
		id, ok, err := n.parts[part].Reserve(queue)
		pick.Unlock()
		if errors.Is(err, partition.ErrNotLeader) {
			continue // stepped down since best(); its heads are gone
		}
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		g, pending, err := n.parts[part].ClaimReserved(id, n.now(), ttl)
		if err != nil {
			return nil, nil, err
		}
		if g == nil {
			continue // no longer claimable; pick again
		}
		return g, pending, nil
	}
	return nil, nil, nil
}

// grantedView is the view of a task just claimed, with its claim id.
func (n *Node) grantedView(g *partition.Granted) wire.TaskView {
	v := n.view(g.Spec, g.Spec.Data, &g.State, nil, n.now())
	idx := g.Claim.Index
	v.Claim = &idx
	return v
}

// leaderErr turns a replica's refusal as not the leader (it stepped down
// between routing the request and writing) into unavailable, which
// coordinators retry at the new leader, rather than an internal error.
func leaderErr(err error) error {
	if errors.Is(err, partition.ErrNotLeader) {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return err
}

// stateRefusals are the refusals a leader derives from its replica's
// state of a task, which a stale replica gets wrong.
var stateRefusals = []error{
	task.ErrClaimSuperseded, task.ErrClaimExpired, task.ErrClaimEnded, task.ErrCompleted,
	task.ErrNoSuchClaim, task.ErrNotFound, task.ErrSeq, task.ErrNotDead,
}

// refusal returns err, this leader's refusal of an operation on task id,
// once it confirmed that it still leads the task's partition
// (replication.Plane.ConfirmLeading); if it cannot, the refusal may come from a stale
// state, and the answer is unavailable: the client must not take it as
// final. A leader cut off while another took over still believes it
// leads; its replica lacks the new leader's writes and holds claims of
// its own that no majority took, so "superseded by claim 2" there may be
// false for a claim the new leader granted (found by the simulation).
// Only a refusal costs the round trip; a write is confirmed by its
// replication anyway.
func (n *Node) refusal(ctx context.Context, id task.ID, err error) error {
	err = leaderErr(err)
	if !slices.ContainsFunc(stateRefusals, func(e error) bool { return errors.Is(err, e) }) {
		return err
	}
	if cerr := n.repl.ConfirmLeading(ctx, n.partOf(id)); cerr != nil {
		return fmt.Errorf("%w: %v; this node could not confirm it still leads the task's partition: %v", wire.ErrUnavailable, err, cerr)
	}
	return err
}

// Renew extends a claim.
func (n *Node) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.RenewRequest, wire.RenewResponse](ctx, n, n.partOf(req.ID), wire.OpRenew, req); handled {
		return resp, err
	}
	if drifting, _ := n.drifting(); drifting {
		return nil, n.errDrifting() // the coordinator retries at the next leader
	}
	ttl := req.TTLMs
	if ttl == 0 {
		ttl = n.cfg.DefaultTTL.Milliseconds()
	}
	if ttl <= 0 || ttl > n.cfg.MaxTTL.Milliseconds() {
		return nil, fmt.Errorf("%w: ttl %dms: want 1ms..%v", task.ErrInvalid, ttl, n.cfg.MaxTTL)
	}
	part := n.partOf(req.ID)
	c, wr, err := n.parts[part].RenewApply(req.ID, req.Claim, n.now(), ttl)
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	acks, err := n.repl.Replicate(ctx, part, 0, wr)
	if err != nil {
		return nil, err
	}
	return &wire.RenewResponse{End: c.End, Acks: acks}, nil
}

// Update appends a progress entry.
func (n *Node) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.UpdateRequest, wire.Ack](ctx, n, n.partOf(req.ID), wire.OpUpdate, req); handled {
		return resp, err
	}
	if err := task.ValidateData(req.Data, n.cfg.MaxPayload); err != nil {
		return nil, err
	}
	part := n.partOf(req.ID)
	wr, err := n.parts[part].UpdateApply(req.ID, req.Claim, req.Seq, req.Data, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	acks, err := n.repl.Replicate(ctx, part, 0, wr)
	if err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// Complete completes a task and tells its dependents; with Next it also
// claims the next tasks (see wire.CompleteRequest), applying the claims
// before waiting so that one fsync covers the completion and the claims.
func (n *Node) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.CompleteRequest, wire.CompleteResponse](ctx, n, n.partOf(req.ID), wire.OpComplete, req); handled {
		return resp, err
	}
	var ttl int64
	var count int
	if req.Next != nil {
		var err error
		if ttl, count, err = n.claimParams(req.Next); err != nil {
			return nil, fmt.Errorf("next: %w", err)
		}
		if req.Next.WaitMs != 0 {
			return nil, fmt.Errorf("%w: next: a claim with a completion does not long-poll; claim separately to wait", task.ErrInvalid)
		}
	}
	part := n.partOf(req.ID)
	_, wr, err := n.parts[part].CompleteApply(req.ID, req.Claim, req.Seq, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	ship := n.repl.Ship(part, n.repl.NeedAcks(part, 0), []task.Record{wr.Rec}, n.repl.WholeRecord(part, req.ID))
	resp := &wire.CompleteResponse{}
	var next *claimed
	if req.Next != nil {
		next, err = n.claimBatch(req.Next.Queue, ttl, count)
		if err != nil {
			// The completion stands; the worker claims again on its own.
			n.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
		}
	}
	// Every write here was applied before any wait, so one fsync can
	// cover the completion and the claims.
	if resp.Acks, err = ship.Finish(ctx, wr.Durable); err != nil {
		return nil, err
	}
	if resp.Next, err = next.wait(ctx); err != nil {
		n.log.Warn("claim after complete", "queue", req.Next.Queue, "err", err)
	}
	// Not only when newly completed: a retry of a completion whose first
	// attempt failed after the write must still tell the dependents (take
	// makes it once).
	if n.deps.take(req.ID) {
		n.notifyDependents(req.ID)
	}
	return resp, nil
}

// reconcileDeps re-checks every blocked task's deps.
func (n *Node) reconcileDeps() {
	now := n.now()
	for _, r := range n.parts {
		if !n.leads(r.Part()) {
			continue // a follower learns of deps done from its leader
		}
		for _, id := range r.Blocked() {
			sp, err := n.store.Spec(r.Part(), id)
			if err != nil {
				continue
			}
			for _, d := range sp.Deps {
				if done, err := n.depState(d); err == nil && done {
					wr, err := r.DepDoneApply(id, d, now)
					if err != nil {
						n.log.Warn("reconcile dependency", "task", id, "dep", d, "err", err)
						continue
					}
					n.repl.ReplicateQuietly(r.Part(), wr)
				}
			}
		}
	}
}

// Fail ends a claim as a failed attempt.
func (n *Node) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.FailRequest, wire.Ack](ctx, n, n.partOf(req.ID), wire.OpFail, req); handled {
		return resp, err
	}
	if req.RetryAfterMs != nil {
		if err := checkMs("retry-after", *req.RetryAfterMs, n.cfg.MaxDelay); err != nil {
			return nil, err
		}
	}
	part := n.partOf(req.ID)
	wr, err := n.parts[part].FailApply(req.ID, req.Claim, req.Reason, req.RetryAfterMs, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	acks, err := n.repl.Replicate(ctx, part, 0, wr)
	if err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// Snooze ends a claim without counting an attempt.
func (n *Node) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.SnoozeRequest, wire.Ack](ctx, n, n.partOf(req.ID), wire.OpSnooze, req); handled {
		return resp, err
	}
	if err := checkMs("delay", req.DelayMs, n.cfg.MaxDelay); err != nil {
		return nil, err
	}
	part := n.partOf(req.ID)
	wr, err := n.parts[part].SnoozeApply(req.ID, req.Claim, req.DelayMs, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	acks, err := n.repl.Replicate(ctx, part, 0, wr)
	if err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// Requeue makes a dead task ready again.
func (n *Node) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if resp, handled, err := forward[wire.RequeueRequest, wire.Ack](ctx, n, n.partOf(req.ID), wire.OpRequeue, req); handled {
		return resp, err
	}
	part := n.partOf(req.ID)
	wr, err := n.parts[part].RequeueApply(req.ID, n.now())
	if err != nil {
		return nil, n.refusal(ctx, req.ID, err)
	}
	acks, err := n.repl.Replicate(ctx, part, 0, wr)
	if err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: acks}, nil
}

// Get reads a task.
func (n *Node) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := req.ID.Check(); err != nil {
		return nil, err
	}
	if req.R < 0 {
		return nil, fmt.Errorf("%w: r=%d is negative", task.ErrInvalid, req.R)
	}
	// r=1 reads whatever one replica holds: this node's own, when it is
	// in the partition's cohort (an operator looking at one replica).
	local := req.R == 1 && slices.Contains(n.partitionCohort(int(n.partOf(req.ID))), n.id)
	if !local {
		if resp, handled, err := forward[wire.GetRequest, wire.TaskView](ctx, n, n.partOf(req.ID), wire.OpGet, req); handled {
			return resp, err
		}
	}
	n.catchUp()
	part := n.partOf(req.ID)
	var v wire.TaskView
	if to, _ := n.repl.Followers(part); len(to) > 0 && req.R != 1 {
		rec, err := n.repl.ReadReplicas(ctx, part, req.ID, to, req.R)
		if err != nil {
			return nil, err
		}
		v = n.view(rec.Spec, rec.Spec.Data, rec.State, rec.Updates, n.now())
	} else {
		sp, err := n.store.FullSpec(part, req.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", task.ErrNotFound, req.ID)
		}
		if err != nil {
			return nil, err
		}
		if v, err = n.readView(part, sp, true); err != nil {
			return nil, err
		}
	}
	// min_seq counts the visible history over all claims: it only grows,
	// so a client that saw n entries never reads fewer.
	if req.MinSeq != nil {
		if have := uint64(len(v.Updates)); have < *req.MinSeq {
			return nil, fmt.Errorf("%w: history has %d entries, caller saw %d", task.ErrStale, have, *req.MinSeq)
		}
	}
	return &v, nil
}

// readView reads a task's state and (if withUpdates) its visible updates
// and builds its view; sp carries the payload.
func (n *Node) readView(part uint16, sp *task.Spec, withUpdates bool) (wire.TaskView, error) {
	st, _, err := n.store.State(part, sp.ID)
	if err != nil {
		return wire.TaskView{}, err
	}
	var ups []task.Update
	if withUpdates {
		err = n.store.Updates(part, sp.ID, func(u task.Update) bool {
			ups = append(ups, u)
			return true
		})
		if err != nil {
			return wire.TaskView{}, err
		}
	}
	return n.view(sp, sp.Data, &st, ups, n.now()), nil
}

// view builds a task's client view. Only the contiguous prefix of each
// claim's updates (seq 0, 1, 2, ... without a gap) is visible.
func (n *Node) view(sp *task.Spec, data []byte, st *task.State, ups []task.Update, now int64) wire.TaskView {
	status, _ := task.Derive(sp, st, now, n.cfg.SkewBound.Milliseconds())
	live := status == task.Claimed
	v := wire.TaskView{
		ID:          sp.ID,
		Queue:       sp.Queue,
		Priority:    sp.Priority,
		Data:        data,
		Deps:        sp.Deps,
		State:       status.String(),
		Claims:      make([]wire.ClaimView, 0, len(st.Claims)),
		Updates:     []wire.UpdateView{},
		Group:       sp.Group,
		Description: sp.Description,
		MaxAttempts: sp.MaxAttempts,
		Attempts:    st.Attempts(live),
		NotBefore:   task.NotBefore(sp, st),
		EnqueuedAt:  sp.EnqueuedAt,
	}
	if v.Deps == nil {
		v.Deps = []task.ID{}
	}
	if v.Data == nil {
		v.Data = []byte{}
	}
	for _, c := range st.Claims {
		cv := wire.ClaimView{Claim: c.Index, Start: c.Start, End: c.End, Epoch: c.Epoch}
		if comp := st.Completion; comp != nil && comp.Claim == c.Index {
			at := comp.At
			cv.Completed = &at
		}
		if r, ok := st.ReleaseOf(c.Index); ok {
			cv.End = min(cv.End, r.At)
		}
		v.Claims = append(v.Claims, cv)
	}
	for _, r := range st.Releases {
		v.Failures = append(v.Failures, wire.FailureView{Claim: r.Claim, At: r.At, Reason: r.Reason, Snooze: r.Snooze, Until: r.Until})
	}
	var claim uint32
	var next uint64
	for i, u := range ups {
		if i == 0 || u.Claim != claim {
			claim, next = u.Claim, 0
		}
		if u.Seq != next {
			continue // a gap: later entries of this claim stay hidden
		}
		v.Updates = append(v.Updates, wire.UpdateView{Claim: u.Claim, Seq: u.Seq, Data: u.Data})
		next++
	}
	return v
}

// List streams the tasks matching the filters, partition by partition in
// id order, a page at a time; nothing is held beyond one page.
func (n *Node) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	if err := n.checkServing(); err != nil {
		return err
	}
	if req.Queue != "" {
		if err := task.ValidateQueue(req.Queue); err != nil {
			return err
		}
	}
	if err := task.ValidateGroup(req.Group); err != nil {
		return err
	}
	var want *task.Status
	if req.State != "" {
		s, err := task.ParseStatus(req.State)
		if err != nil {
			return err
		}
		want = &s
	}
	if req.Limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", task.ErrInvalid, req.Limit)
	}
	mine, err := n.registryParts(ctx)
	if err != nil {
		return err
	}
	page := &wire.ListPage{Tasks: make([]wire.TaskView, 0, listPageSize)}
	sent := 0
	skew := n.cfg.SkewBound.Milliseconds()
	for p := range n.parts {
		if !mine[uint16(p)] {
			continue
		}
		now := n.now()
		err := n.store.ScanPartition(uint16(p), task.ID{}, func(rec store.TaskRecord) (bool, error) {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			sp := rec.Spec
			if req.Queue != "" && sp.Queue != req.Queue || req.Group != "" && sp.Group != req.Group {
				return true, nil
			}
			if want != nil {
				if s, _ := task.Derive(sp, &rec.State, now, skew); s != *want {
					return true, nil
				}
			}
			data := sp.Data
			if rec.PayloadApart {
				var err error
				if data, err = n.store.Data(uint16(p), sp.ID); err != nil {
					return false, err
				}
			}
			page.Tasks = append(page.Tasks, n.view(sp, data, &rec.State, nil, now))
			sent++
			if len(page.Tasks) == listPageSize {
				if err := emit(page); err != nil {
					return false, err
				}
				page.Tasks = page.Tasks[:0]
			}
			return req.Limit == 0 || sent < req.Limit, nil
		})
		if err != nil {
			return err
		}
		if req.Limit > 0 && sent >= req.Limit {
			break
		}
	}
	if len(page.Tasks) > 0 {
		if err := emit(page); err != nil {
			return err
		}
		page.Tasks = page.Tasks[:0]
	}
	if isForwarded(ctx) {
		return nil
	}
	// Then the partitions other nodes lead, one leader after another.
	for _, addr := range n.otherLeaders() {
		if req.Limit > 0 && sent >= req.Limit {
			break
		}
		sub := *req
		if req.Limit > 0 {
			sub.Limit = req.Limit - sent
		}
		c, err := n.peers.Get(ctx, addr)
		if err != nil {
			return fmt.Errorf("%w: list at %s: %v", wire.ErrUnavailable, addr, err)
		}
		err = wire.NewClient(c).List(ctx, &sub, func(pg *wire.ListPage) error {
			sent += len(pg.Tasks)
			return emit(pg)
		})
		if err != nil {
			return fmt.Errorf("list at %s: %w", addr, err)
		}
	}
	return nil
}

// Count counts tasks of a queue (or all queues) in every state.
func (n *Node) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if req.Queue != "" {
		if err := task.ValidateQueue(req.Queue); err != nil {
			return nil, err
		}
	}
	n.catchUp()
	mine, err := n.registryParts(ctx)
	if err != nil {
		return nil, err
	}
	var total int64
	if err := fanOut(ctx, n, wire.OpCount, req, func(r *wire.CountResponse) { total += r.Count }); err != nil {
		return nil, err
	}
	for _, r := range n.parts {
		if !mine[r.Part()] {
			continue
		}
		r.Stats(func(q string, c [task.NumStatus]int64) {
			if req.Queue == "" || q == req.Queue {
				for _, v := range c {
					total += v
				}
			}
		})
	}
	return &wire.CountResponse{Count: total}, nil
}

// Queues returns per-queue counts by state.
func (n *Node) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	n.catchUp()
	sums := map[string]*[task.NumStatus]int64{}
	add := func(q string, c [task.NumStatus]int64) {
		s := sums[q]
		if s == nil {
			s = new([task.NumStatus]int64)
			sums[q] = s
		}
		for i, v := range c {
			s[i] += v
		}
	}
	err := fanOut(ctx, n, wire.OpQueues, req, func(r *wire.QueuesResponse) {
		for _, q := range r.Queues {
			var c [task.NumStatus]int64
			c[task.Ready], c[task.Claimed], c[task.Delayed] = q.Ready, q.Claimed, q.Delayed
			c[task.Blocked], c[task.Completed], c[task.Dead] = q.Blocked, q.Completed, q.Dead
			add(q.Queue, c)
		}
	})
	if err != nil {
		return nil, err
	}
	mine, err := n.registryParts(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range n.parts {
		if !mine[r.Part()] {
			continue
		}
		r.Stats(add)
	}
	resp := &wire.QueuesResponse{Queues: make([]wire.QueueStats, 0, len(sums))}
	for q, c := range sums {
		resp.Queues = append(resp.Queues, wire.QueueStats{
			Queue: q, Ready: c[task.Ready], Claimed: c[task.Claimed], Delayed: c[task.Delayed],
			Blocked: c[task.Blocked], Completed: c[task.Completed], Dead: c[task.Dead],
		})
	}
	slices.SortFunc(resp.Queues, func(a, b wire.QueueStats) int {
		if a.Queue < b.Queue {
			return -1
		}
		if a.Queue > b.Queue {
			return 1
		}
		return 0
	})
	return resp, nil
}
