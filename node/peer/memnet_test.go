package peer

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Test ops of a peer protocol that means nothing: these tests see only
// the transport.
const (
	opEcho    wire.Op = 200 // answers the request's body
	opFail    wire.Op = 201 // answers task.ErrNotFound
	opCount   wire.Op = 202 // streams 0..N-1, then an empty final answer
	opHang    wire.Op = 203 // answers when its context ends
	opNothing wire.Op = 204 // returns without an answer
	opWho     wire.Op = 205 // answers the caller's id and address
)

type echoMsg struct {
	N    int    `cbor:"1,keyasint"`
	Text string `cbor:"2,keyasint"`
}

// hangs reports what opHang's handlers do.
type hangs struct {
	started chan struct{} // one per handler that began to wait
	ended   chan error    // its context's error, once it ended
}

// testMux serves the test ops.
func testMux(h hangs) *Mux {
	mux := NewMux()
	mux.Handle(opEcho, Unary(func(_ context.Context, _ *wire.Request, m *echoMsg) (any, error) { return m, nil }))
	mux.Handle(opFail, Unary(func(context.Context, *wire.Request, *echoMsg) (any, error) {
		return nil, task.ErrNotFound
	}))
	mux.HandleFunc(opCount, func(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
		var m echoMsg
		if err := wire.Unmarshal(req.Body, &m); err != nil {
			_ = w.Error(err)
			return
		}
		for i := range m.N {
			if err := w.Send(&echoMsg{N: i}); err != nil {
				return
			}
		}
		_ = w.Reply(nil)
	})
	mux.HandleFunc(opHang, func(ctx context.Context, _ *wire.Request, w wire.ResponseWriter) {
		h.started <- struct{}{}
		<-ctx.Done()
		h.ended <- ctx.Err()
		_ = w.Error(ctx.Err())
	})
	mux.HandleFunc(opNothing, func(context.Context, *wire.Request, wire.ResponseWriter) {})
	mux.HandleFunc(opWho, func(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
		_ = w.Reply(&echoMsg{N: int(req.PeerID), Text: req.Remote.String()})
	})
	return mux
}

// pair attaches two nodes, a (id 1) and b (id 2), serving the test ops
// and echoing raw streams, and returns a's connection to b.
func pair(t *testing.T) (*MemNet, *MemEndpoint, *MemEndpoint, Conn, hangs) {
	t.Helper()
	net := NewMemNet()
	hung := hangs{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	raw := func(_ context.Context, rs wire.RawStream) {
		defer rs.Close()
		_, _ = io.Copy(rs, rs)
	}
	a, err := net.Attach("a:1", 1, Handlers{Peer: testMux(hung), Raw: raw})
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.Attach("b:2", 2, Handlers{Peer: testMux(hung), Raw: raw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	c, err := a.Dial(context.Background(), "b:2")
	if err != nil {
		t.Fatal(err)
	}
	return net, a, b, c, hung
}

func TestMemNetCall(t *testing.T) {
	_, _, _, c, _ := pair(t)
	ctx := context.Background()
	var got echoMsg
	if err := c.Call(ctx, opEcho, &echoMsg{N: 7, Text: "seven"}, &got); err != nil || got != (echoMsg{N: 7, Text: "seven"}) {
		t.Fatalf("echo: %+v, %v", got, err)
	}
	// The callee sees who called and from where.
	if err := c.Call(ctx, opWho, nil, &got); err != nil || got.N != 1 || got.Text != "a:1" {
		t.Fatalf("who: %+v, %v; want id 1 from a:1", got, err)
	}
	// An error answer is a *wire.Error that matches its sentinel.
	err := c.Call(ctx, opFail, &echoMsg{}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("fail: %v (%T); want a *wire.Error matching task.ErrNotFound", err, err)
	}
	// Unknown ops and handlers that never answer get what wire.Server
	// answers.
	if err := c.Call(ctx, 299, nil, nil); wire.CodeOf(err) != wire.CodeUnknownOp {
		t.Fatalf("unknown op: %v; want CodeUnknownOp", err)
	}
	if err := c.Call(ctx, opNothing, nil, nil); wire.CodeOf(err) != wire.CodeInternal {
		t.Fatalf("no answer: %v; want CodeInternal", err)
	}
	// A body that does not decode into the request type.
	if err := c.Call(ctx, opEcho, cbor.RawMessage{0x01}, nil); wire.CodeOf(err) != wire.CodeBadFrame {
		t.Fatalf("bad body: %v; want CodeBadFrame", err)
	}
	// A streamed answer to Call is refused, as over QUIC.
	if err := c.Call(ctx, opCount, &echoMsg{N: 2}, nil); wire.CodeOf(err) != wire.CodeBadFrame {
		t.Fatalf("stream to Call: %v; want CodeBadFrame", err)
	}
}

func TestMemNetStream(t *testing.T) {
	_, _, _, c, _ := pair(t)
	var got []int
	err := c.Stream(context.Background(), opCount, &echoMsg{N: 100}, func(b cbor.RawMessage) error {
		var m echoMsg
		if err := wire.Unmarshal(b, &m); err != nil {
			return err
		}
		got = append(got, m.N)
		return nil
	})
	if err != nil || len(got) != 100 || got[0] != 0 || got[99] != 99 {
		t.Fatalf("stream: %d answers (%v), %v; want 0..99 in order", len(got), got[:min(3, len(got))], err)
	}
	// A reader that stops ends the stream with its error, and the
	// handler is not left blocked (the endpoints' Close waits for it).
	stop := errors.New("enough")
	if err := c.Stream(context.Background(), opCount, &echoMsg{N: 1000}, func(cbor.RawMessage) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("stopped stream: %v; want the reader's error", err)
	}
}

// A request whose caller gave up is still executed; the caller gets
// ctx's error at once.
func TestMemNetCallerGivesUp(t *testing.T) {
	_, _, b, c, hung := pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, opHang, nil, nil) }()
	<-hung.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("call: %v; want context.Canceled", err)
	}
	// The handler runs on until its own context (the connection's) ends.
	select {
	case err := <-hung.ended:
		t.Fatalf("handler's context ended with the caller's: %v", err)
	default:
	}
	_ = b.Close()
	if err := <-hung.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context: %v; want cancelled when its node closed", err)
	}
}

// A node that leaves the network fails its connections and its address.
func TestMemNetClose(t *testing.T) {
	_, a, b, c, hung := pair(t)
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), opHang, nil, nil) }()
	<-hung.started
	_ = b.Close()
	<-hung.ended
	if err := <-done; !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("call in flight: %v; want unavailable", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("connection to a closed node is not done")
	}
	if err := c.Call(context.Background(), opEcho, &echoMsg{}, nil); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("call after close: %v; want unavailable", err)
	}
	if _, err := a.Dial(context.Background(), "b:2"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("dial of a closed node: %v; want unavailable", err)
	}
	if _, err := a.Dial(context.Background(), "nowhere:0"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("dial of no node: %v; want unavailable", err)
	}
}

func TestMemNetAttachTwice(t *testing.T) {
	net := NewMemNet()
	a, err := net.Attach("a:1", 1, Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Attach("a:1", 3, Handlers{}); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("second attach at a:1: %v; want refused", err)
	}
	// Once the first left, the address is free again (a restarted node).
	_ = a.Close()
	if _, err := net.Attach("a:1", 1, Handlers{}); err != nil {
		t.Fatalf("attach after close: %v", err)
	}
}

func TestMemNetRaw(t *testing.T) {
	_, _, b, c, _ := pair(t)
	rc, err := c.OpenRaw(context.Background(), wire.RawGossip)
	if err != nil {
		t.Fatal(err)
	}
	if rc.RemoteAddr().String() != "b:2" || rc.LocalAddr().String() != "a:1" {
		t.Fatalf("raw stream addresses %s -> %s; want a:1 -> b:2", rc.LocalAddr(), rc.RemoteAddr())
	}
	_ = rc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(rc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo over raw stream: %q, %v", buf, err)
	}
	// The stream dies with its node.
	_ = b.Close()
	if _, err := rc.Read(buf); err == nil {
		t.Fatal("raw stream still reads after its node closed")
	}
}

func TestMemNetFrameLimit(t *testing.T) {
	_, _, _, c, _ := pair(t)
	big := &echoMsg{Text: strings.Repeat("x", wire.DefaultMaxFrame+1)}
	if err := c.Call(context.Background(), opEcho, big, nil); wire.CodeOf(err) != wire.CodeFrameTooLarge {
		t.Fatalf("oversized request: %v; want CodeFrameTooLarge", err)
	}
}
