package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// queue is the one queue of the workload.
const queue = "sim"

// maxUpdates: a worked task gets 0..maxUpdates-1 updates.
const maxUpdates = 3

// client is one simulated client: a sequential loop of requests, each to
// a node drawn at random, recorded as invoke and outcome. It draws every
// choice from its own rng, so its choices depend on the seed and on the
// answers it got, never on another client's pace.
type client struct {
	cfg  *Config
	c    *cluster
	rec  *recorder
	sink *faults.Sink
	rng  *rand.Rand
	// proc is the history's process; after an outcome in doubt the client
	// takes proc+stride, a process of its own no other client uses.
	proc, stride int
	enqueued     int
	// acked are the tasks this client saw acknowledged, in order: what
	// its later enqueues may depend on (at most MaxTasksPerClient), the
	// last of them what a cancel cancels; cancels numbers the cancels.
	acked   []task.ID
	cancels int
	// tag makes the client's payloads unique across the run.
	tag string
}

// outcome classifies an answer as the history needs it (faults history.go,
// "Outcomes"), as the fault suite's HTTP client does: a refusal the API
// answers with a 4xx status took effect nowhere (fail); every other error,
// a lost connection included, is in doubt (info).
func outcome(err error) (typ, code, msg string) {
	switch {
	case err == nil:
		return faults.OK, "", ""
	case errors.Is(err, errDown):
		return faults.Info, "conn_error", err.Error()
	}
	c := wire.CodeOf(err)
	if s := c.HTTPStatus(); s >= http.StatusBadRequest && s < http.StatusInternalServerError {
		return faults.Fail, c.Name(), err.Error()
	}
	return faults.Info, c.Name(), err.Error()
}

// do records inv, runs f against a node drawn at random within the
// request timeout, records the outcome (fill adds what an ok answer
// says) and returns the outcome's type.
func (cl *client) do(ctx context.Context, inv faults.Event, f func(context.Context, wire.Service) error, fill func(*faults.Event)) string {
	i := cl.rng.IntN(cl.cfg.Nodes)
	inv.Proc, inv.Type, inv.Node = cl.proc, faults.Invoke, i+1
	cl.rec.record(inv)
	rctx, cancel := context.WithTimeout(ctx, cl.cfg.RequestTimeout)
	err := cl.c.call(rctx, i, func(s wire.Service) error { return f(rctx, s) })
	cancel()
	out := faults.Event{Proc: cl.proc, F: inv.F, Node: inv.Node, Task: inv.Task, Claim: inv.Claim}
	out.Type, out.Code, out.Err = outcome(err)
	if out.Type == faults.OK && fill != nil {
		fill(&out)
	}
	cl.rec.record(out)
	if out.Type == faults.Info {
		cl.proc += cl.stride
	}
	return out.Type
}

// run loops until the virtual deadline: enqueue or claim and work.
func (cl *client) run(ctx context.Context, until time.Time) {
	for time.Now().Before(until) && ctx.Err() == nil {
		if cl.enqueued < cl.cfg.MaxTasksPerClient && cl.rng.Float64() < cl.cfg.EnqueueProb {
			cl.enqueue(ctx)
			continue
		}
		if !cl.claimAndWork(ctx, true) {
			sleep(ctx, cl.cfg.IdlePause)
		}
	}
}

// enqueue enqueues one task, asking w=1 or a majority, sometimes
// depending on tasks the client saw acknowledged. The invoke records the
// deps; the ok records the answer's acks (how many replicas held the
// task), which is how the history tells a w=1 acknowledgement: the
// history has no field for the w asked, and needs none, since a task
// acknowledged must survive whatever w acknowledged it here.
func (cl *client) enqueue(ctx context.Context) {
	id := faults.NewTaskID(cl.rng, time.Now())
	cl.enqueued++
	payload := fmt.Sprintf("%s-%d", cl.tag, cl.enqueued)
	deps := cl.drawDeps()
	var key string
	if cl.rng.Float64() < cl.cfg.KeyedProb {
		key = fmt.Sprintf("%s-k%d", cl.tag, cl.rng.IntN(cl.cfg.KeyPool))
		id = faults.KeyedTaskID(cl.rng, time.Now(), queue, key, cl.cfg.Partitions)
		deps = nil // a keyed task has none
	}
	w := 0 // a majority
	if cl.rng.Float64() < cl.cfg.W1Prob {
		w = 1
	}
	et := wire.EnqueueTask{ID: &id, Queue: queue, Data: []byte(payload), Deps: deps, MaxAttempts: cl.cfg.MaxAttempts, Group: cl.group(), Key: key}
	req := &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{et}, W: w}
	inv := faults.Event{F: faults.FEnqueue, Task: id.String(), Value: payload, Queue: queue, MaxAttempts: cl.cfg.MaxAttempts, Group: et.Group, Key: key}
	for _, d := range deps {
		inv.Deps = append(inv.Deps, d.String())
	}
	// Drawn whatever the mix, so the other draws do not depend on it.
	if cl.rng.Float64() < cl.cfg.PlacedProb && key == "" && len(deps) == 0 {
		req.Tasks[0].ID, inv.Task, inv.Placed = nil, "", true
	}
	// Drawn whatever the mix, so the other draws do not depend on it.
	req.Hint = cl.rng.Float64() < cl.cfg.HintProb
	var resp *wire.EnqueueResponse
	typ := cl.do(ctx, inv,
		func(ctx context.Context, s wire.Service) (err error) { resp, err = s.Enqueue(ctx, req); return err },
		func(e *faults.Event) {
			if len(resp.Results) == 1 {
				e.Acks, e.Hinted = resp.Results[0].Acks, resp.Results[0].Hinted
				if resp.Results[0].Duplicate {
					e.Holder = resp.Results[0].ID.String()
				}
				if inv.Placed {
					e.Task = resp.Results[0].ID.String()
				}
			}
		})
	if typ == faults.OK && len(resp.Results) == 1 {
		cl.acked = append(cl.acked, resp.Results[0].ID) // the holder, for a duplicate
	}
	// Drawn whatever the outcome, so the draws do not depend on outcomes.
	if cl.rng.Float64() < cl.cfg.CancelProb && len(cl.acked) > 0 {
		cl.cancel(ctx, cl.acked[len(cl.acked)-1])
	}
	if cl.rng.Float64() < cl.cfg.GroupCancelProb {
		cl.cancelGroup(ctx, et.Group)
	}
}

// group is the group label of the client's current enqueue: every
// GroupSize consecutive enqueues share one.
func (cl *client) group() string {
	return fmt.Sprintf("%s-g%d", cl.tag, (cl.enqueued-1)/cl.cfg.GroupSize)
}

// cancelGroup cancels group g with a reason no other cancel of the run
// gives.
func (cl *client) cancelGroup(ctx context.Context, g string) {
	cl.cancels++
	reason := fmt.Sprintf("%s-x%d", cl.tag, cl.cancels)
	var resp *wire.BulkResponse
	cl.do(ctx, faults.Event{F: faults.FGroupCancel, Group: g, Value: reason},
		func(ctx context.Context, s wire.Service) (err error) {
			resp, err = s.GroupCancel(ctx, &wire.GroupCancelRequest{Group: g, Reason: reason})
			return err
		}, func(e *faults.Event) { e.Tasks = resp.Done })
}

// cancel cancels task id with a reason no other cancel of the run gives:
// the checkers tell by it which cancel a final view shows.
func (cl *client) cancel(ctx context.Context, id task.ID) {
	cl.cancels++
	reason := fmt.Sprintf("%s-x%d", cl.tag, cl.cancels)
	cl.do(ctx, faults.Event{F: faults.FCancel, Task: id.String(), Value: reason},
		func(ctx context.Context, s wire.Service) error {
			_, err := s.Cancel(ctx, &wire.CancelRequest{ID: id, Reason: reason})
			return err
		}, nil)
}

// drawDeps draws, with DepProb, 1..MaxDeps distinct tasks the client saw
// acknowledged, as the fault suite's workload does (faults.Loop.enqueue);
// none before the first acknowledgement.
func (cl *client) drawDeps() []task.ID {
	if len(cl.acked) == 0 || cl.rng.Float64() >= cl.cfg.DepProb {
		return nil
	}
	var deps []task.ID
	for range 1 + cl.rng.IntN(cl.cfg.MaxDeps) {
		if d := cl.acked[cl.rng.IntN(len(cl.acked))]; !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	return deps
}

// claimAndWork claims one task and works it (work: the client's fates;
// else complete it at once, as the drain does). It reports whether it got
// a task.
func (cl *client) claimAndWork(ctx context.Context, work bool) bool {
	ttl := cl.cfg.TTL.Milliseconds()
	var resp *wire.ClaimResponse
	var v *wire.TaskView
	const count = 1
	typ := cl.do(ctx, faults.Event{F: faults.FClaim, Queue: queue, TTLMs: ttl, Tasks: count},
		func(ctx context.Context, s wire.Service) (err error) {
			resp, err = s.Claim(ctx, &wire.ClaimRequest{Queue: queue, TTLMs: ttl, Count: count})
			return err
		},
		func(e *faults.Event) {
			e.Tasks = len(resp.Tasks) // more than asked: the checkers flag it
			if len(resp.Tasks) == 0 {
				return
			}
			v = &resp.Tasks[0]
			if v.Claim == nil {
				e.Task, e.Attempts = v.ID.String(), v.Attempts // the checkers flag it
				return
			}
			faults.FillClaim(e, v)
		})
	if typ != faults.OK || v == nil || v.Claim == nil {
		return false
	}
	id, claim := v.ID, *v.Claim
	if !work {
		cl.complete(ctx, id, claim)
		return true
	}
	for seq := range uint64(cl.rng.IntN(maxUpdates)) {
		if !cl.update(ctx, id, claim, seq) {
			return true
		}
	}
	if cl.rng.Float64() < cl.cfg.SlowProb {
		if !cl.slowWork(ctx, id, claim) {
			return true
		}
	} else {
		sleep(ctx, between(cl.rng, 0, cl.cfg.Work))
	}
	switch r := cl.rng.Float64(); {
	case r < cl.cfg.FailProb:
		cl.fail(ctx, id, claim)
	case r < cl.cfg.FailProb+cl.cfg.SnoozeProb:
		cl.snooze(ctx, id, claim)
	case r < cl.cfg.FailProb+cl.cfg.SnoozeProb+cl.cfg.AbandonProb:
		// Abandoned: the lease expires and the task is claimed again.
	default:
		cl.complete(ctx, id, claim)
	}
	return true
}

// slowWork works about SlowWork, renewing the lease meanwhile; false
// when a renew did not come back ok (the client gives the task up).
func (cl *client) slowWork(ctx context.Context, id task.ID, claim uint32) bool {
	until := time.Now().Add(between(cl.rng, cl.cfg.SlowWork/2, cl.cfg.SlowWork))
	every := cl.cfg.TTL / renewsPerTTL
	for time.Now().Before(until) {
		sleep(ctx, every)
		ttl := cl.cfg.TTL.Milliseconds()
		var resp *wire.RenewResponse
		typ := cl.do(ctx, faults.Event{F: faults.FRenew, Task: id.String(), Claim: &claim, TTLMs: ttl},
			func(ctx context.Context, s wire.Service) (err error) {
				resp, err = s.Renew(ctx, &wire.RenewRequest{ID: id, Claim: claim, TTLMs: ttl})
				return err
			},
			func(e *faults.Event) { e.End = resp.End })
		if typ != faults.OK {
			return false
		}
	}
	return true
}

func (cl *client) update(ctx context.Context, id task.ID, claim uint32, seq uint64) bool {
	data := fmt.Sprintf("%s-u%d-%d", cl.tag, claim, seq)
	return cl.do(ctx, faults.Event{F: faults.FUpdate, Task: id.String(), Claim: &claim, Seq: &seq, Value: data},
		func(ctx context.Context, s wire.Service) error {
			_, err := s.Update(ctx, &wire.UpdateRequest{ID: id, Claim: claim, Seq: seq, Data: []byte(data)})
			return err
		}, nil) == faults.OK
}

// complete offers the task's side effect to the fenced sink, then sends
// the complete whatever the sink said, as the fault suite's workers do
// (faults.Loop.completeWithEffect): the history then shows how skuldd
// answers a complete whose effect the sink fenced off, which must not be
// ok. The Effect event is the client's own proc's, recorded at the sink's
// answer, between the claim's outcome and the complete's invoke.
func (cl *client) complete(ctx context.Context, id task.ID, claim uint32) {
	accepted := cl.sink.Offer(id.String(), claim)
	cl.rec.record(faults.Event{Proc: cl.proc, Type: faults.Effect, F: faults.Effect, Task: id.String(), Claim: &claim, Accepted: &accepted})
	cl.do(ctx, faults.Event{F: faults.FComplete, Task: id.String(), Claim: &claim},
		func(ctx context.Context, s wire.Service) error {
			_, err := s.Complete(ctx, &wire.CompleteRequest{ID: id, Claim: claim})
			return err
		}, nil)
}

func (cl *client) fail(ctx context.Context, id task.ID, claim uint32) {
	after := cl.cfg.RetryAfter.Milliseconds()
	cl.do(ctx, faults.Event{F: faults.FFail, Task: id.String(), Claim: &claim, DelayMs: after},
		func(ctx context.Context, s wire.Service) error {
			_, err := s.Fail(ctx, &wire.FailRequest{ID: id, Claim: claim, Reason: "sim", RetryAfterMs: &after})
			return err
		}, nil)
}

func (cl *client) snooze(ctx context.Context, id task.ID, claim uint32) {
	delay := cl.cfg.SnoozeDelay.Milliseconds()
	cl.do(ctx, faults.Event{F: faults.FSnooze, Task: id.String(), Claim: &claim, DelayMs: delay},
		func(ctx context.Context, s wire.Service) error {
			_, err := s.Snooze(ctx, &wire.SnoozeRequest{ID: id, Claim: claim, DelayMs: delay})
			return err
		}, nil)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
