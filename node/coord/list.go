package coord

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// A listing is in id order across the cluster (ids begin with their
// enqueue's millisecond, so this is enqueue order; descending with
// ListRequest.Desc), from after its cursor (ListRequest.After) on: every partition's tasks are stored in id order,
// so the coordinator merges sorted streams, one per partition it leads and
// one per other leader (which merges its own partitions the same way). Each
// stream is read a chunk at a time, when the merge has used up what it
// read: nothing is held beyond a chunk per stream and one page, and a
// listing that stops early (a limit, a client gone) reads little past
// what it sent.

// listChunk is how many tasks a stream reads at a time.
const listChunk = listPageSize

// listSource is one sorted stream of a listing: its buffer of tasks read
// and not yet merged, and how to read the next chunk after an id.
type listSource struct {
	buf  []wire.TaskView
	next int
	// last is the last id read; the next chunk starts after it.
	last task.ID
	// done: the stream has nothing after last.
	done bool
	fill func(ctx context.Context, after task.ID, n int) (tasks []wire.TaskView, more bool, err error)
}

// head returns the stream's next task, reading a chunk when its buffer
// is used up; nil when the stream is over.
func (s *listSource) head(ctx context.Context) (*wire.TaskView, error) {
	for s.next >= len(s.buf) {
		if s.done {
			return nil, nil
		}
		tasks, more, err := s.fill(ctx, s.last, listChunk)
		if err != nil {
			return nil, err
		}
		s.buf, s.next, s.done = tasks, 0, !more
		if len(tasks) > 0 {
			s.last = tasks[len(tasks)-1].ID
		}
		// An empty chunk with more to come (an index's ids whose tasks
		// all moved on) reads the next.
	}
	return &s.buf[s.next], nil
}

// sourceHeap orders the streams by their next task's id (descending
// when desc).
type sourceHeap struct {
	s    []*listSource
	desc bool
}

func (h *sourceHeap) Len() int { return len(h.s) }
func (h *sourceHeap) Less(i, j int) bool {
	c := h.s[i].buf[h.s[i].next].ID.Compare(h.s[j].buf[h.s[j].next].ID)
	if h.desc {
		return c > 0
	}
	return c < 0
}
func (h *sourceHeap) Swap(i, j int) { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *sourceHeap) Push(x any)    { h.s = append(h.s, x.(*listSource)) }
func (h *sourceHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}

// list streams the tasks matching the filters in id order, after the
// cursor, a page at a time, up to the limit.
func (p *Plane) list(ctx context.Context, fwd bool, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	if err := p.h.Serving(); err != nil {
		return err
	}
	want, err := req.Check()
	if err != nil {
		return err
	}
	plan, err := p.fanPlanFor(ctx, fwd, req.Parts)
	if err != nil {
		return err
	}
	var after task.ID
	if req.After != nil {
		after = *req.After
	}
	var sources []*listSource
	for i := range p.parts {
		part := uint16(i)
		if plan.mine[part] {
			fill := p.localFill(part, req, want)
			if want != nil && !want.Ended() {
				fill = p.indexFill(part, req, *want, after)
			}
			sources = append(sources, &listSource{last: after, fill: fill})
		}
	}
	for _, fp := range plan.others {
		sources = append(sources, &listSource{last: after, fill: p.remoteFill(fp, req)})
	}
	h := &sourceHeap{s: make([]*listSource, 0, len(sources)), desc: req.Desc}
	for _, s := range sources {
		t, err := s.head(ctx)
		if err != nil {
			return err
		}
		if t != nil {
			h.s = append(h.s, s)
		}
	}
	heap.Init(h)
	page := &wire.ListPage{Tasks: make([]wire.TaskView, 0, listPageSize)}
	sent := 0
	for h.Len() > 0 && (req.Limit == 0 || sent < req.Limit) {
		s := h.s[0]
		page.Tasks = append(page.Tasks, s.buf[s.next])
		s.buf[s.next] = wire.TaskView{} // the merge holds no task past its page
		s.next++
		sent++
		if len(page.Tasks) == listPageSize {
			if err := emit(page); err != nil {
				return err
			}
			page.Tasks = page.Tasks[:0]
		}
		t, err := s.head(ctx)
		switch {
		case err != nil:
			return err
		case t == nil:
			heap.Pop(h)
		default:
			heap.Fix(h, 0)
		}
	}
	if len(page.Tasks) > 0 {
		return emit(page)
	}
	return nil
}

// localFill reads the next chunk of one of this node's partitions: up to
// n matching tasks with ids after the given one.
func (p *Plane) localFill(part uint16, req *wire.ListRequest, want *task.Status) func(context.Context, task.ID, int) ([]wire.TaskView, bool, error) {
	return func(ctx context.Context, after task.ID, n int) ([]wire.TaskView, bool, error) {
		var out []wire.TaskView
		more := false
		now := p.now()
		scan := p.store.ScanPartition
		if req.Desc {
			scan = p.store.ScanPartitionDesc // ids below after, exclusive
		}
		if req.Queue != "" {
			// The queue index: only the queue's tasks are read.
			scan = func(part uint16, after task.ID, fn func(store.TaskRecord) (bool, error)) error {
				return p.store.ScanQueue(part, req.Queue, after, req.Desc, fn)
			}
		}
		err := scan(part, after, func(rec store.TaskRecord) (bool, error) {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			sp := rec.Spec
			if sp.ID == after {
				return true, nil // the cursor itself: an ascending scan starts at it
			}
			if len(out) == n {
				more = true
				return false, nil
			}
			v, err := p.listView(part, req, want, sp, &rec.State, rec.PayloadApart, now)
			if v != nil {
				out = append(out, *v)
			}
			return err == nil, err
		})
		return out, more, err
	}
}

// indexFill reads the next chunk of a listing by a state that memory
// holds (ready, claimed, delayed, blocked, dead) from one of this node's
// partitions: the ids in that state, from the replica's entries
// (partition.Replica.InStatus, taken once), then each task's records by
// id. It reads only the tasks in that state, not the partition. The
// records decide, as a scan's would: a task whose state moved since the
// ids were taken is left out.
func (p *Plane) indexFill(part uint16, req *wire.ListRequest, want task.Status, cursor task.ID) func(context.Context, task.ID, int) ([]wire.TaskView, bool, error) {
	var ids []task.ID
	taken := false
	return func(ctx context.Context, after task.ID, n int) ([]wire.TaskView, bool, error) {
		if !taken {
			taken = true
			ids = p.parts[part].InStatus(want, req.Queue)
			if req.Desc {
				slices.Reverse(ids)
			}
			// Start after the cursor.
			if !cursor.IsZero() {
				i := 0
				for i < len(ids) && (!req.Desc && ids[i].Compare(cursor) <= 0 || req.Desc && ids[i].Compare(cursor) >= 0) {
					i++
				}
				ids = ids[i:]
			}
		}
		var out []wire.TaskView
		now := p.now()
		for len(ids) > 0 && len(out) < n {
			if err := ctx.Err(); err != nil {
				return nil, false, err
			}
			id := ids[0]
			ids = ids[1:]
			sp, err := p.store.FullSpec(part, id)
			if errors.Is(err, store.ErrNotFound) {
				continue // collected or deleted since
			}
			if err != nil {
				return nil, false, err
			}
			st, _, err := p.store.State(part, id)
			if err != nil {
				return nil, false, err
			}
			v, err := p.listView(part, req, &want, sp, &st, false, now)
			if err != nil {
				return nil, false, err
			}
			if v != nil {
				out = append(out, *v)
			}
		}
		return out, len(ids) > 0, nil
	}
}

// listView is a listing's view of task sp of part under state st, or nil
// when the request's filters leave it out: its labels, then its state's
// name at now (not only its status: "snoozed" and "retrying" are kinds of
// Delayed). The payload is read when the spec came without it (apart), and
// the updates, which live apart from spec and state, as get reads them,
// so the listing shows the same history (none for a task never claimed).
func (p *Plane) listView(part uint16, req *wire.ListRequest, want *task.Status, sp *task.Spec, st *task.State, apart bool, now int64) (*wire.TaskView, error) {
	if req.Queue != "" && sp.Queue != req.Queue || req.Group != "" && sp.Group != req.Group ||
		req.Kind != "" && sp.Kind != req.Kind || req.Subtopic != "" && sp.Subtopic != req.Subtopic {
		return nil, nil
	}
	if want != nil {
		if s, _ := task.Derive(sp, st, now, p.cfg.SkewBound.Milliseconds()); s != *want || task.StateName(sp, st, s) != req.State {
			return nil, nil
		}
	}
	data := sp.Data
	if apart {
		var err error
		if data, err = p.store.Data(part, sp.ID); err != nil {
			return nil, err
		}
	}
	var ups []task.Update
	if len(st.Claims) > 0 {
		err := p.store.Updates(part, sp.ID, func(u task.Update) bool {
			ups = append(ups, u)
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	v := p.view(sp, data, st, ups, now)
	return &v, nil
}

// remoteFill reads the next chunk of another leader's partitions: it asks
// that leader for up to n tasks after the given id, which it merges from
// its partitions as this node does.
func (p *Plane) remoteFill(fp fanPeer, req *wire.ListRequest) func(context.Context, task.ID, int) ([]wire.TaskView, bool, error) {
	return func(ctx context.Context, after task.ID, n int) ([]wire.TaskView, bool, error) {
		sub := *req
		sub.Parts = fp.parts
		sub.Limit = n
		sub.After = nil
		if !after.IsZero() {
			sub.After = &after
		}
		c, err := p.peers.Get(ctx, fp.addr)
		if err != nil {
			return nil, false, fmt.Errorf("%w: list at %s: %v", wire.ErrUnavailable, fp.addr, err)
		}
		var out []wire.TaskView
		err = wire.NewClient(c).List(ctx, &sub, func(pg *wire.ListPage) error {
			out = append(out, pg.Tasks...)
			return nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("list at %s: %w", fp.addr, err)
		}
		if len(out) > n {
			return nil, false, fmt.Errorf("%w: list at %s: %d tasks for a chunk of %d", wire.ErrUnavailable, fp.addr, len(out), n)
		}
		return out, len(out) == n, nil
	}
}
