package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

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
		if n.queues.Paused(req.Queue) && (deadline == nil || !n.queues.WaitResumed(ctx, req.Queue, deadline, n.stopc)) {
			return resp, nil // a paused queue grants nothing
		}
		wake := n.heads.ReadyChan(req.Queue)
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
		ttl = n.defaultLease(req.Queue)
	}
	if ttl <= 0 || ttl > n.cfg.MaxTTL.Milliseconds() {
		return 0, 0, fmt.Errorf("%w: ttl %dms: want 1ms..%v", task.ErrInvalid, ttl, n.cfg.MaxTTL)
	}
	count = max(req.Count, 1)
	if req.Count < 0 || count > maxClaimCount {
		return 0, 0, fmt.Errorf("%w: count %d: want 1..%d", task.ErrInvalid, req.Count, maxClaimCount)
	}
	if err := task.ValidateMs("wait", req.WaitMs, n.cfg.MaxWait); err != nil {
		return 0, 0, err
	}
	return ttl, count, nil
}

// defaultLease is the lease in ms of a claim or renewal of queue's task
// that asks for none: the queue's default lease, else the node's.
func (n *Node) defaultLease(queue string) int64 {
	if ttl := n.queues.Of(queue).DefaultTTLMs; ttl > 0 {
		return ttl
	}
	return n.cfg.DefaultTTL.Milliseconds()
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
			s = n.repl.Ship(part, n.repl.NeedAcks(part, 0), []task.Record{g.Record()}, n.repl.WholeRecord(part, g.Spec.ID))
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
func (n *Node) claimOneApply(queue string, ttl int64) (*partition.Granted, *store.Pending, error) {
	n.catchUp()
	pick := n.heads.PickLock(queue)
	for range maxClaimRaces {
		pick.Lock()
		part, _, ok := n.heads.Best(queue)
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
		if !g.Retired.IsZero() {
			n.shipRetired(part, g, pending)
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
func (n *Node) shipRetired(part uint16, g *partition.Granted, pending *store.Pending) {
	wr := partition.Write{Rec: g.Record(), Durable: pending}
	if n.stopping.Load() {
		return
	}
	n.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
		defer cancel()
		if _, err := n.repl.Replicate(ctx, part, 0, wr); err != nil {
			n.log.Info("shipping a retirement of a task whose key another holds", "partition", part, "task", g.Spec.ID, "keeper", g.Retired, "err", err)
		}
	})
}

// grantedView is the view of a task just claimed, with its claim id.
func (n *Node) grantedView(g *partition.Granted) wire.TaskView {
	v := n.view(g.Spec, g.Spec.Data, &g.State, nil, n.now())
	idx := g.Claim.Index
	v.Claim = &idx
	return v
}
