package node_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/task"
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
	fwd := node.Forwarded(c.Node(i))
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
		if _, err := fwd.Count(ctx, req); !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("%s: count = %v; want unavailable", tc.name, err)
		}
		greq := &wire.GroupCancelRequest{Group: "g"}
		greq.SetParts(tc.parts)
		if _, err := fwd.GroupCancel(ctx, greq); !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("%s: group cancel = %v; want unavailable", tc.name, err)
		}
	}
	if g, err := c.Client(1).Group(ctx, &wire.GroupRequest{Group: "g"}); err != nil || g.Ready != 3 || g.Cancelled != 0 {
		t.Errorf("group after the refused cancels = %+v, %v; want 3 ready", g, err)
	}
	req := &wire.CountRequest{}
	req.SetParts(mine)
	if _, err := fwd.Count(ctx, req); err != nil {
		t.Errorf("count for exactly its partitions = %v", err)
	}
	// A client cannot narrow a request: its parts are ignored.
	req.SetParts(others[:1])
	if got, err := c.Client(i).Count(ctx, req); err != nil || got.Count != int64(len(resp.Results)) {
		t.Errorf("a client's count naming parts = %+v, %v; want all %d", got, err, len(resp.Results))
	}
}

// TestStaleLeaderGroupCancel: a leader cut off while another took its
// partition over still believes it leads, and its replica lacks the task
// the new leader took into a group. Asked (as a coordinator's forwarded
// copy) to cancel the group in the partitions its registry gives it, it
// finds nothing to write there; it must not answer ok, since the task
// stays open. It confirms its leadership with its cohort first, and
// cannot (found by the simulation, seed 846691675204830041).
func TestStaleLeaderGroupCancel(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	f := c.ALeader(t, all)
	fLeads := c.LeadersSettled(t, 0)[all[f]]
	part := uint16(fLeads[0])
	v, err := c.View((f + 1) % 3)
	if err != nil {
		t.Fatal(err)
	}
	oldEpoch := v.Partitions[part].Epoch
	ctx := t.Context()

	c.Isolate(f)
	newLeader := c.AwaitTakeover(t, all, f, part, oldEpoch)
	// A task of group g in the partition taken over, through its new
	// leader: an id of that partition.
	var id task.ID
	for gen := task.NewIDGen(99, clock.Real{}); ; {
		if id = gen.Next(); partOfForTest(id, nodetest.DefaultPartitions) == part {
			break
		}
	}
	if _, err := c.Client(newLeader).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: "q", Group: "g"}}}); err != nil {
		t.Fatal(err)
	}

	// F's registry still gives it the partition.
	fv, err := c.View(f)
	if err != nil {
		t.Fatal(err)
	}
	var mine []uint16
	for p, pv := range fv.Partitions {
		if pv.Leader == all[f] {
			mine = append(mine, uint16(p))
		}
	}
	if !slices.Contains(mine, part) {
		t.Fatalf("the cut-off leader's registry gives it %v, not partition %d any more", mine, part)
	}
	req := &wire.GroupCancelRequest{Group: "g"}
	req.SetParts(mine)
	if resp, err := node.Forwarded(c.Node(f)).GroupCancel(ctx, req); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("group cancel at the cut-off leader = %+v, %v; want unavailable", resp, err)
	}
	c.Heal()
	if got, err := c.Client(newLeader).Get(ctx, &wire.GetRequest{ID: id}); err != nil || got.State != "ready" {
		t.Fatalf("the task = %+v, %v; want it ready, untouched", got, err)
	}
}
