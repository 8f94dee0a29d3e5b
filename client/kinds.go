package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// KindArgs are a kind's typed arguments: Kind names the kind, and the
// arguments travel as the task's payload, JSON-encoded.
type KindArgs interface {
	Kind() string
}

// EnqueueKind enqueues a task of args' kind, its payload args as JSON;
// t gives the queue and the rest (its Kind and Data must be empty).
func (c *Client) EnqueueKind(ctx context.Context, args KindArgs, t Task) (Enqueued, error) {
	if t.Kind != "" || t.Data != nil {
		return Enqueued{}, fmt.Errorf("%w: enqueue kind %q: the task's kind and data come from the args", ErrInvalid, args.Kind())
	}
	data, err := json.Marshal(args)
	if err != nil {
		return Enqueued{}, fmt.Errorf("%w: enqueue kind %q: %w", ErrInvalid, args.Kind(), err)
	}
	t.Kind, t.Data = args.Kind(), data
	return c.Enqueue(ctx, t)
}

// Kinds routes tasks to handlers by their kind: its Handler is a Worker's
// handler. A task of a kind no handler is registered for fails its
// attempt with ErrUnknownKind (retried, as a worker that knows the kind
// may be deploying, and dead after the task's max attempts); one whose
// payload does not decode into the kind's args fails for good
// (SkipRetry: no retry can decode it). Safe for concurrent use.
type Kinds struct {
	mu sync.RWMutex
	h  map[string]Handler
}

// ErrUnknownKind fails the attempt of a task whose kind a Kinds has no
// handler for.
var ErrUnknownKind = fmt.Errorf("client: no handler for the task's kind")

// NewKinds returns an empty router.
func NewKinds() *Kinds { return &Kinds{h: map[string]Handler{}} }

// HandleKind registers h for the kind of A (the zero A's Kind()); h gets
// the payload decoded into an A. Registering a kind twice panics, as
// http.ServeMux does: it is a programming error.
func HandleKind[A KindArgs](k *Kinds, h func(ctx context.Context, job *Job, args A) error) {
	var zero A
	kind := zero.Kind()
	k.Handle(kind, func(ctx context.Context, job *Job) error {
		var args A
		if err := json.Unmarshal(job.Data, &args); err != nil {
			return SkipRetry(fmt.Errorf("kind %q: the payload does not decode: %w", kind, err))
		}
		return h(ctx, job, args)
	})
}

// Handle registers an untyped handler for kind: it gets the payload's
// bytes. The empty kind routes the tasks enqueued without one.
func (k *Kinds) Handle(kind string, h Handler) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, dup := k.h[kind]; dup {
		panic(fmt.Sprintf("client: kind %q registered twice", kind))
	}
	k.h[kind] = h
}

// Handler routes a job to its kind's handler.
func (k *Kinds) Handler() Handler {
	return func(ctx context.Context, job *Job) error {
		k.mu.RLock()
		h, ok := k.h[job.Kind]
		k.mu.RUnlock()
		if !ok {
			return fmt.Errorf("%w %q", ErrUnknownKind, job.Kind)
		}
		return h(ctx, job)
	}
}

// Middleware wraps a handler: logging, tracing, metrics, recovery. It
// calls next to run the handler (or returns without, to stop the job
// there with its own outcome).
type Middleware func(next Handler) Handler

// Use adds middleware around the Worker's handler; the first added is the
// outermost. It must be called before Run.
func (w *Worker) Use(mw ...Middleware) {
	if w.ran.Load() {
		panic("client: Worker.Use after Run")
	}
	w.mw = append(w.mw, mw...)
}

// wrapped is the Worker's handler inside its middleware, the first added
// outermost.
func (w *Worker) wrapped() Handler {
	h := w.h
	for i := len(w.mw) - 1; i >= 0; i-- {
		h = w.mw[i](h)
	}
	return h
}
