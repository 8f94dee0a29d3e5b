package node_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// TestFannedRequestChecksParts: a leader serves a forwarded cluster-wide
// request only for exactly the partitions its registry says it leads,
// those the coordinator named; a coordinator whose registry differs gets
// unavailable (and retries), so no partition is left out or served
// twice, and a refused group cancel cancels nothing.
func TestFannedRequestChecksParts(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.Placed(t, 0, c.IDs(0, 1, 2), 3)
	i, parts := c.BusiestLeader(t, 0, 3)
	mine := make([]uint16, len(parts))
	for k, p := range parts {
		mine[k] = uint16(p)
	}
	ctx := t.Context()
	resp, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q", Group: "g"}, {Queue: "q", Group: "g"}, {Queue: "q", Group: "g"}}})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Node(i)
	fwd := node.WithForwarded(ctx)
	var others []uint16
	for p := range uint16(nodetest.DefaultPartitions) {
		if !slices.Contains(mine, p) {
			others = append(others, p)
		}
	}
	for _, tc := range []struct {
		name  string
		parts []uint16
	}{
		{"none", nil},
		{"one left out", mine[1:]},
		{"one more", append(slices.Clone(mine), others[0])},
		{"others", others},
	} {
		req := &wire.CountRequest{}
		req.SetParts(tc.parts)
		if _, err := n.Count(fwd, req); !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("%s: count = %v; want unavailable", tc.name, err)
		}
		greq := &wire.GroupCancelRequest{Group: "g"}
		greq.SetParts(tc.parts)
		if _, err := n.GroupCancel(fwd, greq); !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("%s: group cancel = %v; want unavailable", tc.name, err)
		}
	}
	if g, err := c.Client(1).Group(ctx, &wire.GroupRequest{Group: "g"}); err != nil || g.Ready != 3 || g.Cancelled != 0 {
		t.Errorf("group after the refused cancels = %+v, %v; want 3 ready", g, err)
	}
	req := &wire.CountRequest{}
	req.SetParts(mine)
	if _, err := n.Count(fwd, req); err != nil {
		t.Errorf("count for exactly its partitions = %v", err)
	}
	// A client cannot narrow a request: its parts are ignored.
	req.SetParts(others[:1])
	if got, err := c.Client(i).Count(ctx, req); err != nil || got.Count != int64(len(resp.Results)) {
		t.Errorf("a client's count naming parts = %+v, %v; want all %d", got, err, len(resp.Results))
	}
}
