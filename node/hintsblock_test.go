package node_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// A hint that cannot be handed over keeps no other hint of its
// partition from its cohort. The 30-minute fault run on bb729d4 (seed
// 3636) lost two acknowledged hinted enqueues this way: each waited,
// until the run's end, behind a keyed hint of its partition whose
// handover failed at every try, and the plane handed a partition's
// hints over all or nothing. Here the keyed hint names a held id with
// other content (refused for good: task.ErrConflict); the plain one
// must reach its cohort anyway, and only the refused one stay pending.
func TestHintHandOverNotBlockedByAnother(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	c.LeadersSettled(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	const queue, key = "hb", "order-1"
	held, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: queue, Key: key, Data: []byte("held")}}})
	if err != nil {
		t.Fatal(err)
	}
	holder := held.Results[0].ID
	part := ring.KeyPartition(queue, key, nodetest.DefaultPartitions)
	var plain task.ID
	for {
		_, _ = rand.Read(plain[:])
		if ring.PartitionOf(plain[:], nodetest.DefaultPartitions) == part {
			break
		}
	}
	bad := &task.Spec{ID: holder, Queue: queue, Key: key, Data: []byte("other content"), MaxAttempts: 3}
	good := &task.Spec{ID: plain, Queue: queue, Data: []byte("plain"), MaxAttempts: 3}
	// The keyed one first: the plane meets it first in the store's order.
	if err := node.AddHints(c.Node(1), []*task.Spec{bad}, 0); err != nil {
		t.Fatal(err)
	}
	if err := node.AddHints(c.Node(1), []*task.Spec{good}, 0); err != nil {
		t.Fatal(err)
	}
	nodetest.WaitFor(t, clusterWait, func() error {
		g, err := c.Client(2).Get(ctx, &wire.GetRequest{ID: plain})
		if err != nil {
			return fmt.Errorf("the plain hint's task: %w", err)
		}
		if g.State != "ready" {
			return fmt.Errorf("the plain hint's task is %s", g.State)
		}
		return nil
	})
	nodetest.WaitFor(t, clusterWait, func() error {
		if st := c.Node(1).HintStats(); st.Pending != 1 || st.Handed != 1 {
			return fmt.Errorf("hints %+v; want the refused one pending, the plain one handed over", st)
		}
		return nil
	})
	if _, err := c.Client(2).Get(ctx, &wire.GetRequest{ID: holder}); errors.Is(err, task.ErrNotFound) {
		t.Fatalf("the holder %s is gone", holder)
	}
}
