package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/wire"
)

// cluster is the simulated nodes on one in-memory network. Safe for
// concurrent use: clients call nodes while the nemesis kills and restarts
// them.
type cluster struct {
	cfg *Config
	net *peer.MemNet
	log *slog.Logger
	// onLead receives each node's "leading" log records (leaderTap).
	onLead func(faults.Leadership)
	mu     sync.Mutex
	nodes  []*simNode
}

// simNode is one node, running or down, with what outlives its
// processes: its disk, its faults and its clock.
type simNode struct {
	cfg   node.Config // with Join as first started: a restart rejoins the same way
	fs    *store.MemFS
	shift *clock.Shift
	node  *node.Node // nil while down
	// inc counts the node's incarnations: a request that began in one
	// and ended after it died is answered in doubt (the client saw the
	// connection drop), whatever the dying node's code returned.
	inc uint64
}

// addrOf is node i's address on the network. Loopback addresses: the
// node's bind check allows them without a cluster secret, and nothing
// is ever bound to them (NoListen).
func addrOf(i int) string { return fmt.Sprintf("127.0.1.%d:13000", i+1) }

// dataDir is every node's data directory, on its own MemFS.
const dataDir = "/data"

// nodeConfig returns node i's configuration: the in-process harness's
// short timers (node/nodetest), no sockets, and the simulation's disk,
// clock and faults.
func (c *cluster) nodeConfig(i int, sn *simNode) node.Config {
	cfg := node.DefaultConfig()
	cfg.Bind = addrOf(i)
	cfg.DataDir = dataDir
	cfg.NoListen = true
	cfg.PeerNet = c.net
	cfg.StoreFS = sn.fs
	// No sync holds: the pressure watch judges contention by the real
	// scheduler's latency, and a hold is a timer. Under a loaded machine
	// (CI running every package) it held a sync in the bubble while a
	// goroutine waited on a replica's mutex, which is not a durable block:
	// virtual time could not advance to end the hold, and the run hung.
	cfg.WALMinSyncInterval = 0
	cfg.Clock = sn.shift
	cfg.Faults = node.NewFaults()
	cfg.Partitions = c.cfg.Partitions
	cfg.Replicas = c.cfg.Replicas
	cfg.SkewBound = c.cfg.SkewBound
	cfg.Drift.MaxDrift = c.cfg.maxDrift()
	cfg.AAEInterval = c.cfg.AAEInterval
	cfg.ReconcileInterval = c.cfg.ReconcileInterval
	// Well within a fault, so that hinted enqueues are hinted and handed
	// over while the schedule runs.
	cfg.HintWait = 300 * time.Millisecond
	cfg.HintInterval = 100 * time.Millisecond
	cfg.DefaultMaxAttempts = c.cfg.MaxAttempts
	cfg.TickInterval = 10 * time.Millisecond
	cfg.RaftTick = 10 * time.Millisecond
	cfg.ElectionBackoff = 5 * time.Millisecond
	cfg.ElectionBackoffMax = 200 * time.Millisecond
	cfg.RetryBase = 10 * time.Millisecond
	cfg.StartTimeout = c.cfg.StartTimeout
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.GossipProfile = "local"
	cfg.VoterInterval = 20 * time.Millisecond
	cfg.DeadVoterGrace = 2 * time.Second
	// Short, as the other graces: an abandoned handoff's promise is taken
	// back within a fault's length, so the schedule exercises the
	// takeover that contends with a candidate, not only the drain.
	cfg.PromiseGrace = 2 * time.Second
	cfg.JoinRetry = 50 * time.Millisecond
	cfg.PlacementSettle = 300 * time.Millisecond
	cfg.ZombieCheck = 200 * time.Millisecond
	cfg.RejoinInterval = 200 * time.Millisecond
	cfg.ClockProbe = 100 * time.Millisecond
	cfg.LeaveTimeout = time.Second
	cfg.Logger = slog.New(&leaderTap{next: c.log.With("member", i+1).Handler(), node: i + 1, record: c.onLead})
	return cfg
}

// newCluster starts cfg.Nodes nodes: the first founds the cluster, each
// other joins through the ones before it.
func newCluster(ctx context.Context, cfg *Config, seed uint64, log *slog.Logger, onLead func(faults.Leadership)) (*cluster, error) {
	c := &cluster{cfg: cfg, net: peer.NewMemNet(), log: log, onLead: onLead}
	rng := rand.New(rand.NewPCG(seed, streamNodes))
	for i := range cfg.Nodes {
		sn := &simNode{fs: store.NewMemFS(), shift: clock.NewShift(clock.Real{}, 0)}
		sn.cfg = c.nodeConfig(i, sn)
		// Reordering draws its delays from the seed too.
		sn.cfg.Faults.Seed(rng.Uint64())
		for j := range i {
			sn.cfg.Join = append(sn.cfg.Join, addrOf(j))
		}
		c.nodes = append(c.nodes, sn)
		if err := c.start(ctx, i); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// start starts node i on its disk.
func (c *cluster) start(ctx context.Context, i int) error {
	c.mu.Lock()
	sn := c.nodes[i]
	cfg := sn.cfg
	cfg.StoreFS = sn.fs
	c.mu.Unlock()
	n, err := node.New(cfg)
	if err != nil {
		return fmt.Errorf("sim: node %d: %w", i+1, err)
	}
	if err := n.Start(ctx); err != nil {
		return fmt.Errorf("sim: start node %d: %w", i+1, err)
	}
	c.mu.Lock()
	sn.node = n
	sn.inc++
	c.mu.Unlock()
	return nil
}

// down marks node i down and returns the node that ran, or nil.
func (c *cluster) down(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	sn := c.nodes[i]
	n := sn.node
	sn.node = nil
	sn.inc++
	return n
}

// kill stops node i as kill -9 would: everything it wrote stays on its
// disk, synced or not.
func (c *cluster) kill(i int) {
	if n := c.down(i); n != nil {
		_ = n.Kill()
	}
}

// crash cuts node i's power: it leaves the network at once (so every
// answer it gave was given before the cut), its disk becomes what a cut
// leaves (CrashImage: what was synced, and unsyncedPercent of the rest),
// and then its process is killed, its last writes going to the old disk.
func (c *cluster) crash(i, unsyncedPercent int, seed uint64) {
	n := c.down(i)
	if n == nil {
		return
	}
	c.net.Disconnect(addrOf(i))
	c.mu.Lock()
	sn := c.nodes[i]
	sn.fs = store.CrashImage(sn.fs, unsyncedPercent, rand.New(rand.NewPCG(seed, seed)))
	c.mu.Unlock()
	_ = n.Kill()
}

// faults returns node i's fault injector (the same across restarts).
func (c *cluster) faults(i int) *node.Faults {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].cfg.Faults
}

// shiftClock sets node i's clock offset.
func (c *cluster) shiftClock(i int, by time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[i].shift.Set(by)
}

// errDown is the answer of a request to a node that is down, or that
// died while serving it: a connection error, an outcome in doubt.
var errDown = errors.New("sim: node down (connection refused or lost)")

// call runs f against node i's client API, as a client connected to it:
// errDown when the node is down, or died before f returned.
func (c *cluster) call(ctx context.Context, i int, f func(wire.Service) error) error {
	c.mu.Lock()
	sn := c.nodes[i]
	n, inc := sn.node, sn.inc
	c.mu.Unlock()
	if n == nil {
		return errDown
	}
	// A frozen node's requests wait in its socket until it thaws.
	if err := sn.cfg.Faults.Gate(ctx); err != nil {
		return errDown
	}
	err := f(n.Service())
	c.mu.Lock()
	died := sn.inc != inc
	c.mu.Unlock()
	if died {
		return errDown
	}
	return err
}

// replicas reports node i's replica of every partition, read in
// process (not a client request: a frozen node answers too); errDown
// when the node is down.
func (c *cluster) replicas(i int) ([]node.ReplicaState, error) {
	c.mu.Lock()
	n := c.nodes[i].node
	c.mu.Unlock()
	if n == nil {
		return nil, errDown
	}
	return n.Replicas()
}

// up lists the nodes running.
func (c *cluster) up() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, sn := range c.nodes {
		if sn.node != nil {
			out = append(out, i)
		}
	}
	return out
}

// isolate cuts node i from every other node, both ways.
func (c *cluster) isolate(i int) {
	for j := range c.nodes {
		if j != i {
			c.faults(j).Block(addrOf(i))
			c.faults(i).Block(addrOf(j))
		}
	}
}

// rejoin heals every link of node i (what isolate cut, and any other
// fault of its links).
func (c *cluster) rejoin(i int) {
	for j := range c.nodes {
		if j != i {
			c.faults(j).HealAddr(addrOf(i))
			c.faults(i).HealAddr(addrOf(j))
		}
	}
}

// healLinks removes every link fault and clock shift, and thaws every
// frozen node.
func (c *cluster) healLinks() {
	for i := range c.nodes {
		c.faults(i).Heal()
		c.faults(i).Thaw()
		c.shiftClock(i, 0)
	}
}

// close stops every node (gracefully: the run is over).
func (c *cluster) close() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		if n := c.down(i); n != nil {
			wg.Go(func() { _ = n.Close() })
		}
	}
	wg.Wait()
}
