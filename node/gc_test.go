package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// gcRetention is the retention of the garbage-collection tests. They
// never wait it out: the nodes of a test's cluster share one clock, which
// gcClock's age moves past the retention, so what completed before is
// old enough to collect and what completed after is not, however slow
// the machine.
const gcRetention = time.Hour

// gcClock returns the option that gives a cluster's nodes one clock, and
// age, which moves that clock forward past gcRetention.
func gcClock() (opt nodetest.Option, age func()) {
	clk := clock.NewShift(clock.Real{}, 0)
	return nodetest.Clock(clk), func() { clk.Set(clk.By() + gcRetention + time.Minute) }
}

// gcEnqueue enqueues one task through node i's client (so its id is in a
// partition node i leads) in its own queue, and returns its id.
func gcEnqueue(t *testing.T, c *nodetest.Cluster, i int, queue string, deps ...task.ID) task.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	resp, err := c.Client(i).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: queue, Deps: deps}}})
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("enqueue into %s through node %d: %+v, %v", queue, i, resp, err)
	}
	return resp.Results[0].ID
}

// gcClaimTTL is the lease of the tests' claims.
const gcClaimTTL = 2 * time.Second

// gcRun claims the task of queue (it must be ready) and completes it.
func gcRun(t *testing.T, c *nodetest.Cluster, i int, queue string, id task.ID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	var got wire.TaskView
	err := nodetest.Poll(clusterWait, func() error {
		// A short lease: a claim granted while a partition moves may be
		// written and not answered, and the task is claimable again once
		// it lapses.
		resp, err := c.Client(i).Claim(ctx, &wire.ClaimRequest{Queue: queue, TTLMs: gcClaimTTL.Milliseconds()})
		if err != nil {
			return err
		}
		if len(resp.Tasks) != 1 {
			return fmt.Errorf("nothing ready in %s", queue)
		}
		got = resp.Tasks[0]
		return nil
	})
	if err != nil {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		for k := range c.Len() {
			v, gerr := c.Client(k).Get(dctx, &wire.GetRequest{ID: id, R: 1})
			t.Logf("node %d's replica of %s: %+v (%v)", k, id, v, gerr)
		}
		cv, _ := c.View(i)
		t.Fatalf("claim of %s through node %d: %v; placement %+v", queue, i, err, cv.Partitions)
	}
	if got.ID != id || got.Claim == nil {
		t.Fatalf("claimed %s (claim %v) from %s; want %s", got.ID, got.Claim, queue, id)
	}
	if _, err := c.Client(i).Complete(ctx, &wire.CompleteRequest{ID: id, Claim: *got.Claim}); err != nil {
		t.Fatalf("complete %s: %v", id, err)
	}
}

// replicaHas reports whether node i's own replica holds task id (a read of
// one replica: r=1 on a node of the partition's cohort).
func replicaHas(c *nodetest.Cluster, i int, id task.ID) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Client(i).Get(ctx, &wire.GetRequest{ID: id, R: 1})
	if errors.Is(err, task.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// allReplicas checks that every node in nodes holds (want) or does not
// hold each of ids.
func allReplicas(c *nodetest.Cluster, nodes []int, want bool, ids ...task.ID) error {
	for _, i := range nodes {
		for _, id := range ids {
			has, err := replicaHas(c, i, id)
			if err != nil {
				return fmt.Errorf("node %d, task %s: %w", i, id, err)
			}
			if has != want {
				return fmt.Errorf("node %d holds %s: %v, want %v", i, id, has, want)
			}
		}
	}
	return nil
}

// TestClusterGC (docs/design.md, Storage): a completed dependency chain spread
// over three leaders is collected on every replica once retention passed;
// a chain with an open task is not, until that task completes; a replica
// that was down while its peers collected does not bring the chain back
// when it returns; a collected dep counts as completed for a task that
// names it later; and a collected task reads as not found.
func TestClusterGC(t *testing.T) {
	withClock, age := gcClock()
	c := nodetest.NewCluster(t, 3, withClock, func(cfg *node.Config) {
		cfg.Retention = gcRetention
		cfg.GCInterval = 100 * time.Millisecond
	})
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)

	// a <- b <- c across the three leaders; d <- e with e left open; f
	// alone.
	a := gcEnqueue(t, c, 0, "gc-a")
	b := gcEnqueue(t, c, 1, "gc-b", a)
	cc := gcEnqueue(t, c, 2, "gc-c", b)
	d := gcEnqueue(t, c, 0, "gc-d")
	e := gcEnqueue(t, c, 1, "gc-e", d)
	f := gcEnqueue(t, c, 2, "gc-f")
	gcRun(t, c, 0, "gc-a", a)
	gcRun(t, c, 1, "gc-b", b)
	gcRun(t, c, 2, "gc-c", cc)
	gcRun(t, c, 0, "gc-d", d)
	gcRun(t, c, 2, "gc-f", f)
	chain := []task.ID{a, b, cc, f}
	// Every replica has everything while nothing is old enough (the
	// completions were acknowledged by a majority; the third replica may
	// lag a moment).
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, true, append(chain, d, e)...) })

	// Node 2 goes down before anything is old enough, and misses the
	// collection.
	const victim = 2
	c.Kill(victim)
	age()
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1}, false, chain...) })
	if err := allReplicas(c, []int{0, 1}, true, d, e); err != nil {
		t.Fatalf("the chain with an open task was collected: %v", err)
	}

	// Back: anti-entropy gives it the tombstones; it never gives the
	// tasks back to the others.
	c.Restart(victim)
	c.Placed(t, 0, all, 3)
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, false, chain...) })
	nodetest.WaitFor(t, clusterWait, func() error { return sameRoots(c, 0, 1, 2) })
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	for i := range 3 {
		for _, id := range chain {
			if _, err := c.Client(i).Get(ctx, &wire.GetRequest{ID: id}); !errors.Is(err, task.ErrNotFound) {
				t.Errorf("quorum read of collected %s through node %d: %v; want not found", id, i, err)
			}
		}
	}
	if err := allReplicas(c, []int{0, 1, 2}, true, d, e); err != nil {
		t.Fatalf("the chain with an open task after the restart: %v", err)
	}

	// A task naming a collected dep starts ready: the dep completed.
	g := gcEnqueue(t, c, 1, "gc-g", a)
	if v, err := c.Client(1).Get(ctx, &wire.GetRequest{ID: g}); err != nil || v.State != task.Ready.String() {
		t.Fatalf("task on a collected dep: %+v, %v; want ready", v, err)
	}

	// Once e completes, d and e go too (after their retention).
	gcRun(t, c, 1, "gc-e", e)
	age()
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, false, d, e) })

	// A replica counts what it collected once its pass ends, which may be
	// after another replica's tombstone already hid the task.
	nodetest.WaitFor(t, clusterWait, func() error {
		var collected int64
		for i := range 3 {
			collected += gcMetric(t, c, i)
		}
		if collected < int64(len(chain)+2) {
			return fmt.Errorf("the nodes count %d tasks collected; want at least %d", collected, len(chain)+2)
		}
		return nil
	})
}

// sameRoots reports whether the nodes' anti-entropy trees agree on every
// partition.
func sameRoots(c *nodetest.Cluster, nodes ...int) error {
	for p := range c.Config(nodes[0]).Partitions {
		want, err := c.Node(nodes[0]).AAERoot(p)
		if err != nil {
			return err
		}
		for _, i := range nodes[1:] {
			got, err := c.Node(i).AAERoot(p)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("partition %d: node %d root %s, node %d root %s", p, nodes[0], want, i, got)
			}
		}
	}
	return nil
}

// gcMetric reads skuldd_gc_collected_total from node i's /metrics.
func gcMetric(t *testing.T, c *nodetest.Cluster, i int) int64 {
	t.Helper()
	resp, err := http.Get(c.HTTP(i) + "/metrics")
	if err != nil {
		t.Fatalf("node %d metrics: %v", i, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "skuldd_gc_collected_total "); ok {
			k, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("node %d: skuldd_gc_collected_total %q: %v", i, v, err)
			}
			return k
		}
	}
	t.Fatalf("node %d metrics lack skuldd_gc_collected_total (%v)", i, sc.Err())
	return 0
}

// TestClusterGCDryRun: `ctl gc --dry-run` (the GC op) reports what would
// go, by queue and with a sample, and collects nothing; the GC op then
// collects exactly that, on every leader, and a second run finds nothing.
func TestClusterGCDryRun(t *testing.T) {
	withClock, age := gcClock()
	c := nodetest.NewCluster(t, 3, withClock, func(cfg *node.Config) {
		cfg.Retention = gcRetention
		cfg.GCInterval = time.Hour // only the op collects
	})
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	var done []task.ID
	for i := range 6 {
		q := fmt.Sprintf("dry-%d", i)
		id := gcEnqueue(t, c, i%3, q)
		gcRun(t, c, i%3, q, id)
		done = append(done, id)
	}
	dep := gcEnqueue(t, c, 0, "dry-dep")
	gcRun(t, c, 0, "dry-dep", dep)
	open := gcEnqueue(t, c, 1, "dry-open", dep)
	fresh := gcEnqueue(t, c, 2, "dry-fresh")
	age()
	gcRun(t, c, 2, "dry-fresh", fresh) // completed, but within retention

	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	dry, err := c.Client(0).GC(ctx, &wire.GCRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dry run: %+v", dry)
	if !dry.DryRun || dry.Collectable != int64(len(done)) || dry.Collected != 0 || dry.Held != 1 || dry.Partitions != c.Config(0).Partitions {
		t.Errorf("dry run %+v; want %d collectable, 1 held, none collected, %d partitions", dry, len(done), c.Config(0).Partitions)
	}
	if len(dry.Queues) != len(done) || dry.Queues[0].Queue != "dry-0" || dry.Queues[0].Tasks != 1 {
		t.Errorf("dry run by queue: %+v", dry.Queues)
	}
	for _, id := range done {
		if !slices.Contains(dry.Sample, id) {
			t.Errorf("dry run sample %v lacks %s", dry.Sample, id)
		}
	}
	if err := allReplicas(c, []int{0, 1, 2}, true, append(done, dep, open, fresh)...); err != nil {
		t.Fatalf("after the dry run: %v", err)
	}

	resp, err := c.Client(1).GC(ctx, &wire.GCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Collected != int64(len(done)) || resp.Held != 1 {
		t.Errorf("gc %+v; want %d collected, 1 held", resp, len(done))
	}
	for _, id := range done {
		if _, err := c.Client(2).Get(ctx, &wire.GetRequest{ID: id}); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("get of collected %s: %v; want not found", id, err)
		}
	}
	if err := allReplicas(c, []int{0, 1, 2}, true, dep, open, fresh); err != nil {
		t.Fatalf("after the pass: %v", err)
	}
	again, err := c.Client(2).GC(ctx, &wire.GCRequest{DryRun: true})
	if err != nil || again.Collectable != 0 {
		t.Errorf("second dry run: %+v, %v; want nothing collectable", again, err)
	}
}

// TestClusterGCReadRepair: a tombstone is authoritative in a quorum read.
// With anti-entropy off, a follower that missed the collection still
// holds the task; a read of all three replicas answers not found (never
// the follower's copy) and repairs the follower.
func TestClusterGCReadRepair(t *testing.T) {
	withClock, age := gcClock()
	c := nodetest.NewCluster(t, 3, withClock, func(cfg *node.Config) {
		cfg.Retention = gcRetention
		cfg.GCInterval = time.Hour
		cfg.AAEInterval = time.Hour
		cfg.TombstoneHorizon = 10 * time.Hour
	})
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	x := gcEnqueue(t, c, 0, "rr")
	gcRun(t, c, 0, "rr", x)
	// The follower to cut off: any node but x's leader (placement, not
	// the test, decides which node that is).
	v, err := c.View(0)
	if err != nil {
		t.Fatal(err)
	}
	leader := v.Partitions[partOfForTest(x, len(v.Partitions))].Leader
	follower := slices.IndexFunc(all, func(id uint64) bool { return id != leader })
	var others []int
	for i := range all {
		if i != follower {
			others = append(others, i)
		}
	}
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, true, x) })
	age()
	for _, i := range others {
		c.Faults(i).DropReplication(c.Addr(follower))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	if resp, err := c.Client(others[0]).GC(ctx, &wire.GCRequest{}); err != nil || resp.Collected != 1 {
		t.Fatalf("gc: %+v, %v; want 1 collected", resp, err)
	}
	if err := allReplicas(c, others, false, x); err != nil {
		t.Fatal(err)
	}
	if err := allReplicas(c, []int{follower}, true, x); err != nil {
		t.Fatalf("the follower cut off from replication: %v", err)
	}
	for _, i := range others {
		c.Faults(i).Heal()
	}
	if v, err := c.Client(follower).Get(ctx, &wire.GetRequest{ID: x, R: 3}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("read of all replicas: %+v, %v; want not found", v, err)
	}
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, false, x) })
}

// TestAwayLongerThanHorizon: a node of a cluster that was down longer
// than the tombstone horizon, with task data, refuses to start (its
// copies could bring back tasks the others collected and forgot); back
// within the horizon it starts. A node alone has no one to bring
// anything back to and starts.
func TestAwayLongerThanHorizon(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.Placed(t, 0, c.IDs(0, 1, 2), 3)
	gcEnqueue(t, c, 0, "away")
	const victim = 2
	nodetest.WaitFor(t, clusterWait, func() error {
		for p := range c.Config(victim).Partitions {
			if h, err := c.Node(victim).Holds(p); h || err != nil {
				return err
			}
		}
		return fmt.Errorf("node %d holds no task yet", victim)
	})
	c.Stop(victim)
	away := c.Config(victim)
	away.Clock = clock.Offset{Base: clock.Real{}, By: away.TombstoneHorizon + 24*time.Hour}
	away.Join = []string{c.Addr(0), c.Addr(1)}
	// Its own address again, as Restart does: on a new one its gossip
	// name would clash with the one that just left there, and the others
	// would take seconds to let it back in before it could be refused.
	away.Bind = c.Addr(victim)
	n, err := node.New(away)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, node.ErrAwayTooLong) {
		_ = n.Close()
		t.Fatalf("start after %v away: %v; want %v", away.TombstoneHorizon+24*time.Hour, err, node.ErrAwayTooLong)
	} else {
		t.Logf("refused: %v", err)
	}
	c.Restart(victim) // the real clock: within the horizon

	one := nodetest.NewCluster(t, 1)
	gcEnqueue(t, one, 0, "away")
	one.Stop(0)
	alone := one.Config(0)
	alone.Clock = clock.Offset{Base: clock.Real{}, By: alone.TombstoneHorizon + 24*time.Hour}
	// Any free port: a node alone has no peers that know its address, and
	// its old port may have been taken (CI: "address already in use" while
	// other packages' tests dialled out).
	alone.Bind = "127.0.0.1:0"
	n, err = node.New(alone)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatalf("a node alone, after %v away: %v", alone.TombstoneHorizon+24*time.Hour, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAwayLongerThanHorizonWithHints: a node down longer than half the
// horizon that holds hints and no task data refuses to start too: a hint
// is a copy of a task, which another holder may have handed over long
// ago (a spread), and the task since collected.
func TestAwayLongerThanHorizonWithHints(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	c.Placed(t, 0, c.IDs(0, 1, 2), 3)
	const victim = 2
	c.Stop(victim)
	away := c.Config(victim)
	st, err := store.Open(store.DefaultConfig(filepath.Join(away.DataDir, "store")))
	if err != nil {
		t.Fatal(err)
	}
	for p := range away.Partitions {
		if has, err := st.HasTasks(uint16(p)); has || err != nil {
			t.Fatalf("partition %d: task data %v, %v; the test needs a node with hints only", p, has, err)
		}
	}
	id := task.NewIDGen(7, clock.Real{}).Next()
	if err := st.PutHints([]store.Hint{{Spec: &task.Spec{ID: id, Queue: "away"}, W: 2, At: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	away.Clock = clock.Offset{Base: clock.Real{}, By: away.TombstoneHorizon + 24*time.Hour}
	away.Join = []string{c.Addr(0), c.Addr(1)}
	away.Bind = c.Addr(victim)
	n, err := node.New(away)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, node.ErrAwayTooLong) {
		_ = n.Close()
		t.Fatalf("start after %v away holding a hint: %v; want %v", away.TombstoneHorizon+24*time.Hour, err, node.ErrAwayTooLong)
	} else if !strings.Contains(err.Error(), "1 hints") {
		t.Fatalf("refused without naming the hints: %v", err)
	}
	c.Restart(victim) // the real clock: within the horizon, the hint handed over
	nodetest.WaitFor(t, clusterWait, func() error {
		if st := c.Node(victim).HintStats(); st.Pending != 0 {
			return fmt.Errorf("hints %+v; want handed over", st)
		}
		return nil
	})
}

// TestClusterGCComponentBound: a dependency component larger than
// GCComponentMax is held whole (counted, nothing of it collected); one
// within the bound goes.
func TestClusterGCComponentBound(t *testing.T) {
	withClock, age := gcClock()
	c := nodetest.NewCluster(t, 3, withClock, func(cfg *node.Config) {
		cfg.Retention = gcRetention
		cfg.GCInterval = time.Hour // only the op collects
		cfg.GCComponentMax = 3
	})
	c.Placed(t, 0, c.IDs(0, 1, 2), 3)
	// big: a dep with three dependents (4 tasks); small: a dep with two
	// (3 tasks). All completed, on several leaders.
	run := func(i int, q string, deps ...task.ID) task.ID {
		id := gcEnqueue(t, c, i, q, deps...)
		gcRun(t, c, i, q, id)
		return id
	}
	bigDep := run(0, "bound-big-dep")
	big := []task.ID{bigDep, run(1, "bound-big-1", bigDep), run(2, "bound-big-2", bigDep), run(0, "bound-big-3", bigDep)}
	smallDep := run(1, "bound-small-dep")
	small := []task.ID{smallDep, run(2, "bound-small-1", smallDep), run(0, "bound-small-2", smallDep)}
	age()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	resp, err := c.Client(0).GC(ctx, &wire.GCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc: %+v", resp)
	if resp.Collected != int64(len(small)) || resp.Held == 0 {
		t.Errorf("gc %+v; want the %d tasks of the small component collected and the big one held", resp, len(small))
	}
	nodetest.WaitFor(t, clusterWait, func() error { return allReplicas(c, []int{0, 1, 2}, false, small...) })
	if err := allReplicas(c, []int{0, 1, 2}, true, big...); err != nil {
		t.Fatalf("the component over the bound: %v", err)
	}
}

// TestQueueRetention: a queue's own retention decides when its ended
// tasks go, shorter or longer than the node's; a component spanning two
// queues waits for the longer.
func TestQueueRetention(t *testing.T) {
	clk := clock.NewShift(clock.Real{}, 0)
	c := nodetest.NewCluster(t, 1, nodetest.Clock(clk), func(cfg *node.Config) {
		cfg.Retention = gcRetention
		cfg.GCInterval = time.Hour // only the op collects
	})
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	for q, d := range map[string]time.Duration{"short": time.Minute, "long": 3 * gcRetention} {
		ms := d.Milliseconds()
		if _, err := c.Client(0).QueueSet(ctx, &wire.QueueSetRequest{Queue: q, RetentionMs: &ms}); err != nil {
			t.Fatal(err)
		}
	}
	short, plain, long := gcEnqueue(t, c, 0, "short"), gcEnqueue(t, c, 0, "plain"), gcEnqueue(t, c, 0, "long")
	gcRun(t, c, 0, "short", short)
	gcRun(t, c, 0, "plain", plain)
	gcRun(t, c, 0, "long", long)
	// A dependent in the short queue of a task in the long one: one
	// component, held until the long queue lets its member go.
	longDep := gcEnqueue(t, c, 0, "long")
	gcRun(t, c, 0, "long", longDep)
	shortWaiter := gcEnqueue(t, c, 0, "short", longDep)
	gcRun(t, c, 0, "short", shortWaiter)

	collect := func(after time.Duration, gone, kept []task.ID) {
		t.Helper()
		clk.Set(after)
		if _, err := c.Client(0).GC(ctx, &wire.GCRequest{}); err != nil {
			t.Fatal(err)
		}
		if err := allReplicas(c, []int{0}, false, gone...); err != nil {
			t.Errorf("%v later: %v", after, err)
		}
		if err := allReplicas(c, []int{0}, true, kept...); err != nil {
			t.Errorf("%v later: %v", after, err)
		}
	}
	collect(2*time.Minute, []task.ID{short}, []task.ID{plain, long, longDep, shortWaiter})
	collect(gcRetention+time.Minute, []task.ID{plain}, []task.ID{long, longDep, shortWaiter})
	collect(3*gcRetention+time.Minute, []task.ID{long, longDep, shortWaiter}, nil)
}
