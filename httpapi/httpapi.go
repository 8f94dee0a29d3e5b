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
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// MaxBody bounds a request body: a full enqueue batch of payloads in
// base64 fits.
const MaxBody = 64 << 20

// New returns the HTTP handler. health reports why the node cannot serve
// (nil when healthy).
func New(svc wire.Service, health func() error, logger *slog.Logger) http.Handler {
	a := &api{svc: svc, health: health, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("POST /v1/tasks", a.enqueueOne)
	mux.HandleFunc("POST /v1/enqueue", handle(a, svc.Enqueue))
	mux.HandleFunc("POST /v1/claim", handle(a, svc.Claim))
	mux.HandleFunc("POST /v1/renew", handle(a, svc.Renew))
	mux.HandleFunc("POST /v1/update", handle(a, svc.Update))
	mux.HandleFunc("POST /v1/complete", handle(a, svc.Complete))
	mux.HandleFunc("POST /v1/fail", handle(a, svc.Fail))
	mux.HandleFunc("POST /v1/snooze", handle(a, svc.Snooze))
	mux.HandleFunc("POST /v1/requeue", handle(a, svc.Requeue))
	mux.HandleFunc("POST /v1/cancel", handle(a, svc.Cancel))
	mux.HandleFunc("POST /v1/delete", handle(a, svc.Delete))
	mux.HandleFunc("DELETE /v1/tasks/{id}", a.delete)
	mux.HandleFunc("GET /v1/tasks/{id}", a.get)
	mux.HandleFunc("GET /v1/tasks", a.list)
	mux.HandleFunc("GET /v1/count", a.count)
	mux.HandleFunc("GET /v1/queues", a.queues)
	mux.HandleFunc("GET /v1/cluster", a.cluster)
	mux.HandleFunc("POST /v1/gc", handle(a, svc.GC))
	mux.HandleFunc("GET /v1/queues/{queue}/settings", a.queueGet)
	mux.HandleFunc("POST /v1/queues/{queue}/settings", a.queueSet)
	mux.HandleFunc("POST /v1/queues/{queue}/pause", a.queuePause(true))
	mux.HandleFunc("POST /v1/queues/{queue}/resume", a.queuePause(false))
	mux.HandleFunc("POST /v1/queues/{queue}/dead/requeue", a.dead(svc.RequeueDead))
	mux.HandleFunc("POST /v1/queues/{queue}/dead/purge", a.dead(svc.PurgeDead))
	mux.HandleFunc("GET /v1/groups/{group}", a.group)
	mux.HandleFunc("POST /v1/groups/{group}/cancel", a.groupCancel)
	mux.HandleFunc("GET /v1/hints", a.hints)
	mux.HandleFunc("GET /v1/schedules", a.scheduleList)
	mux.HandleFunc("GET /v1/schedules/{name}", a.scheduleList)
	mux.HandleFunc("PUT /v1/schedules/{name}", a.scheduleSet)
	mux.HandleFunc("DELETE /v1/schedules/{name}", a.scheduleDelete)
	mux.HandleFunc("POST /v1/shards/join", handle(a, svc.ShardJoin))
	mux.HandleFunc("POST /v1/shards/renew", handle(a, svc.ShardRenew))
	mux.HandleFunc("POST /v1/shards/leave", handle(a, svc.ShardLeave))
	mux.HandleFunc("GET /v1/shards/{set}", func(w http.ResponseWriter, r *http.Request) {
		resp, err := svc.ShardMembers(r.Context(), &wire.ShardMembersRequest{Set: r.PathValue("set")})
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("POST /v1/leave", func(w http.ResponseWriter, r *http.Request) {
		resp, err := svc.Leave(r.Context())
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, wire.Errorf(wire.CodeUnknownOp, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Starting returns the handler of a node that cannot serve its API yet:
// GET /healthz answers from health, as New's does; every other request is
// refused with health's reason (a 503 for a node starting), at once.
func Starting(health func() error, logger *slog.Logger) http.Handler {
	a := &api{health: health, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		err := health()
		if err == nil {
			// Healthy but not yet handed its API: a moment's gap.
			err = fmt.Errorf("%w: starting", wire.ErrUnavailable)
		}
		a.fail(w, err)
	})
	return mux
}

type api struct {
	svc    wire.Service
	health func() error
	log    *slog.Logger
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
	writeJSON(w, we.Code.HTTPStatus(), errorBody{Error: we.Msg, Code: we.Code.Name(), Num: uint16(we.Code)})
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
		return fmt.Errorf("%w: bad JSON body: %v", task.ErrInvalid, err)
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

// list streams matching tasks as NDJSON, one task per line. Errors before
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

func (a *api) cluster(w http.ResponseWriter, r *http.Request) {
	resp, err := a.svc.Cluster(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// RequireToken wraps h so that every request but GET /healthz must carry
// "Authorization: Bearer TOKEN" (the client token of a cluster with a
// secret, as `skuldd ctl token` prints it). Others get 401.
func RequireToken(h http.Handler, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="skuldd"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "a client token is required (Authorization: Bearer TOKEN; skuldd ctl token prints it)", Code: "unauthorized", Num: 0})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	if err := a.health(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
