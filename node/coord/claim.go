package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/node/heads"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// claimPollInterval is how often a long-polling claim asks the other
// leaders for work; local work wakes it at once.
const claimPollInterval = 100 * time.Millisecond

// claim takes up to Count of the queue's best ready tasks, waiting up to
// WaitMs for the first one: at the node whose head is best
// (claimRouted), else here, else at the first other leader with work
// (claimElsewhere). A forwarded claim (fwd) claims here only.
func (p *Plane) claim(ctx context.Context, fwd bool, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	ttl, count, err := p.claimParams(req)
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
		if p.queues.Paused(req.Queue) {
			began := time.Now()
			resumed := deadline != nil && p.queues.WaitResumed(ctx, req.Queue, deadline, p.h.Stopped())
			resp.Waited += time.Since(began)
			if !resumed {
				return resp, nil // a paused queue grants nothing
			}
		}
		wake := p.heads.ReadyChan(req.Queue)
		if tasks, ok := p.claimRouted(ctx, fwd, req, count); ok {
			resp.Tasks = append(resp.Tasks, tasks...)
			return resp, nil
		}
		c, err := p.claimBatch(req.Queue, ttl, count)
		if err != nil {
			return nil, err
		}
		tasks, err := c.wait(ctx)
		if err != nil {
			return nil, err
		}
		resp.Tasks = append(resp.Tasks, tasks...)
		if len(resp.Tasks) == 0 {
			more, err := p.claimElsewhere(ctx, fwd, req, count, pass > 0)
			if err != nil && deadline == nil {
				return nil, err
			}
			resp.Tasks = append(resp.Tasks, more...)
		}
		if len(resp.Tasks) > 0 || deadline == nil {
			return resp, nil
		}
		var poll <-chan time.Time
		if !fwd && !p.leadsAll() {
			t := time.NewTimer(claimPollInterval)
			poll = t.C
			defer t.Stop()
		}
		began := time.Now()
		select {
		case <-wake:
		case <-poll:
		case <-deadline:
			resp.Waited += time.Since(began)
			return resp, nil
		case <-ctx.Done():
			resp.Waited += time.Since(began)
			return resp, nil
		case <-p.h.Stopped():
			return resp, nil // nothing claimed: the client tries again, elsewhere
		}
		resp.Waited += time.Since(began)
	}
}

// claimRouted forwards a claim to the node whose summary shows a better
// head than this node's own; handled is false when this node's head is
// the best known (or nothing better is known).
func (p *Plane) claimRouted(ctx context.Context, fwd bool, req *wire.ClaimRequest, count int) (tasks []wire.TaskView, handled bool) {
	if fwd {
		return nil, false
	}
	node, rh, ok := p.sums.Best(req.Queue, p.h.Alive)
	if !ok {
		return nil, false
	}
	if _, lh, lok := p.heads.Best(req.Queue); lok && heads.ClaimHere(lh, rh, p.cfg.ClaimOrderSlack) {
		return nil, false
	}
	addr := p.h.AddrOf(node)
	if addr == "" {
		return nil, false
	}
	sub := *req
	sub.WaitMs = 0
	sub.Count = count
	var r wire.ClaimResponse
	if err := p.forwardCall(ctx, addr, wire.OpClaim, &sub, &r); err != nil || len(r.Tasks) == 0 {
		return nil, false // stale: fall back
	}
	return r.Tasks, true
}

// claimElsewhere asks the other leaders, in turn, for up to count tasks of
// the queue; it returns what the first one with work granted. This is the
// bounded fallback of claim routing: one request per other leader at most.
// With trustIdle it skips the leaders whose fresh summary shows no ready
// task in the queue: a long poll asks everyone once, and after that
// relies on the summaries, which bring new work within heads.SummaryInterval,
// instead of asking every leader every claimPollInterval.
func (p *Plane) claimElsewhere(ctx context.Context, fwd bool, req *wire.ClaimRequest, count int, trustIdle bool) ([]wire.TaskView, error) {
	if fwd {
		return nil, nil
	}
	sub := *req
	sub.WaitMs = 0
	sub.Count = count
	var last error
	for _, id := range p.otherLeaderIDs() {
		if trustIdle && p.sums.Idle(id, req.Queue) {
			continue
		}
		addr := p.h.AddrOf(id)
		if addr == "" {
			continue
		}
		var r wire.ClaimResponse
		if err := p.forwardCall(ctx, addr, wire.OpClaim, &sub, &r); err != nil {
			last = err
			p.log.Debug("claim at another leader failed", "addr", addr, "err", err)
			continue
		}
		if len(r.Tasks) > 0 {
			return r.Tasks, nil
		}
	}
	return nil, last
}

// claimParams validates a claim request and returns its lease (ms) and
// count with the defaults applied.
func (p *Plane) claimParams(req *wire.ClaimRequest) (ttl int64, count int, err error) {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return 0, 0, err
	}
	ttl = req.TTLMs
	if ttl == 0 {
		ttl = p.defaultLease(req.Queue)
	}
	if ttl <= 0 || ttl > p.cfg.MaxTTL.Milliseconds() {
		return 0, 0, fmt.Errorf("%w: ttl %dms: want 1ms..%v", task.ErrInvalid, ttl, p.cfg.MaxTTL)
	}
	count = max(req.Count, 1)
	if req.Count < 0 || count > MaxClaimCount {
		return 0, 0, fmt.Errorf("%w: count %d: want 1..%d", task.ErrInvalid, req.Count, MaxClaimCount)
	}
	if err := task.ValidateMs("wait", req.WaitMs, p.cfg.MaxWait); err != nil {
		return 0, 0, err
	}
	return ttl, count, nil
}

// defaultLease is the lease in ms of a claim or renewal of queue's task
// that asks for none: the queue's default lease, else the node's.
func (p *Plane) defaultLease(queue string) int64 {
	if ttl := p.queues.Of(queue).DefaultTTLMs; ttl > 0 {
		return ttl
	}
	return p.cfg.DefaultTTL.Milliseconds()
}

// claimBatch claims up to count of queue's best ready tasks without
// waiting: the caller waits on the returned writes (waitAll) before
// answering, so the claims of one request share one fsync. An error after
// some claims were applied ends the batch early with what it has (those
// claims stand and must be answered); an error before any is returned.
func (p *Plane) claimBatch(queue string, ttl int64, count int) (*claimed, error) {
	c := &claimed{p: p}
	if drifting, _ := p.h.Drifting(); drifting {
		return c, nil // no lease by a clock that is ahead: the others grant
	}
	for len(c.views) < count {
		g, pending, err := p.claimOneApply(queue, ttl)
		err = leaderErr(err)
		if err != nil {
			if len(c.views) == 0 {
				return nil, err
			}
			p.log.Warn("claim stopped early", "queue", queue, "claimed", len(c.views), "err", err)
			break
		}
		if g == nil {
			break
		}
		c.views = append(c.views, p.grantedView(g))
		c.pending = append(c.pending, pending)
		part := p.partOf(g.Spec.ID)
		var s *replication.Shipment
		if to, ep := p.repl.Followers(part); len(to) > 0 || ep == 0 {
			s = p.repl.Ship(part, p.repl.NeedAcks(part, 0), []task.Record{g.Record()}, p.repl.WholeRecord(part, g.Spec.ID))
		}
		c.ships = append(c.ships, s)
	}
	return c, nil
}

// claimed is what claimBatch granted: applied locally, shipped to the
// followers, not yet acknowledged.
type claimed struct {
	p       *Plane
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
				g := grantOf(v)
				c.p.releaseUnanswered(v.ID, *v.Claim, g.Epoch, g.End)
				continue
			}
			// A lease that ran out while its replication was slow is
			// nobody's: the task may already be claimed again.
			if len(v.Claims) > 0 && v.Claims[len(v.Claims)-1].End <= c.p.now() {
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
// at epoch ep and will not answer (too few replicas held it), as a snooze
// that takes effect now: the task is ready again at once and the claim
// costs it no attempt, since nobody ever held it. In the background, and
// best effort within the claim's lease (it ends at leaseEnd, and then the
// lease ends the claim): a claim is often unanswered because this node's
// own handoff of the partition (a new epoch, a new cohort) refused its
// shipment, and then the node does not lead the partition for a moment;
// it waits until it leads again (its new epoch carries the claim), or
// until another node leads and the claim expires there. Without the wait
// such a claim held its task until the lease ran out and cost it an
// attempt: a task with one attempt went dead though no worker ever held
// it. One that stepped down and leads again at a later epoch may hold,
// under idx, another leader's acknowledged claim: the replica releases
// idx only if it was granted at ep (ReleaseUnansweredApply).
func (p *Plane) releaseUnanswered(id task.ID, idx uint32, ep uint64, leaseEnd int64) {
	p.h.Go(func() {
		part := p.partOf(id)
		for !p.leads(part) {
			if p.now() >= leaseEnd {
				return
			}
			t := time.NewTimer(releaseLeadPoll)
			select {
			case <-p.h.Stopped():
				t.Stop()
				return
			case <-t.C:
			}
		}
		wr, err := p.parts[part].ReleaseUnansweredApply(id, idx, ep, p.now())
		if err != nil {
			p.log.Debug("releasing a claim nobody was answered", "task", id, "claim", idx, "epoch", ep, "err", err)
			return
		}
		p.repl.ReplicateQuietly(part, wr)
	})
}

// releaseLeadPoll is how often a release of an unanswered claim looks
// whether this node leads the claim's partition again (releaseUnanswered):
// a handoff takes a few round trips, and the claim holds its task until
// then.
const releaseLeadPoll = 50 * time.Millisecond

// grantOf is v's claim (v.Claim) as its claims show it: the epoch it was
// granted at and its lease's end; the zero ClaimView if v does not show
// it (then no claim is released).
func grantOf(v wire.TaskView) wire.ClaimView {
	for _, c := range v.Claims {
		if v.Claim != nil && c.Claim == *v.Claim {
			return c
		}
	}
	return wire.ClaimView{}
}

// waitAll waits until every write in ps is durable, and returns the first
// error. It waits on all of them even after an error: each must be waited
// on once (store.Pending).
func waitAll(ps []*store.Pending) error {
	var first error
	for _, p := range ps {
		if err := p.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// claimOneApply claims the best ready task of queue across the partitions
// this node leads, without waiting for the fsync: the caller waits on the
// pending write before acknowledging the claim. Picks of one queue are
// serialised by the queue's pick lock, so concurrent claims take tasks in
// exact (priority, id) order; the pick only moves the task out of the
// ready index (Reserve), and the store work and the fsync happen after the
// lock is released, so claims overlap them.
func (p *Plane) claimOneApply(queue string, ttl int64) (*partition.Granted, *store.Pending, error) {
	p.h.CatchUp()
	pick := p.heads.PickLock(queue)
	for range maxClaimRaces {
		pick.Lock()
		part, _, ok := p.heads.Best(queue)
		if !ok {
			pick.Unlock()
			return nil, nil, nil
		}
		id, ok, err := p.parts[part].Reserve(queue)
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
		g, pending, err := p.parts[part].ClaimReserved(id, p.now(), ttl)
		if err != nil {
			return nil, nil, err
		}
		if g == nil {
			continue // no longer claimable; pick again
		}
		if !g.Retired.IsZero() {
			p.shipRetired(part, g, pending)
			continue // retired, not claimed: pick again
		}
		return g, pending, nil
	}
	return nil, nil, nil
}

// shipRetired replicates, in the background, the retirement a claim
// wrote instead of a claim (partition.Granted.Retired). Nothing waits
// for it: a lost one reaches the followers by anti-entropy, and every
// leader retires the same task (the keeper rule is the records').
func (p *Plane) shipRetired(part uint16, g *partition.Granted, pending *store.Pending) {
	wr := partition.Write{Rec: g.Record(), Durable: pending}
	if p.h.Stopping() {
		return
	}
	p.h.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
		defer cancel()
		if _, err := p.repl.Replicate(ctx, part, 0, wr); err != nil {
			p.log.Info("shipping a retirement of a task whose key another holds", "partition", part, "task", g.Spec.ID, "keeper", g.Retired, "err", err)
		}
	})
}

// grantedView is the view of a task just claimed, with its claim id.
func (p *Plane) grantedView(g *partition.Granted) wire.TaskView {
	v := p.view(g.Spec, g.Spec.Data, &g.State, nil, p.now())
	idx := g.Claim.Index
	v.Claim = &idx
	return v
}
