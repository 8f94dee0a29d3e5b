package node_test

// Integration tests of one node through its QUIC client (and, at the end,
// its HTTP API). Each test cites the section of docs/design.md it checks.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// testWait bounds every poll: generous, since -race on a small machine is
// slow, but each wait normally ends in milliseconds.
const testWait = 10 * time.Second

// longTTL is a lease no test outlives.
const longTTL = int64(10 * time.Minute / time.Millisecond)

// h drives one node of a cluster through its QUIC client.
type h struct {
	t   *testing.T
	c   *nodetest.Cluster
	ctx context.Context
}

func newH(t *testing.T, opts ...nodetest.Option) *h {
	t.Helper()
	c := nodetest.NewCluster(t, 1, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	t.Cleanup(cancel)
	return &h{t: t, c: c, ctx: ctx}
}

func (x *h) cl() *wire.Client { return x.c.Client(0) }

// enqueue enqueues tasks in one request and returns their ids.
func (x *h) enqueue(tasks ...wire.EnqueueTask) []task.ID {
	x.t.Helper()
	resp, err := x.cl().Enqueue(x.ctx, &wire.EnqueueRequest{Tasks: tasks})
	if err != nil {
		x.t.Fatalf("enqueue %d task(s): %v", len(tasks), err)
	}
	if len(resp.Results) != len(tasks) {
		x.t.Fatalf("enqueue %d task(s): got %d results", len(tasks), len(resp.Results))
	}
	ids := make([]task.ID, len(resp.Results))
	for i, r := range resp.Results {
		if r.ID.IsZero() || r.Acks != 1 {
			x.t.Fatalf("enqueue result %d: %+v; want a non-zero id and 1 ack", i, r)
		}
		ids[i] = r.ID
	}
	return ids
}

// enqueue1 enqueues one task.
func (x *h) enqueue1(et wire.EnqueueTask) task.ID {
	x.t.Helper()
	return x.enqueue(et)[0]
}

func (x *h) claim(req wire.ClaimRequest) []wire.TaskView {
	x.t.Helper()
	resp, err := x.cl().Claim(x.ctx, &req)
	if err != nil {
		x.t.Fatalf("claim %+v: %v", req, err)
	}
	for _, v := range resp.Tasks {
		if v.Claim == nil {
			x.t.Fatalf("claim %+v: task %s has no claim id", req, v.ID)
		}
	}
	return resp.Tasks
}

// claim1 claims one task of queue and fails if there is none.
func (x *h) claim1(queue string, ttl int64) wire.TaskView {
	x.t.Helper()
	got := x.claim(wire.ClaimRequest{Queue: queue, TTLMs: ttl})
	if len(got) != 1 {
		x.t.Fatalf("claim from %q: got %d tasks; want 1", queue, len(got))
	}
	return got[0]
}

// claimNone checks that queue has nothing to claim.
func (x *h) claimNone(queue string) {
	x.t.Helper()
	if got := x.claim(wire.ClaimRequest{Queue: queue, TTLMs: longTTL}); len(got) != 0 {
		x.t.Fatalf("claim from %q: got task %s (claim %d, %s); want none", queue, got[0].ID, *got[0].Claim, got[0].State)
	}
}

// claimWait polls until a claim of queue returns a task. A task's state
// as get derives it changes with time, but claims see it only at the next
// timer tick (Config.TickInterval later), so a test that waited for
// "ready" claims with claimWait.
func (x *h) claimWait(queue string, ttl int64) wire.TaskView {
	x.t.Helper()
	var got wire.TaskView
	nodetest.WaitFor(x.t, testWait, func() error {
		resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: queue, TTLMs: ttl})
		if err != nil {
			return err
		}
		if len(resp.Tasks) == 0 {
			return fmt.Errorf("nothing to claim in %q yet", queue)
		}
		got = resp.Tasks[0]
		return nil
	})
	return got
}

func (x *h) get(id task.ID) *wire.TaskView {
	x.t.Helper()
	v, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id})
	if err != nil {
		x.t.Fatalf("get %s: %v", id, err)
	}
	return v
}

func (x *h) state(id task.ID) string {
	x.t.Helper()
	return x.get(id).State
}

func (x *h) wantState(id task.ID, want string) {
	x.t.Helper()
	if got := x.state(id); got != want {
		x.t.Fatalf("task %s: state %q; want %q", id, got, want)
	}
}

// wantDelayed reads task id and checks that it is in state want (delayed,
// snoozed or retrying), as far as the time the read was answered tells:
// past its not-before (a slow machine) it may be ready already.
func (x *h) wantDelayed(id task.ID, want string) *wire.TaskView {
	x.t.Helper()
	v := x.get(id)
	now := time.Now().UnixMilli()
	if v.State != want && !(v.State == "ready" && now >= v.NotBefore) {
		x.t.Fatalf("task %s at %d: state %q, not before %d; want %s", id, now, v.State, v.NotBefore, want)
	}
	return v
}

// waitState polls until task id is in state want.
func (x *h) waitState(id task.ID, want string) {
	x.t.Helper()
	nodetest.WaitFor(x.t, testWait, func() error {
		v, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id})
		if err != nil {
			return err
		}
		if v.State != want {
			return fmt.Errorf("task %s: state %q; want %q", id, v.State, want)
		}
		return nil
	})
}

func (x *h) count(queue string) int64 {
	x.t.Helper()
	resp, err := x.cl().Count(x.ctx, &wire.CountRequest{Queue: queue})
	if err != nil {
		x.t.Fatalf("count %q: %v", queue, err)
	}
	return resp.Count
}

func (x *h) queues() []wire.QueueStats {
	x.t.Helper()
	resp, err := x.cl().Queues(x.ctx, &wire.QueuesRequest{})
	if err != nil {
		x.t.Fatalf("queues: %v", err)
	}
	return countsOnly(x.t, resp.Queues)
}

// countsOnly returns the rows with their counts alone, having checked
// that each says when its oldest ready task was enqueued exactly when it
// has ready tasks.
func countsOnly(t *testing.T, rows []wire.QueueStats) []wire.QueueStats {
	t.Helper()
	out := slices.Clone(rows)
	for i := range out {
		if (out[i].Ready > 0) != (out[i].OldestReadyAt > 0) {
			t.Fatalf("queue %s: %d ready, oldest ready at %d", out[i].Queue, out[i].Ready, out[i].OldestReadyAt)
		}
		out[i].OldestReadyAt = 0
	}
	return out
}

// stats returns queue's counts (zero if the node does not know it).
func (x *h) stats(queue string) wire.QueueStats {
	x.t.Helper()
	for _, q := range x.queues() {
		if q.Queue == queue {
			return q
		}
	}
	return wire.QueueStats{Queue: queue}
}

// list returns the listed tasks and the number of pages they came in.
func (x *h) list(req wire.ListRequest) ([]wire.TaskView, int) {
	x.t.Helper()
	var out []wire.TaskView
	pages := 0
	err := x.cl().List(x.ctx, &req, func(p *wire.ListPage) error {
		pages++
		if len(p.Tasks) == 0 {
			return errors.New("empty page")
		}
		out = append(out, p.Tasks...)
		return nil
	})
	if err != nil {
		x.t.Fatalf("list %+v: %v", req, err)
	}
	return out, pages
}

// wantCode checks that err carries code.
func wantCode(t *testing.T, what string, err error, code wire.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded; want error %s", what, code.Name())
	}
	if got := wire.CodeOf(err); got != code {
		t.Fatalf("%s: error %q has code %s; want %s", what, err, got.Name(), code.Name())
	}
}

// snapshot is what a refused request must not change: every queue's
// counts and the views of some tasks.
type snapshot struct {
	Queues []wire.QueueStats
	Count  int64
	Views  []wire.TaskView
}

func (x *h) snapshot(ids []task.ID) snapshot {
	x.t.Helper()
	s := snapshot{Queues: x.queues(), Count: x.count("")}
	for _, id := range ids {
		s.Views = append(s.Views, *x.get(id))
	}
	return s
}

// refused runs op, which must fail with code, and checks that it changed
// nothing: queue counts and the views of ids read the same before and
// after.
func (x *h) refused(what string, code wire.Code, ids []task.ID, op func() error) {
	x.t.Helper()
	before := x.snapshot(ids)
	wantCode(x.t, what, op(), code)
	if after := x.snapshot(ids); !reflect.DeepEqual(before, after) {
		x.t.Fatalf("%s: refused, but the node changed:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// idGen makes client-supplied ids, as the Go client does.
type idGen struct {
	mu sync.Mutex
	n  uint32
}

func (g *idGen) next() task.ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	return task.MakeID(time.Now().UnixMilli(), 0xc11e47, g.n)
}

// Reference: docs/design.md, "Operations" (enqueue: assign an id, ack after W
// durable acks, idempotent retry with a client-supplied id) and "Data
// model" (the task's immutable fields).
func TestEnqueue(t *testing.T) {
	x := newH(t)
	cfg := x.c.Config(0)

	id := x.enqueue1(wire.EnqueueTask{
		Queue: "q", Priority: 3, Data: []byte("hello"), Group: "g1",
		Description: "say hello", MaxAttempts: 4,
	})
	v := x.get(id)
	if v.ID != id || v.Queue != "q" || v.Priority != 3 || string(v.Data) != "hello" || v.Group != "g1" ||
		v.Description != "say hello" || v.MaxAttempts != 4 || v.State != "ready" || v.Attempts != 0 ||
		len(v.Claims) != 0 || len(v.Updates) != 0 || len(v.Deps) != 0 || v.EnqueuedAt <= 0 {
		t.Fatalf("get after enqueue: %+v", v)
	}
	if d := x.get(x.enqueue1(wire.EnqueueTask{Queue: "q"})); d.MaxAttempts != cfg.DefaultMaxAttempts {
		t.Errorf("max attempts without one given: %d; want the default %d", d.MaxAttempts, cfg.DefaultMaxAttempts)
	}

	// A batch: ids from one node sort in request order (k-ordered).
	batch := make([]wire.EnqueueTask, 50)
	for i := range batch {
		batch[i] = wire.EnqueueTask{Queue: "q", Data: []byte{byte(i)}}
	}
	ids := x.enqueue(batch...)
	if !slices.IsSortedFunc(ids, task.ID.Compare) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("batch ids not strictly increasing: %v", ids)
	}
	for i, id := range ids {
		if v := x.get(id); len(v.Data) != 1 || v.Data[0] != byte(i) {
			t.Fatalf("batch task %d: data %v; want [%d]", i, v.Data, i)
		}
	}
	if got := x.count("q"); got != 52 {
		t.Fatalf("count after 52 enqueues: %d", got)
	}

	// A delayed task.
	delayed := x.enqueue1(wire.EnqueueTask{Queue: "later", DelayMs: 60_000})
	if v := x.get(delayed); v.State != "delayed" || v.NotBefore < v.EnqueuedAt+60_000 {
		t.Fatalf("delayed task: state %q, not before %d, enqueued %d", v.State, v.NotBefore, v.EnqueuedAt)
	}

	// Client-supplied ids: a retry returns the same id and adds nothing.
	var gen idGen
	own := gen.next()
	et := wire.EnqueueTask{ID: &own, Queue: "q", Data: []byte("mine")}
	for try := range 3 {
		if got := x.enqueue1(et); got != own {
			t.Fatalf("enqueue with id %s (try %d): got id %s", own, try, got)
		}
	}
	if got := x.count("q"); got != 53 {
		t.Fatalf("count after retried enqueue: %d; want 53", got)
	}
	// A retried batch that also carries a new task adds only the new one.
	other := gen.next()
	got := x.enqueue(et, wire.EnqueueTask{ID: &other, Queue: "q"})
	if got[0] != own || got[1] != other {
		t.Fatalf("mixed retry: ids %v; want [%s %s]", got, own, other)
	}
	if got := x.count("q"); got != 54 {
		t.Fatalf("count after mixed retry: %d; want 54", got)
	}
	// The same id twice in one batch is one task.
	twice := gen.next()
	dup := wire.EnqueueTask{ID: &twice, Queue: "q", Data: []byte("twice")}
	if got := x.enqueue(dup, dup); got[0] != twice || got[1] != twice {
		t.Fatalf("one id twice in a batch: ids %v; want %s twice", got, twice)
	}
	if got := x.count("q"); got != 55 {
		t.Fatalf("count after one id twice in a batch: %d; want 55", got)
	}
	// A retry after the task was claimed leaves its claim alone.
	for claimedOwn := false; !claimedOwn; {
		claimedOwn = x.claim1("q", longTTL).ID == own // claims q in order until own
	}
	claimed := x.get(own)
	if got := x.enqueue1(et); got != own {
		t.Fatalf("retry after claim: id %s; want %s", got, own)
	}
	if v := x.get(own); !reflect.DeepEqual(v, claimed) {
		t.Fatalf("retry after claim changed the task:\n%+v\n%+v", claimed, v)
	}
	// The same id with other content is a conflict, and changes nothing.
	x.refused("enqueue of a used id with other data", wire.CodeConflict, []task.ID{own}, func() error {
		_, err := x.cl().Enqueue(x.ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &own, Queue: "q", Data: []byte("theirs")}}})
		return err
	})
}

// Reference: docs/design.md, "Operations" (claim(queue, ttl): returns task +
// claim id; batch claim; no ready task is an empty answer, not an error).
func TestClaim(t *testing.T) {
	x := newH(t)
	batch := make([]wire.EnqueueTask, 5)
	for i := range batch {
		batch[i] = wire.EnqueueTask{Queue: "c", Data: []byte(fmt.Sprint(i))}
	}
	ids := x.enqueue(batch...)

	got := x.claim(wire.ClaimRequest{Queue: "c", Count: 3, TTLMs: 30_000})
	if len(got) != 3 {
		t.Fatalf("claim count 3: got %d tasks", len(got))
	}
	for i, v := range got {
		if v.ID != ids[i] || *v.Claim != 0 || v.State != "claimed" || string(v.Data) != fmt.Sprint(i) {
			t.Fatalf("claimed task %d: %+v; want %s with claim 0, claimed", i, v, ids[i])
		}
		if len(v.Claims) != 1 || v.Claims[0].End-v.Claims[0].Start != 30_000 {
			t.Fatalf("claimed task %d: claims %+v; want one of 30000ms", i, v.Claims)
		}
		if g := x.get(v.ID); g.State != "claimed" || !reflect.DeepEqual(g.Claims, v.Claims) {
			t.Fatalf("get after claim: state %q claims %+v; want claimed %+v", g.State, g.Claims, v.Claims)
		}
	}
	// Count larger than what is ready takes what there is.
	if rest := x.claim(wire.ClaimRequest{Queue: "c", Count: 5}); len(rest) != 2 || rest[0].ID != ids[3] || rest[1].ID != ids[4] {
		t.Fatalf("claim count 5 of the last 2: %d tasks", len(rest))
	} else if c := rest[0].Claims[0]; c.End-c.Start != x.c.Config(0).DefaultTTL.Milliseconds() {
		t.Fatalf("claim without ttl: lease %dms; want the default %v", c.End-c.Start, x.c.Config(0).DefaultTTL)
	}
	x.claimNone("c")
	x.claimNone("never-used")
	if s := x.stats("c"); s.Claimed != 5 || s.Ready != 0 {
		t.Fatalf("stats after claiming all: %+v", s)
	}

	x.refused("claim with ttl over the max", wire.CodeInvalid, ids, func() error {
		_, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "c", TTLMs: x.c.Config(0).MaxTTL.Milliseconds() + 1})
		return err
	})
	x.refused("claim with a negative count", wire.CodeInvalid, ids, func() error {
		_, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "c", Count: -1})
		return err
	})
}

// Reference: docs/design.md, "Operations" (renew(id, claim, ttl) grows end;
// end merges by max, so it never shrinks).
func TestRenew(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "r"})
	v := x.claim1("r", 1000)
	start := v.Claims[0].Start
	resp, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: id, Claim: 0, TTLMs: 60_000})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if resp.End < start+60_000 || resp.Acks != 1 {
		t.Fatalf("renew: %+v; want end >= %d and 1 ack", resp, start+60_000)
	}
	if g := x.get(id); g.Claims[0].End != resp.End || g.State != "claimed" {
		t.Fatalf("get after renew: %+v; want end %d", g.Claims, resp.End)
	}
	// A shorter renew does not shrink the lease.
	short, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: id, Claim: 0, TTLMs: 10})
	if err != nil {
		t.Fatalf("short renew: %v", err)
	}
	if short.End != resp.End {
		t.Fatalf("short renew: end %d; want unchanged %d", short.End, resp.End)
	}
}

// Reference: docs/design.md, "Data model" (updates: a grow-only set keyed
// (claim, seq); reads show only the contiguous prefix) and "Operations"
// (update is idempotent; get with min_seq refuses a shorter history).
func TestUpdateAndGet(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "u"})
	x.claim1("u", longTTL)
	update := func(seq uint64, data string) error {
		_, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: seq, Data: []byte(data)})
		return err
	}
	for seq, d := range []string{"a", "b"} {
		if err := update(uint64(seq), d); err != nil {
			t.Fatalf("update seq %d: %v", seq, err)
		}
	}
	if err := update(1, "b"); err != nil {
		t.Fatalf("repeated update seq 1 with the same data: %v", err)
	}
	ids := []task.ID{id}
	x.refused("update seq 1 with other data", wire.CodeConflict, ids, func() error { return update(1, "x") })
	x.refused("update seq 3 after seq 1 (a gap)", wire.CodeSeq, ids, func() error { return update(3, "d") })

	want := []wire.UpdateView{{Claim: 0, Seq: 0, Data: []byte("a")}, {Claim: 0, Seq: 1, Data: []byte("b")}}
	if got := x.get(id).Updates; !reflect.DeepEqual(got, want) {
		t.Fatalf("updates: %+v; want %+v", got, want)
	}
	for _, seen := range []uint64{0, 1, 2} {
		if _, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id, MinSeq: u64(seen)}); err != nil {
			t.Fatalf("get min_seq %d with 2 updates: %v", seen, err)
		}
	}
	_, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id, MinSeq: u64(3)})
	wantCode(t, "get min_seq 3 with 2 updates", err, wire.CodeStale)
	if !errors.Is(err, task.ErrStale) {
		t.Fatalf("get min_seq 3: %v does not match task.ErrStale", err)
	}
	_, err = x.cl().Get(x.ctx, &wire.GetRequest{ID: task.MakeID(1, 2, 3)})
	if !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get of an unknown id: %v; want task.ErrNotFound", err)
	}
}

// Reference: docs/design.md, "Operations" (complete(id, claim, seq); seq
// defaults to after the last update) and "Guarantees" (an acknowledged
// completion is never followed by a new claim).
func TestComplete(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "done"})
	x.claim1("done", longTTL)
	if _, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: 0, Data: []byte("half")}); err != nil {
		t.Fatalf("update: %v", err)
	}
	ids := []task.ID{id}
	x.refused("complete at seq 5 with one update", wire.CodeSeq, ids, func() error {
		_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0, Seq: u64(5)})
		return err
	})
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0}); err != nil {
		t.Fatalf("complete with the default seq: %v", err)
	}
	v := x.get(id)
	if v.State != "completed" || v.Claims[0].Completed == nil || v.Attempts != 0 {
		t.Fatalf("after complete: state %q claims %+v attempts %d", v.State, v.Claims, v.Attempts)
	}
	// Repeats of the same completion (default seq, or its explicit seq 1)
	// succeed without a change.
	for _, seq := range []*uint64{nil, u64(1)} {
		if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0, Seq: seq}); err != nil {
			t.Fatalf("repeated complete (seq %v): %v", seq, err)
		}
	}
	if g := x.get(id); !reflect.DeepEqual(g, v) {
		t.Fatalf("repeated complete changed the task:\n%+v\n%+v", v, g)
	}
	x.refused("complete at another seq", wire.CodeConflict, ids, func() error {
		_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0, Seq: u64(0)})
		return err
	})
	x.claimNone("done")
	if s := x.stats("done"); s.Completed != 1 || s.Claimed != 0 || s.Ready != 0 {
		t.Fatalf("stats: %+v; want one completed", s)
	}
}

// Reference: docs/design.md, "Operations" (fail(id, claim, reason,
// retry_after): the task is retried after the backoff) and "Data model"
// (attempts = claims ended without completion).
func TestFail(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "f", MaxAttempts: 3})
	x.claim1("f", longTTL)
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 0, Reason: "boom", RetryAfterMs: i64(150)}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	v := x.wantDelayed(id, "retrying")
	if v.Attempts != 1 || len(v.Failures) != 1 || v.Failures[0].Reason != "boom" ||
		v.Failures[0].Snooze || v.NotBefore != v.Failures[0].At+150 {
		t.Fatalf("after fail with retry_after 150ms: %+v", v)
	}
	x.waitState(id, "ready")
	c := x.claimWait("f", longTTL)
	if *c.Claim != 1 || c.Attempts != 1 {
		t.Fatalf("claim after retry: claim %d attempts %d; want claim 1, 1 attempt", *c.Claim, c.Attempts)
	}
	// Without retry_after, the node's backoff applies (RetryBase 10ms,
	// doubled per attempt): delayed, then ready.
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 1}); err != nil {
		t.Fatalf("second fail: %v", err)
	}
	if v := x.wantDelayed(id, "retrying"); v.Attempts != 2 || v.NotBefore <= v.Failures[1].At {
		t.Fatalf("after a fail without retry_after: %+v; want 2 attempts and a backoff", v)
	}
	x.waitState(id, "ready")

	// A repeated fail is a no-op; a snooze of the failed claim is refused.
	other := x.enqueue1(wire.EnqueueTask{Queue: "f2"})
	x.claim1("f2", longTTL)
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: other, Claim: 0, Reason: "r", RetryAfterMs: i64(60_000)}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	before := x.get(other)
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: other, Claim: 0, Reason: "again"}); err != nil {
		t.Fatalf("repeated fail: %v", err)
	}
	if after := x.get(other); !reflect.DeepEqual(before, after) {
		t.Fatalf("repeated fail changed the task:\n%+v\n%+v", before, after)
	}
	x.refused("snooze of a failed claim", wire.CodeClaimEnded, []task.ID{other}, func() error {
		_, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: other, Claim: 0})
		return err
	})
}

// TestFailNoRetry: a fail with no_retry makes the task dead at once,
// whatever its attempts left; with a retry-after too it is refused and
// changes nothing; a requeue brings the task back.
func TestFailNoRetry(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "nr", MaxAttempts: 5})
	x.claim1("nr", longTTL)
	x.refused("no_retry with a retry-after", wire.CodeInvalid, []task.ID{id}, func() error {
		_, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 0, NoRetry: true, RetryAfterMs: i64(10)})
		return err
	})
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 0, Reason: "bad input", NoRetry: true}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	v := x.get(id)
	if v.State != "dead" || v.Attempts != 1 || len(v.Failures) != 1 || !v.Failures[0].NoRetry || v.Failures[0].Reason != "bad input" {
		t.Fatalf("after a fail with no retry: %+v; want dead at 1 attempt", v)
	}
	if _, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: id}); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	x.waitState(id, "ready")
}

// Reference: docs/design.md, "Operations" (snooze(id, claim, delay): ready again
// after the delay without counting a failed attempt).
func TestSnooze(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "s", MaxAttempts: 1})
	x.claim1("s", longTTL)
	if _, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: id, Claim: 0, DelayMs: 100}); err != nil {
		t.Fatalf("snooze: %v", err)
	}
	if v := x.wantDelayed(id, "snoozed"); v.Attempts != 0 || len(v.Failures) != 1 || !v.Failures[0].Snooze {
		t.Fatalf("after snooze: %+v", v)
	}
	x.waitState(id, "ready")
	// max_attempts 1, and claim 0 ended: a snooze is not an attempt.
	c := x.claimWait("s", longTTL)
	if *c.Claim != 1 || c.Attempts != 0 {
		t.Fatalf("claim after snooze: claim %d attempts %d; want claim 1, 0 attempts", *c.Claim, c.Attempts)
	}
	if _, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: id, Claim: 1}); err != nil {
		t.Fatalf("snooze without delay: %v", err)
	}
	x.wantState(id, "ready")
	if c := x.claim1("s", longTTL); *c.Claim != 2 || c.Attempts != 0 {
		t.Fatalf("third claim: claim %d attempts %d", *c.Claim, c.Attempts)
	}
}

// Reference: docs/design.md, "Data model" (dead after max_attempts failed
// claims: a dead-letter state, listable and re-queueable).
func TestRequeueDead(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "d", MaxAttempts: 1})
	ids := []task.ID{id}
	x.refused("requeue of a ready task", wire.CodeNotDead, ids, func() error {
		_, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: id})
		return err
	})
	x.claim1("d", longTTL)
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 0, Reason: "bad input"}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	if v := x.get(id); v.State != "dead" || v.Attempts != 1 {
		t.Fatalf("after the last attempt failed: state %q attempts %d; want dead, 1", v.State, v.Attempts)
	}
	x.claimNone("d")
	if dead, _ := x.list(wire.ListRequest{Queue: "d", State: "dead"}); len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("list of dead tasks: %d", len(dead))
	}
	if _, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: id}); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	if v := x.get(id); v.State != "ready" || v.Attempts != 0 {
		t.Fatalf("after requeue: state %q attempts %d; want ready, 0", v.State, v.Attempts)
	}
	if c := x.claim1("d", longTTL); *c.Claim != 1 {
		t.Fatalf("claim after requeue: claim %d; want 1 (claim ids are never reused)", *c.Claim)
	}
	x.refused("requeue of a claimed task", wire.CodeNotDead, ids, func() error {
		_, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: id})
		return err
	})
	x.refused("requeue of an unknown task", wire.CodeNotFound, ids, func() error {
		_, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: task.MakeID(1, 2, 3)})
		return err
	})
}

// Reference: docs/design.md, "Operations" (list(queue, state, group) and count:
// streamed, never all in memory).
func TestListAndCount(t *testing.T) {
	x := newH(t)
	const na, nb = 400, 250
	var all []task.ID
	group := map[task.ID]string{}
	queue := map[task.ID]string{}
	for _, q := range []struct {
		name string
		n    int
	}{{"la", na}, {"lb", nb}} {
		for start := 0; start < q.n; start += 100 {
			batch := make([]wire.EnqueueTask, 0, 100)
			for i := start; i < min(start+100, q.n); i++ {
				batch = append(batch, wire.EnqueueTask{Queue: q.name, Group: fmt.Sprintf("g%d", i%2), Data: make([]byte, 100)})
			}
			for i, id := range x.enqueue(batch...) {
				all = append(all, id)
				group[id], queue[id] = batch[i].Group, q.name
			}
		}
	}
	claimed := x.claim(wire.ClaimRequest{Queue: "la", Count: 30, TTLMs: longTTL})
	for _, v := range claimed[:10] {
		if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: v.ID, Claim: 0}); err != nil {
			t.Fatalf("complete: %v", err)
		}
	}

	everything, pages := x.list(wire.ListRequest{})
	if len(everything) != na+nb {
		t.Fatalf("list: %d tasks; want %d", len(everything), na+nb)
	}
	if pages < 2 {
		t.Fatalf("list of %d tasks came in %d page(s); want it streamed in several", len(everything), pages)
	}
	seen := map[task.ID]bool{}
	for _, v := range everything {
		if seen[v.ID] || queue[v.ID] == "" {
			t.Fatalf("list: task %s twice or unknown", v.ID)
		}
		seen[v.ID] = true
		if v.Queue != queue[v.ID] || v.Group != group[v.ID] || len(v.Data) != 100 {
			t.Fatalf("list: task %s is %+v", v.ID, v)
		}
	}

	for _, tc := range []struct {
		req  wire.ListRequest
		want int
	}{
		{wire.ListRequest{Queue: "la"}, na},
		{wire.ListRequest{Queue: "lb"}, nb},
		{wire.ListRequest{Queue: "la", State: "claimed"}, 20},
		{wire.ListRequest{Queue: "la", State: "completed"}, 10},
		{wire.ListRequest{Queue: "la", State: "ready"}, na - 30},
		{wire.ListRequest{State: "ready"}, na + nb - 30},
		{wire.ListRequest{State: "dead"}, 0},
		{wire.ListRequest{Group: "g1"}, na/2 + nb/2},
		{wire.ListRequest{Queue: "lb", Group: "g0"}, (nb + 1) / 2},
		{wire.ListRequest{Queue: "nope"}, 0},
		{wire.ListRequest{Limit: 100}, 100},
		{wire.ListRequest{Limit: 300}, 300},
		{wire.ListRequest{Queue: "la", State: "ready", Limit: 1000}, na - 30},
	} {
		got, _ := x.list(tc.req)
		if len(got) != tc.want {
			t.Errorf("list %+v: %d tasks; want %d", tc.req, len(got), tc.want)
		}
		for _, v := range got {
			if tc.req.Queue != "" && v.Queue != tc.req.Queue || tc.req.Group != "" && v.Group != tc.req.Group ||
				tc.req.State != "" && v.State != tc.req.State {
				t.Errorf("list %+v: got %s in %s/%s/%s", tc.req, v.ID, v.Queue, v.Group, v.State)
			}
		}
	}
	for _, req := range []wire.ListRequest{{State: "sleeping"}, {Queue: "bad queue"}, {Group: "bad group"}, {Limit: -1}} {
		err := x.cl().List(x.ctx, &req, func(*wire.ListPage) error { return nil })
		wantCode(t, fmt.Sprintf("list %+v", req), err, wire.CodeInvalid)
	}

	for q, want := range map[string]int64{"": na + nb, "la": na, "lb": nb, "nope": 0} {
		if got := x.count(q); got != want {
			t.Errorf("count %q: %d; want %d", q, got, want)
		}
	}
}

// Reference: docs/design.md, "Operations" (count) and "Data model" (derived
// state: ready, claimed, delayed, blocked, completed, dead).
func TestQueues(t *testing.T) {
	x := newH(t)
	// Three high-priority tasks, claimed first.
	hi := x.enqueue(
		wire.EnqueueTask{Queue: "s", Priority: 9},
		wire.EnqueueTask{Queue: "s", Priority: 9},
		wire.EnqueueTask{Queue: "s", Priority: 9, MaxAttempts: 1},
	)
	readyA := x.enqueue1(wire.EnqueueTask{Queue: "s"})
	x.enqueue(
		wire.EnqueueTask{Queue: "s"},
		wire.EnqueueTask{Queue: "s", DelayMs: 60_000},
		wire.EnqueueTask{Queue: "s", Deps: []task.ID{readyA}},
	)
	x.enqueue1(wire.EnqueueTask{Queue: "t"})
	got := x.claim(wire.ClaimRequest{Queue: "s", Count: 3, TTLMs: longTTL})
	for i, v := range got {
		if v.ID != hi[i] {
			t.Fatalf("claim %d: %s; want the high-priority %s", i, v.ID, hi[i])
		}
	}
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: hi[1], Claim: 0}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: hi[2], Claim: 0}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	want := []wire.QueueStats{
		{Queue: "s", Ready: 2, Claimed: 1, Delayed: 1, Blocked: 1, Completed: 1, Dead: 1},
		{Queue: "t", Ready: 1},
	}
	if got := x.queues(); !reflect.DeepEqual(got, want) {
		t.Fatalf("queues:\n got %+v\nwant %+v", got, want)
	}
	if got := x.count("s"); got != 7 {
		t.Fatalf("count s: %d; want 7", got)
	}
}

// Reference: docs/design.md, "Operations" (every request is validated, with a
// clear error code), "Fencing" (only the task's latest claim may act on
// it; a superseded claim gets a clear error) and "Guarantees". Each
// refused request leaves the node unchanged.
func TestErrors(t *testing.T) {
	const maxPayload = 64
	x := newH(t, nodetest.MaxPayload(maxPayload))
	base := x.enqueue1(wire.EnqueueTask{Queue: "e"})
	none := []task.ID{base}
	enq := func(w int, tasks ...wire.EnqueueTask) func() error {
		return func() error {
			_, err := x.cl().Enqueue(x.ctx, &wire.EnqueueRequest{Tasks: tasks, W: w})
			return err
		}
	}
	var gen idGen
	zero := task.ID{}
	unknown := gen.next()

	t.Run("invalid", func(t *testing.T) {
		x := *x
		x.t = t
		for _, q := range []string{"", "bad queue", "a/b", "ü", strings.Repeat("q", task.MaxQueueLen+1)} {
			x.refused(fmt.Sprintf("enqueue to queue %q", q), wire.CodeInvalid, none, enq(0, wire.EnqueueTask{Queue: q}))
			x.refused(fmt.Sprintf("claim from queue %q", q), wire.CodeInvalid, none, func() error {
				_, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: q})
				return err
			})
		}
		x.refused("batch with one bad queue", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{Queue: "e"}, wire.EnqueueTask{Queue: "b@d"}))
		x.refused("empty enqueue", wire.CodeInvalid, none, enq(0))
		x.refused("bad group", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{Queue: "e", Group: "g g"}))
		x.refused("negative delay", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{Queue: "e", DelayMs: -1}))
		x.refused("count of a bad queue", wire.CodeInvalid, none, func() error {
			_, err := x.cl().Count(x.ctx, &wire.CountRequest{Queue: "bad queue"})
			return err
		})
	})
	t.Run("too-large", func(t *testing.T) {
		x := *x
		x.t = t
		big := make([]byte, maxPayload+1)
		x.refused("payload over MaxPayload", wire.CodeTooLarge, none, enq(0, wire.EnqueueTask{Queue: "e", Data: big}))
		x.refused("batch with one payload over MaxPayload", wire.CodeTooLarge, none,
			enq(0, wire.EnqueueTask{Queue: "e", Data: make([]byte, maxPayload)}, wire.EnqueueTask{Queue: "e", Data: big}))
		x.enqueue1(wire.EnqueueTask{Queue: "e", Data: make([]byte, maxPayload)}) // at the limit is fine
		id := x.enqueue1(wire.EnqueueTask{Queue: "big"})
		x.claim1("big", longTTL)
		x.refused("update over MaxPayload", wire.CodeTooLarge, []task.ID{id}, func() error {
			_, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: 0, Data: big})
			return err
		})
	})
	t.Run("dep-not-found", func(t *testing.T) {
		x := *x
		x.t = t
		x.refused("enqueue with an unknown dep", wire.CodeDepNotFound, none, enq(0, wire.EnqueueTask{Queue: "e", Deps: []task.ID{unknown}}))
		x.refused("batch with an unknown dep", wire.CodeDepNotFound, none,
			enq(0, wire.EnqueueTask{Queue: "e"}, wire.EnqueueTask{Queue: "e", Deps: []task.ID{base, unknown}}))
		// A dep on a later task of the same batch does not exist yet: deps
		// are older ids, so cycles cannot form.
		a, b := gen.next(), gen.next()
		x.refused("dep on a later task of the batch", wire.CodeDepNotFound, none,
			enq(0, wire.EnqueueTask{ID: &a, Queue: "e", Deps: []task.ID{b}}, wire.EnqueueTask{ID: &b, Queue: "e", Deps: []task.ID{a}}))
		_, err := x.cl().Enqueue(x.ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "e", Deps: []task.ID{unknown}}}})
		if !errors.Is(err, task.ErrDepNotFound) {
			t.Fatalf("unknown dep: %v does not match task.ErrDepNotFound", err)
		}
	})
	t.Run("bad-id", func(t *testing.T) {
		x := *x
		x.t = t
		x.refused("enqueue with the zero id", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{ID: &zero, Queue: "e"}))
		x.refused("enqueue with a zero dep", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{Queue: "e", Deps: []task.ID{zero}}))
		self := gen.next()
		x.refused("enqueue depending on itself", wire.CodeInvalid, none, enq(0, wire.EnqueueTask{ID: &self, Queue: "e", Deps: []task.ID{self}}))
		// The zero id is never assigned: there is no such task.
		_, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: zero})
		if c := wire.CodeOf(err); c != wire.CodeNotFound && c != wire.CodeInvalid {
			t.Fatalf("get of the zero id: %v; want not_found or invalid", err)
		}
		// A malformed id (3 bytes, not 20) does not decode: the body is
		// refused as a bad frame, over any op.
		type rawID struct {
			ID    []byte `cbor:"1,keyasint"`
			Claim uint32 `cbor:"2,keyasint"`
		}
		for _, op := range []wire.Op{wire.OpGet, wire.OpRenew, wire.OpComplete, wire.OpRequeue} {
			x.refused(fmt.Sprintf("%s with a 3-byte id", op), wire.CodeBadFrame, none, func() error {
				var resp map[string]any
				return x.cl().Conn().Call(x.ctx, op, rawID{ID: []byte{1, 2, 3}}, &resp)
			})
		}
		x.refused("complete of an unknown task", wire.CodeNotFound, none, func() error {
			_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: unknown, Claim: 0})
			return err
		})
	})
	t.Run("no-such-claim", func(t *testing.T) {
		x := *x
		x.t = t
		fresh := x.enqueue1(wire.EnqueueTask{Queue: "nsc"})
		ids := []task.ID{fresh}
		x.refused("complete of a task never claimed", wire.CodeNoSuchClaim, ids, func() error {
			_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: fresh, Claim: 0})
			return err
		})
		x.claim1("nsc", longTTL)
		x.refused("renew of claim 1 when only 0 exists", wire.CodeNoSuchClaim, ids, func() error {
			_, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: fresh, Claim: 1})
			return err
		})
		x.refused("update of claim 7", wire.CodeNoSuchClaim, ids, func() error {
			_, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: fresh, Claim: 7})
			return err
		})
		x.refused("complete of claim 7", wire.CodeNoSuchClaim, ids, func() error {
			_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: fresh, Claim: 7})
			return err
		})
		x.refused("fail of claim 2", wire.CodeNoSuchClaim, ids, func() error {
			_, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: fresh, Claim: 2})
			return err
		})
	})
	t.Run("superseded", func(t *testing.T) {
		x := *x
		x.t = t
		id := x.enqueue1(wire.EnqueueTask{Queue: "sup"})
		x.claim1("sup", 50)
		// Claim 0 expires at end + skew bound; then the task is claimed
		// again, and claim 0 is fenced off.
		var c1 wire.TaskView
		nodetest.WaitFor(t, testWait, func() error {
			resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "sup", TTLMs: longTTL})
			if err != nil {
				return err
			}
			if len(resp.Tasks) == 0 {
				return errors.New("claim 0 has not expired yet")
			}
			c1 = resp.Tasks[0]
			return nil
		})
		if c1.ID != id || *c1.Claim != 1 {
			t.Fatalf("reclaim: %s claim %d; want %s claim 1", c1.ID, *c1.Claim, id)
		}
		ids := []task.ID{id}
		for name, op := range map[string]func() error{
			"renew": func() error {
				_, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: id, Claim: 0})
				return err
			},
			"complete": func() error {
				_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0})
				return err
			},
			"update": func() error {
				_, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: 0})
				return err
			},
			"fail": func() error {
				_, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: id, Claim: 0})
				return err
			},
			"snooze": func() error {
				_, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: id, Claim: 0})
				return err
			},
		} {
			x.refused(name+" by the superseded claim 0", wire.CodeClaimSuperseded, ids, op)
		}
		if _, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: id, Claim: 0}); !errors.Is(err, task.ErrClaimSuperseded) {
			t.Fatalf("renew by claim 0: %v does not match task.ErrClaimSuperseded", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		x := *x
		x.t = t
		id := x.enqueue1(wire.EnqueueTask{Queue: "exp"})
		c := x.claim1("exp", 50)
		// Past end + skew bound the task is ready again; nobody claimed it.
		// The counts follow at the next timer tick.
		x.waitState(id, "ready")
		nodetest.WaitFor(t, testWait, func() error {
			if s := x.stats("exp"); s.Ready != 1 {
				return fmt.Errorf("stats of exp: %+v; want 1 ready", s)
			}
			return nil
		})
		if now := time.Now().UnixMilli(); now <= c.Claims[0].End {
			t.Fatalf("ready at %d before the claim's end %d", now, c.Claims[0].End)
		}
		x.refused("renew of an expired claim", wire.CodeClaimExpired, []task.ID{id}, func() error {
			_, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: id, Claim: 0, TTLMs: longTTL})
			return err
		})
		// An expired claim not yet superseded may still complete: nobody
		// else holds the task (docs/design.md, "Fencing").
		if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0}); err != nil {
			t.Fatalf("complete by the expired, unsuperseded claim: %v", err)
		}
		x.wantState(id, "completed")
		x.claimNone("exp")
	})
	t.Run("conflict", func(t *testing.T) {
		x := *x
		x.t = t
		id := x.enqueue1(wire.EnqueueTask{Queue: "conf"})
		x.claim1("conf", longTTL)
		if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		x.refused("complete at another seq", wire.CodeConflict, []task.ID{id}, func() error {
			_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: id, Claim: 0, Seq: u64(3)})
			return err
		})
		x.refused("update of a completed task", wire.CodeCompleted, []task.ID{id}, func() error {
			_, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: 0})
			return err
		})
	})
	t.Run("w", func(t *testing.T) {
		x := *x
		x.t = t
		x.refused("w=2 on a one-node cluster", wire.CodeInvalid, none, enq(2, wire.EnqueueTask{Queue: "e"}))
		x.refused("w=-1", wire.CodeInvalid, none, enq(-1, wire.EnqueueTask{Queue: "e"}))
		resp, err := x.cl().Enqueue(x.ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "e"}}, W: 1})
		if err != nil || resp.Results[0].Acks != 1 {
			t.Fatalf("w=1: %+v, %v", resp, err)
		}
	})
}

// claimOrder is the order claims take tasks: priority desc, then id asc.
func claimOrder(a, b wire.TaskView) int {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.ID.Compare(b.ID))
}

// Reference: docs/design.md, "Operations" (claim: the leader takes its best
// ready task from an ordered index, priority desc then id asc; across the
// partitions one node leads, the order is exact).
func TestClaimOrder(t *testing.T) {
	x := newH(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const n = 400
	var want []wire.TaskView
	for len(want) < n {
		batch := make([]wire.EnqueueTask, min(1+rng.IntN(40), n-len(want)))
		for i := range batch {
			batch[i] = wire.EnqueueTask{Queue: "o", Priority: int32(rng.IntN(9) - 4)}
		}
		for i, id := range x.enqueue(batch...) {
			want = append(want, wire.TaskView{ID: id, Priority: batch[i].Priority})
		}
	}
	slices.SortFunc(want, claimOrder)
	for i, w := range want {
		v := x.claim1("o", longTTL)
		if v.ID != w.ID || v.Priority != w.Priority {
			t.Fatalf("claim %d: %s (priority %d); want %s (priority %d)", i, v.ID, v.Priority, w.ID, w.Priority)
		}
	}
	x.claimNone("o")
}

// Reference: docs/design.md, "Guarantees" (two claims of one task never overlap
// in time; every enqueued task is eventually claimable) under concurrent
// claimers.
func TestConcurrentClaims(t *testing.T) {
	x := newH(t)
	const n, workers = 300, 16
	batch := make([]wire.EnqueueTask, n)
	for i := range batch {
		batch[i] = wire.EnqueueTask{Queue: "cc", Priority: int32(i % 5)}
	}
	want := x.enqueue(batch...)

	var mu sync.Mutex
	got := map[task.ID]int{}
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			errc <- func() error {
				for {
					resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "cc", Count: 1 + w%3, TTLMs: longTTL})
					if err != nil {
						return err
					}
					if len(resp.Tasks) == 0 {
						return nil
					}
					for _, v := range resp.Tasks {
						if *v.Claim != 0 {
							return fmt.Errorf("task %s claimed with claim %d while claim 0 is live", v.ID, *v.Claim)
						}
						mu.Lock()
						got[v.ID]++
						mu.Unlock()
						if w%2 == 0 {
							if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: v.ID, Claim: 0}); err != nil {
								return err
							}
						}
					}
				}
			}()
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Errorf("task %s claimed %d times; want once", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("claimed %d distinct tasks; want %d", len(got), n)
	}
	if s := x.stats("cc"); s.Claimed+s.Completed != n || s.Ready != 0 {
		t.Errorf("stats after the claimers: %+v", s)
	}
}

// Reference: docs/design.md, "Operations" (claim: long-poll (wait) is
// supported; no ready task is an empty answer, not an error).
func TestLongPoll(t *testing.T) {
	x := newH(t)
	type result struct {
		resp *wire.ClaimResponse
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "lp", TTLMs: longTTL, WaitMs: 5000})
		done <- result{resp, err, time.Since(began)}
	}()
	select {
	case r := <-done:
		t.Fatalf("long-poll on an empty queue returned before anything was enqueued: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	id := x.enqueue1(wire.EnqueueTask{Queue: "lp"})
	var r result
	select {
	case r = <-done:
	case <-time.After(testWait):
		t.Fatalf("long-poll did not return within %v of the enqueue", testWait)
	}
	if r.err != nil {
		t.Fatalf("long-poll: %v", r.err)
	}
	if len(r.resp.Tasks) != 1 || r.resp.Tasks[0].ID != id || *r.resp.Tasks[0].Claim != 0 {
		t.Fatalf("long-poll: %+v; want task %s with claim 0", r.resp.Tasks, id)
	}
	if r.took >= 4*time.Second {
		t.Fatalf("long-poll took %v: it waited out its wait instead of waking on the enqueue", r.took)
	}

	began = time.Now()
	resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "lp-empty", WaitMs: 200})
	if err != nil || len(resp.Tasks) != 0 {
		t.Fatalf("long-poll 200ms on an empty queue: %+v, %v; want an empty answer", resp, err)
	}
	if took := time.Since(began); took < 150*time.Millisecond {
		t.Fatalf("long-poll 200ms on an empty queue returned after %v", took)
	}
}

// Reference: docs/design.md, "Partition leaders" (a claim expires for the
// leader only at end + skew_bound) and "Guarantees" (claims of one task
// never overlap; claim ids only grow; dead after max_attempts).
func TestClaimExpiry(t *testing.T) {
	const skew = 100
	x := newH(t, nodetest.SkewBound(skew*time.Millisecond))
	id := x.enqueue1(wire.EnqueueTask{Queue: "x", MaxAttempts: 3})
	claim := func() (*wire.TaskView, error) {
		resp, err := x.cl().Claim(x.ctx, &wire.ClaimRequest{Queue: "x", TTLMs: 100})
		if err != nil || len(resp.Tasks) == 0 {
			return nil, err
		}
		return &resp.Tasks[0], nil
	}
	// next is a claim a check below took because the machine was too slow
	// to look inside the window; it is the next claim of the task.
	var next *wire.TaskView
	for want := uint32(0); want < 3; want++ {
		c := next
		if c == nil {
			nodetest.WaitFor(t, testWait, func() error {
				var err error
				if c, err = claim(); err == nil && c == nil {
					err = fmt.Errorf("claim %d: nothing to claim yet", want)
				}
				return err
			})
		}
		next = nil
		if c.ID != id || *c.Claim != want || c.Attempts != want || len(c.Claims) != int(want)+1 {
			t.Fatalf("claim: %s claim %d attempts %d; want %s claim %d attempts %d", c.ID, *c.Claim, c.Attempts, id, want, want)
		}
		end := c.Claims[want].End
		if want > 0 {
			if prev := c.Claims[want-1]; c.Claims[want].Start < prev.End+skew {
				t.Fatalf("claim %d starts at %d, before claim %d's end %d + skew %d", want, c.Claims[want].Start, want-1, prev.End, skew)
			}
		}
		// Until end + skew the task stays claimed and cannot be claimed
		// again. The checks hold whatever the scheduling: each asserts
		// only what the times measured around its request imply.
		check := func() {
			t.Helper()
			t0 := time.Now().UnixMilli()
			v := x.get(id)
			t1 := time.Now().UnixMilli()
			again, err := claim()
			t2 := time.Now().UnixMilli()
			if err != nil {
				t.Fatal(err)
			}
			if t1 < end+skew && v.State != "claimed" {
				t.Fatalf("at %d, before end %d + skew %d: state %q; want claimed", t1, end, skew, v.State)
			}
			if t0 >= end+skew && v.State == "claimed" {
				t.Fatalf("at %d, after end %d + skew %d: still claimed", t0, end, skew)
			}
			if again != nil {
				if t2 < end+skew {
					t.Fatalf("claimed again at %d, before end %d + skew %d", t2, end, skew)
				}
				t.Logf("claim %d: the check ran after end + skew and took the next claim", want)
				next = again
			}
		}
		check() // just after the claim
		nodetest.WaitFor(t, testWait, func() error {
			if now := time.Now().UnixMilli(); now <= end {
				return fmt.Errorf("claim %d: now %d, not past its end %d", want, now, end)
			}
			return nil
		})
		if next == nil {
			check() // past end, inside the skew bound (on a fast enough machine)
		}
	}
	// The third claim expires too: max_attempts 3 makes the task dead.
	x.waitState(id, "dead")
	v := x.get(id)
	if v.Attempts != 3 || len(v.Claims) != 3 {
		t.Fatalf("dead task: attempts %d claims %+v; want 3 and 3", v.Attempts, v.Claims)
	}
	for i, c := range v.Claims {
		if c.Claim != uint32(i) || c.Completed != nil {
			t.Fatalf("claim %d: %+v", i, c)
		}
	}
	// The counts follow at the next timer tick.
	nodetest.WaitFor(t, testWait, func() error {
		if s := x.stats("x"); s.Dead != 1 || s.Ready+s.Claimed != 0 {
			return fmt.Errorf("stats: %+v; want one dead", s)
		}
		return nil
	})
	x.claimNone("x")
}

// Reference: docs/design.md, "Operations" (dependencies: deps must exist; when
// a dep completes its dependents become ready) and "Data model" (a task is
// ready only when every dep is completed).
func TestDependencies(t *testing.T) {
	x := newH(t)
	a := x.enqueue1(wire.EnqueueTask{Queue: "dep-a"})
	b := x.enqueue1(wire.EnqueueTask{Queue: "dep-b", Deps: []task.ID{a, a}})
	if v := x.get(b); v.State != "blocked" || !reflect.DeepEqual(v.Deps, []task.ID{a}) {
		t.Fatalf("b: state %q deps %v; want blocked on [%s]", v.State, v.Deps, a)
	}
	x.claimNone("dep-b")
	x.claim1("dep-a", longTTL)
	x.wantState(b, "blocked") // a claimed is not a completed
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: a, Claim: 0}); err != nil {
		t.Fatalf("complete a: %v", err)
	}
	x.waitState(b, "ready")
	if c := x.claim1("dep-b", longTTL); c.ID != b {
		t.Fatalf("claim after the dep completed: %s; want %s", c.ID, b)
	}

	// Deps on an earlier task of the same batch, by client-supplied id.
	var gen idGen
	p, q := gen.next(), gen.next()
	ids := x.enqueue(
		wire.EnqueueTask{ID: &p, Queue: "dep-p"},
		wire.EnqueueTask{ID: &q, Queue: "dep-q", Deps: []task.ID{p}},
		wire.EnqueueTask{Queue: "dep-q", Deps: []task.ID{p, q}},
	)
	x.wantState(ids[0], "ready")
	x.wantState(ids[1], "blocked")
	x.wantState(ids[2], "blocked")
	x.claim1("dep-p", longTTL)
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: p, Claim: 0}); err != nil {
		t.Fatalf("complete p: %v", err)
	}
	x.waitState(q, "ready")
	x.wantState(ids[2], "blocked") // still waits on q
	if c := x.claim1("dep-q", longTTL); c.ID != q {
		t.Fatalf("claim: %s; want %s", c.ID, q)
	}
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: q, Claim: 0}); err != nil {
		t.Fatalf("complete q: %v", err)
	}
	x.waitState(ids[2], "ready")

	// A dep that is already completed does not block.
	c := x.enqueue1(wire.EnqueueTask{Queue: "dep-c", Deps: []task.ID{a}})
	x.wantState(c, "ready")
	if got := x.claim1("dep-c", longTTL); got.ID != c {
		t.Fatalf("claim: %s; want %s", got.ID, c)
	}
}

// Reference: docs/design.md, "What a user gets" (restart-safe: every
// acknowledged write is durable; a node that restarts comes back with all
// its data) and "Data model" (claim ids are dense and monotonic).
func TestRestart(t *testing.T) {
	x := newH(t)
	const n = 200
	var ids []task.ID
	for start := 0; start < n; start += 50 {
		batch := make([]wire.EnqueueTask, 50)
		for i := range batch {
			k := start + i
			batch[i] = wire.EnqueueTask{Queue: fmt.Sprintf("r%d", k%2), Priority: int32(k % 3), Data: []byte(fmt.Sprint(k)), Group: fmt.Sprintf("g%d", k%4)}
		}
		ids = append(ids, x.enqueue(batch...)...)
	}
	claimed := x.claim(wire.ClaimRequest{Queue: "r0", Count: 60, TTLMs: longTTL})
	if len(claimed) != 60 {
		t.Fatalf("claimed %d; want 60", len(claimed))
	}
	reclaim := map[task.ID]bool{}
	for i, v := range claimed {
		var err error
		switch i % 6 {
		case 0: // updated, then completed
			if _, err = x.cl().Update(x.ctx, &wire.UpdateRequest{ID: v.ID, Claim: 0, Seq: 0, Data: []byte("u0")}); err == nil {
				_, err = x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: v.ID, Claim: 0})
			}
		case 1: // completed
			_, err = x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: v.ID, Claim: 0})
		case 2: // updated twice, still claimed
			for seq := range uint64(2) {
				if err == nil {
					_, err = x.cl().Update(x.ctx, &wire.UpdateRequest{ID: v.ID, Claim: 0, Seq: seq, Data: []byte{byte(seq)}})
				}
			}
		case 3: // snoozed: ready again
			_, err = x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: v.ID, Claim: 0})
			reclaim[v.ID] = true
		case 4: // failed: ready again after one attempt
			_, err = x.cl().Fail(x.ctx, &wire.FailRequest{ID: v.ID, Claim: 0, Reason: "r", RetryAfterMs: i64(0)})
			reclaim[v.ID] = true
		}
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	view := func() map[task.ID]*wire.TaskView {
		m := map[task.ID]*wire.TaskView{}
		for _, id := range ids {
			m[id] = x.get(id)
		}
		return m
	}
	before, queuesBefore, nodeID := view(), x.queues(), x.c.Node(0).ID()

	x.c.Stop(0)
	x.c.Restart(0)

	if id := x.c.Node(0).ID(); id != nodeID {
		t.Fatalf("node id after restart: %d; want %d", id, nodeID)
	}
	after := view()
	for _, id := range ids {
		if !reflect.DeepEqual(before[id], after[id]) {
			t.Fatalf("task %s after restart:\n got %+v\nwant %+v", id, after[id], before[id])
		}
	}
	if q := x.queues(); !reflect.DeepEqual(q, queuesBefore) {
		t.Fatalf("queues after restart:\n got %+v\nwant %+v", q, queuesBefore)
	}
	// Every ready task is claimable; a task claimed before gets the next
	// claim id.
	ready := queuesBefore[0].Ready
	got := x.claim(wire.ClaimRequest{Queue: "r0", Count: 1000, TTLMs: longTTL})
	if int64(len(got)) != ready {
		t.Fatalf("claimed %d after restart; want the %d ready", len(got), ready)
	}
	for _, v := range got {
		want := uint32(len(before[v.ID].Claims))
		if *v.Claim != want || reclaim[v.ID] != (want == 1) {
			t.Fatalf("task %s: claim %d after restart; want %d", v.ID, *v.Claim, want)
		}
		delete(reclaim, v.ID)
	}
	if len(reclaim) != 0 {
		t.Fatalf("%d snoozed or failed tasks not claimable after restart", len(reclaim))
	}
	// New ids still sort after the old ones.
	if id := x.enqueue1(wire.EnqueueTask{Queue: "r0"}); id.Compare(ids[len(ids)-1]) <= 0 {
		t.Fatalf("id %s after restart sorts before %s", id, ids[len(ids)-1])
	}
}

// httpDo sends a request to the node's HTTP API and returns the status and
// body.
func httpDo(t *testing.T, method, url, body string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// httpJSON sends a request, checks the status and decodes the JSON body
// into out (if not nil).
func httpJSON(t *testing.T, method, url, body string, status int, out any) {
	t.Helper()
	got, hdr, b := httpDo(t, method, url, body)
	if got != status {
		t.Fatalf("%s %s %s: status %d (%s); want %d", method, url, body, got, b, status)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content type %q", method, url, ct)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: body %s: %v", method, url, b, err)
		}
	}
}

// httpError checks an error answer: its status and its JSON body's
// message, code name and number.
func httpError(t *testing.T, method, url, body string, code wire.Code) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
		Num   uint16 `json:"code_num"`
	}
	httpJSON(t, method, url, body, code.HTTPStatus(), &e)
	if e.Error == "" || e.Code != code.Name() || wire.Code(e.Num) != code {
		t.Fatalf("%s %s %s: error body %+v; want code %s (%d)", method, url, body, e, code.Name(), code)
	}
}

// Reference: docs/design.md, "Interfaces" (HTTP/JSON on the same port, with the
// same operations, and /healthz) and "Wire" (errors carry stable codes).
func TestHTTP(t *testing.T) {
	const maxPayload = 64
	x := newH(t, nodetest.MaxPayload(maxPayload))
	base := x.c.HTTP(0)

	var health map[string]any
	httpJSON(t, "GET", base+"/healthz", "", 200, &health)
	if health["status"] != "ok" {
		t.Fatalf("healthz: %v", health)
	}
	var ready map[string]any
	httpJSON(t, "GET", base+"/readyz", "", 200, &ready)
	if ready["status"] != "ready" {
		t.Fatalf("readyz: %v", ready)
	}
	// A wrong method is a 405 naming the right ones; an unknown query
	// parameter is refused; node ids are strings.
	httpJSON(t, "GET", base+"/v1/enqueue", "", 405, nil)
	httpJSON(t, "GET", base+"/v1/tasks?limt=1", "", 400, nil)
	var cluster map[string]any
	httpJSON(t, "GET", base+"/v1/cluster", "", 200, &cluster)
	if self, ok := cluster["self"].(string); !ok || self == "" {
		t.Fatalf("cluster: self %#v; want a string", cluster["self"])
	}

	var one wire.EnqueueResult
	httpJSON(t, "POST", base+"/v1/tasks", `{"queue":"h","priority":2,"data":"aGk="}`, 200, &one)
	if one.ID.IsZero() || one.Acks != 1 {
		t.Fatalf("POST /v1/tasks: %+v", one)
	}
	var batch wire.EnqueueResponse
	httpJSON(t, "POST", base+"/v1/enqueue", fmt.Sprintf(`{"tasks":[{"queue":"h"},{"queue":"h","deps":["%s"]}]}`, one.ID), 200, &batch)
	if len(batch.Results) != 2 {
		t.Fatalf("POST /v1/enqueue: %+v", batch)
	}
	blocked := batch.Results[1].ID
	if x.state(blocked) != "blocked" {
		t.Fatalf("task enqueued over HTTP with a dep is not blocked")
	}

	var claim wire.ClaimResponse
	httpJSON(t, "POST", base+"/v1/claim", `{"queue":"h","count":1,"ttl_ms":60000}`, 200, &claim)
	if len(claim.Tasks) != 1 || claim.Tasks[0].ID != one.ID || *claim.Tasks[0].Claim != 0 || string(claim.Tasks[0].Data) != "hi" {
		t.Fatalf("POST /v1/claim: %+v; want %s (priority 2) with claim 0", claim, one.ID)
	}
	var ack wire.Ack
	httpJSON(t, "POST", base+"/v1/complete", fmt.Sprintf(`{"id":"%s","claim":0}`, one.ID), 200, &ack)
	if ack.Acks != 1 {
		t.Fatalf("POST /v1/complete: %+v", ack)
	}
	var v wire.TaskView
	httpJSON(t, "GET", base+"/v1/tasks/"+one.ID.String(), "", 200, &v)
	if v.ID != one.ID || v.State != "completed" || v.Priority != 2 || string(v.Data) != "hi" || v.Claims[0].Completed == nil {
		t.Fatalf("GET /v1/tasks/{id}: %+v", v)
	}
	x.waitState(blocked, "ready")

	// The list streams NDJSON: one task per line.
	status, hdr, body := httpDo(t, "GET", base+"/v1/tasks?queue=h", "")
	if status != 200 || hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET /v1/tasks: status %d, content type %q: %s", status, hdr.Get("Content-Type"), body)
	}
	states := map[task.ID]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var lv wire.TaskView
		if err := json.Unmarshal(sc.Bytes(), &lv); err != nil {
			t.Fatalf("GET /v1/tasks: line %q: %v", sc.Bytes(), err)
		}
		states[lv.ID] = lv.State
	}
	if len(states) != 3 || states[one.ID] != "completed" || states[blocked] != "ready" {
		t.Fatalf("GET /v1/tasks?queue=h: %v", states)
	}
	if _, _, body := httpDo(t, "GET", base+"/v1/tasks?queue=h&state=completed&limit=5", ""); bytes.Count(body, []byte("\n")) != 1 {
		t.Fatalf("GET /v1/tasks?state=completed: %s; want one line", body)
	}
	if _, _, body := httpDo(t, "GET", base+"/v1/tasks?queue=none", ""); len(body) != 0 {
		t.Fatalf("GET /v1/tasks of an empty queue: %q; want no lines", body)
	}
	var cnt wire.CountResponse
	httpJSON(t, "GET", base+"/v1/count?queue=h", "", 200, &cnt)
	if cnt.Count != 3 {
		t.Fatalf("GET /v1/count: %+v", cnt)
	}
	var qs wire.QueuesResponse
	httpJSON(t, "GET", base+"/v1/queues", "", 200, &qs)
	if want := []wire.QueueStats{{Queue: "h", Ready: 2, Completed: 1}}; !reflect.DeepEqual(countsOnly(t, qs.Queues), want) {
		t.Fatalf("GET /v1/queues: %+v; want %+v", qs.Queues, want)
	}

	// Errors: JSON bodies with the code's status; nothing is stored.
	big := base64.StdEncoding.EncodeToString(make([]byte, maxPayload+1))
	unknownID := task.MakeID(1, 2, 3).String()
	for _, tc := range []struct {
		method, path, body string
		code               wire.Code
	}{
		{"POST", "/v1/tasks", `{"queue":"bad queue"}`, wire.CodeInvalid},
		{"POST", "/v1/tasks", `{"queue":"h","data":"` + big + `"}`, wire.CodeTooLarge},
		{"POST", "/v1/tasks", `{"queue":"h","deps":["` + unknownID + `"]}`, wire.CodeDepNotFound},
		{"POST", "/v1/tasks", `{"queue":"h","bogus":1}`, wire.CodeInvalid},
		{"POST", "/v1/tasks", `{"queue":"h","w":2}`, wire.CodeInvalid},
		{"POST", "/v1/tasks", `}{ garbage`, wire.CodeInvalid},
		{"POST", "/v1/tasks", ``, wire.CodeInvalid},
		{"POST", "/v1/tasks", `{"queue":"h"} {"queue":"h"}`, wire.CodeInvalid},
		{"POST", "/v1/tasks", `{"queue":"h","id":"xyz"}`, wire.CodeInvalid},
		{"POST", "/v1/enqueue", `{"tasks":[{"queue":"h"},{"queue":"h","data":"` + big + `"}]}`, wire.CodeTooLarge},
		{"POST", "/v1/enqueue", `{"tasks":[]}`, wire.CodeInvalid},
		{"POST", "/v1/enqueue", `[1,2,3]`, wire.CodeInvalid},
		{"POST", "/v1/claim", `{"queue":"h","ttl_ms":-5}`, wire.CodeInvalid},
		{"POST", "/v1/claim", `{"queue":"h","extra":true}`, wire.CodeInvalid},
		{"POST", "/v1/complete", `{"id":"` + blocked.String() + `","claim":5}`, wire.CodeNoSuchClaim},
		{"POST", "/v1/complete", `{"id":"` + one.ID.String() + `","claim":0,"seq":4}`, wire.CodeConflict},
		{"POST", "/v1/complete", `{"id":"` + unknownID + `","claim":0}`, wire.CodeNotFound},
		{"POST", "/v1/complete", `{"id":"00","claim":0}`, wire.CodeInvalid},
		{"GET", "/v1/tasks/" + unknownID, ``, wire.CodeNotFound},
		{"GET", "/v1/tasks/xyz", ``, wire.CodeInvalid},
		{"GET", "/v1/tasks/" + strings.Repeat("0", 40), ``, wire.CodeInvalid},
		{"GET", "/v1/tasks/" + one.ID.String() + "?min_seq=abc", ``, wire.CodeInvalid},
		{"GET", "/v1/tasks/" + one.ID.String() + "?min_seq=9", ``, wire.CodeStale},
		{"GET", "/v1/tasks?state=sleeping", ``, wire.CodeInvalid},
		{"GET", "/v1/tasks?limit=-1", ``, wire.CodeInvalid},
		{"GET", "/v1/count?queue=bad+queue", ``, wire.CodeInvalid},
		{"GET", "/v1/nope", ``, wire.CodeUnknownOp},
	} {
		before := x.snapshot([]task.ID{one.ID, blocked})
		httpError(t, tc.method, base+tc.path, tc.body, tc.code)
		if after := x.snapshot([]task.ID{one.ID, blocked}); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s %s %s: refused, but the node changed", tc.method, tc.path, tc.body)
		}
	}
}

// Reference: docs/design.md, "Data model" (id: a k-ordered flake id of ms time,
// node id and counter) and "Guarantees" (no acknowledged enqueue is
// lost). A node that restarts with its clock set back (an NTP step at
// boot) reaches the milliseconds of ids it issued before the restart
// again; it must not issue those ids a second time.
func TestIDsAcrossRestartWithClockSetBack(t *testing.T) {
	clk := clock.NewManual(time.Now())
	x := newH(t, func(c *node.Config) { c.Clock = clk })
	first := x.enqueue1(wire.EnqueueTask{Queue: "idc", Data: []byte("first")})
	x.claim1("idc", longTTL)
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: first, Claim: 0}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	clk.Advance(-time.Second)
	x.c.Restart(0)
	clk.Advance(time.Second) // back at the millisecond of first
	second := x.enqueue1(wire.EnqueueTask{Queue: "idc", Data: []byte("second")})
	if second == first {
		t.Errorf("after a restart the node issued id %s again", first)
	}
	if v := x.get(first); string(v.Data) != "first" || v.State != "completed" {
		t.Errorf("first task after the second enqueue: data %q, state %s; want \"first\", completed", v.Data, v.State)
	}
	if v := x.get(second); string(v.Data) != "second" || v.State != "ready" {
		t.Errorf("second task: data %q, state %s; want \"second\", ready", v.Data, v.State)
	}
	if n := x.count("idc"); n != 2 {
		t.Errorf("count: %d; want 2", n)
	}
}

// Reference: docs/design.md, "Operations" (claim long-poll) and STYLE.md habit
// 18 (every Start has a Close that cancels and then waits). A claim
// long-polling over HTTP ends when the node stops: it neither holds Close
// for the whole shutdown timeout nor outlives it.
func TestCloseEndsLongPoll(t *testing.T) {
	x := newH(t)
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		req, err := http.NewRequest("POST", x.c.HTTP(0)+"/v1/claim", strings.NewReader(`{"queue":"lp","wait_ms":60000}`))
		if err != nil {
			done <- result{0, err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{0, err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, nil}
	}()
	select {
	case r := <-done:
		t.Fatalf("long-poll returned before the node stopped: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	began := time.Now()
	x.c.Stop(0)
	limit := x.c.Config(0).ShutdownTimeout / 2
	if took := time.Since(began); took >= limit {
		t.Errorf("Close took %v with a long-poll in flight; want well under the shutdown timeout %v", took, x.c.Config(0).ShutdownTimeout)
	}
	select {
	case r := <-done:
		if r.err == nil && r.status != http.StatusOK && r.status != http.StatusServiceUnavailable {
			t.Errorf("long-poll ended by Close: status %d; want 200 (nothing claimed) or 503", r.status)
		}
	case <-time.After(limit):
		t.Fatalf("long-poll still pending %v after Close returned", limit)
	}
}

// Reference: docs/design.md, "Operations" (get with min_seq refuses a history
// shorter than the client has seen): the history spans claims, so a
// client that saw claim 0's updates still reads after a reclaim.
func TestMinSeqSpansClaims(t *testing.T) {
	x := newH(t)
	id := x.enqueue1(wire.EnqueueTask{Queue: "m"})
	x.claim1("m", longTTL)
	for seq := range uint64(2) {
		if _, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: id, Claim: 0, Seq: seq, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: id, Claim: 0}); err != nil {
		t.Fatal(err)
	}
	if c := x.claim1("m", longTTL); *c.Claim != 1 {
		t.Fatalf("reclaim got claim %d; want 1", *c.Claim)
	}
	if _, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id, MinSeq: u64(2)}); err != nil {
		t.Fatalf("get min_seq 2 after a reclaim, with 2 updates under claim 0: %v", err)
	}
	_, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: id, MinSeq: u64(3)})
	wantCode(t, "get min_seq 3 with 2 updates", err, wire.CodeStale)
}

// The zero id is never assigned: every operation naming it is invalid
// input, on QUIC as on HTTP.
func TestZeroIDInvalid(t *testing.T) {
	x := newH(t)
	var zero task.ID
	ops := map[string]func() error{
		"get":      func() error { _, err := x.cl().Get(x.ctx, &wire.GetRequest{ID: zero}); return err },
		"renew":    func() error { _, err := x.cl().Renew(x.ctx, &wire.RenewRequest{ID: zero}); return err },
		"update":   func() error { _, err := x.cl().Update(x.ctx, &wire.UpdateRequest{ID: zero}); return err },
		"complete": func() error { _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: zero}); return err },
		"fail":     func() error { _, err := x.cl().Fail(x.ctx, &wire.FailRequest{ID: zero}); return err },
		"snooze":   func() error { _, err := x.cl().Snooze(x.ctx, &wire.SnoozeRequest{ID: zero}); return err },
		"requeue":  func() error { _, err := x.cl().Requeue(x.ctx, &wire.RequeueRequest{ID: zero}); return err },
	}
	for name, op := range ops {
		wantCode(t, name+" of the zero id", op(), wire.CodeInvalid)
	}
}

// Reference: docs/design.md, "Operations" (dependencies: when a dep completes,
// its dependents are told). The node learns which tasks are deps from the
// stored reverse edges at start, so a completion after a restart still
// unblocks its dependents at once, not only at the next reconcile.
func TestDependenciesAcrossRestart(t *testing.T) {
	x := newH(t)
	a := x.enqueue1(wire.EnqueueTask{Queue: "dr-a"})
	b := x.enqueue1(wire.EnqueueTask{Queue: "dr-b", Deps: []task.ID{a}})
	x.wantState(b, "blocked")
	x.c.Restart(0)
	x.wantState(b, "blocked")
	x.claim1("dr-a", longTTL)
	if _, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: a, Claim: 0}); err != nil {
		t.Fatalf("complete a: %v", err)
	}
	x.wantState(b, "ready")
}

// A completion can carry the next claim (wire.CompleteRequest.Next): the
// completion is applied first and is durable when the answer comes, the
// next task comes with its claim, and invalid next parameters change
// nothing.
func TestCompleteAndClaimNext(t *testing.T) {
	x := newH(t)
	ids := x.enqueue(wire.EnqueueTask{Queue: "cn", Priority: 2}, wire.EnqueueTask{Queue: "cn", Priority: 1})
	first := x.claim1("cn", longTTL)
	if first.ID != ids[0] {
		t.Fatalf("first claim %s; want %s", first.ID, ids[0])
	}
	x.refused("complete with a long-polling next claim", wire.CodeInvalid, ids, func() error {
		_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: first.ID, Claim: 0, Next: &wire.ClaimRequest{Queue: "cn", WaitMs: 10}})
		return err
	})
	x.refused("complete with an invalid next queue", wire.CodeInvalid, ids, func() error {
		_, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: first.ID, Claim: 0, Next: &wire.ClaimRequest{Queue: "bad/q"}})
		return err
	})
	resp, err := x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: first.ID, Claim: 0, Next: &wire.ClaimRequest{Queue: "cn", TTLMs: longTTL}})
	if err != nil {
		t.Fatalf("complete with next: %v", err)
	}
	if resp.Acks != 1 || len(resp.Next) != 1 || resp.Next[0].ID != ids[1] || resp.Next[0].Claim == nil || *resp.Next[0].Claim != 0 {
		t.Fatalf("complete with next: %+v; want acks 1 and %s under claim 0", resp, ids[1])
	}
	x.wantState(ids[0], "completed")
	x.wantState(ids[1], "claimed")
	// Nothing left: the completion still succeeds, with no next task.
	resp, err = x.cl().Complete(x.ctx, &wire.CompleteRequest{ID: ids[1], Claim: 0, Next: &wire.ClaimRequest{Queue: "cn"}})
	if err != nil || len(resp.Next) != 0 {
		t.Fatalf("complete with next on an empty queue: %+v, %v", resp, err)
	}
	x.wantState(ids[1], "completed")
}
