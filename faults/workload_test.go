package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// fakeNode is a tiny stand-in for a node's HTTP API: a FIFO queue of
// enqueued tasks, claims that never expire, and a switch that makes
// every request answer 503.
type fakeNode struct {
	mu       sync.Mutex
	ready    []task.ID
	claims   map[task.ID]uint32
	down     bool
	requests map[string]int
	// ws are the enqueues' w, in order.
	ws []int
	// placed counts the enqueues that sent no id, hints those that asked
	// for a hint.
	placed, hints int
}

func newFakeNode() *fakeNode {
	return &fakeNode{claims: map[task.ID]uint32{}, requests: map[string]int{}}
}

func (f *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[r.URL.Path]++
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if f.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "no leader", "code": "unavailable"})
		return
	}
	switch r.URL.Path {
	case "/v1/enqueue":
		var req wire.EnqueueRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.ws = append(f.ws, req.W)
		if req.Hint {
			f.hints++
		}
		for i := range req.Tasks {
			if req.Tasks[i].ID == nil { // placed: the node draws the id
				f.placed++
				id := task.MakeID(1, 7, uint32(f.placed))
				req.Tasks[i].ID = &id
			}
			f.ready = append(f.ready, *req.Tasks[i].ID)
		}
		_ = json.NewEncoder(w).Encode(wire.EnqueueResponse{Results: []wire.EnqueueResult{{ID: *req.Tasks[0].ID, Acks: 2}}})
	case "/v1/claim":
		resp := wire.ClaimResponse{}
		if len(f.ready) > 0 {
			id := f.ready[0]
			f.ready = f.ready[1:]
			c := f.claims[id]
			f.claims[id] = c + 1
			resp.Tasks = []wire.TaskView{{ID: id, Claim: &c, Claims: []wire.ClaimView{{Claim: c, End: 1000, Epoch: 4}}, Attempts: 1}}
		}
		_ = json.NewEncoder(w).Encode(resp)
	case "/v1/update", "/v1/complete", "/v1/fail", "/v1/snooze":
		_ = json.NewEncoder(w).Encode(wire.Ack{Acks: 2})
	case "/v1/renew":
		_ = json.NewEncoder(w).Encode(wire.RenewResponse{End: 2000, Acks: 2})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "no such endpoint", "code": "unknown_op"})
	}
}

// memEmitter collects a loop's events in memory and runs a sink.
type memEmitter struct {
	mu     sync.Mutex
	events []Event
	sink   *Sink
}

func (m *memEmitter) Emit(e Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

func (m *memEmitter) Offer(proc int, t string, claim uint32) (bool, error) {
	ok := m.sink.Offer(t, claim)
	c := claim
	m.Emit(Event{Proc: proc, Type: Effect, F: Effect, Task: t, Claim: &c, Accepted: &ok})
	return ok, nil
}

func (m *memEmitter) Holding(bool) {}

func testLoopConfig(addr string) LoopConfig {
	mix := DefaultMix()
	mix.EnqueuePerSec = 200
	mix.FastWork = time.Millisecond
	mix.Slow = 0
	mix.IdlePause = 5 * time.Millisecond
	return LoopConfig{
		Loop: 2, ProcStride: 11, Addrs: []string{addr}, Token: "tok", Seed: 1, Start: MonoNow(),
		RunTag: "t", Queue: "q", TTL: 2 * time.Second, MaxAttempts: 3, ReqTimeout: time.Second, Mix: mix,
	}
}

// A loop records every operation as an invoke and one outcome of the
// same proc, offers each effect before its complete, and takes a new
// proc after an info.
func TestLoopHistoryShape(t *testing.T) {
	fake := newFakeNode()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	em := &memEmitter{sink: NewSink()}
	l := NewLoop(testLoopConfig(strings.TrimPrefix(srv.URL, "http://")), em)
	defer l.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { l.Run(context.Background(), stop); close(done) }()
	testkit.WaitFor(t, 10*time.Second, func() error {
		em.mu.Lock()
		defer em.mu.Unlock()
		n := 0
		for _, e := range em.events {
			if e.Type == OK && e.F == FComplete {
				n++
			}
		}
		if n < 20 {
			return fmt.Errorf("%d completes so far", n)
		}
		return nil
	})
	fake.mu.Lock()
	fake.down = true
	fake.mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, func() error {
		em.mu.Lock()
		defer em.mu.Unlock()
		if n := len(em.events); n == 0 || em.events[n-1].Type != Info {
			return fmt.Errorf("no info yet")
		}
		return nil
	})
	close(stop)
	<-done

	em.mu.Lock()
	defer em.mu.Unlock()
	inflight := map[int]Event{}
	effects := map[string]bool{}
	sawInfo := false
	placed, hints := 0, 0
	for i, e := range em.events {
		switch e.Type {
		case Invoke:
			if _, busy := inflight[e.Proc]; busy {
				t.Fatalf("event %d: proc %d invokes with an operation in flight", i, e.Proc)
			}
			if e.Proc%11 != 2 {
				t.Fatalf("event %d: proc %d is not loop 2's (2 mod 11)", i, e.Proc)
			}
			if e.F == FComplete && !effects[e.Task] {
				t.Fatalf("event %d: complete of %s before its effect", i, e.Task)
			}
			inflight[e.Proc] = e
		case OK, Fail, Info:
			inv, ok := inflight[e.Proc]
			if !ok || inv.F != e.F || inv.Node != e.Node {
				t.Fatalf("event %d: outcome %+v without its invoke", i, e)
			}
			delete(inflight, e.Proc)
			if e.Type == Info {
				sawInfo = true
				if e.Code != "unavailable" {
					t.Errorf("event %d: info code %q; want unavailable", i, e.Code)
				}
			}
			if e.Type == OK && e.F == FClaim && e.Task != "" && (e.Claim == nil || e.Epoch != 4 || e.End != 1000) {
				t.Errorf("event %d: claim ok without its claim, epoch and end: %+v", i, e)
			}
			if e.Hint != inv.Hint {
				t.Errorf("event %d: outcome hint %v, its invoke's %v; want the invoke's", i, e.Hint, inv.Hint)
			}
			if e.Type == OK && e.F == FEnqueue && inv.Hint {
				hints++
			}
			if e.Type == OK && e.F == FEnqueue && inv.Placed {
				placed++
				if inv.Task != "" || e.Task == "" {
					t.Errorf("event %d: placed enqueue invoked with task %q, ok with task %q; want none, then the node's", i, inv.Task, e.Task)
				}
			}
		case Effect:
			effects[e.Task] = true
		}
	}
	if !sawInfo {
		t.Errorf("no info recorded while the node answered 503")
	}
	fake.mu.Lock()
	seen, seenHints := fake.placed, fake.hints
	fake.mu.Unlock()
	if placed == 0 || placed != seen {
		t.Errorf("%d placed enqueues acknowledged, the node saw %d; want some, and the same", placed, seen)
	}
	if hints == 0 || hints != seenHints {
		t.Errorf("%d enqueues that recorded a hint acknowledged, the node saw %d ask for one; want some, and the same", hints, seenHints)
	}
	// After the info the loop's next operation had a new proc.
	last := em.events[len(em.events)-1]
	for _, e := range em.events {
		if e.Type == Invoke && e.TNs > last.TNs && e.Proc == last.Proc {
			t.Errorf("proc %d invoked again after its info", e.Proc)
		}
	}
}

// The drain claims and completes until every node answers empty three
// times in a row.
func TestDrain(t *testing.T) {
	fake := newFakeNode()
	for range 5 {
		fake.ready = append(fake.ready, NewTaskID(rand.New(rand.NewPCG(1, 2)), time.Now()))
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	em := &memEmitter{sink: NewSink()}
	addr := strings.TrimPrefix(srv.URL, "http://")
	cfg := testLoopConfig(addr)
	cfg.Addrs = []string{addr, addr}
	l := NewLoop(cfg, em)
	defer l.Close()
	rep := l.Drain(context.Background(), 10*time.Second, time.Millisecond, 3)
	if !rep.Done || rep.Claimed != 5 || rep.Completed != 5 {
		t.Errorf("drain %+v; want done with 5 claimed and completed", rep)
	}
	if got := fake.requests["/v1/claim"]; got != 5+6 {
		t.Errorf("%d claims; want 5 that found a task and 3 empty per node", got)
	}
}

// Outcomes: 2xx ok, 4xx fail with skuldd's code, 5xx and transport
// errors info.
func TestAPIClassifies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"acks":2}`))
		case "/conflict":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"claim 0 is superseded","code":"claim_superseded","code_num":7}`))
		case "/unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"no leader","code":"unavailable","code_num":16}`))
		case "/slow":
			time.Sleep(200 * time.Millisecond)
		}
	}))
	defer srv.Close()
	// A port nothing listens on: bind one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	api := NewAPI([]string{strings.TrimPrefix(srv.URL, "http://"), closed}, "", nil, netipZero)
	defer api.Close()
	ctx := context.Background()
	var ack wire.Ack
	if r := api.Do(ctx, 1, http.MethodPost, "/ok", struct{}{}, &ack); r.Type != OK || ack.Acks != 2 {
		t.Errorf("/ok: %+v, acks %d", r, ack.Acks)
	}
	if r := api.Do(ctx, 1, http.MethodPost, "/conflict", nil, nil); r.Type != Fail || r.Code != "claim_superseded" {
		t.Errorf("/conflict: %+v; want fail claim_superseded", r)
	}
	if r := api.Do(ctx, 1, http.MethodPost, "/unavailable", nil, nil); r.Type != Info || r.Code != "unavailable" {
		t.Errorf("/unavailable: %+v; want info unavailable", r)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if r := api.Do(tctx, 1, http.MethodGet, "/slow", nil, nil); r.Type != Info || r.Code != "timeout" {
		t.Errorf("/slow: %+v; want info timeout", r)
	}
	if r := api.Do(ctx, 2, http.MethodGet, "/", nil, nil); r.Type != Info || r.Code != "conn_refused" {
		t.Errorf("closed port: %+v; want info conn_refused", r)
	}
}

func TestTaskIDSortsByTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	t0 := time.UnixMilli(1_800_000_000_000)
	a, b := NewTaskID(rng, t0), NewTaskID(rng, t0.Add(time.Millisecond))
	if a.Compare(b) >= 0 || a.Millis() != t0.UnixMilli() {
		t.Errorf("ids %s, %s do not sort by time", a, b)
	}
	if _, err := task.ParseID(a.String()); err != nil || len(a.String()) != 40 {
		t.Errorf("id %q: %v", a, err)
	}
}

var netipZero netip.Addr

// --w reaches every enqueue: the run's config to each loop's (through the
// JSON a worker process reads), and the loop's to the request's "w".
func TestEnqueueCarriesW(t *testing.T) {
	cfg := DefaultConfig()
	cfg.W = 1
	r := &Run{cfg: cfg}
	for _, k := range []int{0, cfg.Workers - 1, cfg.Workers} { // the last is the drain's
		lc := r.loopConfig(k)
		b, err := json.Marshal(&lc)
		if err != nil {
			t.Fatal(err)
		}
		var back LoopConfig
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.W != 1 {
			t.Errorf("loop %d: w %d after the worker's JSON; want 1", k, back.W)
		}
	}

	fake := newFakeNode()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	lc := testLoopConfig(strings.TrimPrefix(srv.URL, "http://"))
	lc.W = 1
	em := &memEmitter{sink: NewSink()}
	l := NewLoop(lc, em)
	defer l.Close()
	for range 5 {
		l.enqueue(context.Background())
	}
	// The answer's acks are recorded on the ok (the fake says 2).
	for _, e := range em.events {
		if e.Type == OK && e.Acks != 2 {
			t.Errorf("enqueue ok with acks %d; want 2", e.Acks)
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.ws) != 5 || slices.ContainsFunc(fake.ws, func(w int) bool { return w != 1 }) {
		t.Errorf("enqueues sent w %v; want 1 each time", fake.ws)
	}
}

// Each request goes with its role's credential: enqueues the
// producer's, claims and the writes under them the worker's; an enqueue
// drawn Forbidden goes with the worker's, is refused (403, a definite
// fail) and recorded as the worker's.
func TestLoopCredentials(t *testing.T) {
	fake := newFakeNode()
	var mu sync.Mutex
	seen := map[string]map[string]int{} // path -> token -> requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		if seen[r.URL.Path] == nil {
			seen[r.URL.Path] = map[string]int{}
		}
		seen[r.URL.Path][tok]++
		mu.Unlock()
		if r.URL.Path == "/v1/enqueue" && tok == "worker-tok" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"forbidden: credential fault-worker (role worker) may not enqueue","code":"forbidden","code_num":28}`))
			return
		}
		r.Header.Set("Authorization", "Bearer tok") // the fake knows one token
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	lc := testLoopConfig(strings.TrimPrefix(srv.URL, "http://"))
	lc.ProducerToken, lc.WorkerToken = "producer-tok", "worker-tok"
	lc.Mix.Forbidden = 0.3
	lc.Mix.Placed, lc.Mix.Keyed, lc.Mix.DepProb = 0, 0, 0
	em := &memEmitter{sink: NewSink()}
	l := NewLoop(lc, em)
	defer l.Close()
	ctx := context.Background()
	for range 40 {
		l.enqueue(ctx)
	}
	for l.claimAndWork(ctx, nil) {
	}
	forbidden := 0
	for _, e := range em.events {
		if e.F != FEnqueue || e.Type == Invoke {
			continue
		}
		switch {
		case e.As == roleWorker && (e.Type != Fail || e.Code != "forbidden"):
			t.Errorf("an enqueue as the worker: %s %s; want a fail, forbidden", e.Type, e.Code)
		case e.As == roleWorker:
			forbidden++
		case e.As != roleProducer || e.Type != OK:
			t.Errorf("an enqueue as %q: %s %s; want the producer's, ok", e.As, e.Type, e.Code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if forbidden == 0 || seen["/v1/enqueue"]["producer-tok"] == 0 || seen["/v1/enqueue"]["worker-tok"] != forbidden {
		t.Errorf("enqueues by token %v, %d refused; want some of each, each worker's refused", seen["/v1/enqueue"], forbidden)
	}
	for _, path := range []string{"/v1/claim", "/v1/complete"} {
		if len(seen[path]) != 1 || seen[path]["worker-tok"] == 0 {
			t.Errorf("%s by token %v; want the worker's only", path, seen[path])
		}
	}
}
