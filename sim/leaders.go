package sim

import (
	"context"
	"log/slog"
	"math"

	"github.com/skuldd/skuldd/faults"
)

// leaderTap is a node's log handler that also hands every "leading" line
// (node/control: a handoff made this node the partition's leader at an
// epoch) to record, as the fault suite reads them from its nodes' log
// files (faults.Leadership): the checkers map each claim's epoch to the
// node that granted it, and flag an epoch two nodes claim to lead. Every
// other record goes to next as it would have.
type leaderTap struct {
	next   slog.Handler
	node   int
	record func(faults.Leadership)
}

// leadingMsg is the message node/control logs when a node starts leading
// a partition, with the attributes leadingPart and leadingEpoch.
const (
	leadingMsg   = "leading"
	leadingPart  = "partition"
	leadingEpoch = "epoch"
)

func (h *leaderTap) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *leaderTap) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == leadingMsg {
		l := faults.Leadership{Node: h.node, Partition: -1}
		r.Attrs(func(a slog.Attr) bool {
			v, ok := whole(a.Value)
			switch {
			case !ok:
			case a.Key == leadingPart:
				l.Partition = int(v)
			case a.Key == leadingEpoch:
				l.Epoch = uint64(v)
			}
			return true
		})
		if l.Partition >= 0 && l.Epoch > 0 {
			h.record(l)
		}
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *leaderTap) WithAttrs(as []slog.Attr) slog.Handler {
	return &leaderTap{next: h.next.WithAttrs(as), node: h.node, record: h.record}
}

func (h *leaderTap) WithGroup(name string) slog.Handler {
	return &leaderTap{next: h.next.WithGroup(name), node: h.node, record: h.record}
}

// whole reads an attribute's value as a non-negative whole number, of
// whichever integer kind it was logged as.
func whole(v slog.Value) (int64, bool) {
	switch v.Kind() {
	case slog.KindInt64:
		return v.Int64(), v.Int64() >= 0
	case slog.KindUint64:
		return int64(v.Uint64()), v.Uint64() <= math.MaxInt64
	}
	return 0, false
}
