package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/quic-go/quic-go"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
)

// Test ops. The real ones live in api.go; the transport only carries them.
const (
	opEcho     Op = 1000 + iota // Reply(req.Body)
	opStream                    // Send streamN ints, then Reply("done")
	opNotFound                  // Error(task.ErrNotFound, wrapped)
	opBlock                     // block until ctx is done
	opPanic                     // panic
	opNoReply                   // return without a response
	opHuge                      // Reply with a body over the server's MaxFrame
	opGate                      // count concurrency, wait on the test's gate
)

const (
	streamN = 1000
	// testTimeout bounds every wait in these tests.
	testTimeout = 10 * time.Second
)

// testHandler serves the test ops.
type testHandler struct {
	blocked  chan struct{} // opBlock: receives once per handler entering
	unblockd atomic.Int64  // opBlock: handlers that saw ctx.Done and returned

	gate      chan struct{} // opGate: closed by the test to release
	active    atomic.Int64
	maxActive atomic.Int64
}

func newTestHandler() *testHandler {
	return &testHandler{blocked: make(chan struct{}, 100), gate: make(chan struct{})}
}

func (h *testHandler) Serve(ctx context.Context, req *Request, w ResponseWriter) {
	switch req.Op {
	case opEcho:
		_ = w.Reply(req.Body)
	case opStream:
		for i := range streamN {
			if err := w.Send(i); err != nil {
				_ = w.Error(err)
				return
			}
		}
		_ = w.Reply("done")
	case opNotFound:
		_ = w.Error(fmt.Errorf("lookup %x: %w", req.Body, task.ErrNotFound))
	case opBlock:
		h.blocked <- struct{}{}
		<-ctx.Done()
		h.unblockd.Add(1)
		_ = w.Error(ctx.Err())
	case opPanic:
		panic("test handler panic")
	case opNoReply:
	case opHuge:
		_ = w.Reply(make([]byte, 2*testMaxFrame))
	case opGate:
		n := h.active.Add(1)
		for {
			m := h.maxActive.Load()
			if n <= m || h.maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		<-h.gate
		h.active.Add(-1)
		_ = w.Reply(nil)
	default:
		_ = w.Error(Errorf(CodeUnknownOp, "unknown op %d", req.Op))
	}
}

// testMaxFrame is the MaxFrame of the test servers and clients.
const testMaxFrame = 1 << 20

// startServer runs a Server with h on a fresh loopback port and returns its
// address. Cleanup closes it and checks that Serve returned nil.
func startServer(t testing.TB, h Handler, mod func(*ServerConfig)) (*Server, string) {
	t.Helper()
	cert, err := SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig{TLS: ServerTLS(cert), MaxFrame: testMaxFrame, Logger: testkit.LoggerAt(t, slog.LevelDebug)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Server.Close: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve returned %v, want nil", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("Serve did not return after Close")
		}
		_ = pc.Close()
	})
	return srv, pc.LocalAddr().String()
}

func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Dial(ctx, addr, ClientConfig{MaxFrame: testMaxFrame})
	if err != nil {
		t.Fatalf("Dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// recv runs f and returns its error, failing the test if it takes longer
// than testTimeout.
func within(t testing.TB, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(testTimeout):
		t.Fatalf("%s did not return within %v", what, testTimeout)
		return nil
	}
}

type echoMsg struct {
	G int    `cbor:"1,keyasint"`
	I int    `cbor:"2,keyasint"`
	S string `cbor:"3,keyasint,omitempty"`
}

func TestCallConcurrent(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	const goroutines, calls = 64, 200
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				req := echoMsg{G: g, I: i, S: strings.Repeat("x", i%50)}
				var resp echoMsg
				if err := c.Call(ctx, opEcho, req, &resp); err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
					return
				}
				if resp != req {
					errs <- fmt.Errorf("goroutine %d call %d: got %+v, want %+v", g, i, resp, req)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Empty request and response bodies.
	if err := c.Call(ctx, opEcho, nil, nil); err != nil {
		t.Fatalf("empty call: %v", err)
	}
}

func TestStreamedResponse(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var got []int
	var final string
	err := c.Stream(ctx, opStream, nil, func(body cbor.RawMessage) error {
		if len(got) == streamN {
			return Unmarshal(body, &final)
		}
		var n int
		if err := Unmarshal(body, &n); err != nil {
			return err
		}
		got = append(got, n)
		return nil
	})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if len(got) != streamN || final != "done" {
		t.Fatalf("got %d items and final %q, want %d and \"done\"", len(got), final, streamN)
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("item %d = %d: out of order", i, n)
		}
	}

	// each's error ends the call; the connection stays usable.
	stop := errors.New("enough")
	calls := 0
	err = c.Stream(ctx, opStream, nil, func(cbor.RawMessage) error {
		calls++
		if calls == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 10 {
		t.Fatalf("Stream with failing each = %v after %d calls, want %v after 10", err, calls, stop)
	}
	if err := c.Call(ctx, opEcho, 1, nil); err != nil {
		t.Fatalf("Call after abandoned Stream: %v", err)
	}

	// A streamed response to Call is a protocol error for that call.
	if err := c.Call(ctx, opStream, nil, nil); CodeOf(err) != CodeBadFrame {
		t.Fatalf("Call of a streaming op = %v, want CodeBadFrame", err)
	}
	if err := c.Call(ctx, opEcho, 1, nil); err != nil {
		t.Fatalf("Call after streamed Call: %v", err)
	}
}

// TestSlowStreamDoesNotHoldCalls: a Stream callback that stops reading
// fills its queue and stalls the stream it shares with other Stream calls;
// Calls, on streams of their own, still get their answers.
func TestSlowStreamDoesNotHoldCalls(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr) // DefaultStreams: one stream for Calls
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	release := make(chan struct{})
	streamed := make(chan error, 1)
	go func() {
		n := 0
		streamed <- c.Stream(ctx, opStream, nil, func(cbor.RawMessage) error {
			if n++; n == 1 {
				<-release
			}
			return nil
		})
	}()
	// The callback holds the first frame; the queue behind it fills, and
	// then the stream's reader waits too.
	testkit.WaitFor(t, testTimeout, func() error {
		s := c.streams[c.calls]
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.mu.pending {
			if len(p.ch) == cap(p.ch) {
				return nil
			}
		}
		return errors.New("the Stream call's queue is not full yet")
	})
	for i := range 10 {
		var got int
		if err := within(t, "Call beside a stalled Stream", func() error { return c.Call(ctx, opEcho, i, &got) }); err != nil || got != i {
			t.Fatalf("Call %d beside a stalled Stream = %d, %v", i, got, err)
		}
	}
	close(release)
	if err := within(t, "released Stream", func() error { return <-streamed }); err != nil {
		t.Fatalf("Stream after release: %v", err)
	}
}

func TestErrorFrame(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	err := c.Call(ctx, opNotFound, []byte{1, 2}, nil)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeNotFound {
		t.Fatalf("Call = %v, want *Error with CodeNotFound", err)
	}
	if !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("errors.Is(%v, task.ErrNotFound) = false", err)
	}
	if !strings.Contains(we.Msg, "lookup 420102: task not found") {
		t.Fatalf("message %q lost the handler's context", we.Msg)
	}
	// The same through Stream.
	err = c.Stream(ctx, opNotFound, nil, func(cbor.RawMessage) error { return nil })
	if !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("Stream = %v, want task.ErrNotFound", err)
	}
	if err := c.Call(ctx, Op(9999), nil, nil); CodeOf(err) != CodeUnknownOp {
		t.Fatalf("unknown op = %v, want CodeUnknownOp", err)
	}
}

func TestFrameLimits(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	// A response over the server's MaxFrame becomes an error frame.
	if err := c.Call(ctx, opHuge, nil, nil); CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("huge reply = %v, want CodeFrameTooLarge", err)
	}
	// A request over the client's MaxFrame fails before it is sent.
	if err := c.Call(ctx, opEcho, make([]byte, 2*testMaxFrame), nil); CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("huge request = %v, want CodeFrameTooLarge", err)
	}
	// Both leave the connection usable; a large frame under the limit passes.
	big := bytes.Repeat([]byte{7}, testMaxFrame/2)
	var back []byte
	if err := c.Call(ctx, opEcho, big, &back); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("large echo = %v (%d bytes back)", err, len(back))
	}
}

// rawStream opens a request stream on c's connection that the test drives
// by hand.
func rawStream(t *testing.T, c *Conn, typ byte) *quic.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	str, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write([]byte{typ}); err != nil {
		t.Fatal(err)
	}
	_ = str.SetDeadline(time.Now().Add(testTimeout))
	return str
}

func readFrame(t *testing.T, r io.Reader) *Frame {
	t.Helper()
	var f Frame
	if err := ReadFrame(r, 0, &f); err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	return &f
}

func TestGarbage(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	str := rawStream(t, c, streamTypeClient)
	rng := rand.New(rand.NewPCG(1, 2))

	// Junk inside a valid length prefix: an error frame, and the stream
	// goes on.
	junk := make([]byte, 300)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	junk[0] = 0x1c // reserved additional information: never well-formed
	if _, err := str.Write(lengthPrefixed(junk)); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, str); f.Code != CodeBadFrame || f.ID != 0 {
		t.Fatalf("after junk: %+v, want a CodeBadFrame error frame with ID 0", f)
	}

	// A valid request on the same stream is served.
	body := mustMarshal(t, "hello")
	if err := WriteFrame(str, &Frame{Version: Version, ID: 7, Op: opEcho, Body: body}); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, str); f.Code != CodeOK || f.ID != 7 || !bytes.Equal(f.Body, body) {
		t.Fatalf("echo after junk: %+v", f)
	}

	// Wrong version: CodeVersion for that ID.
	if _, err := str.Write(lengthPrefixed(mustMarshal(t, map[int]any{1: 2, 2: 9, 3: int(opEcho)}))); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, str); f.Code != CodeVersion || f.ID != 9 {
		t.Fatalf("wrong version: %+v, want CodeVersion for ID 9", f)
	}

	// Requests that decode but are not requests.
	for _, bad := range []*Frame{
		{Version: Version, ID: 0, Op: opEcho},
		{Version: Version, ID: 10, Op: opEcho, Flags: FlagMore},
		{Version: Version, ID: 11, Op: opEcho, Code: CodeInternal},
	} {
		if err := WriteFrame(str, bad); err != nil {
			t.Fatal(err)
		}
		if f := readFrame(t, str); f.Code != CodeBadFrame || f.ID != bad.ID {
			t.Fatalf("bad request %+v: got %+v, want CodeBadFrame", bad, f)
		}
	}

	// A too-large length prefix: CodeFrameTooLarge, then the stream ends.
	if _, err := str.Write(binary.BigEndian.AppendUint32(nil, 1<<30)); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, str); f.Code != CodeFrameTooLarge || f.ID != 0 {
		t.Fatalf("too large: %+v, want CodeFrameTooLarge with ID 0", f)
	}
	var f Frame
	if err := ReadFrame(str, 0, &f); err != io.EOF {
		t.Fatalf("after too large: ReadFrame = %v, %+v; want io.EOF (stream closed)", err, f)
	}

	// An unknown stream type is reset.
	other := rawStream(t, c, 'X')
	if _, err := other.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read on a stream of unknown type succeeded")
	} else if se := (*quic.StreamError)(nil); !errors.As(err, &se) || se.ErrorCode != streamErrUnknownType {
		t.Fatalf("unknown stream type: read error %v, want stream error %d", err, streamErrUnknownType)
	}

	// The same connection's other streams and other connections still work.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.Call(ctx, opEcho, 1, nil); err != nil {
		t.Fatalf("Call on the same connection: %v", err)
	}
	if err := dial(t, addr).Call(ctx, opEcho, 1, nil); err != nil {
		t.Fatalf("Call on a new connection: %v", err)
	}
}

func TestCallCancel(t *testing.T) {
	h := newTestHandler()
	_, addr := startServer(t, h, nil)
	c := dial(t, addr)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, opBlock, nil, nil) }()
	select {
	case <-h.blocked:
	case <-time.After(testTimeout):
		t.Fatal("handler never started")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Call = %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("cancelled Call did not return promptly")
	}

	// A deadline works the same; the connection stays usable.
	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	if err := within(t, "Call with deadline", func() error { return c.Call(dctx, opBlock, nil, nil) }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call past its deadline = %v, want context.DeadlineExceeded", err)
	}
	ok, okCancel := context.WithTimeout(context.Background(), testTimeout)
	defer okCancel()
	if err := c.Call(ok, opEcho, 1, nil); err != nil {
		t.Fatalf("Call after cancellations: %v", err)
	}
}

func TestServerCloseWaitsAndFailsCalls(t *testing.T) {
	h := newTestHandler()
	srv, addr := startServer(t, h, nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const pending = 5
	errc := make(chan error, pending)
	for range pending {
		go func() { errc <- c.Call(ctx, opBlock, nil, nil) }()
	}
	for range pending {
		select {
		case <-h.blocked:
		case <-time.After(testTimeout):
			t.Fatal("handlers never started")
		}
	}

	if err := within(t, "Server.Close", srv.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := h.unblockd.Load(); n != pending {
		t.Fatalf("Close returned with %d of %d handlers still running", pending-n, pending)
	}
	for range pending {
		select {
		case err := <-errc:
			if !errors.Is(err, ErrUnavailable) || CodeOf(err) != CodeUnavailable {
				t.Fatalf("pending Call = %v (code %s), want ErrUnavailable", err, CodeOf(err).Name())
			}
		case <-time.After(testTimeout):
			t.Fatal("pending Call did not fail after Server.Close")
		}
	}
	if err := c.Call(ctx, opEcho, 1, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Call after the connection died = %v, want ErrUnavailable", err)
	}
}

func TestConnCloseFailsPending(t *testing.T) {
	h := newTestHandler()
	_, addr := startServer(t, h, nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, opBlock, nil, nil) }()
	<-h.blocked
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; CodeOf(err) != CodeUnavailable {
		t.Fatalf("pending Call after Close = %v, want CodeUnavailable", err)
	}
	if err := c.Call(ctx, opEcho, 1, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Call after Close = %v, want ErrUnavailable", err)
	}
	// The server notices the connection is gone and ends its handler.
	testkit.WaitFor(t, testTimeout, func() error {
		if h.unblockd.Load() != 1 {
			return errors.New("handler still blocked")
		}
		return nil
	})
}

func TestHandlerPanicAndNoReply(t *testing.T) {
	_, addr := startServer(t, newTestHandler(), nil)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	for range 3 {
		if err := c.Call(ctx, opPanic, nil, nil); CodeOf(err) != CodeInternal {
			t.Fatalf("panicking handler = %v, want CodeInternal", err)
		}
	}
	err := c.Call(ctx, opNoReply, nil, nil)
	if CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), "without a response") {
		t.Fatalf("handler without reply = %v, want CodeInternal", err)
	}
	if err := c.Call(ctx, opEcho, 1, nil); err != nil {
		t.Fatalf("Call after panics: %v", err)
	}
}

// rethrowChild names the environment variable under which
// TestRethrowPanics runs as the child that panics.
const rethrowChild = "WIRE_TEST_RETHROW_CHILD"

// With RethrowPanics a handler's panic is not recovered: it takes the
// process down (a test binary, here a child of this one) with its value.
func TestRethrowPanics(t *testing.T) {
	if os.Getenv(rethrowChild) == "1" {
		_, addr := startServer(t, newTestHandler(), func(cfg *ServerConfig) { cfg.RethrowPanics = true })
		c := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = c.Call(ctx, opPanic, nil, nil)
		time.Sleep(testTimeout) // the panic ends the process first
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRethrowPanics$")
	cmd.Env = append(os.Environ(), rethrowChild+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "panic: test handler panic") {
		t.Fatalf("child: %v; want it to die of the handler's panic; output:\n%s", err, out)
	}
}

func TestMaxInflightPerConn(t *testing.T) {
	const limit, calls = 2, 20
	h := newTestHandler()
	_, addr := startServer(t, h, func(cfg *ServerConfig) { cfg.MaxInflightPerConn = limit })
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			if err := c.Call(ctx, opGate, nil, nil); err != nil {
				errs <- err
			}
		})
	}
	testkit.WaitFor(t, testTimeout, func() error {
		if n := h.active.Load(); n < limit {
			return fmt.Errorf("%d handlers running, want %d", n, limit)
		}
		return nil
	})
	close(h.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := h.maxActive.Load(); m > limit {
		t.Fatalf("%d handlers ran at once, limit %d", m, limit)
	}
}

func TestConfigValidation(t *testing.T) {
	cert, err := SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler()
	for _, cfg := range []ServerConfig{
		{},
		{TLS: ClientTLS()},
		{TLS: ServerTLS(cert), MaxFrame: 10},
		{TLS: ServerTLS(cert), MaxInflightPerConn: -1},
	} {
		if _, err := NewServer(cfg, h); err == nil {
			t.Errorf("NewServer(%+v) succeeded", cfg)
		}
	}
	if _, err := NewServer(ServerConfig{TLS: ServerTLS(cert)}, nil); err == nil {
		t.Errorf("NewServer with nil handler succeeded")
	}
	for _, cfg := range []ClientConfig{{Streams: -1}, {Streams: maxClientStreams + 1}, {MaxFrame: 1}, {DialTimeout: -1}} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", cfg); err == nil {
			t.Errorf("Dial with %+v succeeded", cfg)
		}
	}
}

// Server.Close and Conn.Close leave no goroutine behind, including
// handlers that were blocked and idle handler goroutines.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("traffic", func(t *testing.T) {
		h := newTestHandler()
		_, addr := startServer(t, h, nil)
		c := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				if err := c.Call(ctx, opEcho, i, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		go func() { _ = c.Call(ctx, opBlock, nil, nil) }()
		<-h.blocked
		// Cleanup closes the Conn, then the Server, and waits for Serve.
	})
	testkit.WaitFor(t, testTimeout, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	})
}

// BenchmarkCallParallel measures request throughput of ~64 concurrent
// callers sharing one Conn (default config), echoing 100-byte bodies. It
// also reports the UDP packets the client sent per request, which shows
// how well requests are batched.
func BenchmarkCallParallel(b *testing.B) {
	const callers = 64
	_, addr := startServer(b, newTestHandler(), func(cfg *ServerConfig) {
		cfg.Logger = slog.New(slog.DiscardHandler)
	})
	c := dial(b, addr)
	payload := bytes.Repeat([]byte{'x'}, 100)
	ctx := context.Background()
	sent := c.qc.ConnectionStats().PacketsSent

	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var resp []byte
		for pb.Next() {
			if err := c.Call(ctx, opEcho, payload, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	b.ReportMetric(float64(c.qc.ConnectionStats().PacketsSent-sent)/float64(b.N), "pkts/req")
}

// TestDialTimeoutSaysSo: a dial that gets no answer in its time fails
// with a DialTimeoutError that says what that means, and still matches
// context.DeadlineExceeded; so does one cut short by the caller's
// deadline.
func TestDialTimeoutSaysSo(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0") // bound, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, tc := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		dialTO time.Duration
	}{
		{"own timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, 200 * time.Millisecond},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, 5 * time.Second},
	} {
		ctx, cancel := tc.ctx()
		_, err := Dial(ctx, pc.LocalAddr().String(), ClientConfig{DialTimeout: tc.dialTO})
		cancel()
		var dte *DialTimeoutError
		if !errors.As(err, &dte) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within") {
			t.Errorf("%s: %v; want a DialTimeoutError saying no answer", tc.name, err)
		}
	}
}
