package coord

import (
	"context"
	"sync"

	"github.com/skuldd/skuldd/wire"
)

// gate holds the plane's operations in flight, so the node closes the
// planes beneath them (the store above all) only once none runs: an op
// that outlived its node's store would write to a closed store (a
// coordinator's own write after a forward to a stopping leader, an
// in-process call that no listener drains).
//
// Invariant: once close has begun, enter refuses, and close returns only
// after every op that entered has exited.
type gate struct {
	mu      sync.Mutex
	closing bool
	ops     sync.WaitGroup
	// stop ends the contexts of the ops in flight when close begins: a
	// stopping node does not wait out a long-poll or a hint wait.
	stop   context.Context
	cancel context.CancelFunc
}

func newGate() *gate {
	g := &gate{}
	g.stop, g.cancel = context.WithCancel(context.Background())
	return g
}

// errClosed refuses an op that arrives once the plane is closing.
var errClosed = wire.ErrShuttingDown

// enter admits an op: it returns the op's context, which also ends when
// the plane closes, and exit, to be called once the op is done.
func (g *gate) enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return nil, nil, errClosed
	}
	g.ops.Add(1)
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(g.stop, cancel)
	return ctx, func() {
		unhook()
		cancel()
		g.ops.Done()
	}, nil
}

// close refuses new ops, ends the contexts of those in flight and waits
// for them to return.
func (g *gate) close() {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	g.cancel()
	g.ops.Wait()
}

// Close ends the plane: it refuses new operations, ends the contexts of
// those in flight and returns once all have returned. The node calls it
// before it closes the planes the coordinator acts through.
func (p *Plane) Close() { p.gate.close() }

// enter admits one op into the plane (gate.enter).
func (p *Plane) enter(ctx context.Context) (context.Context, func(), error) {
	return p.gate.enter(ctx)
}

// gated runs op, a request-taking operation, inside the plane's gate.
func gated[Q, R any](p *Plane, ctx context.Context, q Q, op func(context.Context, Q) (R, error)) (R, error) {
	ctx, exit, err := p.enter(ctx)
	if err != nil {
		var zero R
		return zero, err
	}
	defer exit()
	return op(ctx, q)
}
