package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/wire"
)

// TestKillEndsOpsInFlight: a node's Kill returns only once the client
// ops in flight on it have ended. An enqueue held on its way to its
// leader when its coordinator is killed ends, with an error, before Kill
// returns; before, it went on after Kill returned, and an op that then
// wrote here did so to a closed store (the simulation's "pebble:
// closed").
func TestKillEndsOpsInFlight(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	f := c.ALeader(t, all)
	k := (f + 1) % 3
	fLeads := c.LeadersSettled(t, 0)[all[f]]
	var key string
	for i := 0; key == ""; i++ {
		if kk := fmt.Sprintf("job-%d", i); slices.Contains(fLeads, int(ring.KeyPartition("q", kk, nodetest.DefaultPartitions))) {
			key = kk
		}
	}
	c.Faults(k).HoldOp(c.Addr(f), wire.OpEnqueue)
	coordinator := node.Coordinator(c.Node(k))
	res := make(chan error, 1)
	go func() {
		_, err := coordinator.Enqueue(context.Background(), &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q", Key: key}}})
		res <- err
	}()
	nodetest.WaitFor(t, clusterWait, func() error {
		if h := c.Faults(k).HeldOps(); h != 1 {
			return fmt.Errorf("%d forwards held", h)
		}
		return nil
	})
	c.Kill(k)
	// The hold ends only with its caller's context or a release: an op
	// still held is one Kill left running.
	if h := c.Faults(k).HeldOps(); h != 0 {
		t.Fatalf("Kill returned with %d enqueue still in flight", h)
	}
	c.Faults(k).ReleaseOps()
	if err := <-res; err == nil {
		t.Fatal("the enqueue was served after its coordinator was killed")
	}
	if _, err := coordinator.Enqueue(context.Background(), &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q"}}}); err == nil {
		t.Fatal("a killed node took an enqueue")
	}
}
