package hints

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// storeHost is a Host of a store alone: Add and Close need nothing else.
type storeHost struct{ s *store.Store }

func (h storeHost) Store() *store.Store                                    { return h.s }
func (h storeHost) Replica(uint16) *partition.Replica                      { return nil }
func (h storeHost) Replication() *replication.Plane                        { return nil }
func (h storeHost) Placeable(uint16, int) bool                             { return false }
func (h storeHost) HandOverKeyed(context.Context, int, []*task.Spec) error { return nil }

// TestAddAfterClose: an enqueue that comes to hint after the node
// started stopping is refused (unavailable, in doubt) instead of
// writing the store the node closes next: the simulation saw pebble
// panic, "closed", on such a late hint (an enqueue that had waited for
// its leader while its node was killed).
func TestAddAfterClose(t *testing.T) {
	st, err := store.Open(store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Self: 1, Partitions: 4, Interval: time.Second, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler)}, storeHost{st})
	if err != nil {
		t.Fatal(err)
	}
	sp := &task.Spec{ID: task.ID{1}, Queue: "q"}
	if err := p.Add([]*task.Spec{sp}, 1); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	err = p.Add([]*task.Spec{{ID: task.ID{2}, Queue: "q"}}, 1)
	if !errors.Is(err, wire.ErrUnavailable) || !errors.Is(err, wire.ErrShuttingDown) {
		t.Fatalf("Add after Close = %v; want unavailable, shutting down", err)
	}
	if got := p.pending.Load(); got != 1 {
		t.Fatalf("pending %d; want the one added before Close", got)
	}
}

// ServePut keeps what a coordinator may spread (tasks without key or
// deps, each with an id and a valid queue) and refuses the rest whole,
// keeping nothing of a refused request.
func TestServePut(t *testing.T) {
	st, err := store.Open(store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := New(Config{Self: 1, Partitions: 4, Interval: time.Second, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler)}, storeHost{st})
	if err != nil {
		t.Fatal(err)
	}
	ok := &task.Spec{ID: task.ID{1}, Queue: "q"}
	for _, tc := range []struct {
		name string
		req  wire.HintPutRequest
	}{
		{"no tasks", wire.HintPutRequest{W: 2}},
		{"negative w", wire.HintPutRequest{W: -1, Specs: []*task.Spec{ok}}},
		{"nil task", wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, nil}}},
		{"no id", wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, {Queue: "q"}}}},
		{"keyed", wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, {ID: task.ID{2}, Queue: "q", Key: "k"}}}},
		{"deps", wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, {ID: task.ID{3}, Queue: "q", Deps: []task.ID{{1}}}}}},
		{"bad queue", wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, {ID: task.ID{4}, Queue: "no spaces"}}}},
	} {
		if err := p.ServePut(&tc.req); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%s: %v; want invalid", tc.name, err)
		}
	}
	if got := p.Stats().Pending; got != 0 {
		t.Fatalf("refused puts kept %d hints", got)
	}
	if err := p.ServePut(&wire.HintPutRequest{W: 2, Specs: []*task.Spec{ok, {ID: task.ID{5}, Queue: "q"}}}); err != nil {
		t.Fatal(err)
	}
	hs, err := p.List(10)
	if err != nil || len(hs) != 2 || hs[0].W != 2 {
		t.Fatalf("hints after a put: %+v, %v; want 2, w=2", hs, err)
	}
}
