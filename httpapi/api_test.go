package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/wire"
)

// serve sends one request to h and returns the recorder.
func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
	}
	h.ServeHTTP(rec, r)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", rec.Body.Bytes(), err)
	}
	return e
}

// /healthz is liveness (only a stopping node fails it); /readyz lists
// every reason the node is not ready; while the node starts, /healthz
// says starting with a 200 and every operation is refused with a 503.
func TestProbes(t *testing.T) {
	stopping := func() error { return wire.ErrShuttingDown }
	alive := func() error { return nil }
	notReady := func() []string { return []string{"starting", "metadata group: no leader"} }
	ready := func() []string { return nil }
	for _, tc := range []struct {
		name     string
		h        http.Handler
		path     string
		status   int
		want     string
		wantWhys []string
	}{
		{"alive", httpapi.New(httpapi.Config{Service: &fakeService{}, Live: alive, Ready: ready, Log: quiet()}), "/healthz", 200, "ok", nil},
		{"stopping", httpapi.New(httpapi.Config{Service: &fakeService{}, Live: stopping, Ready: ready, Log: quiet()}), "/healthz", 503, "shutting down", []string{"shutting down"}},
		{"ready", httpapi.New(httpapi.Config{Service: &fakeService{}, Live: alive, Ready: ready, Log: quiet()}), "/readyz", 200, "ready", nil},
		{"not ready", httpapi.New(httpapi.Config{Service: &fakeService{}, Live: alive, Ready: notReady, Log: quiet()}), "/readyz", 503, "not ready", []string{"starting", "metadata group: no leader"}},
		{"starting alive", httpapi.Starting(httpapi.Config{Live: alive, Ready: notReady, Log: quiet()}), "/healthz", 200, "starting", nil},
		{"starting not ready", httpapi.Starting(httpapi.Config{Live: alive, Ready: notReady, Log: quiet()}), "/readyz", 503, "not ready", []string{"starting", "metadata group: no leader"}},
		{"starting stopping", httpapi.Starting(httpapi.Config{Live: stopping, Ready: notReady, Log: quiet()}), "/healthz", 503, "shutting down", []string{"shutting down"}},
	} {
		rec := serve(tc.h, "GET", tc.path, "")
		var got httpapi.Health
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != tc.status || got.Status != tc.want || !slices.Equal(got.Reasons, tc.wantWhys) {
			t.Errorf("%s: GET %s: %d %q (%v); want %d, %q, reasons %q", tc.name, tc.path, rec.Code, rec.Body.Bytes(), err, tc.status, tc.want, tc.wantWhys)
		}
	}
	rec := serve(httpapi.Starting(httpapi.Config{Live: alive, Ready: notReady, Log: quiet()}), "POST", "/v1/enqueue", "{}")
	if e := errorOf(t, rec); rec.Code != 503 || e.Code != "unavailable" || !strings.Contains(e.Error, "starting") {
		t.Errorf("enqueue while starting: %d %+v; want 503 unavailable, starting", rec.Code, e)
	}
}

// A method a path has no route for gets 405 with Allow naming the ones
// it has; a path no route has gets 404.
func TestMethodNotAllowed(t *testing.T) {
	h := newAPI(&fakeService{})
	id := fakeID.String()
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/gc", 405, "POST"},
		{"PATCH", "/v1/tasks/" + id, 405, "GET, HEAD, DELETE"},
		{"POST", "/v1/tasks/" + id, 405, "GET, HEAD, DELETE"},
		{"PUT", "/v1/tasks", 405, "GET, HEAD, POST"},
		{"DELETE", "/v1/schedules", 405, "GET, HEAD"},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"POST", "/metrics", 404, ""}, // no metrics handler in this configuration
		{"GET", "/v1/nope", 404, ""},
		{"POST", "/", 405, "GET, HEAD"},
		{"GET", "/nothing/here", 404, ""},
	} {
		rec := serve(h, tc.method, tc.path, "")
		e := errorOf(t, rec)
		if rec.Code != tc.status || rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q (%+v); want %d, Allow %q", tc.method, tc.path, rec.Code, rec.Header().Get("Allow"), e, tc.status, tc.allow)
			continue
		}
		wantCode := map[int]string{405: "method_not_allowed", 404: "unknown_op"}[tc.status]
		if e.Code != wantCode || e.Num == 0 {
			t.Errorf("%s %s: error %+v; want code %s", tc.method, tc.path, e, wantCode)
		}
	}
}

// A query parameter the endpoint does not take is refused, naming it and
// the ones the endpoint takes; a known one still works.
func TestUnknownQueryParameter(t *testing.T) {
	h := newAPI(&fakeService{})
	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/v1/tasks?limt=5", 400, []string{`"limt"`, "queue, state, group, kind, subtopic, limit"}},
		{"/v1/tasks?limit=5&queue=q", 200, nil},
		{"/v1/cluster?verbose=1", 400, []string{`"verbose"`, "takes none"}},
		{"/v1/hints?limit=2&x=", 400, []string{`"x"`}},
		{"/v1/tasks/" + fakeID.String() + "?r=2", 200, nil},
		{"/v1/tasks/" + fakeID.String() + "?rr=2", 400, []string{`"rr"`, "min_seq, r"}},
	} {
		rec := serve(h, "GET", tc.path, "")
		if rec.Code != tc.status {
			t.Errorf("GET %s: %d %q; want %d", tc.path, rec.Code, rec.Body.Bytes(), tc.status)
			continue
		}
		if tc.status == 200 {
			continue
		}
		e := errorOf(t, rec)
		for _, w := range tc.want {
			if e.Code != "invalid" || !strings.Contains(e.Error, w) {
				t.Errorf("GET %s: %+v; want invalid, saying %s", tc.path, e, w)
			}
		}
	}
}

// Error messages speak of JSON fields and values, not Go types, and say
// each part once.
func TestCleanErrors(t *testing.T) {
	h := newAPI(&fakeService{})
	for _, tc := range []struct {
		path, body string
		want       string
	}{
		{"/v1/enqueue", `{"tasks":[{"queue":"q","priority":"high"}]}`, `invalid argument: field "tasks.priority" must be an integer, not a string`},
		{"/v1/enqueue", `{"tasks":{}}`, `invalid argument: field "tasks" must be an array, not an object`},
		{"/v1/enqueue", `[]`, `invalid argument: the body must be an object, not an array`},
		{"/v1/claim", `{"queue":"q","count":-1.5}`, `invalid argument: field "count" must be an integer, not a number -1.5`},
		{"/v1/enqueue", `{"tasks":[{"queue":"q","data":"%%%"}]}`, `invalid argument: a payload is not valid base64: illegal base64 data at input byte 0`},
		{"/v1/cancel", `{"id":"nope"}`, `invalid argument: malformed id "nope": want 40 hex characters`},
		{"/v1/enqueue", `{"taskz":[]}`, `invalid argument: bad JSON body: unknown field "taskz"`},
		{"/v1/enqueue", `{"tasks":[}`, `invalid argument: body is not JSON (at byte 11): invalid character '}' looking for beginning of value`},
	} {
		rec := serve(h, "POST", tc.path, tc.body)
		e := errorOf(t, rec)
		if rec.Code != 400 || !strings.HasPrefix(e.Error, tc.want) {
			t.Errorf("POST %s %s: %d %q; want 400 starting %q", tc.path, tc.body, rec.Code, e.Error, tc.want)
		}
		for _, bad := range []string{"Go struct", "of type", "json:", "wire.", "invalid argument: invalid argument"} {
			if strings.Contains(e.Error, bad) {
				t.Errorf("POST %s %s: message %q says %q", tc.path, tc.body, e.Error, bad)
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"unavailable: unavailable: no quorum", "unavailable: no quorum"},
		{"invalid argument: invalid argument: invalid argument: x", "invalid argument: x"},
		{"a: b: a: b", "a: b: a: b"},
		{"plain", "plain"},
	} {
		if got := httpapi.CleanMessage(tc.in); got != tc.want {
			t.Errorf("CleanMessage(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// Node ids are JSON strings of digits: a 64-bit id survives JavaScript
// and jq, which read numbers as doubles. They read back as they were.
func TestNodeIDsAreStrings(t *testing.T) {
	const big = uint64(1)<<63 + 12345
	cr := wire.ClusterResponse{
		Self:       big,
		Members:    []wire.MemberView{{ID: big, Addr: "a:1", State: "alive", Raft: "voter"}},
		Raft:       wire.RaftView{Leader: big, Voters: []uint64{big, 7}},
		Partitions: []wire.PartitionView{{Partition: 0, Cohort: []uint64{big}, Leader: big, Epoch: 3}},
		Clock:      &wire.ClockView{Peers: []wire.PeerClock{{ID: big}}},
	}
	b, err := json.Marshal(&cr)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	want := "9223372036854788153"
	for _, got := range []any{
		generic["self"],
		generic["members"].([]any)[0].(map[string]any)["id"],
		generic["raft"].(map[string]any)["leader"],
		generic["raft"].(map[string]any)["voters"].([]any)[0],
		generic["partitions"].([]any)[0].(map[string]any)["cohort"].([]any)[0],
		generic["partitions"].([]any)[0].(map[string]any)["leader"],
		generic["clock"].(map[string]any)["peers"].([]any)[0].(map[string]any)["id"],
	} {
		if got != want {
			t.Errorf("a node id in %s is %#v; want the string %q", b, got, want)
		}
	}
	var back wire.ClusterResponse
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Self != big || back.Raft.Voters[1] != 7 || back.Partitions[0].Cohort[0] != big {
		t.Errorf("read back: %+v", back)
	}
	var ids wire.NodeIDs
	if err := json.Unmarshal([]byte(`[1, "2"]`), &ids); err != nil || !slices.Equal(ids, wire.NodeIDs{1, 2}) {
		t.Errorf("numbers as older builds sent them: %v, %v", ids, err)
	}
	if err := json.Unmarshal([]byte(`["x"]`), &ids); err == nil {
		t.Error("a node id that is not a number read without an error")
	}
}

// GET /openapi.json is a valid OpenAPI 3 description, and it agrees with
// what the handler does: every operation it names is routed (a method it
// does not name for a path gets 405, and Allow lists exactly its
// methods), every parameter it names is taken and no other, and the
// handler's answer to each operation validates against its schema.
func TestOpenAPI(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "skuldd_up 1\n")
	})
	h := httpapi.New(httpapi.Config{Service: &fakeService{}, Live: func() error { return nil },
		Ready: func() []string { return nil }, Metrics: metrics, Log: quiet()})
	rec := serve(h, "GET", "/openapi.json", "")
	if rec.Code != 200 {
		t.Fatalf("GET /openapi.json: %d %s", rec.Code, rec.Body.Bytes())
	}
	// The status page is HTML: its body is checked as text.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	ctx := context.Background()
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("not a valid OpenAPI 3 description: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	id := fakeID.String()
	fill := strings.NewReplacer("{id}", id, "{queue}", "q", "{group}", "g", "{name}", "a", "{set}", "w")
	// Bodies that the fake service answers with 200.
	bodies := map[string]string{
		"/v1/tasks":                   `{"queue":"q","data":"eA=="}`,
		"/v1/enqueue":                 `{"tasks":[{"queue":"q","priority":2}]}`,
		"/v1/claim":                   `{"queue":"q","count":2}`,
		"/v1/renew":                   `{"id":"` + id + `","claim":200}`,
		"/v1/update":                  `{"id":"` + id + `","claim":200}`,
		"/v1/complete":                `{"id":"` + id + `","claim":200}`,
		"/v1/fail":                    `{"id":"` + id + `","claim":200}`,
		"/v1/snooze":                  `{"id":"` + id + `","claim":200}`,
		"/v1/requeue":                 `{"id":"` + id + `"}`,
		"/v1/cancel":                  `{"id":"` + id + `"}`,
		"/v1/delete":                  `{"id":"` + id + `"}`,
		"/v1/gc":                      `{"dry_run":true}`,
		"/v1/schedules/{name}":        `{"queue":"q","every_ms":1000}`,
		"/v1/shards/join":             `{"set":"w","member":"m1","ttl_ms":5000}`,
		"/v1/shards/renew":            `{"set":"w","member":"m1"}`,
		"/v1/shards/leave":            `{"set":"w","member":"m1"}`,
		"/v1/queues/{queue}/settings": `{"max_attempts":3}`,
		"/v1/groups/{group}/cancel":   `{"reason":"r"}`,
	}
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			url := fill.Replace(path)
			body := ""
			if op.RequestBody != nil {
				var ok bool
				if body, ok = bodies[path]; !ok {
					t.Errorf("%s %s takes a body the test has no example of", method, path)
					continue
				}
			}
			req := httptest.NewRequest(method, url, strings.NewReader(body))
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Errorf("%s %s: %d %s; want 200", method, url, rec.Code, rec.Body.Bytes())
				continue
			}
			// The answer validates against the description.
			vreq := httptest.NewRequest(method, url, strings.NewReader(body))
			if body != "" {
				vreq.Header.Set("Content-Type", "application/json")
			}
			route, params, err := router.FindRoute(vreq)
			if err != nil {
				t.Errorf("%s %s: the description has no route for it: %v", method, url, err)
				continue
			}
			in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
			if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
				t.Errorf("%s %s: the request does not fit the description: %v", method, url, err)
			}
			if strings.Contains(rec.Header().Get("Content-Type"), "ndjson") {
				continue // a stream: its lines are checked below
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code,
				Header: rec.Header(), Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes()))}
			if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
				t.Errorf("%s %s: the answer %s does not fit the description: %v", method, url, rec.Body.Bytes(), err)
			}
			// Each query parameter the description names is taken; another
			// is refused.
			for _, p := range op.Parameters {
				if p.Value.In != "query" {
					continue
				}
				if rec := serve(h, method, url+"?"+p.Value.Name+"=", body); rec.Code == 400 && strings.Contains(rec.Body.String(), "unknown query parameter") {
					t.Errorf("%s %s: the described parameter %q is refused", method, url, p.Value.Name)
				}
			}
			if rec := serve(h, method, url+"?undescribed=1", body); rec.Code != 400 {
				t.Errorf("%s %s?undescribed=1: %d; want 400", method, url, rec.Code)
			}
		}
		// Every other method gets 405, and Allow lists exactly the methods
		// the description has for this URL (a templated path may take a
		// concrete one's other methods: a client of GET /v1/shards/{set}
		// with the set "join" asks GET /v1/shards/join).
		url := fill.Replace(path)
		var allow []string
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE"} {
			probe := m
			if m == "HEAD" {
				probe = "GET" // Go's mux answers HEAD with a GET route
			}
			if described(doc, probe, url) {
				allow = append(allow, m)
			}
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if slices.Contains(allow, m) {
				continue
			}
			rec := serve(h, m, url, "")
			if rec.Code != 405 || rec.Header().Get("Allow") != strings.Join(allow, ", ") {
				t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", m, url, rec.Code, rec.Header().Get("Allow"), strings.Join(allow, ", "))
			}
		}
	}
	if ops < 40 {
		t.Errorf("the description has %d operations; the API has more than 40", ops)
	}
	// A listing's lines are tasks as the description says.
	rec = serve(h, "GET", "/v1/tasks?queue=q", "")
	schema := doc.Components.Schemas["TaskView"]
	if schema == nil {
		t.Fatal("no TaskView schema")
	}
	for line := range strings.SplitSeq(strings.TrimSpace(rec.Body.String()), "\n") {
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("list line %q: %v", line, err)
		}
		if err := schema.Value.VisitJSON(v); err != nil {
			t.Errorf("list line %s does not fit TaskView: %v", line, errors.Unwrap(err))
		}
	}
}

// described reports whether the description has an operation of method
// whose path template matches url.
func described(doc *openapi3.T, method, url string) bool {
	for path, item := range doc.Paths.Map() {
		if item.GetOperation(method) == nil {
			continue
		}
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), "[^/]+") + "$")
		if re.MatchString(url) {
			return true
		}
	}
	return false
}

func httpTestRequest(method, path string) *http.Request {
	return httptest.NewRequest(method, path, nil)
}

func serveReq(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}
