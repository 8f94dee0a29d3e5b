package sim

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/skuldd/skuldd/faults"
)

// The tap hands on every "leading" record with its partition and epoch,
// as node/control logs them, and passes every record through.
func TestLeaderTap(t *testing.T) {
	var got []faults.Leadership
	var passed int
	next := slog.NewTextHandler(io.Discard, nil)
	log := slog.New(&leaderTap{next: countingHandler{next, &passed}, node: 2, record: func(l faults.Leadership) { got = append(got, l) }})
	log.With("member", 2).Info("leading", "partition", 3, "epoch", uint64(7), "sealed", []uint64{1, 2})
	log.Info("leading", "partition", 4) // no epoch: not a leadership
	log.Info("something else", "partition", 5, "epoch", uint64(9))
	log.Debug("leading", "partition", 6, "epoch", uint64(10)) // below Info, which node/control logs it at
	want := []faults.Leadership{{Node: 2, Partition: 3, Epoch: 7}}
	if len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("tapped %+v; want %+v", got, want)
	}
	if passed != 3 {
		t.Fatalf("%d records passed on; want 3", passed)
	}
}

// countingHandler counts the records it handles.
type countingHandler struct {
	slog.Handler
	n *int
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	*h.n++
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.n}
}
