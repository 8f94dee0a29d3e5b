package peer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/wire"
)

// The raft carrier delivers every message of a destination, in order, in
// batches, and stops with its context.
func TestRaftCarrier(t *testing.T) {
	net := NewMemNet()
	var mu sync.Mutex
	var got []string
	batches := 0
	mux := NewMux()
	mux.Handle(wire.OpRaft, Unary(func(_ context.Context, _ *wire.Request, b *wire.RaftBatch) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, m := range b.Msgs {
			got = append(got, string(m))
		}
		return nil, nil
	}))
	b, err := net.Attach("b:2", 2, Handlers{Peer: mux})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := net.Attach("a:1", 1, Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	pool := NewPool(a, time.Second, time.Second)
	defer pool.Close()
	resolve := func(id uint64) string {
		if id == 2 {
			return "b:2"
		}
		return ""
	}
	c := NewRaftCarrier(ctx, pool, resolve, slog.New(slog.NewTextHandler(io.Discard, nil)))
	const n = 1000
	for i := range n {
		if !c.Send(2, fmt.Appendf(nil, "m%d", i)) || !c.Send(3, []byte("to nobody")) {
			t.Fatal("Send refused before the context ended")
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != n {
			return fmt.Errorf("delivered %d of %d messages", len(got), n)
		}
		return nil
	})
	mu.Lock()
	if len(got) != n || got[0] != "m0" || got[n-1] != fmt.Sprintf("m%d", n-1) || batches >= n {
		t.Fatalf("delivered %d messages in %d batches; want all %d, in order, batched", len(got), batches, n)
	}
	for i, m := range got {
		if m != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d is %s: out of order", i, m)
		}
	}
	mu.Unlock()
	cancel()
	c.Wait()
	if c.Send(2, []byte("late")) {
		t.Fatal("Send accepted after the context ended")
	}
}
