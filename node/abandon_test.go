package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// A handoff that gives up after its promises stopped the registry's
// leader leading tells that leader, which takes its partition back at
// once rather than after its promise grace (45 s; no claims meanwhile).
// The in-process harness met it at placement: a takeover raced a
// hand-off, asked above the winner's epoch, and lost the CAS; here the
// loser's CAS cannot reach the metadata group (its raft traffic is
// dropped), so it gives up when its deadline ends.
func TestAbandonedHandoffTellsTheLeader(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	led := c.LeadersSettled(t, 0)
	x := c.ALeader(t, all)
	part := led[all[x]][0]
	y := (x + 1) % 3
	v, err := c.View(x)
	if err != nil {
		t.Fatal(err)
	}
	pv := v.Partitions[part]
	if pv.Leader != all[x] || !slices.Contains(pv.Cohort, all[y]) {
		t.Fatalf("partition %d: %+v; want led by node %d with node %d in its cohort", part, pv, all[x], all[y])
	}
	if grace := node.DefaultConfig().PromiseGrace; grace <= nodetest.ClusterWait {
		t.Fatalf("promise grace %v: too short for this test to tell the tell from the grace", grace)
	}

	for j := range 3 {
		if j != y {
			c.Faults(y).DropOp(c.Addr(j), wire.OpRaft)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err = node.TakeOver(ctx, c.Node(y), part, pv.Cohort)
	cancel()
	if err == nil {
		t.Fatal("a takeover whose CAS cannot commit won")
	}
	c.Heal()
	// The registry's leader was asked to promise above its epoch: it
	// stepped down, and leads again only at a newer epoch of its own;
	// within ClusterWait, below the promise grace.
	nodetest.WaitFor(t, nodetest.ClusterWait, func() error {
		v, err := c.View(x)
		if err != nil {
			return err
		}
		if p := v.Partitions[part]; p.Leader != all[x] || p.Epoch <= pv.Epoch {
			return fmt.Errorf("partition %d: leader %d at epoch %d; want node %d again above epoch %d", part, p.Leader, p.Epoch, all[x], pv.Epoch)
		}
		return nil
	})
	c.LeadersSettled(t, x)
}
