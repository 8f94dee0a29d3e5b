package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// TestClusterAntiEntropy (docs/design.md, Anti-entropy): a replica cut off
// from replication while 1,000 tasks are written (acknowledged by the
// other two) converges with its peers within 3 anti-entropy intervals
// after it returns: the same root hash for every partition, so the same
// records.
func TestClusterAntiEntropy(t *testing.T) {
	const interval = time.Second
	c := nodetest.NewCluster(t, 3, func(cfg *node.Config) { cfg.AAEInterval = interval })
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	const victim = 2
	for _, i := range []int{0, 1} {
		c.Faults(i).DropReplication(c.Addr(victim))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	const n = 1000
	for k := range n / 50 {
		var batch []wire.EnqueueTask
		for range 50 {
			batch = append(batch, wire.EnqueueTask{Queue: "aae", Data: []byte("payload")})
		}
		if _, err := c.Client(k%2).Enqueue(ctx, &wire.EnqueueRequest{Tasks: batch}); err != nil {
			t.Fatalf("enqueue while node %d is cut off: %v", victim, err)
		}
	}
	diff := func() (int, error) {
		differ := 0
		for p := range c.Config(0).Partitions {
			want, err := c.Node(0).AAERoot(p)
			if err != nil {
				return 0, err
			}
			for _, i := range []int{1, victim} {
				got, err := c.Node(i).AAERoot(p)
				if err != nil {
					return 0, err
				}
				if got != want {
					differ++
				}
			}
		}
		return differ, nil
	}
	if d, err := diff(); err != nil || d == 0 {
		t.Fatalf("before healing, %d partition replicas differ (%v); the cut did not bite", d, err)
	}
	for _, i := range []int{0, 1} {
		c.Faults(i).Heal()
	}
	healed := time.Now()
	// Three intervals, plus one for a round that was just starting when
	// the cut healed and for scheduling on a busy machine.
	nodetest.WaitFor(t, 4*interval, func() error {
		d, err := diff()
		if err != nil {
			return err
		}
		if d > 0 {
			return fmt.Errorf("%d partition replicas still differ", d)
		}
		return nil
	})
	t.Logf("converged %v after healing (anti-entropy interval %v)", time.Since(healed).Round(time.Millisecond), interval)
	repaired := int64(0)
	for i := range 3 {
		v, err := c.View(i)
		if err != nil || v.AAE == nil {
			t.Fatalf("cluster view of node %d: %+v, %v", i, v, err)
		}
		repaired += v.AAE.Pushed
		t.Logf("node %d anti-entropy: %+v", i, *v.AAE)
	}
	if repaired == 0 {
		t.Error("the cluster views count no record pushed by anti-entropy")
	}
}
