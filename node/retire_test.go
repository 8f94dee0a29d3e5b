package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// indexes returns 0..n-1.
func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// naming returns the partitions whose cohort node i's registry says names
// id.
func namingOn(c *nodetest.Cluster, i int, id uint64) []int {
	var out []int
	for p, pi := range node.MetaOf(c.Node(i)).Partitions {
		if slices.Contains(pi.Cohort, id) {
			out = append(out, p)
		}
	}
	return out
}

// TestRemoveNode (docs/design.md, Retiring nodes): a node that died for
// good is removed once placement refilled its cohorts: the registry
// forgets it for good, every task is still there, and a second removal
// is a no-op. A live node is refused.
func TestRemoveNode(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := nodetest.NewCluster(t, size)
			all := c.IDs(indexes(size)...)
			c.Placed(t, 0, all, 3)
			rs := enqueueSome(t, c, 0, 100, "rm")
			victim := size - 1
			ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
			defer cancel()
			_, err := c.Client(0).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[victim]})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeConflict || !strings.Contains(err.Error(), "is alive") {
				t.Fatalf("removing a live node: %v", err)
			}
			if len(namingOn(c, 0, all[victim])) == 0 {
				t.Fatalf("no partition on node %d: the test removes nothing", victim)
			}
			c.Kill(victim)
			nodetest.WaitFor(t, clusterWait, func() error {
				v, err := c.View(0)
				if err != nil {
					return err
				}
				for _, m := range v.Members {
					if m.ID == all[victim] && (m.State == "alive" || m.State == "suspect") {
						return fmt.Errorf("node %d is still %s", victim, m.State)
					}
				}
				return nil
			})
			resp, err := c.Client(0).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[victim]})
			if err != nil || !resp.Removed || resp.Refilled == 0 {
				t.Fatalf("remove: %+v, %v", resp, err)
			}
			for i := range size - 1 {
				nodetest.WaitFor(t, clusterWait, func() error {
					m := node.MetaOf(c.Node(i))
					if _, ok := m.Members[all[victim]]; ok || !m.Removed[all[victim]] {
						return fmt.Errorf("node %d still registers node %d", i, victim)
					}
					if p := namingOn(c, i, all[victim]); len(p) > 0 {
						return fmt.Errorf("partitions %v still name it", p)
					}
					return nil
				})
			}
			if voters, learners := node.RaftConfig(c.Node(0)); slices.Contains(voters, all[victim]) || slices.Contains(learners, all[victim]) {
				t.Fatalf("still in the metadata group: voters %v learners %v", voters, learners)
			}
			resp, err = c.Client(1).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[victim]})
			if err != nil || resp.Removed {
				t.Fatalf("a second removal: %+v, %v", resp, err)
			}
			allThere(t, c, 1, rs)
		})
	}
}

// TestDecommission (docs/design.md, Retiring nodes): a live node's
// partitions move to the other members while it serves, then it leaves
// and is removed; tasks enqueued throughout are all there. A
// decommission that would leave fewer live members than the replication
// factor is refused.
func TestDecommission(t *testing.T) {
	for _, tc := range []struct {
		size, replicas int
	}{{3, 2}, {5, 3}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			c := nodetest.NewCluster(t, tc.size, nodetest.Replicas(tc.replicas))
			all := c.IDs(indexes(tc.size)...)
			c.Placed(t, 0, all, tc.replicas)
			rs := enqueueSome(t, c, 0, 100, "dc")
			victim := tc.size - 1
			ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
			defer cancel()
			var st *wire.DecommissionStatus
			for {
				var err error
				st, err = c.Client(0).Decommission(ctx, &wire.DecommissionRequest{Node: all[victim]})
				if err != nil {
					t.Fatal(err)
				}
				if st.Done() {
					break
				}
				rs = append(rs, enqueueSome(t, c, victim, 5, "dc")...)
				time.Sleep(50 * time.Millisecond)
			}
			if !st.Retiring {
				t.Fatalf("status %+v", st)
			}
			// The node asked tells the victim to leave, as ctl does.
			if st, err := c.Client(0).Decommission(ctx, &wire.DecommissionRequest{Node: all[victim], Leave: true}); err != nil || !st.Left {
				t.Fatalf("leave: %+v, %v", st, err)
			}
			c.Stop(victim)
			nodetest.WaitFor(t, clusterWait, func() error {
				_, err := c.Client(0).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[victim]})
				return err
			})
			allThere(t, c, 1, rs)

			// Now one member fewer than it had: one more decommission
			// leaves fewer than the replicas when size-1 == replicas.
			if tc.size-1 == tc.replicas {
				_, err := c.Client(0).Decommission(ctx, &wire.DecommissionRequest{Node: all[0]})
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != wire.CodeConflict || !strings.Contains(err.Error(), "add a node first") {
					t.Fatalf("a decommission leaving too few: %v", err)
				}
			}
		})
	}
}

// TestRemovedNodeRefused: a node removed while it was down and started
// again is refused by its peers (over QUIC, whose hello names it), and
// its start fails saying so, not only that no leader answered.
func TestRemovedNodeRefused(t *testing.T) {
	c := nodetest.NewCluster(t, 4, nodetest.QUIC())
	all := c.IDs(indexes(4)...)
	c.Placed(t, 0, all, 3)
	victim := 3
	c.Kill(victim)
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	nodetest.WaitFor(t, clusterWait, func() error {
		_, err := c.Client(0).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[victim]})
		return err
	})
	err := c.TryRestartWith(victim, nodetest.StartTimeout(3*time.Second))
	if err == nil || !strings.Contains(err.Error(), "was removed from the cluster for good") {
		t.Fatalf("a removed node's start: %v; want it to say it was removed", err)
	}
}
