package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// The pool shares one connection per address, dials again after it
// failed, and Drop closes it.
func TestPool(t *testing.T) {
	net := NewMemNet()
	attach := func(addr string, id uint64) *MemEndpoint {
		mux := NewMux()
		mux.HandleFunc(wire.OpRaft, func(_ context.Context, _ *wire.Request, w wire.ResponseWriter) { _ = w.Reply(nil) })
		e, err := net.Attach(addr, id, Handlers{Peer: mux})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := attach("a:1", 1), attach("b:2", 2)
	defer a.Close()
	p := NewPool(a, time.Second, time.Second)
	defer p.Close()
	ctx := context.Background()
	c1, err := p.Get(ctx, "b:2")
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := p.Get(ctx, "b:2"); c2 != c1 {
		t.Fatal("a second Get dialed again")
	}
	// b restarts: the old connection is done, the next Get dials anew.
	_ = b.Close()
	if err := p.Call(ctx, "b:2", wire.OpRaft, nil, nil); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("call while b is down: %v; want unavailable", err)
	}
	b = attach("b:2", 2)
	defer b.Close()
	if err := p.Call(ctx, "b:2", wire.OpRaft, nil, nil); err != nil {
		t.Fatalf("call after b came back: %v", err)
	}
	c3, _ := p.Get(ctx, "b:2")
	if c3 == c1 {
		t.Fatal("the pool kept a failed connection")
	}
	p.Drop("b:2")
	select {
	case <-c3.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Drop did not close the connection")
	}
}

// hangingTransport's dials wait until release is closed, then fail.
type hangingTransport struct{ release chan struct{} }

func (h hangingTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil, errors.New("no answer")
}

// TestPoolGetBoundedByItsContext: the caller whose Get starts a dial waits
// for it no longer than its own context, though the dial itself runs to
// the pool's dial timeout (a dead peer, whose QUIC dial waits that long).
func TestPoolGetBoundedByItsContext(t *testing.T) {
	tr := hangingTransport{release: make(chan struct{})}
	p := NewPool(tr, time.Hour, time.Hour)
	defer p.Close()
	defer close(tr.release) // before Close, which waits for the dial
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, "dead:1")
		got <- err
	}()
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Get = %v; want its context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get outlived its context: it waits for the dial it started")
	}
}
