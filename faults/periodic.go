package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Periodic tasks in a run (check_periodic.go judges them). Once the
// cluster is up, before the faults, the harness sets periodicSchedules
// through the HTTP API: they enqueue into PeriodicQueue, which no worker
// and not the drain claims (the loops claim Config.Queue only), so every
// task an occurrence got is still there, ready, at the end. At the final
// reads it reads the schedules back (GET /v1/schedules), then lists the
// queue's tasks (GET /v1/tasks?queue=...), in that order: every
// occurrence up to a schedule's done was enqueued before done was
// advanced past it, so the listing, sent later, shows its task. All of it
// goes to periodic.json.

// PeriodicFile is the run's periodic record (PeriodicRecord); optional
// for the checkers: a run from before schedules has none.
const PeriodicFile = "periodic.json"

// PeriodicQueue is the queue the run's schedules enqueue into.
const PeriodicQueue = "periodic"

// periodicSchedules are the schedules a run sets: one per catch-up
// policy, at the shortest periods the cluster takes and a second apart,
// so that failovers of the metadata group's leader fall between
// occurrences and on them.
var periodicSchedules = []wire.ScheduleSetRequest{
	{Name: "fault-tick", Queue: PeriodicQueue, EveryMs: 1000, CatchUp: "all", Data: []byte("tick")},
	{Name: "fault-tock", Queue: PeriodicQueue, EveryMs: 2000, CatchUp: "skip", Data: []byte("tock")},
}

// Bounds of the periodic steps. The sets run on a cluster just ready; the
// final reads on one converged and drained. Each attempt goes to the next
// node after a failure.
const (
	// periodicSetBound bounds the attempts of one schedule's set.
	periodicSetBound = 30 * time.Second
	// periodicReadBound bounds the attempts of each final read.
	periodicReadBound = 30 * time.Second
	// periodicRetryPause separates two attempts.
	periodicRetryPause = 300 * time.Millisecond
	// periodicListPage is how many tasks a page of the final listing asks
	// for.
	periodicListPage = 50
	// periodicListTimeout bounds one listing: the queue's tasks of every
	// partition, fanned out to their leaders, a few thousand in a long
	// run (about 350 bytes each, well within maxResponse).
	periodicListTimeout = 20 * time.Second
)

// PeriodicRecord is periodic.json: the schedules as set and as read back,
// and the tasks of their queue.
type PeriodicRecord struct {
	Queue string `json:"queue"`
	// Sets are the schedules the harness set, in order.
	Sets []ScheduleSet `json:"sets"`
	// Schedules is the final read of every schedule; Tasks the listing
	// of Queue sent after it.
	Schedules PeriodicSchedules `json:"schedules"`
	Tasks     PeriodicTasks     `json:"tasks"`
}

// ScheduleSet is one schedule's set: the request, and the view its ok
// answered (nil if no attempt came back ok and readable).
type ScheduleSet struct {
	Request wire.ScheduleSetRequest `json:"request"`
	Answer  *wire.ScheduleView      `json:"answer,omitempty"`
	// Node answered the set, at TNs (the answer's time).
	Node int   `json:"node,omitempty"`
	TNs  int64 `json:"t_ns,omitempty"`
	// Errors are the attempts that failed, each "node N: code error".
	Errors []string `json:"errors,omitempty"`
}

// PeriodicRead is the outcome of a final read: OK when an attempt
// answered whole, through Node, sent at TNs; the failed attempts.
// Attempts 0: the read was never tried (the run ended first).
type PeriodicRead struct {
	OK       bool     `json:"ok"`
	Node     int      `json:"node,omitempty"`
	TNs      int64    `json:"t_ns,omitempty"`
	Attempts int      `json:"attempts"`
	Errors   []string `json:"errors,omitempty"`
}

// PeriodicSchedules is the final read of the schedules.
type PeriodicSchedules struct {
	PeriodicRead
	Views []wire.ScheduleView `json:"views"`
}

// PeriodicTasks is the final listing of the periodic queue.
type PeriodicTasks struct {
	PeriodicRead
	Tasks []PeriodicTask `json:"tasks"`
}

// PeriodicTask is a listed task, reduced to what the checker reads.
type PeriodicTask struct {
	ID         string `json:"id"`
	Queue      string `json:"queue"`
	Key        string `json:"key,omitempty"`
	State      string `json:"state"`
	EnqueuedAt int64  `json:"enqueued_at"`
	// Cancelled with CancelReason (a retired duplicate's begins with
	// wire.RetiredKeyReason).
	Cancelled    bool   `json:"cancelled,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
}

// Retired reports whether the task is a retired duplicate of its key:
// cancelled by its leader because another task holds the key.
func (t *PeriodicTask) Retired() bool {
	return t.Cancelled && strings.HasPrefix(t.CancelReason, wire.RetiredKeyReason)
}

// PeriodicSummary is the periodic part of summary.json.
type PeriodicSummary struct {
	// Set counts the schedules whose set was acknowledged, of Sent.
	Sent int `json:"sent"`
	Set  int `json:"set"`
	// Read: both final reads answered; Schedules and Tasks what they
	// held; Errors the failed attempts of sets and reads.
	Read      bool `json:"read"`
	Schedules int  `json:"schedules"`
	Tasks     int  `json:"tasks"`
	Errors    int  `json:"errors"`
}

func (r *Run) periodicSummary() PeriodicSummary {
	p := &r.periodic
	s := PeriodicSummary{Sent: len(p.Sets), Read: p.Schedules.OK && p.Tasks.OK,
		Schedules: len(p.Schedules.Views), Tasks: len(p.Tasks.Tasks),
		Errors: len(p.Schedules.Errors) + len(p.Tasks.Errors)}
	for _, st := range p.Sets {
		if st.Answer != nil {
			s.Set++
		}
		s.Errors += len(st.Errors)
	}
	return s
}

// writePeriodic writes periodic.json as it stands.
func (r *Run) writePeriodic() error {
	r.sum.Periodic = r.periodicSummary()
	return WriteJSONFile(filepath.Join(r.cfg.Out, PeriodicFile), &r.periodic)
}

// setSchedules sets periodicSchedules, each retried through the nodes in
// turn until one answers it or periodicSetBound passes, and writes
// periodic.json. A set that was never acknowledged is in the record for
// the checker to fail the run on; the run goes on.
func (r *Run) setSchedules(ctx context.Context) error {
	r.periodic = PeriodicRecord{Queue: PeriodicQueue}
	node := 1
	for _, req := range periodicSchedules {
		st := ScheduleSet{Request: req}
		deadline := time.Now().Add(periodicSetBound)
		for {
			var v wire.ScheduleView
			actx, cancel := context.WithTimeout(ctx, r.cfg.ReqTimeout)
			res := r.api.Do(actx, node, http.MethodPut, "/v1/schedules/"+url.PathEscape(req.Name), &req, &v)
			cancel()
			if res.Read() {
				st.Answer, st.Node, st.TNs = &v, node, r.tl.Now()
				break
			}
			st.Errors = append(st.Errors, fmt.Sprintf("node %d: %s %s", node, res.Code, res.Err))
			node = node%r.api.Nodes() + 1
			// A refusal (4xx) is final: the spec is wrong, not the
			// cluster.
			if res.Type == Fail || time.Now().After(deadline) || sleepCtx(ctx, periodicRetryPause) != nil {
				break
			}
		}
		if st.Answer != nil {
			r.log.Info("schedule set", "name", req.Name, "version", st.Answer.Version, "start", st.Answer.Start, "node", st.Node,
				"failed attempts", len(st.Errors))
		} else {
			r.log.Warn("schedule not set", "name", req.Name, "attempts", len(st.Errors), "last", st.Errors[len(st.Errors)-1])
		}
		r.periodic.Sets = append(r.periodic.Sets, st)
	}
	if err := r.writePeriodic(); err != nil {
		return err
	}
	return ctx.Err()
}

// periodicReads reads the schedules back, then lists the periodic queue,
// each through the nodes in turn until one answers whole, and writes
// periodic.json.
func (r *Run) periodicReads(ctx context.Context) error {
	p := &r.periodic
	var views []wire.ScheduleView
	p.Schedules.PeriodicRead = r.periodicRead(ctx, r.cfg.ReqTimeout, periodicReadBound, func(ctx context.Context, node int) error {
		var resp wire.ScheduleListResponse
		res := r.api.Do(ctx, node, http.MethodGet, "/v1/schedules", nil, &resp)
		if !res.Read() {
			return fmt.Errorf("%s %s", res.Code, res.Err)
		}
		views = resp.Schedules
		return nil
	})
	p.Schedules.Views = views
	var tasks []PeriodicTask
	p.Tasks.PeriodicRead = r.periodicRead(ctx, periodicListTimeout, periodicReadBound, func(ctx context.Context, node int) (err error) {
		tasks, err = r.listQueue(ctx, node, p.Queue, periodicListPage)
		return err
	})
	p.Tasks.Tasks = tasks
	r.log.Info("periodic reads", "schedules", len(views), "schedules read", p.Schedules.OK, "tasks", len(tasks), "tasks read", p.Tasks.OK,
		"failed attempts", len(p.Schedules.Errors)+len(p.Tasks.Errors))
	if err := r.writePeriodic(); err != nil {
		return err
	}
	return ctx.Err()
}

// periodicRead tries read through the nodes in turn, each attempt
// bounded by timeout, until one succeeds or bound passes.
func (r *Run) periodicRead(ctx context.Context, timeout, bound time.Duration, read func(ctx context.Context, node int) error) PeriodicRead {
	var pr PeriodicRead
	deadline := time.Now().Add(bound)
	for node := 1; ; node = node%r.api.Nodes() + 1 {
		at := r.tl.Now()
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := read(actx, node)
		cancel()
		pr.Attempts++
		if err == nil {
			pr.OK, pr.Node, pr.TNs = true, node, at
			return pr
		}
		pr.Errors = append(pr.Errors, fmt.Sprintf("node %d: %v", node, err))
		if time.Now().After(deadline) || sleepCtx(ctx, periodicRetryPause) != nil {
			return pr
		}
	}
}

// parseTaskList decodes a listing's NDJSON: one task view a line, which
// an error object ends when the listing failed part way (the node had
// already answered 200).
func parseTaskList(body []byte) ([]PeriodicTask, error) {
	if len(body) >= maxResponse {
		return nil, fmt.Errorf("listing of %d bytes or more: cut at the client's bound", maxResponse)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	out := []PeriodicTask{}
	for {
		var line json.RawMessage
		err := dec.Decode(&line)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing line %d: %w", len(out)+1, err)
		}
		var eb errorBody
		if json.Unmarshal(line, &eb) == nil && (eb.Code != "" || eb.Error != "") {
			return nil, fmt.Errorf("listing failed after %d tasks: %s %s", len(out), eb.Code, eb.Error)
		}
		var v wire.TaskView
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("listing line %d: %w", len(out)+1, err)
		}
		t := PeriodicTask{ID: v.ID.String(), Queue: v.Queue, Key: v.Key, State: v.State, EnqueuedAt: v.EnqueuedAt}
		if v.Cancelled != nil {
			t.Cancelled, t.CancelReason = true, v.Cancelled.Reason
		}
		out = append(out, t)
	}
}
