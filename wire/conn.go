package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/quic-go/quic-go"
)

// Client defaults.
const (
	// DefaultStreams is the default ClientConfig.Streams. One: requests
	// that share a stream leave in shared writes (each flush carries
	// every request queued while the previous one was written) and the
	// node answers them in kind, so a busy Conn sends and receives far
	// fewer packets. Measured on three nodes with 64 clients (skuldd
	// bench, --streams): 4 streams sent 1.18 UDP datagrams per enqueued
	// task and 1 stream 0.67, for 28% more enqueues per second and 10%
	// less CPU per task over enqueue and claim+complete.
	DefaultStreams = 1
	// DefaultDialTimeout is the default ClientConfig.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
	// maxClientStreams bounds ClientConfig.Streams well below the server's
	// maxIncomingStreams.
	maxClientStreams = 64
	// streamRespQueueLen is the capacity, in frames, of a Stream call's
	// queue of response frames. When it is full the stream's reader waits
	// for the callback to catch up, which also holds up the other calls
	// sharing that QUIC stream (and, through flow control, the server):
	// backpressure, never a drop.
	streamRespQueueLen = 64
)

// ClientConfig configures a client Conn. The zero value is valid.
type ClientConfig struct {
	// TLS is the client's TLS configuration; default ClientTLS(). The Conn
	// uses a clone; if NextProtos is empty it offers ALPNClient.
	TLS *tls.Config
	// Streams is the number of long-lived QUIC streams the Conn multiplexes
	// Calls over; default DefaultStreams, at most 64. Each Call goes to
	// the stream with the fewest requests in flight. Fewer streams batch
	// better; more streams limit head-of-line blocking behind a lost
	// packet. Stream calls do not use these: the Conn opens one more
	// stream for them, so a slow Stream callback, which holds up the other
	// calls on its stream, never holds up a Call.
	Streams int
	// MaxFrame is the largest envelope sent or accepted, in bytes; default
	// DefaultMaxFrame. A request over it fails locally with
	// CodeFrameTooLarge. It should match the server's.
	MaxFrame int
	// DialTimeout bounds Dial: resolving, the QUIC handshake and opening
	// the streams; default DefaultDialTimeout.
	DialTimeout time.Duration
	// Token is the client token of a cluster with a secret (DeriveKeys,
	// ParseToken); nil says no hello. With a token the Conn also checks
	// that the node proves the same secret.
	Token []byte

	// hello, set by DialPeer, makes the Conn say hello as a peer.
	hello *helloConfig
}

// helloConfig is what a dialer proves in its hello.
type helloConfig struct {
	key []byte
	id  uint64
}

// validate checks cfg and returns a copy with defaults filled in.
func (cfg ClientConfig) validate() (ClientConfig, error) {
	if cfg.TLS == nil {
		cfg.TLS = ClientTLS()
	} else {
		cfg.TLS = cfg.TLS.Clone()
	}
	if cfg.TLS.MinVersion < tls.VersionTLS13 {
		cfg.TLS.MinVersion = tls.VersionTLS13
	}
	if len(cfg.TLS.NextProtos) == 0 {
		cfg.TLS.NextProtos = []string{ALPNClient}
	}
	switch {
	case cfg.Streams == 0:
		cfg.Streams = DefaultStreams
	case cfg.Streams < 0 || cfg.Streams > maxClientStreams:
		return cfg, fmt.Errorf("wire: ClientConfig.Streams %d out of range [1, %d]", cfg.Streams, maxClientStreams)
	}
	switch {
	case cfg.MaxFrame == 0:
		cfg.MaxFrame = DefaultMaxFrame
	case cfg.MaxFrame < minMaxFrame || uint64(cfg.MaxFrame) > maxEncodableFrame:
		return cfg, fmt.Errorf("wire: ClientConfig.MaxFrame %d out of range [%d, %d]", cfg.MaxFrame, minMaxFrame, uint64(maxEncodableFrame))
	}
	switch {
	case cfg.DialTimeout == 0:
		cfg.DialTimeout = DefaultDialTimeout
	case cfg.DialTimeout < 0:
		return cfg, fmt.Errorf("wire: ClientConfig.DialTimeout %v is negative", cfg.DialTimeout)
	}
	if cfg.hello == nil && cfg.Token != nil {
		cfg.hello = &helloConfig{key: cfg.Token}
	}
	return cfg, nil
}

// Conn is a client connection to one node. It multiplexes requests, each
// tagged with a fresh ID, over a few long-lived streams; responses come
// back in any order and are matched to their caller by ID.
//
// Conn is safe for concurrent use, and is meant to be shared: many
// concurrent callers are what fill its batches (one flush carries every
// request queued while the previous flush was written).
//
// A Conn does not reconnect. Once the connection fails (the node closed
// it, it timed out, a stream broke, or the node broke the protocol) every
// pending and later call fails with an error wrapping ErrUnavailable
// (CodeOf gives CodeUnavailable); the caller dials again. Close must still
// be called to release the UDP socket.
//
// Goroutines: per stream one writer (the only writer of the stream, fed by
// its send queue) and one reader (dispatches response frames to callers).
// All of them end once the connection fails; Close waits for them.
type Conn struct {
	remote   string
	maxFrame int
	// pc and tr are the Conn's own socket and transport, closed by Close;
	// nil on a Conn from DialPeer, which uses the server's.
	pc     net.PacketConn
	tr     *quic.Transport
	qc     *quic.Conn
	alpn   string
	peerID uint64
	// streams are the request streams: streams[:calls] carry Calls,
	// streams[calls] (the last) carries Stream calls.
	streams []*clientStream
	calls   int
	// nextID numbers requests; IDs start at 1 (0 is reserved).
	nextID atomic.Uint64

	// done is closed when the connection fails or is closed; err, set
	// before, is what pending and later calls return.
	done     chan struct{}
	err      error
	failOnce sync.Once

	closeOnce sync.Once
	closeErr  error
	// wg counts the stream goroutines.
	wg sync.WaitGroup
}

// clientStream is one long-lived request stream.
type clientStream struct {
	c   *Conn
	str *quic.Stream
	// out is the send queue (capacity sendQueueLen) of encoded request
	// frames; callers block while it is full. It is never closed: the
	// writer stops on c.done.
	out chan *bytes.Buffer
	// inflight counts the calls waiting on this stream, for picking the
	// least loaded one.
	inflight atomic.Int64

	// mu guards pending, the callers waiting for a response, by request ID.
	mu struct {
		sync.Mutex
		pending map[uint64]*pending
	}
}

// pending is one caller waiting for its response.
type pending struct {
	// ch receives the response frames. For a Call it has capacity 1 and
	// gets exactly one frame (the entry leaves the map as it is delivered),
	// so delivery never blocks. For a Stream it has capacity
	// streamRespQueueLen and delivery blocks while it is full.
	ch        chan *Frame
	streaming bool
	// gone is closed when a Stream caller stops receiving, releasing a
	// reader blocked on a full ch. Nil for a Call.
	gone chan struct{}
}

// dialRound rounds the time a timed-out dial waited, for its message.
const dialRound = 100 * time.Millisecond

// DialTimeoutError is a dial that got no answer in the time it had:
// the node is down, or nothing listens at the address (QUIC runs over
// UDP, so a closed port looks the same as a dead machine). It matches
// context.DeadlineExceeded with errors.Is.
type DialTimeoutError struct {
	Addr  string
	After time.Duration
}

func (e *DialTimeoutError) Error() string {
	return fmt.Sprintf("dial %s: no answer within %v (the node is down, or not listening at this address)", e.Addr, e.After)
}

// Unwrap makes the error a deadline exceeded.
func (e *DialTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// Timeout reports true, as net errors of a timeout do.
func (e *DialTimeoutError) Timeout() bool { return true }

// Dial connects to the node at addr ("host:port") over its own UDP socket
// and opens cfg.Streams request streams. ctx bounds the dial together with
// cfg.DialTimeout; it does not bound the Conn's life afterwards.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Conn, error) {
	return dialOn(ctx, nil, addr, cfg)
}

// dialOn dials addr over tr, or over a socket and transport of its own
// when tr is nil.
func dialOn(parent context.Context, tr *quic.Transport, addr string, cfg ClientConfig) (_ *Conn, err error) {
	cfg, err = cfg.validate()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(parent, cfg.DialTimeout)
	defer cancel()
	began := time.Now()
	defer func() {
		if err != nil && ctx.Err() == context.DeadlineExceeded {
			// No answer in the time the dial had (its own timeout or the
			// caller's deadline): say what that means.
			err = &DialTimeoutError{Addr: addr, After: time.Since(began).Round(dialRound)}
		}
	}()

	raddr, err := resolveUDP(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	var udp net.PacketConn
	owned := tr == nil
	if owned {
		network := "udp4"
		if raddr.AddrPort().Addr().Is6() {
			network = "udp6"
		}
		u, err := net.ListenUDP(network, nil)
		if err != nil {
			return nil, fmt.Errorf("wire: dial %s: bind udp socket: %w", addr, err)
		}
		udp = u
		tr = &quic.Transport{Conn: udp}
	}
	qc, err := tr.Dial(ctx, raddr, cfg.TLS, quicConfig())
	if err != nil {
		if owned {
			_ = tr.Close()
			_ = udp.Close()
		}
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	c := &Conn{
		remote:   addr,
		maxFrame: cfg.MaxFrame,
		qc:       qc,
		done:     make(chan struct{}),
	}
	if owned {
		c.pc, c.tr = udp, tr
	}
	if err := c.open(ctx, cfg.Streams, cfg.hello, cfg.TLS.NextProtos); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	return c, nil
}

// open checks the negotiated protocol, says hello if asked to, opens n
// streams for Calls and one for Stream calls, and starts their goroutines.
func (c *Conn) open(ctx context.Context, n int, hello *helloConfig, offered []string) error {
	state := c.qc.ConnectionState()
	c.alpn = state.TLS.NegotiatedProtocol
	if !slices.Contains(offered, c.alpn) {
		return fmt.Errorf("server negotiated protocol %q, want one of %q", c.alpn, offered)
	}
	if hello != nil {
		id, err := dialHello(ctx, c.qc, hello.key, hello.id)
		if err != nil {
			return err
		}
		c.peerID = id
	}
	c.calls = n
	for range n + 1 {
		str, err := c.qc.OpenStreamSync(ctx)
		if err != nil {
			return fmt.Errorf("open stream: %w", err)
		}
		// The type byte also makes the stream visible to the server now.
		if _, err := str.Write([]byte{streamTypeClient}); err != nil {
			return fmt.Errorf("open stream: write type byte: %w", err)
		}
		s := &clientStream{c: c, str: str, out: make(chan *bytes.Buffer, sendQueueLen)}
		s.mu.pending = make(map[uint64]*pending)
		c.streams = append(c.streams, s)
	}
	for _, s := range c.streams {
		c.wg.Add(2)
		go s.writeLoop()
		go s.readLoop()
	}
	return nil
}

// resolveUDP resolves "host:port", preferring an IPv4 address when the
// host has both kinds (nodes usually bind IPv4 loopback).
func resolveUDP(ctx context.Context, addr string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no address for %q", host)
	}
	ip := ips[0].Unmap()
	for _, a := range ips {
		if a.Unmap().Is4() {
			ip = a.Unmap()
			break
		}
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(pn))), nil
}

// errConnClosed is the cause recorded when the user closes the Conn.
var errConnClosed = errors.New("closed")

// fail records the first failure, releases every waiting caller and closes
// the QUIC connection, which ends every stream goroutine. Later calls do
// nothing.
func (c *Conn) fail(cause error) {
	c.failOnce.Do(func() {
		// The cause is formatted with %v, not wrapped: it may be a *Error
		// (a frame the server rejected), and CodeOf must still say
		// CodeUnavailable.
		c.err = fmt.Errorf("wire: conn %s: %v: %w", c.remote, cause, ErrUnavailable)
		close(c.done)
		_ = c.qc.CloseWithError(appErrNone, "")
	})
}

// Close closes the connection: pending calls fail with an error wrapping
// ErrUnavailable, the stream goroutines end (Close waits for them), and
// the UDP socket is released. It is safe to call more than once.
func (c *Conn) Close() error {
	c.fail(errConnClosed)
	c.closeOnce.Do(func() {
		c.wg.Wait()
		if c.tr == nil {
			return
		}
		err := c.tr.Close()
		if uerr := c.pc.Close(); err == nil {
			err = uerr
		}
		if err != nil {
			c.closeErr = fmt.Errorf("wire: close conn %s: %w", c.remote, err)
		}
	})
	return c.closeErr
}

// Call sends req (encoded with Marshal; nil for no body) as a request of
// kind op and waits for its response, which it decodes into resp (nil to
// ignore the body; an empty body leaves resp untouched).
//
// Errors: an error frame from the node is returned as a *Error (errors.Is
// matches its domain sentinel, such as task.ErrNotFound); a request over
// MaxFrame fails locally with CodeFrameTooLarge; a streamed response, or a
// body that does not decode into resp, gives CodeBadFrame; a dead
// connection gives an error wrapping ErrUnavailable. When ctx ends Call
// returns ctx.Err() at once and forgets the request: the node may still
// execute it, and a late response is discarded.
//
// Call is safe for concurrent use.
func (c *Conn) Call(ctx context.Context, op Op, req, resp any) error {
	s, id, p, err := c.start(ctx, op, req, false)
	if err != nil {
		return err
	}
	defer s.inflight.Add(-1)

	var f *Frame
	select {
	case f = <-p.ch:
	case <-ctx.Done():
		s.unregister(id)
		return ctx.Err()
	case <-c.done:
		// A response that arrived just before the failure still counts.
		select {
		case f = <-p.ch:
		default:
			s.unregister(id)
			return c.err
		}
	}
	if f.Code != CodeOK {
		return &Error{Code: f.Code, Msg: f.Msg}
	}
	if f.Flags&FlagMore != 0 {
		return Errorf(CodeBadFrame, "wire: op %v: streamed response to Call; use Stream", op)
	}
	if resp != nil && len(f.Body) > 0 {
		return Unmarshal(f.Body, resp)
	}
	return nil
}

// Stream is Call for a streamed response: it calls each with the body of
// every FlagMore frame, in order, then with the final frame's body if that
// is not empty. each runs on the caller's goroutine and owns the body. If
// each returns an error, Stream returns it and discards the rest of the
// response. Errors are as for Call; an error frame may come after some
// bodies were already passed to each.
//
// Up to 64 frames are queued for a slow each; beyond that the other
// Stream calls of the Conn wait too (they share a stream), but Calls do
// not (see ClientConfig.Streams).
//
// Stream is safe for concurrent use.
func (c *Conn) Stream(ctx context.Context, op Op, req any, each func(body cbor.RawMessage) error) error {
	s, id, p, err := c.start(ctx, op, req, true)
	if err != nil {
		return err
	}
	defer func() {
		s.unregister(id)
		close(p.gone)
		s.inflight.Add(-1)
	}()

	for {
		var f *Frame
		select {
		case f = <-p.ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			select {
			case f = <-p.ch:
			default:
				return c.err
			}
		}
		if f.Code != CodeOK {
			return &Error{Code: f.Code, Msg: f.Msg}
		}
		if f.Flags&FlagMore == 0 {
			if len(f.Body) > 0 {
				return each(f.Body)
			}
			return nil
		}
		if err := each(f.Body); err != nil {
			return err
		}
	}
}

// start encodes and queues a request, with its pending entry registered
// first so that no response can miss it. On success the caller owns one
// unit of s.inflight and must release it.
func (c *Conn) start(ctx context.Context, op Op, req any, streaming bool) (*clientStream, uint64, *pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, nil, err
	}
	select {
	case <-c.done:
		return nil, 0, nil, c.err
	default:
	}
	id := c.nextID.Add(1)
	buf := getEncBuf()
	if err := appendFrame(buf, &Frame{Version: Version, ID: id, Op: op}, req, c.maxFrame); err != nil {
		putEncBuf(buf)
		return nil, 0, nil, err
	}

	var err error
	p := &pending{streaming: streaming}
	if streaming {
		p.ch = make(chan *Frame, streamRespQueueLen)
		p.gone = make(chan struct{})
	} else {
		p.ch = make(chan *Frame, 1)
	}
	s := c.pick(streaming)
	s.inflight.Add(1)
	s.mu.Lock()
	s.mu.pending[id] = p
	s.mu.Unlock()

	select {
	case s.out <- buf:
		return s, id, p, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.done:
		err = c.err
	}
	putEncBuf(buf)
	s.unregister(id)
	s.inflight.Add(-1)
	if streaming {
		close(p.gone)
	}
	return nil, 0, nil, err
}

// pick returns the stream of Stream calls for a streaming request, else
// the stream of Calls with the fewest requests in flight.
func (c *Conn) pick(streaming bool) *clientStream {
	if streaming {
		return c.streams[c.calls]
	}
	best := c.streams[0]
	bn := best.inflight.Load()
	for _, s := range c.streams[1:c.calls] {
		if n := s.inflight.Load(); n < bn {
			best, bn = s, n
		}
	}
	return best
}

// unregister forgets the pending entry for id, if it is still there.
func (s *clientStream) unregister(id uint64) {
	s.mu.Lock()
	delete(s.mu.pending, id)
	s.mu.Unlock()
}

// writeLoop is the stream's writer goroutine (see writeFrames). It ends
// when the connection fails; a write error fails the connection.
func (s *clientStream) writeLoop() {
	defer s.c.wg.Done()
	if err := writeFrames(s.str, s.out, s.c.done); err != nil {
		s.c.fail(fmt.Errorf("write stream %d: %w", s.str.StreamID(), err))
	}
}

// readLoop is the stream's reader goroutine: it dispatches each response
// frame to its caller. Any read error fails the connection, and so ends
// this goroutine.
func (s *clientStream) readLoop() {
	defer s.c.wg.Done()
	br := bufio.NewReaderSize(s.str, readBufSize)
	for {
		f := new(Frame)
		err := ReadFrame(br, s.c.maxFrame, f)
		if err != nil {
			if Resumable(err) && f.ID != 0 {
				// The node sent something this client cannot read for
				// one request: fail that request, keep the stream.
				we := ToError(err)
				s.dispatch(&Frame{Version: Version, ID: f.ID, Op: f.Op, Code: we.Code, Msg: we.Msg})
				continue
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the node ended a stream we still use
			}
			s.c.fail(fmt.Errorf("read stream %d: %w", s.str.StreamID(), err))
			return
		}
		if f.ID == 0 {
			// An error about the stream itself (say, a frame the node
			// could not parse): requests may have been lost, so the
			// connection is no longer trustworthy.
			s.c.fail(fmt.Errorf("node rejected the stream: %s (%s)", f.Msg, f.Code.Name()))
			return
		}
		if f.Flags&^knownFlags != 0 {
			f = &Frame{Version: Version, ID: f.ID, Op: f.Op, Code: CodeBadFrame,
				Msg: fmt.Sprintf("wire: response frame has unknown flags %#x", uint8(f.Flags))}
		}
		s.dispatch(f)
	}
}

// dispatch hands f to the caller waiting for f.ID, or drops it if there is
// none (the caller gave up). A final frame (no FlagMore, or an error
// frame) removes the entry, and so does any frame for a Call, which
// expects exactly one.
func (s *clientStream) dispatch(f *Frame) {
	final := f.Flags&FlagMore == 0 || f.Code != CodeOK
	s.mu.Lock()
	p := s.mu.pending[f.ID]
	if p != nil && (final || !p.streaming) {
		delete(s.mu.pending, f.ID)
	}
	s.mu.Unlock()
	if p == nil {
		return
	}
	if !p.streaming {
		p.ch <- f // capacity 1, one delivery: never blocks
		return
	}
	select {
	case p.ch <- f:
	case <-p.gone:
	case <-s.c.done:
	}
}
