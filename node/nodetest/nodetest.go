// Package nodetest is the in-process cluster harness every skuldd
// integration test uses (STYLE.md habit 6). It is for tests only: only
// _test.go files may import it.
//
// A Cluster runs real nodes in the test process: each with its own
// t.TempDir() data directory, bound to 127.0.0.1 port 0, short timers, and
// a logger that writes to t.Log (so logs show only for failing tests, or
// with -v). Everything is closed through t.Cleanup.
//
// Node 0 founds the cluster; the others join it through the running
// nodes, over an in-memory peer network (or QUIC on loopback: QUIC,
// TransportEnv), with gossip tuned for one machine ("local") and a fast
// metadata-shape loop. Clients reach the nodes over QUIC and HTTP.
//
// A Cluster, configured by Options (SkewBound, Partitions, PeerNet, QUIC,
// Clock, ...) over the test defaults, offers:
//   - its nodes: Node, Config, Addr, Client, HTTP, IDs, Len;
//   - their lives: Join, TryJoin, Stop, Kill, Restart, RestartAlone and
//     KillAll;
//   - faults: Faults, Isolate, Heal (node.Faults underneath);
//   - its view, read through a node's client API (view.go): View,
//     Settled (members and metadata raft), Placed and PlacedOn (every
//     partition's cohort settled), LeadersSettled, ALeader, Leaders,
//     BusiestLeader (who leads which partition) and AwaitTakeover (a
//     partition's new leader after its old one is cut off). The helpers
//     that wait do so up to ClusterWait, with WaitFor.
//
// WaitFor and Poll are the tests' one way to wait (testkit's), and Logger
// their logger.
//
// Concurrency: Node, Addr, Client, HTTP, Config, IDs, View and Settled
// may be called from any goroutine; NewCluster, Stop, Restart and the
// view helpers that take a testing.TB call t.Fatal on failure and must
// be called from the test's goroutine.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/wire"
)

// Option adjusts a node's configuration before it is created. Options run
// after the harness's test defaults, in order.
type Option func(*node.Config)

// Test defaults: short timers so a test never waits on a production
// interval.
const (
	// DefaultSkewBound is the clock skew bound of test nodes: a claim
	// expires for its leader at end + 100ms.
	DefaultSkewBound = 100 * time.Millisecond
	// DefaultPartitions is P for test clusters.
	DefaultPartitions = 8
	// startTimeout bounds a node's start-up: generous, since -race on a
	// small machine is slow, but a start normally takes milliseconds.
	startTimeout = 30 * time.Second
	// dialTimeout bounds dialing a node's QUIC client.
	dialTimeout = 10 * time.Second
	// bindAttempts bounds retries of a start whose port was taken in the
	// meantime (port 0 picks a free UDP port; its TCP twin may be in use).
	bindAttempts = 5
)

// SkewBound sets the clock skew bound.
func SkewBound(d time.Duration) Option { return func(c *node.Config) { c.SkewBound = d } }

// MaxPayload sets the payload limit in bytes.
func MaxPayload(n int) Option { return func(c *node.Config) { c.MaxPayload = n } }

// Partitions sets P.
func Partitions(p int) Option { return func(c *node.Config) { c.Partitions = p } }

// Secret sets the cluster secret.
func Secret(b []byte) Option { return func(c *node.Config) { c.ClusterSecret = b } }

// StartTimeout sets how long a node may take to start (and to join).
func StartTimeout(d time.Duration) Option { return func(c *node.Config) { c.StartTimeout = d } }

// PeerNet carries the peer traffic of the nodes over net (one network
// for the whole cluster) instead of QUIC on loopback.
func PeerNet(net *peer.MemNet) Option { return func(c *node.Config) { c.PeerNet = net } }

// QUIC carries the peer traffic over QUIC on loopback whatever
// TransportEnv says: for tests of what only QUIC does (the cluster
// secret's handshake).
func QUIC() Option { return func(c *node.Config) { c.PeerNet = nil } }

// TransportEnv names the environment variable that picks the peer
// transport of every test cluster: by default an in-memory network
// (peer.MemNet, one per cluster), "quic" for QUIC on loopback. A PeerNet
// or QUIC option wins. QUIC's own paths are tested in wire, by the tests
// that force it, by the end-to-end tests of the binary and by the fault
// suite.
const TransportEnv = "SKULDD_TEST_TRANSPORT"

// DeadVoterGrace sets how long a metadata voter may be gone before it is
// replaced.
func DeadVoterGrace(d time.Duration) Option { return func(c *node.Config) { c.DeadVoterGrace = d } }

// MaxVersion makes the node play a build that supports cluster versions
// up to v (version.Base: a build from before versions).
func MaxVersion(v version.V) Option { return func(c *node.Config) { c.MaxVersion = v } }

// UpgradeHold starts the node with --upgrade-hold.
func UpgradeHold(on bool) Option { return func(c *node.Config) { c.UpgradeHold = on } }

// Replicas sets the replication factor a founding node proposes.
func Replicas(n int) Option { return func(c *node.Config) { c.Replicas = n } }

// Clock sets the clock the node reads wall time from. Pass one
// clock.Shift to every node of a cluster to move their clocks together:
// a test then makes a retention, a horizon or a lease pass by setting the
// shift instead of sleeping through it, and the nodes' clocks never
// disagree (their drift checks see no skew).
func Clock(clk clock.Clock) Option { return func(c *node.Config) { c.Clock = clk } }

// testConfig returns the harness defaults for a node of t with data in dir.
func testConfig(t testing.TB, i int, dir string) node.Config {
	cfg := node.DefaultConfig()
	cfg.Bind = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.Partitions = DefaultPartitions
	cfg.SkewBound = DefaultSkewBound
	cfg.TickInterval = 10 * time.Millisecond
	cfg.RaftTick = 10 * time.Millisecond
	cfg.ElectionBackoff = 5 * time.Millisecond
	cfg.ElectionBackoffMax = 200 * time.Millisecond
	cfg.RetryBase = 10 * time.Millisecond
	cfg.StartTimeout = startTimeout
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.GossipProfile = "local"
	cfg.VoterInterval = 20 * time.Millisecond
	cfg.DeadVoterGrace = 2 * time.Second
	cfg.JoinRetry = 50 * time.Millisecond
	cfg.PlacementSettle = 300 * time.Millisecond
	cfg.ZombieCheck = 200 * time.Millisecond
	cfg.RejoinInterval = 200 * time.Millisecond
	cfg.ClockProbe = 100 * time.Millisecond
	cfg.AAEInterval = 200 * time.Millisecond
	cfg.HintWait = 500 * time.Millisecond
	cfg.HintInterval = 100 * time.Millisecond
	cfg.ReconcileInterval = 500 * time.Millisecond
	cfg.Drift.MaxDrift = DefaultSkewBound / 2 // below the skew bound, as Validate wants
	cfg.LeaveTimeout = time.Second
	cfg.UpgradeCheck = 100 * time.Millisecond
	cfg.Faults = node.NewFaults()
	cfg.Logger = Logger(t).With("member", i)
	return cfg
}

// Cluster is a set of in-process nodes.
type Cluster struct {
	t testing.TB
	// net is the in-memory network of the nodes (TransportEnv), or nil.
	net     *peer.MemNet
	mu      sync.Mutex
	members []*member
}

// member is one node of the cluster, running or stopped.
type member struct {
	cfg    node.Config // as configured; Bind stays the original request
	node   *node.Node  // nil before the first start
	addr   string      // the address it serves (or last served) on
	client *wire.Client
	up     bool
}

// maxNodes bounds a test cluster.
const maxNodes = 9

// NewCluster starts a cluster of n nodes configured with the test defaults
// and then opts: node 0 founds it, the others join in turn.
func NewCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 || n > maxNodes {
		t.Fatalf("nodetest: NewCluster(%d): want 1..%d nodes", n, maxNodes)
	}
	c := &Cluster{t: t}
	if os.Getenv(TransportEnv) != "quic" {
		c.net = peer.NewMemNet()
	}
	for i := range n {
		cfg := testConfig(t, i, t.TempDir())
		cfg.PeerNet = c.net
		for _, o := range opts {
			o(&cfg)
		}
		c.members = append(c.members, &member{cfg: cfg})
	}
	c.net = c.members[0].cfg.PeerNet // a PeerNet option's network
	// Cleanups run last-in first-out: this one, registered after the data
	// dirs and loggers were made, closes the nodes before their data dirs
	// are removed and while their logs still reach t.Log.
	t.Cleanup(c.closeAll)
	for i, m := range c.members {
		if i > 0 {
			m.cfg.Join = c.runningAddrs()
		}
		c.start(i, m, m.cfg.Bind)
	}
	return c
}

// runningAddrs returns the addresses of the running nodes.
func (c *Cluster) runningAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var addrs []string
	for _, m := range c.members {
		if m.up {
			addrs = append(addrs, m.addr)
		}
	}
	return addrs
}

// Len returns the number of nodes, running or stopped.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// Join starts a new node, configured with the test defaults and opts, that
// joins the cluster through its running nodes, and returns its index.
func (c *Cluster) Join(opts ...Option) int {
	c.t.Helper()
	i, err := c.tryJoin(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	return i
}

// TryJoin is Join for a node expected to fail: it returns the start error
// (the node is then not kept), or nil and keeps the node.
func (c *Cluster) TryJoin(opts ...Option) error {
	c.t.Helper()
	_, err := c.tryJoin(opts)
	return err
}

func (c *Cluster) tryJoin(opts []Option) (int, error) {
	c.mu.Lock()
	i := len(c.members)
	c.mu.Unlock()
	cfg := testConfig(c.t, i, c.t.TempDir())
	cfg.PeerNet = c.net
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Join = c.runningAddrs()
	n, err := node.New(cfg)
	if err != nil {
		return 0, fmt.Errorf("nodetest: join node %d: %w", i, err)
	}
	if err := n.Start(context.Background()); err != nil {
		return 0, fmt.Errorf("nodetest: join node %d: %w", i, err)
	}
	m := &member{cfg: cfg}
	c.mu.Lock()
	c.members = append(c.members, m)
	c.mu.Unlock()
	cl, err := c.dialClient(n)
	if err != nil {
		_ = n.Close()
		return 0, err
	}
	c.mu.Lock()
	m.node, m.addr, m.client, m.up = n, n.Addr(), cl, true
	c.mu.Unlock()
	return i, nil
}

// dialClient dials n's client API with the cluster's token, if any.
func (c *Cluster) dialClient(n *node.Node) (*wire.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	var cc wire.ClientConfig
	if secret := n.Config().ClusterSecret; secret != nil {
		keys, err := wire.DeriveKeys(secret)
		if err != nil {
			return nil, err
		}
		cc.Token = keys.ClientToken
	}
	conn, err := wire.Dial(ctx, n.Addr(), cc)
	if err != nil {
		return nil, fmt.Errorf("nodetest: dial node at %s: %w", n.Addr(), err)
	}
	return wire.NewClient(conn), nil
}

func (c *Cluster) member(i int) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.members) {
		panic(fmt.Sprintf("nodetest: node %d out of range [0, %d)", i, len(c.members)))
	}
	return c.members[i]
}

// start creates and starts node i bound to bind, retrying on a port that
// is in use (falling back to port 0), then dials its client.
func (c *Cluster) start(i int, m *member, bind string) {
	c.t.Helper()
	if err := c.tryStart(i, m, bind); err != nil {
		c.t.Fatal(err)
	}
}

// tryStart is start returning its error; it is safe to call from any
// goroutine.
func (c *Cluster) tryStart(i int, m *member, bind string) error {
	cfg := m.cfg
	var n *node.Node
	for attempt := 1; ; attempt++ {
		cfg.Bind = bind
		var err error
		n, err = node.New(cfg)
		if err != nil {
			return fmt.Errorf("nodetest: node %d: %w", i, err)
		}
		err = n.Start(context.Background())
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == bindAttempts {
			return fmt.Errorf("nodetest: start node %d (bind %s): %w", i, bind, err)
		}
		c.t.Logf("nodetest: node %d: %s is in use, binding port 0: %v", i, bind, err)
		bind = anyPort(bind)
	}
	cl, err := c.dialClient(n)
	if err != nil {
		_ = n.Close()
		return fmt.Errorf("nodetest: node %d: %w", i, err)
	}
	c.mu.Lock()
	m.node, m.addr, m.client, m.up = n, n.Addr(), cl, true
	c.mu.Unlock()
	return nil
}

// KillAll kills every running node (as crashes, all at once) and starts
// them all again together, each with the configuration it was first
// started with (its join list included), on the same addresses: the whole
// cluster restarting after a power cut.
func (c *Cluster) KillAll() {
	c.t.Helper()
	n := c.Len()
	addrs := make([]string, n)
	for i := range n {
		c.Kill(i)
		c.mu.Lock()
		addrs[i] = c.members[i].addr
		c.mu.Unlock()
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.tryStart(i, c.member(i), addrs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

// anyPort returns addr's host with port 0.
func anyPort(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, "0")
}

// Node returns node i (closed if it was stopped).
func (c *Cluster) Node(i int) *node.Node {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.node
}

// Config returns node i's configuration (Bind as requested, not as bound).
func (c *Cluster) Config(i int) node.Config { return c.member(i).cfg }

// Addr returns the address node i serves on (UDP for QUIC, TCP for HTTP),
// or last served on if it is stopped.
func (c *Cluster) Addr(i int) string {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.addr
}

// Client returns the QUIC client of node i, dialed when the node started
// and closed when it stops. After Restart it is a new client.
func (c *Cluster) Client(i int) *wire.Client {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !m.up {
		panic(fmt.Sprintf("nodetest: Client(%d): node is stopped", i))
	}
	return m.client
}

// HTTP returns the base URL of node i's HTTP API, "http://host:port".
func (c *Cluster) HTTP(i int) string { return "http://" + c.Addr(i) }

// Stop closes node i and its client. Stopping a stopped node does nothing.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.down(i, "close", (*node.Node).Close)
}

// down marks node i stopped, closes its client and stops it with stop.
func (c *Cluster) down(i int, what string, stop func(*node.Node) error) {
	c.t.Helper()
	m := c.member(i)
	c.mu.Lock()
	up, n, cl := m.up, m.node, m.client
	m.up, m.client = false, nil
	c.mu.Unlock()
	if !up {
		return
	}
	if err := cl.Close(); err != nil {
		c.t.Logf("nodetest: close client of node %d: %v", i, err)
	}
	if err := stop(n); err != nil {
		c.t.Errorf("nodetest: %s node %d: %v", what, i, err)
	}
}

// Isolate cuts node i off from every other node, both ways (a network
// partition); Heal ends every fault.
func (c *Cluster) Isolate(i int) {
	c.t.Helper()
	for j := range c.Len() {
		if j == i {
			continue
		}
		c.member(i).cfg.Faults.Block(c.Addr(j))
		c.member(j).cfg.Faults.Block(c.Addr(i))
	}
}

// Heal removes every injected fault.
func (c *Cluster) Heal() {
	for j := range c.Len() {
		c.member(j).cfg.Faults.Heal()
	}
}

// Faults returns node i's fault injector.
func (c *Cluster) Faults(i int) *node.Faults { return c.member(i).cfg.Faults }

// Kill stops node i as a crash would (no gossip leave: the others find it
// dead by probing). Restart brings it back.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.down(i, "kill", (*node.Node).Kill)
}

// Restart stops node i if it runs, then creates and starts it again with
// the same configuration and data directory, on the same address if it is
// still free (else on a new port: read Addr again).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.restart(i, true)
}

// RestartAlone is Restart without a join list, as an operator restarts
// the first node of a cluster (started without --join): the node must
// find its cluster from what it stored.
func (c *Cluster) RestartAlone(i int) {
	c.t.Helper()
	c.restart(i, false)
}

func (c *Cluster) restart(i int, join bool, opts ...Option) {
	c.t.Helper()
	if err := c.tryRestart(i, join, opts); err != nil {
		c.t.Fatal(err)
	}
}

// RestartWith is Restart with opts applied to the node's configuration
// first (and kept for later restarts): a rolling upgrade restarts each
// node as another build with it.
func (c *Cluster) RestartWith(i int, opts ...Option) {
	c.t.Helper()
	c.restart(i, true, opts...)
}

// TryRestartWith is RestartWith returning the start's error (the node
// is left down then).
func (c *Cluster) TryRestartWith(i int, opts ...Option) error {
	c.t.Helper()
	return c.tryRestart(i, true, opts)
}

func (c *Cluster) tryRestart(i int, join bool, opts []Option) error {
	c.Stop(i)
	m := c.member(i)
	c.mu.Lock()
	addr := m.addr
	c.mu.Unlock()
	for _, o := range opts {
		o(&m.cfg)
	}
	m.cfg.Join = nil
	if join && c.Len() > 1 {
		// Any running member will do to find the cluster again.
		m.cfg.Join = c.runningAddrs()
	}
	return c.tryStart(i, m, addr)
}

// closeAll stops every running node, as the cluster's cleanup. It first
// cuts every node off from every other (the test is over; nothing it
// checked depends on the nodes reaching each other now), then closes them
// one at a time. Without the cut, closing cost seconds of every test: a
// node's Close hands its partitions to the others, and a handoff to a
// peer that is itself closing or gone waits out the handoff timeout
// (15s, seen with four nodes on either transport); over QUIC a node also
// waits out the 2s dial timeout for a peer closed before it (QUIC ignores
// ICMP). With the cut, each Close still runs its whole shutdown (its
// handoffs and gossip leave fail at once) and returns in milliseconds.
func (c *Cluster) closeAll() {
	n := c.Len()
	for i := range n {
		c.cutOff(i)
	}
	for i := range n {
		c.Stop(i)
	}
}

// cutOff blocks traffic to and from node i's address at every other node.
func (c *Cluster) cutOff(i int) {
	addr := c.Addr(i)
	for j := range c.Len() {
		if f := c.Faults(j); j != i && f != nil && addr != "" {
			f.Block(addr)
		}
	}
}

// WaitFor calls f until it returns nil, polling every few milliseconds,
// and fails the test with f's last error if timeout passes first. It is
// testkit.WaitFor, the one place tests wait: they never sleep bare
// (STYLE.md habit 7).
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	testkit.WaitFor(t, timeout, f)
}

// Poll is WaitFor without the test: it calls f until it returns nil or
// timeout passes, and returns nil or f's last error. It may be called from
// any goroutine.
func Poll(timeout time.Duration, f func() error) error { return testkit.Poll(timeout, f) }

// Logger returns a logger that writes to t.Log at Info level, so logs show
// only for failing tests (or with -v). Lines logged after the test's
// cleanups have run are dropped: t.Log would panic on them.
func Logger(t testing.TB) *slog.Logger { return testkit.Logger(t) }
