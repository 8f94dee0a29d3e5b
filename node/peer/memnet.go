package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/fxamacker/cbor/v2"
	"github.com/skuldd/skuldd/wire"
)

// MemNet is an in-memory network of nodes: the Transport of tests and of
// the simulation. It keeps what nodes can tell of QUIC (requests and
// answers encoded by wire's encoders, under its frame limit; error
// answers as *wire.Error; a dead connection's error wrapping
// wire.ErrUnavailable; raw streams with deadlines), without sockets,
// handshakes or timers of its own. Faults are not its business: wrap
// its endpoints with Faults. Safe for concurrent use.
//
// Unlike wire.Server, a handler that panics is not recovered: MemNet runs
// in tests, where a panic must fail the run, not become an error answer.
type MemNet struct {
	mu    sync.Mutex
	nodes map[string]*MemEndpoint
}

// NewMemNet returns an empty network.
func NewMemNet() *MemNet { return &MemNet{nodes: make(map[string]*MemEndpoint)} }

// memStreamBuffer is how many streamed answers wait for a slow reader
// before the handler's Send blocks (wire.Conn queues as many).
const memStreamBuffer = 64

// errMemClosed is the error of a connection that was closed or whose
// other end left the network.
var errMemClosed = fmt.Errorf("peer: in-memory connection closed: %w", wire.ErrUnavailable)

// Attach serves h at addr as node id until the returned endpoint is
// closed. The endpoint is also the Transport the node dials with, from
// addr.
func (m *MemNet) Attach(addr string, id uint64, h Handlers) (*MemEndpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, taken := m.nodes[addr]; taken {
		return nil, fmt.Errorf("peer: address %s is already on the network", addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &MemEndpoint{net: m, addr: addr, id: id, h: h, ctx: ctx, cancel: cancel, conns: make(map[*memConn]struct{})}
	m.nodes[addr] = e
	return e, nil
}

// Disconnect takes the node at addr off the network at once, as a power
// cut would: its endpoint closes (Close), so nothing it sends or answers
// from then on arrives anywhere. The simulation disconnects a node it
// crashes before it images the node's disk, so that every answer the
// node gave was given before the image. No node at addr: nothing to do.
func (m *MemNet) Disconnect(addr string) {
	if e := m.lookup(addr); e != nil {
		_ = e.Close()
	}
}

func (m *MemNet) lookup(addr string) *MemEndpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[addr]
}

// MemEndpoint is one node on a MemNet.
type MemEndpoint struct {
	net    *MemNet
	addr   string
	id     uint64
	h      Handlers
	ctx    context.Context // done once the endpoint closed
	cancel context.CancelFunc
	// handlers counts the handlers running here; Close waits for them.
	handlers sync.WaitGroup

	mu     sync.Mutex
	closed bool
	// conns are the connections from and to this endpoint; closing it
	// closes them all.
	conns map[*memConn]struct{}
}

// Addr returns the endpoint's address.
func (e *MemEndpoint) Addr() string { return e.addr }

// Dial implements Transport: a connection from e to the node at addr.
func (e *MemEndpoint) Dial(ctx context.Context, addr string) (Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	to := e.net.lookup(addr)
	if to == nil {
		return nil, fmt.Errorf("%w: peer: dial %s: no node at that address", wire.ErrUnavailable, addr)
	}
	c := &memConn{from: e, to: to, done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(to.ctx)
	if !e.add(c) {
		c.cancel()
		return nil, errMemClosed
	}
	if !to.add(c) {
		e.remove(c)
		c.cancel()
		return nil, fmt.Errorf("%w: peer: dial %s: the node left", wire.ErrUnavailable, addr)
	}
	return c, nil
}

func (e *MemEndpoint) add(c *memConn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

// enter counts one more handler running here, unless the endpoint is
// closed. Under the endpoint's lock, so that Close, which marks the
// endpoint closed under it before it waits, never misses one; the caller
// must call handlers.Done when the handler returns.
func (e *MemEndpoint) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.handlers.Add(1)
	return true
}

func (e *MemEndpoint) remove(c *memConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.conns, c)
}

// Close takes the node off the network: dials to its address fail, its
// connections (both ways) fail, the contexts of its handlers end, and
// Close waits for the handlers to return.
func (e *MemEndpoint) Close() error {
	e.net.mu.Lock()
	if e.net.nodes[e.addr] == e {
		delete(e.net.nodes, e.addr)
	}
	e.net.mu.Unlock()
	e.mu.Lock()
	e.closed = true
	conns := e.conns
	e.conns = make(map[*memConn]struct{})
	e.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	e.cancel()
	e.handlers.Wait()
	return nil
}

// memAddr is a node's address on a MemNet.
type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// memConn is a connection from one endpoint to another.
type memConn struct {
	from, to *MemEndpoint
	// ctx is the context of the handlers serving this connection's
	// requests: done when the connection or the serving endpoint closes.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (c *memConn) Done() <-chan struct{} { return c.done }

func (c *memConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.cancel()
		c.from.remove(c)
		c.to.remove(c)
	})
	return nil
}

// memAnswer is one answer frame: a body, streamed (more) or final, or a
// final error.
type memAnswer struct {
	body cbor.RawMessage
	more bool
	err  *wire.Error
}

// start runs the handler of the node at the other end for one request,
// on its own goroutine, and returns where its answers arrive. gone must
// be closed when the caller stops reading them.
func (c *memConn) start(op wire.Op, req any, buffer int, gone <-chan struct{}) (<-chan memAnswer, error) {
	select {
	case <-c.done:
		return nil, errMemClosed
	default:
	}
	body, err := wire.EncodeBody(req, wire.DefaultMaxFrame)
	if err != nil {
		return nil, err
	}
	h := c.to.h.Peer
	if h == nil {
		return nil, fmt.Errorf("%w: peer: %s serves no peer requests", wire.ErrUnavailable, c.to.addr)
	}
	if !c.to.enter() {
		return nil, errMemClosed
	}
	answers := make(chan memAnswer, buffer)
	w := &memWriter{answers: answers, ctx: c.ctx, gone: gone}
	r := &wire.Request{Op: op, PeerID: c.from.id, Body: body, Remote: memAddr(c.from.addr)}
	go func() {
		defer c.to.handlers.Done()
		h.Serve(c.ctx, r, w)
		if !w.ended.Load() {
			_ = w.Error(wire.Errorf(wire.CodeInternal, "handler returned without a response"))
		}
	}()
	return answers, nil
}

func (c *memConn) Call(ctx context.Context, op wire.Op, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	gone := make(chan struct{})
	defer close(gone)
	answers, err := c.start(op, req, 1, gone)
	if err != nil {
		return err
	}
	var a memAnswer
	select {
	case a = <-answers:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		select {
		case a = <-answers:
		default:
			return errMemClosed
		}
	}
	switch {
	case a.err != nil:
		return a.err
	case a.more:
		return wire.Errorf(wire.CodeBadFrame, "wire: op %v: streamed response to Call; use Stream", op)
	case resp != nil && len(a.body) > 0:
		return wire.Unmarshal(a.body, resp)
	}
	return nil
}

func (c *memConn) Stream(ctx context.Context, op wire.Op, req any, each func(body cbor.RawMessage) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	gone := make(chan struct{})
	defer close(gone)
	answers, err := c.start(op, req, memStreamBuffer, gone)
	if err != nil {
		return err
	}
	for {
		var a memAnswer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			select {
			case a = <-answers:
			default:
				return errMemClosed
			}
		}
		if a.err != nil {
			return a.err
		}
		if !a.more {
			if len(a.body) > 0 {
				return each(a.body)
			}
			return nil
		}
		if err := each(a.body); err != nil {
			return err
		}
	}
}

// OpenRaw opens a raw stream to the other end's Raw handler: a
// synchronous pipe with deadlines, as a QUIC stream is.
func (c *memConn) OpenRaw(ctx context.Context, kind byte) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return nil, errMemClosed
	default:
	}
	raw := c.to.h.Raw
	if raw == nil {
		return nil, fmt.Errorf("%w: peer: %s takes no raw streams", wire.ErrUnavailable, c.to.addr)
	}
	if !c.to.enter() {
		return nil, errMemClosed
	}
	near, far := net.Pipe()
	local := &pipeConn{Conn: near, local: memAddr(c.from.addr), remote: memAddr(c.to.addr)}
	remote := &pipeConn{Conn: far, local: memAddr(c.to.addr), remote: memAddr(c.from.addr)}
	go func() {
		defer c.to.handlers.Done()
		// The stream dies with the connection, as a QUIC stream does,
		// even after the handler handed it on and returned.
		context.AfterFunc(c.ctx, func() { _ = near.Close(); _ = far.Close() })
		raw(c.ctx, wire.RawStream{Conn: remote, Kind: kind, PeerID: c.from.id})
	}()
	return local, nil
}

// pipeConn is one end of a net.Pipe with the nodes' addresses.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

func (p *pipeConn) LocalAddr() net.Addr  { return p.local }
func (p *pipeConn) RemoteAddr() net.Addr { return p.remote }

// memWriter is the wire.ResponseWriter of one request on a MemNet.
type memWriter struct {
	answers chan<- memAnswer
	ctx     context.Context // the handler's
	gone    <-chan struct{} // closed once the caller stopped reading
	ended   atomic.Bool
}

// errMemResponseEnded is returned by a memWriter after Reply or Error.
var errMemResponseEnded = errors.New("peer: response already ended")

func (w *memWriter) deliver(a memAnswer) error {
	// Nothing sent after the connection closed reaches the caller (as
	// over QUIC, where the handler's context ends after the close).
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("peer: send response: %w", err)
	}
	select {
	case w.answers <- a:
		return nil
	case <-w.gone:
		return errMemClosed
	case <-w.ctx.Done():
		return fmt.Errorf("peer: send response: %w", w.ctx.Err())
	}
}

func (w *memWriter) Send(v any) error {
	if w.ended.Load() {
		return errMemResponseEnded
	}
	body, err := wire.EncodeBody(v, wire.DefaultMaxFrame)
	if err != nil {
		return err
	}
	return w.deliver(memAnswer{body: body, more: true})
}

func (w *memWriter) Reply(v any) error {
	if !w.ended.CompareAndSwap(false, true) {
		return errMemResponseEnded
	}
	body, err := wire.EncodeBody(v, wire.DefaultMaxFrame)
	if err != nil {
		// The request still gets its one final answer.
		_ = w.deliver(memAnswer{err: wire.ErrorAnswer(err)})
		return err
	}
	return w.deliver(memAnswer{body: body})
}

func (w *memWriter) Error(err error) error {
	if !w.ended.CompareAndSwap(false, true) {
		return errMemResponseEnded
	}
	if err == nil {
		err = wire.Errorf(wire.CodeInternal, "handler reported a nil error")
	}
	return w.deliver(memAnswer{err: wire.ErrorAnswer(err)})
}
