package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"github.com/quic-go/quic-go"

	"github.com/skuldd/skuldd/internal/version"
)

// streamTypeClient is the first byte of every request stream (clients'
// and peers'). Each bidirectional stream starts with one type byte; it
// also makes the stream visible to the server's AcceptStream, which
// returns only once the first byte has arrived. The other types are
// streamTypeHello (auth.go) and streamTypeRaw; the server resets a stream
// whose type it does not know.
const streamTypeClient byte = 'C'

// streamTypeRaw starts a raw byte stream, handed whole to the server's
// RawHandler: the type byte, then one byte the application chose (its
// kind), then whatever the two ends exchange.
const streamTypeRaw byte = 'R'

// QUIC application error codes, sent when closing a connection.
const (
	appErrNone     quic.ApplicationErrorCode = 0 // orderly close
	appErrShutdown quic.ApplicationErrorCode = 1 // the server is shutting down
	appErrNotYet   quic.ApplicationErrorCode = 3 // the server cannot check the hello yet (starting); retry
)

// QUIC stream error codes, sent when resetting one direction of a stream.
const (
	streamErrNone          quic.StreamErrorCode = 0 // not interested any more
	streamErrUnknownType   quic.StreamErrorCode = 1 // unknown stream-type byte
	streamErrFrameTooLarge quic.StreamErrorCode = 2 // a frame over the limit; the stream cannot resync
	streamErrStalled       quic.StreamErrorCode = 3 // the peer stopped reading responses
	streamErrInternal      quic.StreamErrorCode = 4 // a bug (recovered panic)
)

// Server limits and timeouts.
const (
	// DefaultMaxInflightPerConn is the default ServerConfig.MaxInflightPerConn.
	DefaultMaxInflightPerConn = 4096
	// minMaxFrame is the smallest MaxFrame accepted: every error frame must
	// fit.
	minMaxFrame = 1 << 10
	// streamTypeTimeout bounds the wait for a stream's type byte. It has
	// normally arrived already (see streamTypeClient).
	streamTypeTimeout = handshakeIdleTimeout
	// streamWriteTimeout is how long one write of responses may block on a
	// client that does not read them (QUIC flow control) before the server
	// gives up on the stream and resets it.
	streamWriteTimeout = 30 * time.Second
	// maxErrorMsgLen bounds the message of an error frame, in bytes.
	maxErrorMsgLen = 1 << 10
	// maxIdleWorkers is how many handler goroutines may wait idle for the
	// next request, server-wide (see Server.dispatch).
	maxIdleWorkers = 256
)

// Request is one request as a Handler sees it.
type Request struct {
	Op Op
	// PeerID is the node id the peer proved in its hello; on a client
	// connection the credential the client proved (0: the cluster token,
	// or a node without a secret).
	PeerID uint64
	// Body is the request's CBOR body, empty if it had none. It is owned by
	// the handler: the server never reuses it.
	Body   cbor.RawMessage
	Remote net.Addr
}

// ResponseWriter answers one request. Exactly one of Reply or Error ends
// the request; Send may be called before it any number of times for a
// streamed response. Calls after the request ended return an error and
// send nothing.
//
// The methods are to be called from the handler's goroutine only, and not
// after Serve returned. They block while the stream's send queue is full
// (backpressure from a slow client) and return an error once the stream or
// connection is gone or the handler's context is done.
type ResponseWriter interface {
	// Send marshals v and sends it as a streamed response frame (FlagMore).
	Send(v any) error
	// Reply marshals v (nil, or an empty cbor.RawMessage, for an empty
	// body) and sends it as the final response frame. A cbor.RawMessage is
	// sent as is (after a well-formedness check). If v cannot be encoded or its frame would exceed
	// MaxFrame, Reply ends the request with an error frame instead
	// (CodeInternal or CodeFrameTooLarge) and returns the error.
	Reply(v any) error
	// Error ends the request with an error frame whose code and message come
	// from ToError(err). Messages are cut to 1 KiB.
	Error(err error) error
}

// Handler serves requests.
//
// Serve is called on its own goroutine for each request, concurrently with
// other requests of the same and other connections. ctx is cancelled when
// the connection closes or the server shuts down (always after the
// connection is closed, so nothing sent after that reaches the client);
// Serve must then return promptly, because Server.Close waits for it. Serve must end the request
// with w.Reply or w.Error; if it returns without doing so, the server
// sends CodeInternal "handler returned without a response". A panic in
// Serve is recovered, logged with its stack, and answered with
// CodeInternal: it is a bug, but one request must not take down the node.
type Handler interface {
	Serve(ctx context.Context, req *Request, w ResponseWriter)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, req *Request, w ResponseWriter)

// Serve calls f(ctx, req, w).
func (f HandlerFunc) Serve(ctx context.Context, req *Request, w ResponseWriter) { f(ctx, req, w) }

// ServerConfig configures a Server.
type ServerConfig struct {
	// TLS is the server's TLS configuration (see ServerTLS); required, with
	// a certificate. The server uses a clone; if NextProtos is empty it
	// offers ALPNClient and this build's peer protocols (peerversion.go),
	// and it never allows below TLS 1.3.
	TLS *tls.Config
	// MaxFrame is the largest envelope accepted or sent, in bytes; default
	// DefaultMaxFrame, at least 1 KiB, at most 4 GiB - 1. A request frame
	// over it gets a CodeFrameTooLarge error frame and its stream is
	// closed; a response over it is replaced by a CodeFrameTooLarge error.
	MaxFrame int
	// MaxInflightPerConn is the number of requests of one connection, over
	// all its streams, being handled at once; default
	// DefaultMaxInflightPerConn. When it is reached the stream readers of
	// that connection stop reading until a handler finishes: QUIC flow
	// control then pushes back on the client. Nothing is refused or
	// dropped.
	MaxInflightPerConn int
	// Logger receives the server's logs; default slog.Default().
	Logger *slog.Logger
	// PeerHandler serves requests of peer connections (a peer ALPN); nil
	// refuses peer connections. Handler serves client connections.
	PeerHandler Handler
	// RawHandler receives the raw streams peers open (Conn.OpenRaw); nil
	// resets them. It runs on the stream's own goroutine, owns the stream
	// and must close it.
	RawHandler func(ctx context.Context, rs RawStream)
	// RethrowPanics leaves a handler's panic unrecovered: a test sets it
	// (node does in test binaries) so that a bug fails the test where it
	// is, instead of becoming a CodeInternal answer the test may not
	// look at.
	RethrowPanics bool
	// NodeID is this node's id, sent in hellos; required with PeerHandler.
	NodeID uint64
	// Keys are the keys peers and clients must prove (see auth.go).
	Keys Keys
	// Credentials looks up the keys of a client credential by id
	// (credential.go): an error wrapping ErrUnavailable says the node
	// cannot tell yet (it is starting; the client may retry), any other
	// that it holds no such credential. Nil: the node holds none, and
	// only the cluster token opens a client connection.
	Credentials func(id uint64) (CredentialKeys, error)
	// AdmitPeer checks a peer once it proved who it is (its node id) on a
	// connection of protocol version v, the highest cluster version its
	// build supports (peerversion.go): an error wrapping ErrPeerRefused
	// (a *TooOldError, say) closes the connection with its message, on
	// both sides (the dialer checks the node it reached too). Nil admits
	// every peer.
	AdmitPeer func(id uint64, v version.V) error
	// MaxPeerVersion caps the peer protocols the server offers and dials
	// with (0: version.Max): a test plays a node of an older build with it.
	MaxPeerVersion version.V
	// ResetKey keys QUIC stateless resets. A key that survives restarts
	// (the node keeps one in its data dir) lets peers drop a connection to
	// the node's previous life as soon as they use it. Nil: a random key.
	ResetKey *[32]byte
}

// validate checks cfg and returns a copy with defaults filled in.
func (cfg ServerConfig) validate() (ServerConfig, error) {
	if cfg.TLS == nil {
		return cfg, errors.New("wire: ServerConfig.TLS is required")
	}
	if len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil && cfg.TLS.GetConfigForClient == nil {
		return cfg, errors.New("wire: ServerConfig.TLS has no certificate")
	}
	cfg.TLS = cfg.TLS.Clone()
	if cfg.TLS.MinVersion < tls.VersionTLS13 {
		cfg.TLS.MinVersion = tls.VersionTLS13
	}
	if len(cfg.TLS.NextProtos) == 0 {
		cfg.TLS.NextProtos = append([]string{ALPNClient}, peerALPNs()...)
	}
	if cfg.MaxPeerVersion != 0 {
		cfg.TLS.NextProtos = slices.DeleteFunc(cfg.TLS.NextProtos, func(p string) bool {
			v, peer := PeerVersion(p)
			return peer && v > cfg.MaxPeerVersion
		})
	}
	switch {
	case cfg.MaxFrame == 0:
		cfg.MaxFrame = DefaultMaxFrame
	case cfg.MaxFrame < minMaxFrame || uint64(cfg.MaxFrame) > maxEncodableFrame:
		return cfg, fmt.Errorf("wire: ServerConfig.MaxFrame %d out of range [%d, %d]", cfg.MaxFrame, minMaxFrame, uint64(maxEncodableFrame))
	}
	switch {
	case cfg.MaxInflightPerConn == 0:
		cfg.MaxInflightPerConn = DefaultMaxInflightPerConn
	case cfg.MaxInflightPerConn < 0:
		return cfg, fmt.Errorf("wire: ServerConfig.MaxInflightPerConn %d is negative", cfg.MaxInflightPerConn)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PeerHandler != nil && cfg.NodeID == 0 {
		return cfg, errors.New("wire: ServerConfig.NodeID is required with a PeerHandler")
	}
	return cfg, nil
}

// Server serves the client protocol over QUIC: it accepts connections,
// accepts request streams on them, and runs the Handler for each request.
//
// Goroutines, all tracked by wg and all ended by Close:
//   - Serve's accept loop (the caller's goroutine, counted while it runs);
//   - one per connection (serveConn): accepts streams, closes the
//     connection when it ends;
//   - per stream, a reader (reads frames, starts handlers) and a writer
//     (the only writer of the stream, fed by the stream's send queue);
//   - handler goroutines: one per request being handled (at most
//     MaxInflightPerConn per connection), kept after the request while
//     fewer than maxIdleWorkers are idle, to serve a later request of any
//     connection; idle ones end on Close.
type Server struct {
	cfg ServerConfig
	h   Handler
	log *slog.Logger

	// ctx is cancelled by Close: it ends the accept loops (connections,
	// streams) and idle handler goroutines.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine the server runs (see the type comment).
	wg sync.WaitGroup
	// work hands a request to an idle handler goroutine (unbuffered: a
	// send succeeds only if one is waiting); idle counts those waiting.
	work chan handlerJob
	idle atomic.Int32
	// listening is closed once Serve has its transport (DialPeer waits
	// for it).
	listening chan struct{}

	// mu guards the listener state.
	mu struct {
		sync.Mutex
		closed  bool // Close was called; Serve must not start
		serving bool // Serve was called
		tr      *quic.Transport
		ln      *quic.Listener
	}
}

// NewServer validates cfg, fills in its defaults and returns a Server that
// runs h. It does not listen: call Serve.
func NewServer(cfg ServerConfig, h Handler) (*Server, error) {
	if h == nil {
		return nil, errors.New("wire: NewServer: nil Handler")
	}
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, h: h, log: cfg.Logger, ctx: ctx, cancel: cancel, work: make(chan handlerJob), listening: make(chan struct{})}, nil
}

// Serve accepts QUIC connections on pc, a UDP socket the caller bound and
// keeps owning (the caller closes it after Serve returns). It builds one
// quic.Transport on pc, which can later also dial from the same address.
// Serve blocks until Close and then returns nil; it returns an error if it
// cannot listen or the listener fails. Serve may be called once.
func (s *Server) Serve(pc net.PacketConn) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	if s.mu.serving {
		s.mu.Unlock()
		return errors.New("wire: Server.Serve called twice")
	}
	s.mu.serving = true
	// The stateless reset key lets a peer drop our connection as soon as
	// it sends to a connection we forgot.
	var key quic.StatelessResetKey
	if s.cfg.ResetKey != nil {
		key = *s.cfg.ResetKey
	} else if _, err := rand.Read(key[:]); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("wire: stateless reset key: %w", err)
	}
	tr := &quic.Transport{Conn: pc, StatelessResetKey: &key}
	ln, err := tr.Listen(s.cfg.TLS, quicConfig())
	if err != nil {
		s.mu.Unlock()
		_ = tr.Close()
		return fmt.Errorf("wire: listen on %s: %w", pc.LocalAddr(), err)
	}
	s.mu.tr, s.mu.ln = tr, ln
	close(s.listening)
	// Added under mu, before Close can start waiting: see Close.
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	s.log.Info("wire: serving", "addr", pc.LocalAddr().String())
	for {
		qc, err := ln.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wire: accept on %s: %w", pc.LocalAddr(), err)
		}
		s.wg.Add(1)
		go s.serveConn(qc)
	}
}

// Close stops accepting connections, closes every connection (clients see
// CodeUnavailable), cancels the handlers' contexts and waits for every
// goroutine the server started, handlers included, to return. It is safe
// to call more than once and from any goroutine.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.mu.closed = true
	ln, tr := s.mu.ln, s.mu.tr
	s.mu.Unlock()

	s.cancel()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	s.wg.Wait()
	if tr != nil {
		// Every connection was closed with CONNECTION_CLOSE by serveConn;
		// this stops the transport's packet loop. pc stays open.
		if terr := tr.Close(); err == nil {
			err = terr
		}
	}
	if err != nil {
		return fmt.Errorf("wire: close server: %w", err)
	}
	return nil
}

// serverConn is the state one connection's goroutines share.
type serverConn struct {
	srv    *Server
	qc     *quic.Conn
	remote net.Addr
	log    *slog.Logger
	// h serves the connection's requests: the Handler or the PeerHandler,
	// by the negotiated protocol; peer says which.
	h    Handler
	peer bool
	// peerVersion is a peer connection's protocol version.
	peerVersion version.V
	// key is what the dialer's hello must prove; needHello says whether
	// the connection must say hello before anything else.
	key       []byte
	needHello bool
	// helloOnce guards the hello exchange; authed is closed once it
	// succeeded (at once when no hello is needed), and peerID is set
	// before.
	helloOnce    sync.Once
	helloStarted atomic.Bool
	refuseOnce   sync.Once
	authed       chan struct{}
	peerID       uint64
	// ctx is cancelled once the connection is closed, by either side or
	// by the server shutting down; handlers get it.
	ctx context.Context
	// sem holds a token per request being handled (capacity
	// MaxInflightPerConn); stream readers block on it when it is full.
	sem chan struct{}
}

// serveConn accepts the streams of qc until the connection or the server
// closes, then closes the connection. Its stream goroutines end on their
// own once the connection is closed.
func (s *Server) serveConn(qc *quic.Conn) {
	defer s.wg.Done()
	// The handlers' context is cancelled only once the connection is
	// closed (by the peer, by a timeout, or below on shutdown), so a
	// handler that answers its cancellation cannot race the close: the
	// client sees the connection fail (ErrUnavailable), not the handler's
	// context error.
	ctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(qc.Context(), cancel)
	defer stop()
	defer cancel()

	remote := qc.RemoteAddr()
	state := qc.ConnectionState()
	alpn := state.TLS.NegotiatedProtocol
	cs := &serverConn{
		srv:    s,
		qc:     qc,
		remote: remote,
		log:    s.log.With("remote", remote.String(), "alpn", alpn),
		ctx:    ctx,
		sem:    make(chan struct{}, s.cfg.MaxInflightPerConn),
		authed: make(chan struct{}),
	}
	switch {
	case isPeerALPN(alpn):
		if s.cfg.PeerHandler == nil {
			cs.log.Warn("wire: refusing a peer connection: this node does not serve peers")
			_ = qc.CloseWithError(appErrAuth, "this node does not accept peer connections")
			return
		}
		cs.h, cs.peer, cs.key, cs.needHello = s.cfg.PeerHandler, true, s.cfg.Keys.PeerKey, true
		cs.peerVersion, _ = PeerVersion(alpn)
	default:
		cs.h, cs.key, cs.needHello = s.h, s.cfg.Keys.ClientToken, s.cfg.Keys.ClientToken != nil
	}
	if !cs.needHello {
		close(cs.authed)
	}
	cs.log.Debug("wire: connection accepted")

	var err error
	for {
		var str *quic.Stream
		str, err = qc.AcceptStream(s.ctx)
		if err != nil {
			break
		}
		s.wg.Add(1)
		go cs.serveStream(str)
	}
	if s.ctx.Err() != nil {
		_ = qc.CloseWithError(appErrShutdown, "server shutting down")
	} else {
		// The peer closed it or it timed out; this is a no-op then.
		_ = qc.CloseWithError(appErrNone, "")
	}
	cs.log.Debug("wire: connection closed", "err", err)
}

// serverStream is one request stream.
type serverStream struct {
	cs  *serverConn
	str *quic.Stream
	log *slog.Logger
	// out is the send queue (capacity sendQueueLen) of encoded frames for
	// the writer. Senders are the reader and the stream's handlers; the
	// reader closes it once it has stopped and every handler has returned.
	out chan *bytes.Buffer
	// dead is closed by the writer when it can no longer write; senders
	// then give up instead of blocking on a full out.
	dead chan struct{}
	// handlers counts this stream's running handler goroutines.
	handlers sync.WaitGroup
}

// serveStream runs a stream's reader on the current goroutine and starts
// its writer. It returns after the reader stopped, every handler of the
// stream returned, and the send queue was closed (the writer then drains
// it and ends the stream).
func (cs *serverConn) serveStream(str *quic.Stream) {
	defer cs.srv.wg.Done()
	log := cs.log.With("stream", int64(str.StreamID()))

	var typ [1]byte
	_ = str.SetReadDeadline(time.Now().Add(streamTypeTimeout))
	if _, err := io.ReadFull(str, typ[:]); err != nil {
		log.Debug("wire: stream ended before its type byte", "err", err)
		str.CancelRead(streamErrNone)
		str.CancelWrite(streamErrNone)
		return
	}
	_ = str.SetReadDeadline(time.Time{})
	switch typ[0] {
	case streamTypeHello:
		cs.hello(str)
		return
	case streamTypeClient, streamTypeRaw:
		if !cs.waitAuthed() {
			str.CancelRead(streamErrNone)
			str.CancelWrite(streamErrNone)
			return
		}
		if typ[0] == streamTypeRaw {
			cs.serveRaw(str, log)
			return
		}
	default:
		log.Debug("wire: unknown stream type; resetting", "type", typ[0])
		str.CancelRead(streamErrUnknownType)
		str.CancelWrite(streamErrUnknownType)
		return
	}

	st := &serverStream{
		cs:   cs,
		str:  str,
		log:  log,
		out:  make(chan *bytes.Buffer, sendQueueLen),
		dead: make(chan struct{}),
	}
	cs.srv.wg.Add(1)
	go st.writeLoop()
	st.readLoop()
	st.handlers.Wait()
	close(st.out)
}

// writeLoop is the stream's writer goroutine (see writeFrames). When the
// send queue is closed it flushes and closes the send direction (FIN). On
// a write error it closes dead, resets the send direction, and discards
// whatever is still queued until the queue is closed.
func (st *serverStream) writeLoop() {
	defer st.cs.srv.wg.Done()
	err := writeFrames(deadlineWriter{st.str, streamWriteTimeout}, st.out, nil)
	if err == nil {
		_ = st.str.Close()
		return
	}
	close(st.dead)
	code := streamErrNone
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		code = streamErrStalled
		st.log.Warn("wire: client stopped reading responses; resetting stream", "timeout", streamWriteTimeout)
	} else {
		st.log.Debug("wire: stream write failed", "err", err)
	}
	st.str.CancelWrite(code)
	for buf := range st.out {
		putEncBuf(buf)
	}
}

// readLoop reads request frames and starts a handler for each, until the
// client ends its send direction, the stream breaks, a frame is too large,
// or the connection's context ends.
func (st *serverStream) readLoop() {
	cs := st.cs
	defer func() {
		// Nothing a client sends may panic the node; if the decoder ever
		// does, drop the stream, not the process.
		if r := recover(); r != nil {
			st.log.Error("wire: stream reader panicked", "panic", r, "stack", string(debug.Stack()))
			st.str.CancelRead(streamErrInternal)
		}
	}()
	br := bufio.NewReaderSize(st.str, readBufSize)
	var f Frame
	for {
		err := ReadFrame(br, cs.srv.cfg.MaxFrame, &f)
		switch {
		case err == nil:
		case err == io.EOF:
			return
		case Resumable(err):
			we := ToError(err)
			st.log.Debug("wire: bad request frame", "id", f.ID, "code", we.Code.Name(), "err", err)
			if st.sendError(cs.ctx, f.ID, f.Op, we) != nil {
				return
			}
			continue
		case CodeOf(err) == CodeFrameTooLarge:
			st.log.Debug("wire: request frame too large; closing stream", "err", err)
			_ = st.sendError(cs.ctx, 0, 0, ToError(err))
			st.str.CancelRead(streamErrFrameTooLarge)
			return
		default:
			st.log.Debug("wire: stream read ended", "err", err)
			st.str.CancelRead(streamErrNone)
			return
		}

		select {
		case <-st.dead:
			// Responses can no longer be sent; stop taking requests.
			st.str.CancelRead(streamErrNone)
			return
		default:
		}
		if bad := checkRequestFrame(&f); bad != nil {
			st.log.Debug("wire: bad request frame", "id", f.ID, "err", bad.Msg)
			if st.sendError(cs.ctx, f.ID, f.Op, bad) != nil {
				return
			}
			continue
		}
		// Backpressure: wait for a slot rather than refuse the request.
		select {
		case cs.sem <- struct{}{}:
		case <-cs.ctx.Done():
			st.str.CancelRead(streamErrNone)
			return
		}
		st.handlers.Add(1)
		cs.srv.dispatch(handlerJob{st: st, id: f.ID, op: f.Op, body: f.Body})
	}
}

// handlerJob is one request for a handler goroutine.
type handlerJob struct {
	st   *serverStream
	id   uint64
	op   Op
	body cbor.RawMessage
}

// dispatch runs j on its own goroutine: an idle handler goroutine if one
// is waiting, else a new one. Reusing goroutines saves growing a fresh
// stack for every request (the CBOR encoder needs several KiB), which
// costs more CPU than the rest of the request path on the server.
func (s *Server) dispatch(j handlerJob) {
	select {
	case s.work <- j:
	default:
		s.wg.Add(1)
		go s.worker(j)
	}
}

// worker is a handler goroutine: it runs j, then waits for more work
// while fewer than maxIdleWorkers goroutines are idle, and ends on
// shutdown.
func (s *Server) worker(j handlerJob) {
	defer s.wg.Done()
	for {
		j.st.handle(j.id, j.op, j.body)
		if s.idle.Add(1) > maxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case j = <-s.work:
			s.idle.Add(-1)
		case <-s.ctx.Done():
			s.idle.Add(-1)
			return
		}
	}
}

// checkRequestFrame returns the error frame to answer a request frame that
// decoded but is not a valid request, or nil.
func checkRequestFrame(f *Frame) *Error {
	switch {
	case f.ID == 0:
		return Errorf(CodeBadFrame, "wire: request id 0 is reserved")
	case f.Code != CodeOK:
		return Errorf(CodeBadFrame, "wire: request frame carries error code %d", uint16(f.Code))
	case f.Flags != 0:
		return Errorf(CodeBadFrame, "wire: request frame has flags %#x; none are defined for requests", uint8(f.Flags))
	}
	return nil
}

// handle runs the handler for one request and makes sure the request
// ends with exactly one final frame. It runs on a worker goroutine.
func (st *serverStream) handle(id uint64, op Op, body cbor.RawMessage) {
	cs := st.cs
	defer st.handlers.Done()
	defer func() { <-cs.sem }()

	w := &responseWriter{st: st, ctx: cs.ctx, id: id, op: op}
	defer func() {
		if r := recover(); r != nil {
			if cs.srv.cfg.RethrowPanics {
				panic(r)
			}
			st.log.Error("wire: handler panicked", "op", op, "id", id, "panic", r, "stack", string(debug.Stack()))
			_ = w.Error(Errorf(CodeInternal, "internal error: handler panicked"))
			return
		}
		if !w.ended.Load() {
			st.log.Error("wire: handler returned without a response", "op", op, "id", id)
			_ = w.Error(Errorf(CodeInternal, "handler returned without a response"))
		}
	}()
	cs.h.Serve(cs.ctx, &Request{Op: op, PeerID: cs.peerID, Body: body, Remote: cs.remote}, w)
}

// errStreamGone is returned by sends once the stream's writer has failed.
var errStreamGone = fmt.Errorf("wire: stream closed: %w", ErrUnavailable)

// errResponseEnded is returned by ResponseWriter methods after Reply or
// Error.
var errResponseEnded = errors.New("wire: response already ended")

// send encodes f, with body v (see appendFrame), and queues it for the
// writer, blocking while the queue is full. A frame over MaxFrame is not
// queued: send returns a *Error with CodeFrameTooLarge.
func (st *serverStream) send(ctx context.Context, f *Frame, v any) error {
	buf := getEncBuf()
	if err := appendFrame(buf, f, v, st.cs.srv.cfg.MaxFrame); err != nil {
		putEncBuf(buf)
		return err
	}
	select {
	case st.out <- buf:
		return nil
	case <-st.dead:
		putEncBuf(buf)
		return errStreamGone
	case <-ctx.Done():
		putEncBuf(buf)
		return fmt.Errorf("wire: send response: %w", ctx.Err())
	}
}

// sendError queues an error frame for id.
func (st *serverStream) sendError(ctx context.Context, id uint64, op Op, we *Error) error {
	we = ErrorAnswer(we)
	return st.send(ctx, &Frame{Version: Version, ID: id, Op: op, Code: we.Code, Msg: we.Msg}, nil)
}

// ErrorAnswer returns err as the peer receives it in an error frame: its
// wire code (never CodeOK, which would read as success) and its message
// made valid UTF-8 and cut to 1 KiB.
func ErrorAnswer(err error) *Error {
	we := ToError(err)
	code := we.Code
	if code == CodeOK {
		code = CodeInternal
	}
	return &Error{Code: code, Msg: cleanMsg(we.Msg)}
}

// cleanMsg makes an error message safe to send: valid UTF-8 (the decoder
// rejects anything else) and at most maxErrorMsgLen bytes, cut on a rune
// boundary.
func cleanMsg(m string) string {
	m = strings.ToValidUTF8(m, "\uFFFD")
	if len(m) <= maxErrorMsgLen {
		return m
	}
	cut := maxErrorMsgLen
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut]
}

// responseWriter is the ResponseWriter of one request.
type responseWriter struct {
	st  *serverStream
	ctx context.Context
	id  uint64
	op  Op
	// ended is set by the first Reply or Error. It is atomic only so that
	// a handler that breaks the one-goroutine contract gets an error rather
	// than a data race.
	ended atomic.Bool
}

func (w *responseWriter) Send(v any) error {
	if w.ended.Load() {
		return errResponseEnded
	}
	return w.st.send(w.ctx, &Frame{Version: Version, ID: w.id, Op: w.op, Flags: FlagMore}, v)
}

func (w *responseWriter) Reply(v any) error {
	if !w.ended.CompareAndSwap(false, true) {
		return errResponseEnded
	}
	err := w.st.send(w.ctx, &Frame{Version: Version, ID: w.id, Op: w.op}, v)
	if err != nil {
		if c := CodeOf(err); c == CodeInternal || c == CodeFrameTooLarge {
			// The reply could not be encoded or is over the limit: the
			// request still gets its one final frame.
			_ = w.st.sendError(w.ctx, w.id, w.op, ToError(err))
		}
	}
	return err
}

func (w *responseWriter) Error(err error) error {
	if !w.ended.CompareAndSwap(false, true) {
		return errResponseEnded
	}
	if err == nil {
		err = Errorf(CodeInternal, "handler reported a nil error")
	}
	return w.st.sendError(w.ctx, w.id, w.op, ToError(err))
}

// deadlineWriter writes to a stream with a fresh write deadline for each
// write, so a stalled peer cannot block the writer forever. bufio calls
// Write only when it flushes, so this costs one deadline per batch.
type deadlineWriter struct {
	str     *quic.Stream
	timeout time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.str.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.str.Write(p)
}
