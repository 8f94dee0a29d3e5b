package node_test

import (
	"bytes"
	"context"
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
