package node_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// TestListPayloads: list returns every task's payload, whether the store
// keeps it with the spec (up to 1 KiB) or apart (larger), and get agrees.
func TestListPayloads(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	ctx := context.Background()
	want := map[task.ID][]byte{}
	for _, size := range []int{0, 100, 1024, 1025, 70_000} {
		data := bytes.Repeat([]byte{byte(size)}, size)
		resp, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "lp", Data: data}}})
		if err != nil {
			t.Fatal(err)
		}
		want[resp.Results[0].ID] = data
	}
	got := map[task.ID][]byte{}
	err := c.Client(0).List(ctx, &wire.ListRequest{Queue: "lp"}, func(p *wire.ListPage) error {
		for _, v := range p.Tasks {
			got[v.ID] = v.Data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("list returned %d tasks; want %d", len(got), len(want))
	}
	for id, data := range want {
		if !bytes.Equal(got[id], data) {
			t.Errorf("list: task %s has %d bytes of payload; want %d", id, len(got[id]), len(data))
		}
		v, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: id})
		if err != nil || !bytes.Equal(v.Data, data) {
			t.Errorf("get %s: %d bytes, %v; want %d", id, len(v.Data), err, len(data))
		}
	}
}

// TestListUpdates: list shows each task's progress updates, the same
// visible history get shows (it used to show none: "updates":[]), on one
// node and on three (where the listing node forwards to other leaders).
func TestListUpdates(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) { testListUpdates(t, nodes) })
	}
}

func testListUpdates(t *testing.T, nodes int) {
	c := nodetest.NewCluster(t, nodes)
	ctx := context.Background()
	cl := c.Client(nodes - 1)
	// Two tasks claimed: one with two updates under its first claim and
	// one more under a second (after a snooze); the other with one
	// update. The third is delayed, never claimed, without updates.
	resp, err := cl.Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "lu"}, {Queue: "lu"}, {Queue: "lu", DelayMs: 3_600_000}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[task.ID]int{}
	for _, r := range resp.Results {
		want[r.ID] = 0
	}
	update := func(id task.ID, claim uint32, seq uint64, data string) {
		t.Helper()
		if _, err := cl.Update(ctx, &wire.UpdateRequest{ID: id, Claim: claim, Seq: seq, Data: []byte(data)}); err != nil {
			t.Fatalf("update %s claim %d seq %d: %v", id, claim, seq, err)
		}
		want[id]++
	}
	var claimed []wire.TaskView
	for len(claimed) < 2 {
		cr, err := cl.Claim(ctx, &wire.ClaimRequest{Queue: "lu", TTLMs: 60_000, Count: 2 - len(claimed)})
		if err != nil || len(cr.Tasks) == 0 {
			t.Fatalf("claim: %v, %d tasks; want 2 in all", err, len(cr.Tasks))
		}
		claimed = append(claimed, cr.Tasks...)
	}
	a, b := claimed[0], claimed[1]
	update(a.ID, *a.Claim, 0, "a0")
	update(a.ID, *a.Claim, 1, "a1")
	update(b.ID, *b.Claim, 0, "b0")
	if _, err := cl.Snooze(ctx, &wire.SnoozeRequest{ID: a.ID, Claim: *a.Claim}); err != nil {
		t.Fatal(err)
	}
	cr, err := cl.Claim(ctx, &wire.ClaimRequest{Queue: "lu", TTLMs: 60_000})
	if err != nil || len(cr.Tasks) != 1 || cr.Tasks[0].ID != a.ID {
		t.Fatalf("claim after snooze: %v, %+v; want %s back", err, cr, a.ID)
	}
	update(a.ID, *cr.Tasks[0].Claim, 0, "a2")

	listed := map[task.ID][]wire.UpdateView{}
	err = cl.List(ctx, &wire.ListRequest{Queue: "lu"}, func(p *wire.ListPage) error {
		for _, v := range p.Tasks {
			listed[v.ID] = v.Updates
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(want) {
		t.Fatalf("list returned %d tasks; want %d", len(listed), len(want))
	}
	for id, n := range want {
		g, err := cl.Get(ctx, &wire.GetRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Updates) != n {
			t.Fatalf("get %s: %d updates; want %d", id, len(g.Updates), n)
		}
		l := listed[id]
		if len(l) != len(g.Updates) {
			t.Errorf("list %s: %d updates %+v; get shows %d %+v", id, len(l), l, len(g.Updates), g.Updates)
			continue
		}
		for i := range l {
			if l[i].Claim != g.Updates[i].Claim || l[i].Seq != g.Updates[i].Seq || !bytes.Equal(l[i].Data, g.Updates[i].Data) {
				t.Errorf("list %s: update %d is %+v; get shows %+v", id, i, l[i], g.Updates[i])
			}
		}
	}
}
