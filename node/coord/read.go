package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// get reads a task.
func (p *Plane) get(ctx context.Context, fwd bool, req *wire.GetRequest) (*wire.TaskView, error) {
	if err := p.h.Serving(); err != nil {
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
	local := req.R == 1 && slices.Contains(p.h.Cohort(int(p.partOf(req.ID))), p.cfg.Self)
	if !local {
		if resp, handled, err := forward[wire.GetRequest, wire.TaskView](ctx, p, fwd, p.partOf(req.ID), wire.OpGet, req); handled {
			return resp, err
		}
	}
	p.h.CatchUp()
	part := p.partOf(req.ID)
	var v wire.TaskView
	if to, _ := p.repl.Followers(part); len(to) > 0 && req.R != 1 {
		rec, err := p.repl.ReadReplicas(ctx, part, req.ID, to, req.R)
		if err != nil {
			return nil, err
		}
		v = p.view(rec.Spec, rec.Spec.Data, rec.State, rec.Updates, p.now())
	} else {
		sp, err := p.store.FullSpec(part, req.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", task.ErrNotFound, req.ID)
		}
		if err != nil {
			return nil, err
		}
		if v, err = p.readView(part, sp, true); err != nil {
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
func (p *Plane) readView(part uint16, sp *task.Spec, withUpdates bool) (wire.TaskView, error) {
	st, _, err := p.store.State(part, sp.ID)
	if err != nil {
		return wire.TaskView{}, err
	}
	var ups []task.Update
	if withUpdates {
		err = p.store.Updates(part, sp.ID, func(u task.Update) bool {
			ups = append(ups, u)
			return true
		})
		if err != nil {
			return wire.TaskView{}, err
		}
	}
	return p.view(sp, sp.Data, &st, ups, p.now()), nil
}

// view builds a task's client view (wire.ViewOf) by this node's skew
// bound.
func (p *Plane) view(sp *task.Spec, data []byte, st *task.State, ups []task.Update, now int64) wire.TaskView {
	return wire.ViewOf(sp, data, st, ups, now, p.cfg.SkewBound.Milliseconds())
}

// count counts tasks of a queue (or all queues) in every state; with a
// subtopic, only those of it.
func (p *Plane) count(ctx context.Context, fwd bool, req *wire.CountRequest) (*wire.CountResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	if req.Queue != "" {
		if err := task.ValidateQueue(req.Queue); err != nil {
			return nil, err
		}
	}
	if err := task.ValidateLabel("subtopic", req.Subtopic); err != nil {
		return nil, err
	}
	p.h.CatchUp()
	plan, err := p.fanPlanFor(ctx, fwd, req.Parts)
	if err != nil {
		return nil, err
	}
	var total int64
	if err := fanOut(ctx, p, plan, wire.OpCount, req, func(r *wire.CountResponse) { total += r.Count }); err != nil {
		return nil, err
	}
	add := func(q string, c [task.NumStatus]int64) {
		if req.Queue == "" || q == req.Queue {
			for _, v := range c {
				total += v
			}
		}
	}
	for _, r := range p.parts {
		if !plan.mine[r.Part()] {
			continue
		}
		if req.Subtopic == "" {
			r.Stats(add)
			continue
		}
		r.SubtopicStats(func(q, sub string, c [task.NumStatus]int64) {
			if sub == req.Subtopic {
				add(q, c)
			}
		})
	}
	return &wire.CountResponse{Count: total}, nil
}

// queueStats returns per-queue counts by state, and per subtopic when asked.
func (p *Plane) queueStats(ctx context.Context, fwd bool, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	if err := p.h.Serving(); err != nil {
		return nil, err
	}
	p.h.CatchUp()
	type key struct{ queue, sub string }
	queues, subs := map[key]*[task.NumStatus]int64{}, map[key]*[task.NumStatus]int64{}
	add := func(m map[key]*[task.NumStatus]int64, k key, c [task.NumStatus]int64) {
		s := m[k]
		if s == nil {
			s = new([task.NumStatus]int64)
			m[k] = s
		}
		for i, v := range c {
			s[i] += v
		}
	}
	plan, err := p.fanPlanFor(ctx, fwd, req.Parts)
	if err != nil {
		return nil, err
	}
	oldest := map[string]int64{}
	older := func(q string, at int64) {
		if o, ok := oldest[q]; at > 0 && (!ok || at < o) {
			oldest[q] = at
		}
	}
	err = fanOut(ctx, p, plan, wire.OpQueues, req, func(r *wire.QueuesResponse) {
		for _, q := range r.Queues {
			add(queues, key{q.Queue, ""}, statsCounts(q))
			older(q.Queue, q.OldestReadyAt)
		}
		for _, q := range r.Subtopics {
			add(subs, key{q.Queue, q.Subtopic}, statsCounts(q))
		}
	})
	if err != nil {
		return nil, err
	}
	for _, r := range p.parts {
		if !plan.mine[r.Part()] {
			continue
		}
		r.Stats(func(q string, c [task.NumStatus]int64) { add(queues, key{q, ""}, c) })
		r.OldestReady(older)
		if req.Subtopics {
			r.SubtopicStats(func(q, sub string, c [task.NumStatus]int64) { add(subs, key{q, sub}, c) })
		}
	}
	rows := func(m map[key]*[task.NumStatus]int64) []wire.QueueStats {
		out := make([]wire.QueueStats, 0, len(m))
		for k, c := range m {
			out = append(out, wire.QueueStats{
				Queue: k.queue, Subtopic: k.sub, Ready: c[task.Ready], Claimed: c[task.Claimed], Delayed: c[task.Delayed],
				Blocked: c[task.Blocked], Completed: c[task.Completed], Dead: c[task.Dead], Cancelled: c[task.Cancelled],
			})
			if k.sub == "" {
				out[len(out)-1].OldestReadyAt = oldest[k.queue]
			}
		}
		slices.SortFunc(out, func(a, b wire.QueueStats) int {
			return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Subtopic, b.Subtopic))
		})
		return out
	}
	resp := &wire.QueuesResponse{Queues: rows(queues)}
	if req.Subtopics {
		resp.Subtopics = rows(subs)
	}
	return resp, nil
}

// statsCounts returns a queue row's counts by state.
func statsCounts(q wire.QueueStats) [task.NumStatus]int64 {
	var c [task.NumStatus]int64
	c[task.Ready], c[task.Claimed], c[task.Delayed] = q.Ready, q.Claimed, q.Delayed
	c[task.Blocked], c[task.Completed], c[task.Dead], c[task.Cancelled] = q.Blocked, q.Completed, q.Dead, q.Cancelled
	return c
}
