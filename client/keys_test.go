package client_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
)

// TestUniqueKeys: on three nodes (partitions led by each), enqueues of
// one key sent at once through every node create one task, and every
// answer names it; the key is per queue; a cancelled task frees its key;
// unique_for bounds how long it holds it.
func TestUniqueKeys(t *testing.T) {
	_, clients := threeNodes(t)
	ctx := t.Context()
	for k := range 8 { // keys over several partitions
		key := fmt.Sprintf("order-%d", k)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[client.ID]int{}
		created := 0
		for i := range 12 {
			wg.Go(func() {
				res, err := clients[i%3].Enqueue(ctx, client.Task{Queue: "q", Key: key, Data: fmt.Appendf(nil, "%d", i)})
				if err != nil {
					t.Errorf("enqueue %s: %v", key, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				ids[res.ID]++
				if !res.Duplicate {
					created++
				}
			})
		}
		wg.Wait()
		if len(ids) != 1 || created != 1 {
			t.Fatalf("key %s: answers named %v, %d created; want one task, created once", key, ids, created)
		}
		n, err := clients[0].Count(ctx, "q")
		if err != nil || n != int64(k+1) {
			t.Fatalf("after key %s: %d tasks, %v; want %d", key, n, err, k+1)
		}
	}

	first, err := clients[1].Enqueue(ctx, client.Task{Queue: "other", Key: "order-0"})
	if err != nil || first.Duplicate {
		t.Fatalf("the same key in another queue = %+v, %v; want a new task", first, err)
	}
	if err := clients[2].Cancel(ctx, first.ID, "gone"); err != nil {
		t.Fatal(err)
	}
	again, err := clients[0].Enqueue(ctx, client.Task{Queue: "other", Key: "order-0"})
	if err != nil || again.Duplicate || again.ID == first.ID {
		t.Errorf("the key of a cancelled task = %+v, %v; want a new task", again, err)
	}

	w, err := clients[0].Enqueue(ctx, client.Task{Queue: "q", Key: "window", UniqueFor: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := clients[1].Enqueue(ctx, client.Task{Queue: "q", Key: "window", UniqueFor: 300 * time.Millisecond}); err != nil || d.ID != w.ID || !d.Duplicate {
		t.Errorf("inside the window = %+v, %v; want %v", d, err, w.ID)
	}
	time.Sleep(300 * time.Millisecond) // the node's clock: the window is by EnqueuedAt
	if d, err := clients[2].Enqueue(ctx, client.Task{Queue: "q", Key: "window", UniqueFor: 300 * time.Millisecond}); err != nil || d.ID == w.ID || d.Duplicate {
		t.Errorf("past the window = %+v, %v; want a new task", d, err)
	}

	// An id of the client's own with a key must be of the key's
	// partition.
	wrong := clients[0].NewID()
	for ring.PartitionOf(wrong[:], nodetest.DefaultPartitions) == ring.KeyPartition("q", "k", nodetest.DefaultPartitions) {
		wrong = clients[0].NewID()
	}
	for _, bad := range []client.Task{
		{Queue: "q", Key: "k", ID: wrong},
		{Queue: "q", Key: "k", Deps: []client.ID{w.ID}},
		{Queue: "q", UniqueFor: time.Second},
		{Queue: "q", Key: "a\x00b"},
	} {
		if _, err := clients[0].Enqueue(ctx, bad); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("enqueue %+v = %v; want ErrInvalid", bad, err)
		}
	}
}
