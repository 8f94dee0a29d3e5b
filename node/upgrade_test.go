package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// upgradeStatus asks node i for the upgrade status (finalize: and raise).
func upgradeStatus(t *testing.T, c *nodetest.Cluster, i int, finalize bool) (*wire.UpgradeStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	return c.Client(i).Upgrade(ctx, &wire.UpgradeRequest{Finalize: finalize})
}

// enqueueSome enqueues n tasks through node i and returns their results.
func enqueueSome(t *testing.T, c *nodetest.Cluster, i, n int, queue string) []wire.EnqueueResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	var batch []wire.EnqueueTask
	for k := range n {
		batch = append(batch, wire.EnqueueTask{Queue: queue, Data: []byte(fmt.Sprint(k))})
	}
	r, err := c.Client(i).Enqueue(ctx, &wire.EnqueueRequest{Tasks: batch})
	if err != nil {
		t.Fatal(err)
	}
	return r.Results
}

// allThere checks that every task of rs is found through node i.
func allThere(t *testing.T, c *nodetest.Cluster, i int, rs []wire.EnqueueResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	for _, r := range rs {
		if _, err := c.Client(i).Get(ctx, &wire.GetRequest{ID: r.ID}); err != nil {
			t.Fatalf("acknowledged task %s: %v", r.ID, err)
		}
	}
}

// versionOn waits until node i runs cluster version v.
func versionOn(t *testing.T, c *nodetest.Cluster, i int, v version.V) {
	t.Helper()
	nodetest.WaitFor(t, clusterWait, func() error {
		if got := node.MetaOf(c.Node(i)).Version(); got != v {
			return fmt.Errorf("node %d runs cluster version %d, want %d", i, got, v)
		}
		return nil
	})
}

// TestRollingUpgrade (docs/design.md, Versions): a cluster of nodes
// playing a build from before versions is upgraded to this build one node
// at a time, the first with --upgrade-hold. Until every member supports
// version 2 a finalize is refused naming the node behind, and what
// version 2 adds (removing a node) is refused with a clear error; with
// every node upgraded the hold keeps the version at 1 until finalize
// raises it on every node; from then on a node of the older build cannot
// start in the cluster. Nothing enqueued before or during the upgrade is
// lost.
func TestRollingUpgrade(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := nodetest.NewCluster(t, size, nodetest.MaxVersion(version.Base))
			idx := make([]int, size)
			for i := range idx {
				idx[i] = i
			}
			all := c.IDs(idx...)
			c.Placed(t, 0, all, 3)
			versionOn(t, c, 0, version.Base)
			before := enqueueSome(t, c, 0, 50, "up")

			ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
			defer cancel()
			_, err := c.Client(0).RemoveNode(ctx, &wire.RemoveNodeRequest{Node: all[size-1]})
			if !errors.Is(err, wire.ErrClusterVersion) || !strings.Contains(err.Error(), "cluster version 2 adds it") {
				t.Fatalf("a removal at cluster version 1: %v; want cluster_version, saying which version adds it", err)
			}

			var during []wire.EnqueueResult
			for i := range size {
				c.RestartWith(i, nodetest.MaxVersion(0), nodetest.UpgradeHold(i == 0))
				c.Placed(t, (i+1)%size, all, 3)
				during = append(during, enqueueSome(t, c, (i+1)%size, 10, "up")...)
				if i == 0 {
					_, err := upgradeStatus(t, c, 0, true)
					var we *wire.Error
					if !errors.As(err, &we) || we.Code != wire.CodeConflict || !strings.Contains(err.Error(), "supports at most 1") {
						t.Fatalf("finalize with one node upgraded: %v; want a conflict naming a node that supports at most 1", err)
					}
				}
			}
			nodetest.WaitFor(t, clusterWait, func() error {
				st, err := upgradeStatus(t, c, 1, false)
				switch {
				case err != nil:
					return err
				case st.Supported != uint32(version.Max) || !st.Held:
					return fmt.Errorf("status %+v: want every member at %d, held", st, version.Max)
				}
				return nil
			})
			if v := node.MetaOf(c.Node(0)).Version(); v != version.Base {
				t.Fatalf("the version was raised to %d past the hold", v)
			}
			st, err := upgradeStatus(t, c, size-1, true)
			if err != nil || !st.Raised || st.RaisedFrom != uint32(version.Base) || st.ClusterVersion != uint32(version.Max) {
				t.Fatalf("finalize: %+v, %v", st, err)
			}
			for i := range size {
				versionOn(t, c, i, version.Max)
			}
			if _, err := upgradeStatus(t, c, 0, true); err == nil || !strings.Contains(err.Error(), "nothing to raise") {
				t.Fatalf("a second finalize: %v", err)
			}
			err = c.TryRestartWith(size-1, nodetest.MaxVersion(version.Base))
			if err == nil || !strings.Contains(err.Error(), "this build supports at most 1") {
				t.Fatalf("an older build started in a cluster at version 2: %v", err)
			}
			c.RestartWith(size-1, nodetest.MaxVersion(0))
			c.Placed(t, 0, all, 3)
			allThere(t, c, size-1, append(before, during...))
		})
	}
}

// TestUpgradeRaisesItself: with no node holding it back, the metadata
// leader raises the version once the last node runs the new build.
func TestUpgradeRaisesItself(t *testing.T) {
	c := nodetest.NewCluster(t, 3, nodetest.MaxVersion(version.Base))
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	c.RestartWith(0, nodetest.MaxVersion(0))
	c.RestartWith(1, nodetest.MaxVersion(0))
	c.Placed(t, 0, all, 3)
	if v := node.MetaOf(c.Node(0)).Version(); v != version.Base {
		t.Fatalf("raised to %d with node 2 on the older build", v)
	}
	c.RestartWith(2, nodetest.MaxVersion(0))
	for i := range 3 {
		versionOn(t, c, i, version.Max)
	}
}
