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
