package peer

import (
	"context"
	"fmt"
	"sync"

	"github.com/skuldd/skuldd/wire"
)

// Mux routes peer requests to the handler registered for their op: each
// plane registers its own ops, so no switch names them all. Safe for
// concurrent use; ops are normally registered before the node serves.
type Mux struct {
	mu       sync.RWMutex
	handlers map[wire.Op]wire.Handler
	fallback wire.Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: make(map[wire.Op]wire.Handler)} }

// Handle registers h for op. Registering an op twice is a wiring bug and
// panics (at start, before any request is served).
func (m *Mux) Handle(op wire.Op, h wire.Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[op]; dup {
		panic(fmt.Sprintf("peer: op %v registered twice", op))
	}
	m.handlers[op] = h
}

// HandleFunc registers f for op.
func (m *Mux) HandleFunc(op wire.Op, f func(ctx context.Context, req *wire.Request, w wire.ResponseWriter)) {
	m.Handle(op, wire.HandlerFunc(f))
}

// Fallback sets the handler of the ops nothing registered; without one
// they are answered with wire.CodeUnknownOp.
func (m *Mux) Fallback(h wire.Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fallback = h
}

// Serve implements wire.Handler.
func (m *Mux) Serve(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	m.mu.RLock()
	h, ok := m.handlers[req.Op]
	if !ok {
		h = m.fallback
	}
	m.mu.RUnlock()
	if h == nil {
		_ = w.Error(wire.Errorf(wire.CodeUnknownOp, "unknown peer op %d", req.Op))
		return
	}
	h.Serve(ctx, req, w)
}

// Unary adapts fn, which takes a decoded request body and returns the
// answer (nil for an empty one), to a Handler: a body that does not
// decode is answered with wire.CodeBadFrame.
func Unary[Req any](fn func(ctx context.Context, req *wire.Request, body *Req) (any, error)) wire.Handler {
	return wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		body := new(Req)
		if err := wire.Unmarshal(req.Body, body); err != nil {
			_ = w.Error(wire.Errorf(wire.CodeBadFrame, "%s: %v", req.Op, err))
			return
		}
		resp, err := fn(ctx, req, body)
		if err != nil {
			_ = w.Error(err)
			return
		}
		_ = w.Reply(resp)
	})
}
