package peer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Pool holds one outgoing connection per peer address and redials
// connections that failed. Safe for concurrent use.
type Pool struct {
	tr Transport
	// dialTimeout bounds one dial: a dead address costs this long (QUIC
	// ignores ICMP), so it stays short.
	dialTimeout time.Duration
	// callTimeout bounds one Call (a raft batch, a gossip packet, a join).
	callTimeout time.Duration

	mu sync.Mutex
	// conns maps an address to its connection, or to the dial in progress.
	conns map[string]*poolEntry
}

type poolEntry struct {
	ready chan struct{} // closed when the dial ended
	conn  Conn
	err   error
}

// NewPool returns a pool dialing over tr, each dial bounded by
// dialTimeout and each Call by callTimeout.
func NewPool(tr Transport, dialTimeout, callTimeout time.Duration) *Pool {
	return &Pool{tr: tr, dialTimeout: dialTimeout, callTimeout: callTimeout, conns: make(map[string]*poolEntry)}
}

// Get returns a live connection to addr, dialing one if needed. Callers
// racing for the same address share one dial, which runs apart from them
// (bounded by the pool's dial timeout): each waits for it no longer than
// its own ctx, the one that started it too. (The dial once ran on the
// first caller's goroutine, whose ctx then did not bound it: a forward to
// a dead leader with half a second to spare waited the whole dial
// timeout.)
func (p *Pool) Get(ctx context.Context, addr string) (Conn, error) {
	for {
		p.mu.Lock()
		e := p.conns[addr]
		if e == nil {
			e = &poolEntry{ready: make(chan struct{})}
			p.conns[addr] = e
			p.mu.Unlock()
			go p.dial(addr, e)
		} else {
			p.mu.Unlock()
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.conn.Done():
			// Failed since: forget it and dial again.
			p.forget(addr, e)
			_ = e.conn.Close()
			continue
		default:
			return e.conn, nil
		}
	}
}

func (p *Pool) dial(addr string, e *poolEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), p.dialTimeout)
	defer cancel()
	c, err := p.tr.Dial(ctx, addr)
	if err != nil {
		err = fmt.Errorf("peer %s: %w", addr, err)
		p.forget(addr, e) // the next Get dials again
	}
	e.conn, e.err = c, err
	close(e.ready)
}

// forget removes e from the pool if it is still addr's entry.
func (p *Pool) forget(addr string, e *poolEntry) {
	p.mu.Lock()
	if p.conns[addr] == e {
		delete(p.conns, addr)
	}
	p.mu.Unlock()
}

// Drop closes the connection to addr, if there is one, and forgets it:
// calls waiting on it fail now instead of at their deadline, and the next
// Get dials again. For a peer gossip declared dead, whose answers will not
// come (over QUIC the connection would otherwise wait out its idle
// timeout).
func (p *Pool) Drop(addr string) {
	p.mu.Lock()
	e := p.conns[addr]
	delete(p.conns, addr)
	p.mu.Unlock()
	if e == nil {
		return
	}
	go func() {
		<-e.ready // a dial in progress ends within dialTimeout
		if e.conn != nil {
			_ = e.conn.Close()
		}
	}()
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	entries := p.conns
	p.conns = make(map[string]*poolEntry)
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.conn != nil {
			_ = e.conn.Close()
		}
	}
}

// Call sends one request to addr, bounded by the pool's call timeout.
func (p *Pool) Call(ctx context.Context, addr string, op wire.Op, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, p.callTimeout)
	defer cancel()
	c, err := p.Get(ctx, addr)
	if err != nil {
		return err
	}
	return c.Call(ctx, op, req, resp)
}
