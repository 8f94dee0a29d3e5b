package httpapi_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// fakeService answers every call from its request alone, and fails on
// request: a queue named "e<n>" (or, for calls that carry a claim, claim n
// in 1..99) makes the call fail with wire code n; a list of queue "m<n>"
// sends a page and then fails with code n. It records the codes it failed
// with, so a test can tell a 5xx it caused from one httpapi made up.
type fakeService struct {
	mu     sync.Mutex
	failed []wire.Code
	// err, if set, is what Count returns (the error-mapping table).
	err error
}

// fail returns the error for code n and records it.
func (f *fakeService) fail(n uint64) error {
	c := wire.Code(n)
	f.mu.Lock()
	f.failed = append(f.failed, c)
	f.mu.Unlock()
	return wire.Errorf(c, "fake failure with code %d", n)
}

// errFor returns the error a queue name asks for, if any.
func (f *fakeService) errFor(queue, prefix string) error {
	if !strings.HasPrefix(queue, prefix) {
		return nil
	}
	n, err := strconv.ParseUint(queue[len(prefix):], 10, 16)
	if err != nil || n == 0 {
		return nil
	}
	return f.fail(n)
}

func (f *fakeService) errForClaim(claim uint32) error {
	if claim == 0 || claim > 99 {
		return nil
	}
	return f.fail(uint64(claim))
}

func (f *fakeService) failedWith(status int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.failed {
		if c.HTTPStatus() == status {
			return true
		}
	}
	return false
}

func fakeView(id task.ID, queue string) wire.TaskView {
	claim := uint32(0)
	return wire.TaskView{
		ID: id, Queue: queue, Data: []byte("payload"), Deps: []task.ID{}, State: "claimed",
		Claim: &claim, Claims: []wire.ClaimView{{Claim: 0, Start: 1, End: 2}}, Updates: []wire.UpdateView{},
		MaxAttempts: 3,
	}
}

var fakeID = task.MakeID(1_700_000_000_000, 1, 1)

func (f *fakeService) Ping(context.Context) (*wire.PingResponse, error) {
	return &wire.PingResponse{NodeID: 1, Time: 2}, nil
}

func (f *fakeService) Enqueue(_ context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	resp := &wire.EnqueueResponse{Results: []wire.EnqueueResult{}}
	for i, t := range req.Tasks {
		if err := f.errFor(t.Queue, "e"); err != nil {
			return nil, err
		}
		resp.Results = append(resp.Results, wire.EnqueueResult{ID: task.MakeID(1, 1, uint32(i)), Acks: 1})
	}
	return resp, nil
}

func (f *fakeService) Claim(_ context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	if err := f.errFor(req.Queue, "e"); err != nil {
		return nil, err
	}
	resp := &wire.ClaimResponse{Tasks: []wire.TaskView{}}
	for i := range min(max(req.Count, 1), 3) {
		resp.Tasks = append(resp.Tasks, fakeView(task.MakeID(1, 1, uint32(i)), req.Queue))
	}
	return resp, nil
}

func (f *fakeService) Renew(_ context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	if err := f.errForClaim(req.Claim); err != nil {
		return nil, err
	}
	return &wire.RenewResponse{End: 5, Acks: 1}, nil
}

func (f *fakeService) ack(claim uint32) (*wire.Ack, error) {
	if err := f.errForClaim(claim); err != nil {
		return nil, err
	}
	return &wire.Ack{Acks: 1}, nil
}

func (f *fakeService) Update(_ context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return f.ack(req.Claim)
}

func (f *fakeService) Complete(_ context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	a, err := f.ack(req.Claim)
	if err != nil {
		return nil, err
	}
	return &wire.CompleteResponse{Acks: a.Acks}, nil
}

func (f *fakeService) Fail(_ context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return f.ack(req.Claim)
}

func (f *fakeService) Snooze(_ context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return f.ack(req.Claim)
}

func (f *fakeService) Requeue(context.Context, *wire.RequeueRequest) (*wire.Ack, error) {
	return &wire.Ack{Acks: 1}, nil
}

func (f *fakeService) Cancel(context.Context, *wire.CancelRequest) (*wire.Ack, error) {
	return &wire.Ack{Acks: 1}, nil
}

func (f *fakeService) Delete(context.Context, *wire.DeleteRequest) (*wire.Ack, error) {
	return &wire.Ack{Acks: 1}, nil
}

func (f *fakeService) RequeueDead(_ context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return &wire.BulkResponse{Done: len(req.Queue)}, nil
}

func (f *fakeService) PurgeDead(_ context.Context, req *wire.DeadRequest) (*wire.BulkResponse, error) {
	return &wire.BulkResponse{Done: len(req.Queue)}, nil
}

// Get fails with code id[19] for ids whose first byte is 0xee.
func (f *fakeService) Get(_ context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	if req.ID[0] == 0xee && req.ID[19] != 0 {
		return nil, f.fail(uint64(req.ID[19]))
	}
	v := fakeView(req.ID, "q")
	v.Claim = nil
	// The replica count asked for comes back as the view's priority, for
	// TestGetReplicaCount.
	v.Priority = int32(req.R)
	return &v, nil
}

// TestGetReplicaCount: GET /v1/tasks/{id} passes r (how many replicas to
// read; r=1 is the answering node's own) to the service, and refuses an
// r that is not a count.
func TestGetReplicaCount(t *testing.T) {
	h := newAPI(&fakeService{})
	id := task.ID{1}.String()
	for q, want := range map[string]int{"": 0, "?r=1": 1, "?r=3&min_seq=0": 3} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks/"+id+q, nil))
		var v wire.TaskView
		if err := json.Unmarshal(rec.Body.Bytes(), &v); rec.Code != http.StatusOK || err != nil || int(v.Priority) != want {
			t.Errorf("%s: %d %s; want r=%d passed on", q, rec.Code, rec.Body, want)
		}
	}
	for _, q := range []string{"?r=x", "?r=-1"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks/"+id+q, nil))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d; want 400", q, rec.Code)
		}
	}
}

func (f *fakeService) List(_ context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	if err := f.errFor(req.Queue, "e"); err != nil {
		return err
	}
	n := min(req.Limit, 5)
	if req.Limit == 0 {
		n = 2
	}
	for i := range n {
		if err := emit(&wire.ListPage{Tasks: []wire.TaskView{fakeView(task.MakeID(1, 1, uint32(i)), req.Queue)}}); err != nil {
			return err
		}
	}
	return f.errFor(req.Queue, "m")
}

func (f *fakeService) Count(_ context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	if err := f.errFor(req.Queue, "e"); err != nil {
		return nil, err
	}
	return &wire.CountResponse{Count: 7 + int64(len(req.Subtopic))}, nil
}

func (f *fakeService) Queues(_ context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	resp := &wire.QueuesResponse{Queues: []wire.QueueStats{{Queue: "q", Ready: 1}}}
	if req.Subtopics {
		resp.Subtopics = []wire.QueueStats{{Queue: "q", Subtopic: "eu", Ready: 1}}
	}
	return resp, nil
}

// Group echoes the request: Total is the dead tasks asked for.
func (f *fakeService) Group(_ context.Context, req *wire.GroupRequest) (*wire.GroupResponse, error) {
	return &wire.GroupResponse{Group: req.Group, Total: int64(req.Dead)}, nil
}

// GroupCancel echoes the request: Done is the group name's length, the
// reason the one error.
func (f *fakeService) GroupCancel(_ context.Context, req *wire.GroupCancelRequest) (*wire.BulkResponse, error) {
	resp := &wire.BulkResponse{Done: len(req.Group)}
	if req.Reason != "" {
		resp.Errors = []string{req.Reason}
	}
	return resp, nil
}

// Hints echoes the request's limit as the pending count.
func (f *fakeService) Hints(_ context.Context, req *wire.HintsRequest) (*wire.HintsResponse, error) {
	return &wire.HintsResponse{Node: 1, Pending: int64(req.Limit), Hints: []wire.HintView{}}, nil
}

func (f *fakeService) Leave(context.Context) (*wire.LeaveResponse, error) {
	return &wire.LeaveResponse{}, nil
}

func (f *fakeService) Cluster(context.Context) (*wire.ClusterResponse, error) {
	return &wire.ClusterResponse{Self: 1}, nil
}

func (f *fakeService) GC(_ context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &wire.GCResponse{DryRun: req.DryRun, Candidates: 3, Collectable: 2}, nil
}

func (f *fakeService) QueueGet(_ context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &wire.QueueSettings{Queue: req.Queue, MaxAttempts: 4}, nil
}

func (f *fakeService) QueueSet(_ context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if f.err != nil {
		return nil, f.err
	}
	s := &wire.QueueSettings{Queue: req.Queue}
	if req.Paused != nil {
		s.Paused = *req.Paused
	}
	if req.MaxAttempts != nil {
		s.MaxAttempts = *req.MaxAttempts
	}
	return s, nil
}

func (f *fakeService) ScheduleSet(_ context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &wire.ScheduleView{Name: req.Name, Queue: req.Queue, EveryMs: req.EveryMs, Cron: req.Cron, CatchUp: "skip", Version: 1}, nil
}

func (f *fakeService) ScheduleList(_ context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &wire.ScheduleListResponse{Schedules: []wire.ScheduleView{{Name: cmp.Or(req.Name, "a"), Queue: "q", EveryMs: 1000}}}, nil
}

func (f *fakeService) ScheduleDelete(_ context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &wire.ScheduleDeleteResponse{Deleted: req.Name == "a"}, nil
}

func (f *fakeService) ShardJoin(_ context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	return &wire.ShardView{Set: req.Set, Generation: 1, Count: 1, Index: 0, Work: true,
		Members: []wire.ShardMemberView{{ID: req.Member, TTLMs: req.TTLMs}}}, nil
}

func (f *fakeService) ShardRenew(_ context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	return &wire.ShardView{Set: req.Set, Generation: req.Stopped + 1, Index: -1}, nil
}

func (f *fakeService) ShardLeave(_ context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	return &wire.ShardView{Set: req.Set, Index: -1}, nil
}

func (f *fakeService) ShardMembers(_ context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	return &wire.ShardView{Set: req.Set, Index: -1, Members: []wire.ShardMemberView{}}, nil
}

var _ wire.Service = (*fakeService)(nil)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newAPI is the handler over svc of a node alive and ready.
func newAPI(svc wire.Service) http.Handler {
	return httpapi.New(httpapi.Config{
		Service: svc, Live: func() error { return nil }, Ready: func() []string { return nil }, Log: quiet(),
	})
}

// errorBody is the JSON form of every error answer.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Num   uint16 `json:"code_num"`
}

// The routes FuzzHTTPDecode drives, by the fuzzer's route byte.
const (
	routeEnqueue     = iota // POST /v1/enqueue, body
	routeClaim              // POST /v1/claim, body
	routeComplete           // POST /v1/complete, body
	routeTasks              // POST /v1/tasks, body
	routeGroupCancel        // POST /v1/groups/g/cancel, body (optional)
	routeGet                // GET /v1/tasks/{id}: arg is the id segment, then "?" and a query
	routeGetRaw             // GET /v1/tasks/ + arg as a raw path and query
	routeList               // GET /v1/tasks?arg
	numRoutes
)

// request builds the request for route, or nil if the fuzzer's input
// cannot be a request line at all.
func request(route uint8, body []byte, arg string) *http.Request {
	switch route {
	case routeEnqueue, routeClaim, routeComplete, routeTasks, routeGroupCancel:
		path := [...]string{"/v1/enqueue", "/v1/claim", "/v1/complete", "/v1/tasks", "/v1/groups/g/cancel"}[route]
		r := httptest.NewRequest("POST", path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	case routeGet:
		seg, query, _ := strings.Cut(arg, "?")
		r := httptest.NewRequest("GET", "/v1/tasks/x", nil)
		r.URL.Path = "/v1/tasks/" + seg
		r.URL.RawPath = "/v1/tasks/" + url.PathEscape(seg)
		r.URL.RawQuery = query
		r.RequestURI = r.URL.RequestURI()
		return r
	case routeGetRaw:
		u, err := url.ParseRequestURI("/v1/tasks/" + arg)
		if err != nil {
			return nil
		}
		r := httptest.NewRequest("GET", "/v1/tasks/x", nil)
		r.URL = u
		r.RequestURI = u.RequestURI()
		return r
	case routeList:
		r := httptest.NewRequest("GET", "/v1/tasks", nil)
		r.URL.RawQuery = arg
		r.RequestURI = r.URL.RequestURI()
		return r
	}
	return nil
}

// checkResponse checks the invariants of every answer: JSON (NDJSON for a
// listing), a status below 500 unless the service failed with that
// status, and error bodies that agree with their status.
func checkResponse(t *testing.T, f *fakeService, route uint8, rec *httptest.ResponseRecorder) {
	t.Helper()
	status, body := rec.Code, rec.Body.Bytes()
	ct := rec.Header().Get("Content-Type")
	if status >= 300 && status < 400 {
		// ServeMux's own redirect of a path it cleans ("/v1/tasks/..",
		// "/v1/tasks/a/../b"): only a path can ask for it, and it names
		// where to go. Its body is ServeMux's, not JSON.
		if route != routeGet && route != routeGetRaw || rec.Header().Get("Location") == "" {
			t.Fatalf("route %d: status %d, location %q", route, status, rec.Header().Get("Location"))
		}
		return
	}
	if status >= 500 && !f.failedWith(status) {
		t.Fatalf("route %d: status %d that the service did not cause: %s", route, status, body)
	}
	if status == http.StatusOK && (route == routeList || route == routeGetRaw && ct == "application/x-ndjson") {
		if ct != "application/x-ndjson" {
			t.Fatalf("list: content type %q", ct)
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("list: line %q is not JSON", sc.Bytes())
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("list: %v", err)
		}
		return
	}
	if ct != "application/json" {
		t.Fatalf("route %d: status %d, content type %q: %q", route, status, ct, body)
	}
	if !json.Valid(body) {
		t.Fatalf("route %d: status %d, body is not JSON: %q", route, status, body)
	}
	if status == http.StatusOK {
		return
	}
	var e errorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("route %d: status %d, error body %q: %v", route, status, body, err)
	}
	if c := wire.Code(e.Num); e.Error == "" || c.Name() != e.Code || c.HTTPStatus() != status {
		t.Fatalf("route %d: status %d with error body %+v", route, status, e)
	}
}

// FuzzHTTPDecode feeds arbitrary bodies to the POST endpoints and
// arbitrary paths and queries to the GET ones. The handler must never
// panic, and every answer must be well-formed (checkResponse). The seeds
// run in every go test.
func FuzzHTTPDecode(f *testing.F) {
	id := fakeID.String()
	bodies := []string{
		``, `null`, `{}`, `[]`, `"x"`, `1`, `{`, `}`, `{"tasks":null}`, `{"tasks":[]}`, `{"tasks":[null]}`,
		`{"tasks":[{"queue":"q","data":"aGk=","deps":["` + id + `"],"priority":-3}],"w":1}`,
		`{"tasks":[{"queue":"e16"}]}`, `{"tasks":[{"queue":"q"},{"queue":"e1"}]}`, `{"tasks":[{"id":"` + id + `","queue":"q"}]}`,
		`{"tasks":[{"queue":"q","data":"not base64!"}]}`, `{"tasks":[{"queue":"q","deps":["zz"]}]}`,
		`{"queue":"q","count":2,"ttl_ms":1000,"wait_ms":10}`, `{"queue":"e17"}`, `{"queue":"e99"}`, `{"queue":"e2"}`,
		`{"queue":"q","count":1e400}`, `{"queue":"q","count":-1}`, `{"queue":"q","ttl_ms":"x"}`, `{"queue":"q","count":9223372036854775808}`,
		`{"id":"` + id + `","claim":0}`, `{"id":"` + id + `","claim":0,"seq":3}`, `{"id":"` + id + `","claim":16}`,
		`{"id":"` + id + `","claim":23}`, `{"id":"` + id + `","claim":4294967296}`, `{"id":"00","claim":0}`, `{"id":null,"claim":0}`,
		`{"queue":"q","w":2}`, `{"queue":"q","bogus":1}`, `{"queue":"q","queue":"r"}`, `{"queue":"q"} {"queue":"r"}`, `{"queue":"q"}garbage`,
		"\xef\xbb\xbf{}", "{\"queue\":\"\xff\"}", strings.Repeat("[", 10000), `{"queue":"q","description":"` + strings.Repeat("x", 5000) + `"}`,
	}
	bodies = append(bodies, `{"reason":"r"}`, `{"group":"g"}`, `{"group":"h"}`, " ", "\n{}\n")
	for route := range uint8(routeGroupCancel + 1) {
		for _, b := range bodies {
			f.Add(route, []byte(b), "")
		}
	}
	for _, arg := range []string{
		id, id + "?min_seq=2", id + "?min_seq=-1", id + "?min_seq=x", "", "xyz", strings.Repeat("0", 40),
		"ee00000000000000000000000000000000000010", "ee00000000000000000000000000000000000001",
		"a/b", "..", ".", "a%2Fb", "%zz", "?", "\x00", strings.ToUpper(id),
	} {
		f.Add(uint8(routeGet), []byte(nil), arg)
		f.Add(uint8(routeGetRaw), []byte(nil), arg)
	}
	for _, q := range []string{
		"", "queue=q", "queue=e16", "queue=m1", "queue=m22&limit=3", "limit=-1", "limit=x", "limit=99999999999999999999",
		"state=ready", "state=nope", "group=g&queue=q&state=dead&limit=1", "%zz", "queue=%00", ";;&&==",
		"kind=a&subtopic=eu", "kind=%20", "subtopic=x&state=snoozed",
	} {
		f.Add(uint8(routeList), []byte(nil), q)
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte, arg string) {
		route %= numRoutes
		r := request(route, body, arg)
		if r == nil {
			return
		}
		fake := &fakeService{}
		rec := httptest.NewRecorder()
		newAPI(fake).ServeHTTP(rec, r)
		checkResponse(t, fake, route, rec)
	})
}

// TestErrorMapping checks the one table from errors to HTTP answers: the
// status, the stable code name and number, and the message.
func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   wire.Code
		status int
	}{
		{task.ErrInvalid, wire.CodeInvalid, http.StatusBadRequest},
		{fmt.Errorf("get %s: %w", fakeID, task.ErrNotFound), wire.CodeNotFound, http.StatusNotFound},
		{fmt.Errorf("%w: %s", task.ErrDepNotFound, fakeID), wire.CodeDepNotFound, http.StatusBadRequest},
		{fmt.Errorf("%w: payload is 2 bytes, limit 1", task.ErrTooLarge), wire.CodeTooLarge, http.StatusRequestEntityTooLarge},
		{task.ErrNoSuchClaim, wire.CodeNoSuchClaim, http.StatusConflict},
		{task.ErrClaimSuperseded, wire.CodeClaimSuperseded, http.StatusConflict},
		{task.ErrClaimExpired, wire.CodeClaimExpired, http.StatusConflict},
		{task.ErrClaimEnded, wire.CodeClaimEnded, http.StatusConflict},
		{task.ErrCompleted, wire.CodeCompleted, http.StatusConflict},
		{task.ErrConflict, wire.CodeConflict, http.StatusConflict},
		{task.ErrSeq, wire.CodeSeq, http.StatusConflict},
		{task.ErrNotDead, wire.CodeNotDead, http.StatusConflict},
		{task.ErrStale, wire.CodeStale, http.StatusConflict},
		{task.ErrEpoch, wire.CodeEpoch, http.StatusConflict},
		{fmt.Errorf("%w: no leader", wire.ErrUnavailable), wire.CodeUnavailable, http.StatusServiceUnavailable},
		{wire.ErrShuttingDown, wire.CodeShuttingDown, http.StatusServiceUnavailable},
		{wire.ErrOverloaded, wire.CodeOverloaded, http.StatusTooManyRequests},
		{context.DeadlineExceeded, wire.CodeTimeout, http.StatusGatewayTimeout},
		{context.Canceled, wire.CodeTimeout, http.StatusGatewayTimeout},
		{errors.New("disk on fire"), wire.CodeInternal, http.StatusInternalServerError},
		{wire.Errorf(wire.CodeBadFrame, "bad frame"), wire.CodeBadFrame, http.StatusBadRequest},
		{wire.Errorf(wire.CodeUnknownOp, "unknown op"), wire.CodeUnknownOp, http.StatusNotFound},
		{wire.Errorf(wire.CodeVersion, "version 9"), wire.CodeVersion, http.StatusBadRequest},
		{wire.Errorf(wire.CodeFrameTooLarge, "frame"), wire.CodeFrameTooLarge, http.StatusRequestEntityTooLarge},
		// A sentinel wrapped twice keeps its code.
		{fmt.Errorf("task 3 of 4: %w", fmt.Errorf("%w: queue name is empty", task.ErrInvalid)), wire.CodeInvalid, http.StatusBadRequest},
	} {
		fake := &fakeService{err: tc.err}
		rec := httptest.NewRecorder()
		newAPI(fake).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/count", nil))
		var e errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("%v: body %q: %v", tc.err, rec.Body.Bytes(), err)
		}
		if rec.Code != tc.status || e.Code != tc.code.Name() || wire.Code(e.Num) != tc.code || e.Error != tc.err.Error() {
			t.Errorf("%v: status %d body %+v; want status %d, code %s (%d), the error's message",
				tc.err, rec.Code, e, tc.status, tc.code.Name(), tc.code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%v: content type %q", tc.err, ct)
		}
	}

}

// TestAuthenticate: the probes are open; every other request needs a
// token the authenticator takes (a Bearer header or a Basic password),
// and goes on as its principal; /debug/ is the admin's.
func TestAuthenticate(t *testing.T) {
	authn := func(tok string) (wire.Principal, error) {
		switch tok {
		case "admin":
			return wire.Principal{}, nil
		case "reader":
			return wire.Principal{Credential: 7}, nil
		}
		return wire.Principal{}, fmt.Errorf("%w: no such token", wire.ErrUnauthenticated)
	}
	var seen wire.Principal
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := wire.PrincipalFrom(r.Context())
		if !ok && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			t.Errorf("%s reached the API without a principal", r.URL.Path)
		}
		seen = p
		newAPI(&fakeService{}).ServeHTTP(w, r)
	})
	h := httpapi.Authenticate(inner, authn, func(p wire.Principal) bool { return p.Credential == 0 })
	cases := []struct {
		method, path, auth string
		basic              string
		want               int
		who                uint64
	}{
		{"GET", "/healthz", "", "", http.StatusOK, 0},
		{"GET", "/readyz", "", "", http.StatusOK, 0},
		{"GET", "/v1/queues", "", "", http.StatusUnauthorized, 0},
		{"GET", "/v1/queues", "Bearer wrong", "", http.StatusUnauthorized, 0},
		{"GET", "/v1/queues", "Bearer admin", "", http.StatusOK, 0},
		{"GET", "/v1/queues", "Bearer reader", "", http.StatusOK, 7},
		{"GET", "/v1/cluster", "", "reader", http.StatusOK, 7},
		{"GET", "/debug/pprof/", "Bearer reader", "", http.StatusForbidden, 0},
		// Basic credentials (a browser's, sent with any request to the
		// origin, a cross-site form's too) open reads only.
		{"POST", "/v1/gc", "", "admin", http.StatusUnauthorized, 0},
		{"POST", "/v1/gc", "Bearer admin", "", http.StatusBadRequest, 0}, // past authentication: its missing body refused
		{"DELETE", "/v1/schedules/x", "", "admin", http.StatusUnauthorized, 0},
		{"POST", "/healthz", "", "", http.StatusUnauthorized, 0},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		if tc.basic != "" {
			r.SetBasicAuth("anyone", tc.basic)
		}
		seen = wire.Principal{Credential: 99}
		h.ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("%s %s auth %q: status %d, want %d", tc.method, tc.path, tc.auth, rec.Code, tc.want)
		}
		if tc.want == http.StatusOK && tc.path != "/healthz" && tc.path != "/readyz" && seen.Credential != tc.who {
			t.Errorf("%s %s: principal %d, want %d", tc.method, tc.path, seen.Credential, tc.who)
		}
		if tc.want == http.StatusUnauthorized && !strings.Contains(strings.Join(rec.Header().Values("WWW-Authenticate"), ";"), "Basic") {
			t.Errorf("%s %s: 401 without a Basic challenge", tc.method, tc.path)
		}
	}
}

// POST /v1/gc passes dry_run through and answers the pass's figures.
func TestHTTPGC(t *testing.T) {
	for _, dry := range []bool{true, false} {
		rec := httptest.NewRecorder()
		body := fmt.Sprintf(`{"dry_run":%v}`, dry)
		r := httptest.NewRequest("POST", "/v1/gc", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		newAPI(&fakeService{}).ServeHTTP(rec, r)
		var got wire.GCResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("dry_run=%v: status %d body %q: %v", dry, rec.Code, rec.Body.Bytes(), err)
		}
		if got.DryRun != dry || got.Candidates != 3 || got.Collectable != 2 {
			t.Errorf("dry_run=%v: %+v", dry, got)
		}
	}
	rec := httptest.NewRecorder()
	newAPI(&fakeService{}).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/gc", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET /v1/gc: status %d, Allow %q; want 405, POST", rec.Code, rec.Header().Get("Allow"))
	}
}

// The queue-settings endpoints: the path names the queue; pause and
// resume set Paused; a body naming another queue is refused.
func TestHTTPQueueSettings(t *testing.T) {
	h := newAPI(&fakeService{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               wire.QueueSettings
	}{
		{"GET", "/v1/queues/mail/settings", "", http.StatusOK, wire.QueueSettings{Queue: "mail", MaxAttempts: 4}},
		{"POST", "/v1/queues/mail/settings", `{"max_attempts":9}`, http.StatusOK, wire.QueueSettings{Queue: "mail", MaxAttempts: 9}},
		{"POST", "/v1/queues/mail/settings", `{"queue":"mail","max_attempts":9}`, http.StatusOK, wire.QueueSettings{Queue: "mail", MaxAttempts: 9}},
		{"POST", "/v1/queues/mail/settings", `{"queue":"other"}`, http.StatusBadRequest, wire.QueueSettings{}},
		{"POST", "/v1/queues/mail/settings", `{"bogus":1}`, http.StatusBadRequest, wire.QueueSettings{}},
		{"POST", "/v1/queues/mail/pause", "", http.StatusOK, wire.QueueSettings{Queue: "mail", Paused: true}},
		{"POST", "/v1/queues/mail/resume", "", http.StatusOK, wire.QueueSettings{Queue: "mail"}},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if rec.Code != tc.status {
			t.Errorf("%s %s %s: status %d body %q; want %d", tc.method, tc.path, tc.body, rec.Code, rec.Body.Bytes(), tc.status)
			continue
		}
		if tc.status != http.StatusOK {
			continue
		}
		var got wire.QueueSettings
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got != tc.want {
			t.Errorf("%s %s %s: %+v, %v; want %+v", tc.method, tc.path, tc.body, got, err, tc.want)
		}
	}
}

// The schedule and shard endpoints: a schedule set by path and body,
// listed all or one, deleted; a shard member's join, renew, leave, and a
// set read.
func TestHTTPSchedules(t *testing.T) {
	h := newAPI(&fakeService{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"PUT", "/v1/schedules/tick", `{"queue":"q","every_ms":1000}`, http.StatusOK, `"name":"tick","queue":"q","every_ms":1000`},
		{"PUT", "/v1/schedules/tick", `{"name":"tick","queue":"q","cron":"@daily"}`, http.StatusOK, `"cron":"@daily"`},
		{"PUT", "/v1/schedules/tick", `{"name":"tock","queue":"q"}`, http.StatusBadRequest, ""},
		{"PUT", "/v1/schedules/tick", `{"queue":"q","evry_ms":1000}`, http.StatusBadRequest, ""},
		{"GET", "/v1/schedules", "", http.StatusOK, `{"schedules":[{"name":"a"`},
		{"GET", "/v1/schedules/tick", "", http.StatusOK, `{"schedules":[{"name":"tick"`},
		{"DELETE", "/v1/schedules/a", "", http.StatusOK, `{"deleted":true}`},
		{"DELETE", "/v1/schedules/b", "", http.StatusOK, `{"deleted":false}`},
		{"POST", "/v1/shards/join", `{"set":"w","member":"m1","ttl_ms":5000}`, http.StatusOK, `"members":[{"id":"m1","index":0,"ttl_ms":5000}],"index":0,"work":true`},
		{"POST", "/v1/shards/renew", `{"set":"w","member":"m1","stopped":3}`, http.StatusOK, `"generation":4`},
		{"POST", "/v1/shards/leave", `{"set":"w","member":"m1"}`, http.StatusOK, `"set":"w"`},
		{"GET", "/v1/shards/w", "", http.StatusOK, `{"set":"w","generation":0,"count":0,"members":[],"index":-1,"work":false}`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s %s %s: status %d body %q; want %d with %s", tc.method, tc.path, tc.body, rec.Code, rec.Body.Bytes(), tc.status, tc.want)
		}
	}
}

// The task-control endpoints reach the service's methods: cancel and
// delete by body or path, a bulk requeue or purge by the path's queue, a
// group's counts and cancel by the path's group (the cancel's body
// optional), a subtopic's count and the queues' subtopics.
func TestHTTPTaskControl(t *testing.T) {
	h := newAPI(&fakeService{})
	id := strings.Repeat("ab", 20)
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/v1/cancel", `{"id":"` + id + `","reason":"obsolete"}`, http.StatusOK, `{"acks":1}`},
		{"POST", "/v1/cancel", `{"id":"nope"}`, http.StatusBadRequest, ""},
		{"POST", "/v1/delete", `{"id":"` + id + `"}`, http.StatusOK, `{"acks":1}`},
		{"DELETE", "/v1/tasks/" + id, "", http.StatusOK, `{"acks":1}`},
		{"DELETE", "/v1/tasks/nope", "", http.StatusBadRequest, ""},
		{"POST", "/v1/queues/mail/dead/requeue", "", http.StatusOK, `{"done":4}`},
		{"POST", "/v1/queues/mailer/dead/purge", "", http.StatusOK, `{"done":6}`},
		{"GET", "/v1/groups/batch-7", "", http.StatusOK, `{"group":"batch-7","total":0,"ready":0,"claimed":0,"delayed":0,"blocked":0,"completed":0,"dead":0,"cancelled":0}`},
		{"GET", "/v1/groups/batch-7?dead=25", "", http.StatusOK, `{"group":"batch-7","total":25,"ready":0,"claimed":0,"delayed":0,"blocked":0,"completed":0,"dead":0,"cancelled":0}`},
		{"GET", "/v1/groups/batch-7?dead=x", "", http.StatusBadRequest, ""},
		{"GET", "/v1/groups/batch-7?dead=-1", "", http.StatusBadRequest, ""},
		{"POST", "/v1/groups/batch-7/cancel", "", http.StatusOK, `{"done":7}`},
		{"POST", "/v1/groups/batch-7/cancel", " \n", http.StatusOK, `{"done":7}`},
		{"POST", "/v1/groups/batch-7/cancel", `{"reason":"obsolete"}`, http.StatusOK, `{"done":7,"errors":["obsolete"]}`},
		{"POST", "/v1/groups/batch-7/cancel", `{"group":"batch-7","reason":"x"}`, http.StatusOK, `{"done":7,"errors":["x"]}`},
		{"POST", "/v1/groups/batch-7/cancel", `{"group":"other"}`, http.StatusBadRequest, ""},
		{"POST", "/v1/groups/batch-7/cancel", `{"reasn":"typo"}`, http.StatusBadRequest, ""},
		{"POST", "/v1/groups/batch-7/cancel", `{"reason":`, http.StatusBadRequest, ""},
		{"GET", "/v1/count?subtopic=eu", "", http.StatusOK, `{"count":9}`},
		{"GET", "/v1/queues?subtopics=true", "", http.StatusOK, `{"queues":[{"queue":"q","ready":1,"claimed":0,"delayed":0,"blocked":0,"completed":0,"dead":0,"cancelled":0}],"subtopics":[{"queue":"q","ready":1,"claimed":0,"delayed":0,"blocked":0,"completed":0,"dead":0,"cancelled":0,"subtopic":"eu"}]}`},
		{"GET", "/v1/queues?subtopics=maybe", "", http.StatusBadRequest, ""},
		{"GET", "/v1/hints", "", http.StatusOK, `{"node":"1","pending":0,"handed":0,"hints":[]}`},
		{"GET", "/v1/hints?limit=5", "", http.StatusOK, `{"node":"1","pending":5,"handed":0,"hints":[]}`},
		{"GET", "/v1/hints?limit=x", "", http.StatusBadRequest, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if rec.Code != tc.status {
			t.Errorf("%s %s %s: status %d body %q; want %d", tc.method, tc.path, tc.body, rec.Code, rec.Body.Bytes(), tc.status)
			continue
		}
		if got := strings.TrimSpace(rec.Body.String()); tc.want != "" && got != tc.want {
			t.Errorf("%s %s: body %s; want %s", tc.method, tc.path, got, tc.want)
		}
	}
}
