package node_test

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// An enqueue under a client's id repeated once its task was claimed (a
// client retrying after a lost answer, or a keyed hint handed over) is a
// repeat: answered with the task, which it leaves as it is. Its leader
// used to ship the followers a first state stamped 0 for the task, which
// a follower holding the claim's newer state refused ("send the whole
// record") once another leader had taken the partition over since the
// claim, so the repeat failed in doubt at every try: the 30-minute
// fault run on 7faaf41 saw every keyed hint of a claimed holder refused
// so at its handover.
func TestEnqueueRepeatAfterClaim(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	c.LeadersSettled(t, 0)
	for _, tc := range []struct {
		name, queue, key string
	}{
		{"client id", "rep-id", ""},
		{"client id and key", "rep-key", "order-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
			defer cancel()
			var id task.ID
			for {
				_, _ = rand.Read(id[:])
				if tc.key == "" || ring.PartitionOf(id[:], nodetest.DefaultPartitions) == ring.KeyPartition(tc.queue, tc.key, nodetest.DefaultPartitions) {
					break
				}
			}
			enq := &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: tc.queue, Key: tc.key, Data: []byte("once")}}}
			if _, err := c.Client(0).Enqueue(ctx, enq); err != nil {
				t.Fatal(err)
			}
			cl, err := c.Client(1).Claim(ctx, &wire.ClaimRequest{Queue: tc.queue, TTLMs: 60_000})
			if err != nil || len(cl.Tasks) != 1 || cl.Tasks[0].ID != id {
				t.Fatalf("claim: %+v, %v", cl, err)
			}
			// Another cohort member leads the partition from a newer
			// epoch: the claim's state is of an older line to it.
			part := int(ring.PartitionOf(id[:], nodetest.DefaultPartitions))
			v, err := c.View(0)
			if err != nil {
				t.Fatal(err)
			}
			pv := v.Partitions[part]
			next := -1
			for i, nid := range all {
				if nid != pv.Leader && slices.Contains(pv.Cohort, nid) {
					next = i
				}
			}
			if err := node.TakeOver(ctx, c.Node(next), part, pv.Cohort); err != nil {
				t.Fatalf("takeover of partition %d by node %d: %v", part, all[next], err)
			}
			again := &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: tc.queue, Key: tc.key, Data: []byte("once")}}}
			r, err := c.Client(2).Enqueue(ctx, again)
			if err != nil || r.Results[0].ID != id || r.Results[0].Duplicate {
				t.Fatalf("the enqueue repeated after the claim: %+v, %v; want a repeat of %s", r, err, id)
			}
			g, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: id})
			if err != nil || g.State != "claimed" {
				t.Fatalf("after the repeat: %+v, %v; want the task still claimed", g, err)
			}
		})
	}
}
