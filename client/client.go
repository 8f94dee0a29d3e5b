package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Defaults of Config.
const (
	// DefaultDialTimeout bounds connecting to one node: a node that is
	// down is known, and the next one tried, after this long (a QUIC
	// handshake takes a round trip or two; the rest is room for a lost
	// packet's resend).
	DefaultDialTimeout = time.Second
	// DefaultRetryFor is how long a call keeps trying nodes.
	DefaultRetryFor = 30 * time.Second
	// retryPause is the pause after every node of Config.Nodes failed a
	// call once, before the next round; it doubles up to retryPauseMax.
	retryPause    = 50 * time.Millisecond
	retryPauseMax = time.Second
)

// Config configures a Client. Nodes is required; the zero value of every
// other field is its default.
type Config struct {
	// Nodes lists addresses (host:port) of nodes of one cluster. The
	// client uses one at a time, starting with the first, and moves on
	// when it fails.
	Nodes []string
	// Token is what the client proves to a cluster with a secret: the
	// cluster's token (the admin's, in the hex form `skuldd ctl token`
	// prints) or a credential's (`skuldd ctl auth create`: skuld_...,
	// limited to its role); empty for a cluster without a secret.
	Token string
	// DialTimeout bounds connecting to one node; default
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// RetryFor bounds how long a call keeps trying nodes while none can
	// serve it (ErrUnavailable after); default DefaultRetryFor. The
	// call's context bounds it too.
	RetryFor time.Duration
	// Streams is the number of QUIC streams a connection spreads calls
	// over; default the wire's (more for many concurrent calls).
	Streams int
}

// Client is a connection to a skuldd cluster. Its methods may be called
// concurrently. Close it when done.
type Client struct {
	cfg   Config
	token []byte

	mu     sync.Mutex
	cur    int          // index into cfg.Nodes of the node in use
	conn   *wire.Client // to cfg.Nodes[cur]; nil: not connected
	closed bool

	// ids: this client's origin (the node field of its ids) and counter.
	origin uint64
	seq    atomic.Uint32
}

// New checks cfg and returns a Client. It connects on the first call.
func New(cfg Config) (*Client, error) {
	if len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("%w: client: no nodes", ErrInvalid)
	}
	for _, a := range cfg.Nodes {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: client: node address %q: %v", ErrInvalid, a, err)
		}
	}
	if cfg.DialTimeout < 0 || cfg.RetryFor < 0 || cfg.Streams < 0 {
		return nil, fmt.Errorf("%w: client: negative dial timeout, retry time or streams", ErrInvalid)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	c := &Client{cfg: cfg}
	if cfg.Token != "" {
		tok, err := wire.ParseToken(cfg.Token)
		if err != nil {
			return nil, fmt.Errorf("%w: client: %v", ErrInvalid, err)
		}
		c.token = tok
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	c.origin = binary.BigEndian.Uint64(b[:]) >> 1
	return c, nil
}

// Close closes the connection; calls after it fail.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn != nil {
		err := c.conn.Close()
		c.conn = nil
		return err
	}
	return nil
}

// NewID returns a fresh task id: ids of one client grow with time and
// never repeat, and ids of different clients differ (each client draws
// its own origin at random). Tasks are claimed in id order within a
// priority, so an id from NewID keeps a task's place in the queue.
func (c *Client) NewID() ID {
	return task.MakeID(time.Now().UnixMilli(), c.origin, c.seq.Add(1))
}

// errClosed is the error of a call on a closed Client.
var errClosed = errors.New("client: closed")

// connect returns the connection in use, dialing the current node if
// there is none, and the node's address.
func (c *Client) connect(ctx context.Context) (*wire.Client, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, "", errClosed
	}
	addr := c.cfg.Nodes[c.cur]
	if c.conn != nil {
		return c.conn, addr, nil
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	conn, err := wire.Dial(dctx, addr, wire.ClientConfig{Streams: c.cfg.Streams, DialTimeout: c.cfg.DialTimeout, Token: c.token})
	if err != nil {
		return nil, addr, err
	}
	c.conn = wire.NewClient(conn)
	return c.conn, addr, nil
}

// failed drops conn (if it is still the one in use) and moves to the next
// node.
func (c *Client) failed(conn *wire.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn != nil && c.conn != conn {
		return // another call moved on already
	}
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
	c.cur = (c.cur + 1) % len(c.cfg.Nodes)
}

// do runs fn against a node, moving to the next node while the answer is
// retryable, for at most Config.RetryFor and while ctx lasts. It returns
// an *Error for a refusal.
func (c *Client) do(ctx context.Context, op string, fn func(context.Context, *wire.Client) error) error {
	deadline := time.Now().Add(c.cfg.RetryFor)
	pause := retryPause
	var last error
	var lastAddr string
	for tries := 1; ; tries++ {
		cl, addr, err := c.connect(ctx)
		if errors.Is(err, errClosed) {
			return &Error{Op: op, Node: addr, Code: "closed", Err: err}
		}
		if err == nil {
			err = fn(ctx, cl)
			if err == nil {
				return nil
			}
		}
		last, lastAddr = err, addr
		if ctx.Err() != nil {
			return &Error{Op: op, Node: addr, Code: "canceled", Err: fmt.Errorf("%w (last: %v)", ctx.Err(), last)}
		}
		if !retryable(err) {
			return &Error{Op: op, Node: addr, Code: codeName(err), Err: err}
		}
		c.failed(cl)
		if time.Now().After(deadline) {
			break
		}
		if tries%len(c.cfg.Nodes) == 0 {
			// Every node failed once: pause before the next round.
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return &Error{Op: op, Node: addr, Code: "canceled", Err: fmt.Errorf("%w (last: %v)", ctx.Err(), last)}
			case <-t.C:
			}
			pause = min(2*pause, retryPauseMax)
		}
	}
	return &Error{Op: op, Node: lastAddr, Code: codeName(last), Err: fmt.Errorf("%w: no node served it within %v: %w", ErrUnavailable, c.cfg.RetryFor, last)}
}
