package nodetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/wire"
)

// The cluster's view, as the integration tests read it: who is a member,
// who leads which partition, and when placement and leadership have
// settled. Every view comes from a node's client API (wire Cluster), as
// an operator would see it, cross-checked where said against the leaders'
// own replicas (node.Node.Replicas).
//
// The helpers that can fail the test take the test t rather than using
// the cluster's: a cluster may be shared by subtests, and a failure must
// be reported to, and stop, the (sub)test that waited. They call
// t.Fatal and must be called from that test's goroutine. View, IDs and
// Settled only return errors and may be called from any goroutine.

// ClusterWait bounds every wait of the view helpers (and of the node
// package's cluster tests): gossip and raft on loopback settle in well
// under a second, but -race on two cores is slow.
const ClusterWait = 30 * time.Second

// viewTimeout bounds one request for a node's view of the cluster.
const viewTimeout = 5 * time.Second

// placementQuiet is how long Placed wants no epoch to change: longer than
// the placement loop's interval, so a move that has one phase left shows.
const placementQuiet = time.Second

// View asks node i for its view of the cluster (members, metadata raft,
// partitions with their cohorts, leaders and epochs), waiting up to 5s
// for the answer. Node i must be running (see Client).
func (c *Cluster) View(i int) (*wire.ClusterResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), viewTimeout)
	defer cancel()
	return c.Client(i).Cluster(ctx)
}

// IDs returns the node ids of the nodes at the given indexes, in that
// order.
func (c *Cluster) IDs(idx ...int) []uint64 {
	var out []uint64
	for _, i := range idx {
		out = append(out, c.Node(i).ID())
	}
	return out
}

// Settled reports whether node i sees exactly alive as its alive members
// (in any order), voters metadata voters and a metadata leader: nil if
// so, else an error saying what it sees. It does not wait: pass it to
// WaitFor.
func (c *Cluster) Settled(i int, alive []uint64, voters int) error {
	v, err := c.View(i)
	if err != nil {
		return err
	}
	var up []uint64
	for _, m := range v.Members {
		if m.State == "alive" {
			up = append(up, m.ID)
		}
	}
	slices.Sort(up)
	want := slices.Clone(alive)
	slices.Sort(want)
	if !slices.Equal(up, want) {
		return fmt.Errorf("node %d sees alive %v, want %v (members %+v)", i, up, want, v.Members)
	}
	if len(v.Raft.Voters) != voters {
		return fmt.Errorf("node %d sees voters %v, want %d", i, v.Raft.Voters, voters)
	}
	if v.Raft.Leader == 0 {
		return fmt.Errorf("node %d sees no metadata leader", i)
	}
	return nil
}

// Placed waits until every partition, seen from node i, has a cohort of
// the given size drawn from want, led by its first member (the state
// moves end in), and the placement stayed so for a second (no move in
// flight). It waits up to ClusterWait and then fails the test with the
// last shortfall (see PlacedOn).
func (c *Cluster) Placed(t testing.TB, i int, want []uint64, size int) {
	t.Helper()
	c.PlacedOn(t, []int{i}, want, size)
}

// PlacedOn is Placed seen from each of nodes, over one quiet period:
// every node's view must hold and stay unchanged (no partition's epoch
// moving) for a second together. It waits up to ClusterWait and then
// fails the test with the last shortfall: a node's request error, a
// cohort of the wrong size or holding a node not in want, a leader that
// is not its cohort's first member, or how long ago the placement last
// changed.
func (c *Cluster) PlacedOn(t testing.TB, nodes []int, want []uint64, size int) {
	t.Helper()
	var stableSince time.Time
	last := make([][]wire.PartitionView, len(nodes))
	testkit.WaitFor(t, ClusterWait, func() error {
		for k, i := range nodes {
			v, err := c.View(i)
			if err != nil {
				return err
			}
			if err := placedView(i, v, want, size); err != nil {
				return err
			}
			if !slices.EqualFunc(v.Partitions, last[k], func(a, b wire.PartitionView) bool { return a.Epoch == b.Epoch }) {
				last[k], stableSince = v.Partitions, time.Now()
			}
		}
		if time.Since(stableSince) < placementQuiet {
			return fmt.Errorf("placement changed %v ago", time.Since(stableSince))
		}
		return nil
	})
}

// placedView reports how node i's view v falls short of Placed's
// condition, or nil.
func placedView(i int, v *wire.ClusterResponse, want []uint64, size int) error {
	for _, p := range v.Partitions {
		if len(p.Cohort) != size {
			return fmt.Errorf("node %d: partition %d cohort %v, want %d members", i, p.Partition, p.Cohort, size)
		}
		for _, id := range p.Cohort {
			if !slices.Contains(want, id) {
				return fmt.Errorf("node %d: partition %d cohort %v holds %d, not one of %v", i, p.Partition, p.Cohort, id, want)
			}
		}
		// Settled: moves end with the ring's first member leading.
		if p.Leader != p.Cohort[0] {
			return fmt.Errorf("node %d: partition %d leader %d, cohort %v: still moving", i, p.Partition, p.Leader, p.Cohort)
		}
	}
	return nil
}

// LeadersSettled waits until every partition has a leader on which node
// i's registry and the leaders themselves agree (leadership moves for a
// while after placement): node i's view names, for each partition, a
// running node whose replica of it leads at the view's epoch. It returns
// the partitions each node id leads. It waits up to ClusterWait and then
// fails the test with the last disagreement (or request error).
func (c *Cluster) LeadersSettled(t testing.TB, i int) map[uint64][]int {
	t.Helper()
	var led map[uint64][]int
	testkit.WaitFor(t, ClusterWait, func() error {
		v, err := c.View(i)
		if err != nil {
			return err
		}
		byID := map[uint64]int{}
		for k := range c.Len() {
			byID[c.Node(k).ID()] = k
		}
		led = map[uint64][]int{}
		for _, p := range v.Partitions {
			k, ok := byID[p.Leader]
			if !ok {
				return fmt.Errorf("partition %d: leader %d is no running node", p.Partition, p.Leader)
			}
			reps, err := c.Node(k).Replicas()
			if err != nil {
				return err
			}
			if got := reps[p.Partition].LeadingEpoch; got != p.Epoch {
				return fmt.Errorf("partition %d: the registry names node %d at epoch %d, which leads it at epoch %d", p.Partition, p.Leader, p.Epoch, got)
			}
			led[p.Leader] = append(led[p.Leader], p.Partition)
		}
		return nil
	})
	return led
}

// ALeader returns the index in all (the node ids in index order) of a
// node that leads a partition, once leadership settled as node 0 sees it
// (LeadersSettled, so it waits as long and fails the same way): placement
// need not give every node a partition to lead. It fails the test if no
// node in all leads one.
func (c *Cluster) ALeader(t testing.TB, all []uint64) int {
	t.Helper()
	led := c.LeadersSettled(t, 0)
	i := slices.IndexFunc(all, func(id uint64) bool { return len(led[id]) > 0 })
	if i < 0 {
		t.Fatalf("no node leads a partition: %v", led)
	}
	return i
}

// Leaders returns the distinct partition leaders node i sees, in the
// order of the partitions they first lead. It does not wait; it fails the
// test if node i does not answer.
func (c *Cluster) Leaders(t testing.TB, i int) []uint64 {
	t.Helper()
	v, err := c.View(i)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, p := range v.Partitions {
		if !slices.Contains(out, p.Leader) {
			out = append(out, p.Leader)
		}
	}
	return out
}

// BusiestLeader returns the node among [from, to) that leads the most
// partitions once leadership settled as node 0 sees it (LeadersSettled:
// the registry and the leaders' replicas agree, so it waits as long and
// fails the same way), the first such on a tie, with the partitions it
// leads, and logs it as the test's victim. It fails the test if none of
// the nodes leads any partition. (It once read node 0's view without
// waiting, and a test could pick a victim whose partitions were still
// changing hands.)
func (c *Cluster) BusiestLeader(t testing.TB, from, to int) (int, []int) {
	t.Helper()
	led := c.LeadersSettled(t, 0)
	best, most := -1, []int(nil)
	for i := from; i < to; i++ {
		if parts := led[c.Node(i).ID()]; len(parts) > len(most) {
			best, most = i, parts
		}
	}
	if best < 0 {
		t.Fatalf("none of nodes %d..%d leads a partition: %v", from, to-1, led)
	}
	t.Logf("victim: node %d, leading partitions %v", best, most)
	return best, most
}

// AwaitTakeover waits until a node other than f leads partition part at
// an epoch above oldEpoch, seen through node (f+1) mod len(all) (so not
// through f, which the caller has typically cut off), and returns the new
// leader's index in all (the node ids in index order). It waits up to
// ClusterWait and then fails the test with the leader and epoch last
// seen (or the request error).
func (c *Cluster) AwaitTakeover(t testing.TB, all []uint64, f int, part uint16, oldEpoch uint64) int {
	t.Helper()
	newLeader := -1
	testkit.WaitFor(t, ClusterWait, func() error {
		v, err := c.View((f + 1) % len(all))
		if err != nil {
			return err
		}
		p := v.Partitions[part]
		if p.Leader == all[f] || p.Epoch <= oldEpoch {
			return fmt.Errorf("partition %d: leader %d at epoch %d", part, p.Leader, p.Epoch)
		}
		newLeader = slices.Index(all, p.Leader)
		return nil
	})
	return newLeader
}
