// Package httpapi serves the client API as HTTP/JSON on the node's TCP
// port: the same operations as the QUIC protocol (wire.Service), plus
// /healthz. Request and response bodies are the wire messages in their JSON
// form; payloads are base64, as Go encodes []byte; ids are 40 hex
// characters; durations are milliseconds.
//
// Every body is read through a size limit and decoded strictly (unknown
// fields are an error), and every error is a JSON object with a message, a
// stable code name and number, and the HTTP status of that code.
//
// httpapi imports wire and task; it must not import node or store.
package httpapi

import (
	"bufio"
	"context"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// MaxBody bounds a request body: a full enqueue batch of payloads in
// base64 fits.
const MaxBody = 64 << 20

// Config configures the handler.
type Config struct {
	// Service answers the client operations.
	Service wire.Service
	// Live reports why the process should be restarted (nil: it is
	// alive): GET /healthz, the liveness probe. Only a stopping node is
	// not alive; a node cut off from its peers or with an untrusted clock
	// is alive (a restart would not help it) but not ready.
	Live func() error
	// Ready lists why the node should not be sent requests now (none:
	// ready): GET /readyz, the readiness probe.
	Ready func() []string
	// Metrics serves GET /metrics (nil: no metrics).
	Metrics http.Handler
	Log     *slog.Logger
}

// New returns the HTTP handler of a node that serves its API.
func New(cfg Config) http.Handler {
	a := &api{svc: cfg.Service, cfg: cfg, log: cfg.Log}
	return a.serve(a.routes())
}

// Starting returns the handler of a node that cannot serve its API yet:
// /healthz says it is alive and starting, /readyz answers from Ready, and
// every other request is refused at once with Live's reason, or as
// starting (a 503 the client can retry elsewhere).
func Starting(cfg Config) http.Handler {
	a := &api{cfg: cfg, log: cfg.Log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthzStarting)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		err := cfg.Live()
		if err == nil {
			err = fmt.Errorf("%w: starting", wire.ErrUnavailable)
		}
		a.fail(w, err)
	})
	return mux
}

type api struct {
	svc         wire.Service
	cfg         Config
	log         *slog.Logger
	spec        spec
	statusState statusState
}

// serve builds the mux of routes. A request no route takes gets 405 with
// Allow when its path is another method's route, else 404; a query
// parameter its route does not take gets 400, as an unknown JSON field
// does (a typo'd "limit" must not list everything).
func (a *api) serve(routes []route) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.method+" "+rt.path, a.checkQuery(rt))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			a.fail(w, wire.Errorf(wire.CodeMethodNotAllowed, "%s %s is not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		a.fail(w, wire.Errorf(wire.CodeUnknownOp, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// probedMethods are the methods allowed asks the mux about.
var probedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete}

// allowed lists the methods that have a route at r's path.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range probedMethods {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// checkQuery refuses a request with a query parameter rt does not take.
func (a *api) checkQuery(rt route) http.Handler {
	taken := names(rt.query)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			for name := range r.URL.Query() {
				if !slices.Contains(taken, name) {
					a.fail(w, unknownParam(rt, taken, name))
					return
				}
			}
		}
		rt.handler(w, r)
	})
}

func unknownParam(rt route, taken []string, name string) error {
	if len(taken) == 0 {
		return fmt.Errorf("%w: unknown query parameter %q: %s %s takes none", task.ErrInvalid, name, rt.method, rt.path)
	}
	return fmt.Errorf("%w: unknown query parameter %q: %s %s takes %s", task.ErrInvalid, name, rt.method, rt.path, strings.Join(taken, ", "))
}

// errorBody is the JSON form of every error.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Num   uint16 `json:"code_num"`
}

func (a *api) fail(w http.ResponseWriter, err error) {
	we := wire.ToError(err)
	if we.Code == wire.CodeInternal {
		a.log.Error("http request failed", "err", err)
	}
	writeJSON(w, we.Code.HTTPStatus(), errorBody{Error: CleanMessage(we.Msg), Code: we.Code.Name(), Num: uint16(we.Code)})
}

// CleanMessage drops a part of an error message that repeats the one
// before it ("invalid argument: invalid argument: x" reads "invalid
// argument: x"): errors wrapped at each layer with the same sentinel say
// it once to a user.
func CleanMessage(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Decode reads one JSON value from body into v: at most MaxBody bytes,
// unknown fields rejected, nothing after the value.
func Decode(body io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(body, MaxBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: request body over %d bytes", task.ErrTooLarge, tooBig.Limit)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: request body truncated", task.ErrInvalid)
		}
		return decodeError(err)
	}
	if dec.More() {
		return fmt.Errorf("%w: more than one JSON value in the body", task.ErrInvalid)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON body", task.ErrInvalid)
	}
	return nil
}

// decodeError says what was wrong with a JSON body in the API's terms:
// the field by its JSON path and the kind of value it takes, not Go's
// type names. An error a field's own decoder returned (a malformed id)
// says what it is already.
func decodeError(err error) error {
	if errors.Is(err, task.ErrInvalid) {
		return err
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := typ.Field
		if field == "" {
			return fmt.Errorf("%w: the body must be %s, not %s", task.ErrInvalid, jsonKind(typ.Type), article(typ.Value))
		}
		return fmt.Errorf("%w: field %q must be %s, not %s", task.ErrInvalid, field, jsonKind(typ.Type), article(typ.Value))
	}
	var b64 base64.CorruptInputError
	if errors.As(err, &b64) {
		return fmt.Errorf("%w: a payload is not valid base64: %v", task.ErrInvalid, b64)
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%w: body is not JSON (at byte %d): %s", task.ErrInvalid, syn.Offset, syn.Error())
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return fmt.Errorf("%w: bad JSON body: %s", task.ErrInvalid, msg)
}

// jsonKind names the JSON value a Go type takes.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a JSON value"
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// article puts "a" or "an" before the name of a JSON value as
// encoding/json gives it ("string", "number 1.5", "array", "object").
func article(v string) string {
	if v == "" {
		return "that"
	}
	if strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}

func handle[Req, Resp any](a *api, fn func(context.Context, *Req) (*Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := new(Req)
		if err := Decode(http.MaxBytesReader(w, r.Body, MaxBody), req); err != nil {
			a.fail(w, err)
			return
		}
		resp, err := fn(r.Context(), req)
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// enqueueOne takes a single task (with an optional "w") and answers
// {"id", "acks"}.
func (a *api) enqueueOne(w http.ResponseWriter, r *http.Request) {
	var body struct {
		wire.EnqueueTask
		W int `json:"w,omitempty"`
	}
	if err := Decode(http.MaxBytesReader(w, r.Body, MaxBody), &body); err != nil {
		a.fail(w, err)
		return
	}
	resp, err := a.svc.Enqueue(r.Context(), &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{body.EnqueueTask}, W: body.W})
	if err != nil {
		a.fail(w, err)
		return
	}
	if len(resp.Results) != 1 {
		a.fail(w, fmt.Errorf("enqueue answered %d results for one task", len(resp.Results)))
		return
	}
	writeJSON(w, http.StatusOK, resp.Results[0])
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	id, err := task.ParseID(r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	req := &wire.GetRequest{ID: id}
	if s := r.URL.Query().Get("min_seq"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			a.fail(w, fmt.Errorf("%w: min_seq %q is not a number", task.ErrInvalid, s))
			return
		}
		req.MinSeq = &v
	}
	if s := r.URL.Query().Get("r"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			a.fail(w, fmt.Errorf("%w: r %q is not a replica count", task.ErrInvalid, s))
			return
		}
		req.R = v
	}
	v, err := a.svc.Get(r.Context(), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// list streams matching tasks as NDJSON, one task per line, in id order
// (enqueue order) across the cluster, from after the cursor ?after=ID. Errors before
// the first line are JSON errors; a failure later ends the stream with an
// {"error": ...} line.
func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &wire.ListRequest{Queue: q.Get("queue"), State: q.Get("state"), Group: q.Get("group"), Kind: q.Get("kind"),
		Subtopic: q.Get("subtopic")}
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			a.fail(w, fmt.Errorf("%w: limit %q is not a count", task.ErrInvalid, s))
			return
		}
		req.Limit = v
	}
	if s := q.Get("desc"); s != "" {
		v, err := strconv.ParseBool(s)
		if err != nil {
			a.fail(w, fmt.Errorf("%w: desc %q is not true or false", task.ErrInvalid, s))
			return
		}
		req.Desc = v
	}
	if s := q.Get("after"); s != "" {
		id, err := task.ParseID(s)
		if err != nil {
			a.fail(w, fmt.Errorf("after: %w", err))
			return
		}
		req.After = &id
	}
	started := false
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	err := a.svc.List(r.Context(), req, func(p *wire.ListPage) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		for i := range p.Tasks {
			if err := enc.Encode(&p.Tasks[i]); err != nil {
				return err
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	switch {
	case err != nil && !started:
		a.fail(w, err)
	case err != nil:
		we := wire.ToError(err)
		_ = enc.Encode(errorBody{Error: we.Msg, Code: we.Code.Name(), Num: uint16(we.Code)})
	case !started:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
}

func (a *api) count(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	resp, err := a.svc.Count(r.Context(), &wire.CountRequest{Queue: q.Get("queue"), Subtopic: q.Get("subtopic")})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *api) queues(w http.ResponseWriter, r *http.Request) {
	req := &wire.QueuesRequest{}
	if s := r.URL.Query().Get("subtopics"); s != "" {
		v, err := strconv.ParseBool(s)
		if err != nil {
			a.fail(w, fmt.Errorf("%w: subtopics %q is not true or false", task.ErrInvalid, s))
			return
		}
		req.Subtopics = v
	}
	resp, err := a.svc.Queues(r.Context(), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// group answers a group's counts; ?dead=N lists up to N of its dead
// tasks.
func (a *api) group(w http.ResponseWriter, r *http.Request) {
	req := &wire.GroupRequest{Group: r.PathValue("group")}
	if s := r.URL.Query().Get("dead"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			a.fail(w, fmt.Errorf("%w: dead %q is not a count", task.ErrInvalid, s))
			return
		}
		req.Dead = v
	}
	resp, err := a.svc.Group(r.Context(), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// hints lists the answering node's hinted enqueues: ?limit=N.
func (a *api) hints(w http.ResponseWriter, r *http.Request) {
	req := &wire.HintsRequest{}
	if s := r.URL.Query().Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			a.fail(w, fmt.Errorf("%w: limit %q is not a count", task.ErrInvalid, s))
			return
		}
		req.Limit = v
	}
	resp, err := a.svc.Hints(r.Context(), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// authList lists the client credentials.
func (a *api) authList(as wire.AuthService) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := as.AuthList(r.Context(), &wire.AuthListRequest{})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// authRevoke revokes the path's credential.
func (a *api) authRevoke(as wire.AuthService) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := as.AuthRevoke(r.Context(), &wire.AuthRevokeRequest{Name: r.PathValue("name")})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// upgrade reads the upgrade status, or finalizes the upgrade.
func (a *api) upgrade(ad wire.AdminService, finalize bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := ad.Upgrade(r.Context(), &wire.UpgradeRequest{Finalize: finalize})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// pathNode is the path's node id.
func pathNode(r *http.Request) (uint64, error) {
	id, err := strconv.ParseUint(r.PathValue("node"), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: node %q is not a node id (ctl cluster lists them)", task.ErrInvalid, r.PathValue("node"))
	}
	return id, nil
}

// decommission starts, follows or cancels the path node's decommission.
func (a *api) decommission(ad wire.AdminService) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req wire.DecommissionRequest
		body := bufio.NewReader(http.MaxBytesReader(w, r.Body, MaxBody))
		if hasBody(body) {
			if err := Decode(body, &req); err != nil {
				a.fail(w, err)
				return
			}
		}
		id, err := pathNode(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		if req.Node != 0 && req.Node != id {
			a.fail(w, fmt.Errorf("%w: node %d in the body, %d in the path", task.ErrInvalid, req.Node, id))
			return
		}
		req.Node = id
		resp, err := ad.Decommission(r.Context(), &req)
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// removeNode forgets the path's node.
func (a *api) removeNode(ad wire.AdminService) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := pathNode(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		resp, err := ad.RemoveNode(r.Context(), &wire.RemoveNodeRequest{Node: id})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// scheduleList lists the schedules, or the path's one.
func (a *api) scheduleList(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.ScheduleList(r.Context(), &wire.ScheduleListRequest{Name: r.PathValue("name")})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// scheduleSet creates or replaces the path's schedule from the body
// (wire.ScheduleSetRequest without the name, which is the path's).
func (a *api) scheduleSet(w http.ResponseWriter, r *http.Request) {
	var req wire.ScheduleSetRequest
	if err := Decode(http.MaxBytesReader(w, r.Body, MaxBody), &req); err != nil {
		a.fail(w, err)
		return
	}
	name := r.PathValue("name")
	if req.Name != "" && req.Name != name {
		a.fail(w, fmt.Errorf("%w: schedule %q in the body, %q in the path", task.ErrInvalid, req.Name, name))
		return
	}
	req.Name = name
	resp, err := a.svc.ScheduleSet(r.Context(), &req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// scheduleDelete deletes the path's schedule.
func (a *api) scheduleDelete(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.ScheduleDelete(r.Context(), &wire.ScheduleDeleteRequest{Name: r.PathValue("name")})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// groupCancel cancels the path's group; the body, optional, is
// wire.GroupCancelRequest without the group, which is the path's.
func (a *api) groupCancel(w http.ResponseWriter, r *http.Request) {
	var req wire.GroupCancelRequest
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, MaxBody))
	if hasBody(body) {
		if err := Decode(body, &req); err != nil {
			a.fail(w, err)
			return
		}
	}
	g := r.PathValue("group")
	if req.Group != "" && req.Group != g {
		a.fail(w, fmt.Errorf("%w: group %q in the body, %q in the path", task.ErrInvalid, req.Group, g))
		return
	}
	req.Group = g
	resp, err := a.svc.GroupCancel(r.Context(), &req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// hasBody reports whether body holds more than white space, leaving its
// first other byte unread. A read error counts as a body: Decode reports
// it.
func hasBody(body *bufio.Reader) bool {
	for {
		b, err := body.ReadByte()
		switch {
		case err == io.EOF:
			return false
		case err != nil:
			return true
		case b != ' ' && b != '\t' && b != '\r' && b != '\n':
			_ = body.UnreadByte()
			return true
		}
	}
}

// queueGet answers a queue's settings.
func (a *api) queueGet(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.QueueGet(r.Context(), &wire.QueueGetRequest{Queue: r.PathValue("queue")})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// queueSet changes the settings the body names (wire.QueueSetRequest
// without the queue, which is the path's).
func (a *api) queueSet(w http.ResponseWriter, r *http.Request) {
	var req wire.QueueSetRequest
	if err := Decode(http.MaxBytesReader(w, r.Body, MaxBody), &req); err != nil {
		a.fail(w, err)
		return
	}
	q := r.PathValue("queue")
	if req.Queue != "" && req.Queue != q {
		a.fail(w, fmt.Errorf("%w: queue %q in the body, %q in the path", task.ErrInvalid, req.Queue, q))
		return
	}
	req.Queue = q
	resp, err := a.svc.QueueSet(r.Context(), &req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// delete deletes the path's task.
func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	id, err := task.ParseID(r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	resp, err := a.svc.Delete(r.Context(), &wire.DeleteRequest{ID: id})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// dead runs a bulk requeue or purge of the path's queue's dead tasks.
func (a *api) dead(op func(context.Context, *wire.DeadRequest) (*wire.BulkResponse, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := op(r.Context(), &wire.DeadRequest{Queue: r.PathValue("queue")})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// queuePause pauses (or resumes) the path's queue.
func (a *api) queuePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := a.svc.QueueSet(r.Context(), &wire.QueueSetRequest{Queue: r.PathValue("queue"), Paused: &paused})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// leave hands the node's partitions over and shuts it down.
func (a *api) leave(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.Leave(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// shardMembers answers the path's shard set.
func (a *api) shardMembers(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.ShardMembers(r.Context(), &wire.ShardMembersRequest{Set: r.PathValue("set")})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *api) cluster(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.Cluster(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// Authenticate wraps h so that every request but the probes (GET
// /healthz and /readyz) must carry a token, the cluster's (as `skuldd ctl
// token` prints it) or a client credential's (`skuldd ctl auth create`):
// "Authorization: Bearer TOKEN", or, for reads, Basic credentials with
// the token as the password (a browser's prompt; see bearer). authn says
// whom a token proves;
// the request goes on with that principal (wire.WithPrincipal), whose
// role the API checks per operation. pprof and the test hooks (/debug/)
// are the admin's (isAdmin). Others get 401, or 403.
func Authenticate(h http.Handler, authn func(token string) (wire.Principal, error), isAdmin func(wire.Principal) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			h.ServeHTTP(w, r)
			return
		}
		tok, ok := bearer(r)
		if !ok {
			// A browser asks for Basic credentials (the token as the
			// password), which is how a person opens the status page.
			w.Header().Add("WWW-Authenticate", `Bearer realm="skuldd"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="skuldd", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "a token is required (Authorization: Bearer TOKEN; skuldd ctl token prints the cluster's, skuldd ctl auth create makes a credential)", Code: wire.CodeUnauthenticated.Name(), Num: uint16(wire.CodeUnauthenticated)})
			return
		}
		p, err := authn(tok)
		if errors.Is(err, wire.ErrUnavailable) {
			// The node cannot tell yet (starting): the client retries.
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: CleanMessage(err.Error()), Code: wire.CodeUnavailable.Name(), Num: uint16(wire.CodeUnavailable)})
			return
		}
		if err != nil {
			w.Header().Add("WWW-Authenticate", `Bearer realm="skuldd", error="invalid_token"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="skuldd", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: CleanMessage(err.Error()), Code: wire.CodeUnauthenticated.Name(), Num: uint16(wire.CodeUnauthenticated)})
			return
		}
		if strings.HasPrefix(r.URL.Path, "/debug/") && !isAdmin(p) {
			writeJSON(w, http.StatusForbidden, errorBody{Error: r.URL.Path + " is the admin's", Code: wire.CodeForbidden.Name(), Num: uint16(wire.CodeForbidden)})
			return
		}
		h.ServeHTTP(w, r.WithContext(wire.WithPrincipal(r.Context(), p)))
	})
}

// bearer returns the token r carries: "Authorization: Bearer TOKEN", or,
// for a read (GET or HEAD) only, the password of Basic credentials (any
// user name). A browser keeps Basic credentials and sends them with any
// request to the origin, a form another site posts included; a Bearer
// header it never adds by itself. So Basic opens the status page and
// the other reads, and nothing that writes: a cross-site form cannot
// make a credential, leave, purge or cancel in the name of an admin who
// opened the page.
func bearer(r *http.Request) (string, bool) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
		return strings.TrimSpace(tok), true
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return "", false
	}
	if _, pass, ok := r.BasicAuth(); ok && pass != "" {
		return pass, true
	}
	return "", false
}

// Health is the body of GET /healthz and /readyz.
type Health struct {
	// Status is "ok" (alive), "starting" (alive, not serving yet),
	// "ready", "not ready" or "shutting down".
	Status string `json:"status"`
	// Reasons say why the node is not ready, or not alive.
	Reasons []string `json:"reasons,omitempty"`
}

// healthz is the liveness probe: 200 unless the node is stopping.
func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	if err := a.cfg.Live(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "shutting down", Reasons: []string{err.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

// healthzStarting is healthz while the node starts: alive, starting.
func (a *api) healthzStarting(w http.ResponseWriter, _ *http.Request) {
	if err := a.cfg.Live(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "shutting down", Reasons: []string{err.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, Health{Status: "starting"})
}

// readyz is the readiness probe: 200 when Ready finds nothing wrong,
// else 503 with every reason it found.
func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if reasons := a.cfg.Ready(); len(reasons) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "not ready", Reasons: reasons})
		return
	}
	writeJSON(w, http.StatusOK, Health{Status: "ready"})
}
