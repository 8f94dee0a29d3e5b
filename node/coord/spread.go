package coord

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Spread hints (node/DESIGN.md, Spread hints). An enqueue
// without an id of the client's is placed in a partition whose cohort
// seems able to take it, and written there directly (writeNew). When the
// cohort fails it in flight (a cohort killed or cut off after the
// placement, before gossip noticed), the write is in doubt: some replicas
// may hold the task. Placing it again under a new id could then make two
// tasks of one enqueue; answering the failure fails an enqueue that other
// nodes could keep. So the coordinator keeps the task, under its id, as a
// hint on as many nodes as the write needed replicas: itself and others
// it reaches (OpHintPut), each synced before it answers; with too few
// nodes within reach it asks none, and the enqueue fails in doubt (as
// it does when too few of those asked answer: those that did hand the
// task over later). The enqueue is
// answered "hinted" once that many hold it: as durable as the write it
// asked for, claimable once a holder hands it to its cohort. Every holder
// hands it over; the cohort takes the repeats as repeats (one id). A
// holder is a copy of the task, as a replica is, under the same bound:
// none stays apart from its cohort longer than the tombstone horizon.

// spreadFanOut bounds how many nodes beyond those it needs a spread asks
// at once: one that seems alive may be dead, and asking one more at once
// costs a hint where waiting for a dead one costs the enqueue.
const spreadFanOut = 2

// spreadHedge is how often a spread whose puts have not all answered
// asks one more node: a put to a live node answers in milliseconds.
const spreadHedge = 50 * time.Millisecond

// SpreadOrder returns the nodes a spread of a write to part asks, in
// order: the members gossip holds alive (alive) other than self; first
// those outside part's cohort (the cohort is the one that failed the
// write), then its members, and last in each the suspects (a request to
// them went unanswered lately: suspect); each group rotated by part so
// that spreads of many partitions do not all land on the same nodes.
func SpreadOrder(self uint64, part uint16, cohort, members []uint64, alive, suspect func(uint64) bool) []uint64 {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	var groups [4][]uint64 // outside, cohort; then their suspects
	for _, id := range ms {
		if id == self || !alive(id) {
			continue
		}
		g := 0
		if slices.Contains(cohort, id) {
			g = 1
		}
		if suspect(id) {
			g += 2
		}
		groups[g] = append(groups[g], id)
	}
	var out []uint64
	for _, g := range []int{0, 1, 2, 3} {
		if s := groups[g]; len(s) > 0 {
			k := int(part) % len(s)
			out = append(append(out, s[k:]...), s[:k]...)
		}
	}
	return out
}

// members returns every node in some partition's cohort.
func (p *Plane) members() []uint64 {
	var out []uint64
	for part := range p.cfg.Partitions {
		for _, id := range p.h.Cohort(part) {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// spread keeps ts, tasks of part without key or deps under ids this node
// drew, whose direct write with w (need acks) ended in doubt (cause), as
// hints on need nodes: need-1 others first, then this one. It returns
// errHinted once need nodes hold them, else cause: the outcome stays in
// doubt (what some nodes keep is handed over later). With too few nodes
// within reach it asks none.
func (p *Plane) spread(ctx context.Context, part uint16, ts []partition.NewTask, w, need int, cause error) error {
	specs := make([]*task.Spec, len(ts))
	for i := range ts {
		specs[i] = ts[i].Spec
	}
	order := SpreadOrder(p.cfg.Self, part, p.h.Cohort(int(part)), p.members(), p.h.Alive, func(id uint64) bool {
		return !p.repl.Reachable(id)
	})
	if len(order) < need-1 {
		return fmt.Errorf("%w; too few nodes within reach to keep it as hints (%d of %d)", cause, len(order)+1, need)
	}
	if got := p.putHints(ctx, order, need-1, &wire.HintPutRequest{W: w, Specs: specs}); got < need-1 {
		return fmt.Errorf("%w; kept as a hint on %d of the %d other nodes it needs", cause, got, need-1)
	}
	if err := p.hints.Add(specs, w); err != nil {
		return fmt.Errorf("%w; kept as a hint on %d other nodes, and here failed: %v", cause, need-1, err)
	}
	if need > 1 {
		p.log.Info("enqueue kept as hints here and on other nodes: its cohort failed the write", "partition", part, "tasks", len(ts), "holders", need, "first", specs[0].ID)
	}
	return errHinted
}

// putHints asks the nodes of order, up to want of them holding req,
// want+spreadFanOut at a time and one more every spreadHedge, and returns
// how many hold it. It returns once want do, or when none is left to
// ask, or ctx ends.
func (p *Plane) putHints(ctx context.Context, order []uint64, want int, req *wire.HintPutRequest) int {
	ctx, cancel := context.WithCancel(ctx)
	type answer struct{ ok bool }
	answers := make(chan answer, len(order))
	var wg sync.WaitGroup
	// The puts still out end with ctx, at once: a put to a node that
	// hangs must not hold the answer once want nodes hold the tasks.
	defer func() {
		cancel()
		wg.Wait()
	}()
	ask := func(id uint64) {
		wg.Go(func() {
			addr := p.h.AddrOf(id)
			err := fmt.Errorf("no address")
			if addr != "" {
				err = p.peers.Call(ctx, addr, wire.OpHintPut, req, nil)
			}
			if err != nil && ctx.Err() == nil {
				p.log.Debug("keeping an enqueue as a hint on another node", "peer", id, "err", err)
			}
			answers <- answer{err == nil}
		})
	}
	hedge := time.NewTicker(spreadHedge)
	defer hedge.Stop()
	next, inFlight, held := 0, 0, 0
	for held < want {
		for inFlight < want-held+spreadFanOut && next < len(order) {
			ask(order[next])
			next++
			inFlight++
		}
		if inFlight == 0 {
			break
		}
		select {
		case a := <-answers:
			inFlight--
			if a.ok {
				held++
			}
		case <-hedge.C:
			// The nodes asked hang (cut off, or dead before gossip
			// noticed): one more is asked, while any is left.
			if next < len(order) {
				ask(order[next])
				next++
				inFlight++
			}
		case <-ctx.Done():
			return held
		}
	}
	return held
}

// spreadBy is when a direct write of tasks whose ids this node drew
// stops waiting for its cohort and is spread instead: the enqueue's hint
// wait, from when this node took it.
func (p *Plane) spreadBy(start time.Time) time.Time { return start.Add(p.cfg.HintWait) }
