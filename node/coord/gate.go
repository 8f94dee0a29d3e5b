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
	oc := &opCtx{Context: ctx, g: g}
	return oc, oc.exit, nil
}

// opCtx is the context of an op in the gate: its own (the embedded
// parent), which also ends when the plane closes or the op exits. Most
// ops never wait on their context (an enqueue that one node's sync
// answers does not), so opCtx joins the parent with the gate's stop only
// when something first asks for Done (a select, or a context derived from
// it): until then it costs the op no registration with either context (a
// context.WithCancel and an AfterFunc per op were about a tenth of a
// one-node enqueue's CPU).
//
// Invariant: once joined, joined is the parent with the stop joined, and
// it is cancelled when the op exits; until then Err says what joined's
// would.
type opCtx struct {
	context.Context // the op's own
	g               *gate

	mu     sync.Mutex
	joined context.Context // nil until Done is first asked for
	cancel context.CancelFunc
	unhook func() bool
	exited bool
}

// join returns the parent joined with the gate's stop, made on first use.
func (c *opCtx) join() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joined == nil {
		c.joined, c.cancel = context.WithCancel(c.Context)
		c.unhook = context.AfterFunc(c.g.stop, c.cancel)
		// A stop already done runs the hook in a goroutine of its own:
		// cancel here too, so Done is closed when it is returned.
		if c.exited || c.g.stop.Err() != nil {
			c.cancel()
		}
	}
	return c.joined
}

// loaded returns joined, nil if not made yet, and whether the op exited.
func (c *opCtx) loaded() (context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined, c.exited
}

func (c *opCtx) Done() <-chan struct{} { return c.join().Done() }

func (c *opCtx) Err() error {
	joined, exited := c.loaded()
	if joined != nil {
		return joined.Err()
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if exited || c.g.stop.Err() != nil {
		return context.Canceled
	}
	return nil
}

// Value is the parent's, but once joined the joined context's: a context
// derived from the op's (which asks for Done first) then finds joined as
// its parent to cancel it, and context.Cause sees why it ended.
func (c *opCtx) Value(key any) any {
	if joined, _ := c.loaded(); joined != nil {
		return joined.Value(key)
	}
	return c.Context.Value(key)
}

// exit ends the op: its context is done from now on, and the gate no
// longer waits for it.
func (c *opCtx) exit() {
	c.mu.Lock()
	c.exited = true
	cancel, unhook := c.cancel, c.unhook
	c.mu.Unlock()
	if cancel != nil {
		unhook()
		cancel()
	}
	c.g.ops.Done()
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
