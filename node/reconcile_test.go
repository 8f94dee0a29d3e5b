package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// TestNewLeaderReconcilesDeps: a dependent's leader dies before its
// dep completes, and the dep's leader is cut off until its notices of
// the completion gave up, so no one heard of it; the node that takes the
// dependent's partition over re-checks its blocked tasks at once, not a
// reconcile interval later (an hour here), and the dependent becomes
// claimable. (The quick fault run, seed 49200: a dependent stayed
// blocked to the end after every node was killed right after its dep
// completed, its notice lost and the next reconcile 30 s away.)
func TestNewLeaderReconcilesDeps(t *testing.T) {
	c := nodetest.NewCluster(t, 3, func(cfg *node.Config) { cfg.ReconcileInterval = time.Hour })
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*clusterWait)
	defer cancel()
	v, err := c.View(0)
	if err != nil {
		t.Fatal(err)
	}
	x := c.ALeader(t, all)
	y := -1
	for i := range 3 {
		if i != x {
			for _, p := range v.Partitions {
				if p.Leader == all[i] {
					y = i
				}
			}
		}
		if y >= 0 {
			break
		}
	}
	if y < 0 {
		t.Fatal("no second node leads a partition")
	}
	now := time.Now().UnixMilli()
	idAt := idsLedBy(v, 55)
	d, dep := idAt(all[x], now), idAt(all[y], now)
	if _, err := c.Client(x).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &d, Queue: "dep"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client(x).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &dep, Queue: "after", Deps: []task.ID{d}}}}); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Client(x).Claim(ctx, &wire.ClaimRequest{Queue: "dep", TTLMs: 60_000})
	if err != nil || len(cl.Tasks) != 1 {
		t.Fatalf("claim of the dep: %+v, %v", cl, err)
	}
	oldEpoch := v.Partitions[partOfForTest(dep, len(v.Partitions))].Epoch
	c.Kill(y)
	if _, err := c.Client(x).Complete(ctx, &wire.CompleteRequest{ID: d, Claim: *cl.Tasks[0].Claim}); err != nil {
		t.Fatal(err)
	}
	// X, which completed the dep, is cut off until its notices gave up
	// (four tries over 1.75 s): no one heard of the completion.
	c.Isolate(x)
	time.Sleep(3 * time.Second)
	c.Heal()
	nl := c.AwaitTakeover(t, all, y, partOfForTest(dep, len(v.Partitions)), oldEpoch)
	nodetest.WaitFor(t, clusterWait, func() error {
		g, err := c.Client(nl).Get(ctx, &wire.GetRequest{ID: dep})
		if err != nil {
			return err
		}
		if g.State != "ready" {
			return fmt.Errorf("the dependent is %s", g.State)
		}
		return nil
	})
}
