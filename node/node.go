package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/access"
	"github.com/skuldd/skuldd/node/control"
	"github.com/skuldd/skuldd/node/coord"
	"github.com/skuldd/skuldd/node/deps"
	"github.com/skuldd/skuldd/node/heads"
	"github.com/skuldd/skuldd/node/hints"
	"github.com/skuldd/skuldd/node/listen"
	"github.com/skuldd/skuldd/node/membership"
	"github.com/skuldd/skuldd/node/metrics"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/pressure"
	"github.com/skuldd/skuldd/node/queues"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/node/schedules"
	"github.com/skuldd/skuldd/node/shards"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Node is one running skuldd process.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	id       uint64
	resetKey [32]byte // QUIC stateless reset key, kept across restarts
	store    *store.Store
	pressure *pressure.Watch // whether the store holds busy syncs (node/pressure)
	// raft is the metadata group (membership's), set once Start has it;
	// what may run before (the peer handlers, shutdown, metrics) uses
	// raftGroup.
	raft  *raftgroup.Group
	parts []*partition.Replica
	fresh *partition.FreshBudget // the replicas' claim cache; nil: none
	heads *heads.Index
	// deps is this node's part of the dependency protocol (node/deps).
	deps *deps.Plane
	// hints are the enqueues this node holds for cohorts it could not
	// reach (node/hints); set at Start, once the partitions are loaded.
	hints *hints.Plane
	// sched enqueues the periodic tasks' occurrences while this node
	// leads the metadata group.
	sched *schedules.Plane
	// reconcileSoon asks reconcileLoop for a round within
	// reconcileRetry (capacity 1): a reconcile that could not check every
	// dependency, or a partition newly led.
	reconcileSoon chan struct{}
	// shards serves the worker shards and, while this node leads the
	// metadata group, expires their members.
	shards *shards.Plane
	ids    *task.IDGen

	// ms is the node's membership (node/membership): the metadata group,
	// gossip, joining, peers' addresses. Set at Start, before the peer
	// transport serves.
	ms    *membership.Membership
	peers *peer.Pool
	// peerEnd is the node on Config.PeerNet, when it uses one.
	peerEnd *peer.MemEndpoint
	// repl is the replication data plane (node/replication).
	repl *replication.Plane
	sums heads.Summaries
	// coord is the coordinator plane (node/coord), which serves the
	// client API, and api its faces as the servers call them; both set
	// at Start, once the planes it acts through exist. Until then
	// client ops are refused (serveClient, serveForwarded).
	coord atomic.Pointer[coord.Plane]
	api   atomic.Pointer[apiFaces]

	// ln is the node's sockets and servers (node/listen); nil with
	// Config.NoListen.
	ln    *listen.Listener
	addr  string
	ready atomic.Bool
	// nextDue is the earliest timer of any partition (MaxInt64: none);
	// tickMu serialises tick.
	nextDue atomic.Int64
	tickMu  sync.Mutex
	// cohort caches the cohort size from the metadata group, so requests
	// never copy the group's state.
	cohort atomic.Int32
	// placement caches every partition's cohort, refreshed with cohort.
	placement atomic.Pointer[placementView]
	// queues are the queues' settings, refreshed with cohort.
	queues   *queues.Settings
	access   *access.Registry
	stopping atomic.Bool
	killed   atomic.Bool // Kill: no graceful leave
	// departing: the node hands off its partitions and stops; it takes
	// no leadership any more.
	departing atomic.Bool
	// partsLoaded is closed once the partitions are loaded: peer ops on
	// partitions wait for it (the peer protocol serves from the start).
	partsLoaded chan struct{}
	// leaving is closed by Leave (ctl leave).
	leaving   chan struct{}
	leaveOnce sync.Once
	// refused is why a peer last refused this node's connection
	// (refusalWatch); nil if none did.
	refused atomic.Pointer[string]
	// stopc is closed when shutdown begins: it ends long-polling claims,
	// which would otherwise hold the HTTP server's graceful shutdown for
	// its whole timeout and outlive Close.
	stopc chan struct{}

	// ctl is the leadership control plane (failover, placement, zombies,
	// the clock, the metadata group's voters); set at Start, once the
	// node knows its id.
	ctl *control.Control
	// metrics is the node's registry, served at GET /metrics; it counts
	// and times client requests (Meter). Set at Start, before the servers.
	metrics *metrics.Metrics
	// exitc receives why the node must exit (ExitOnDrift); buffered.
	exitc chan error

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

func (n *Node) now() int64 { return clock.UnixMilli(n.clock) }

// Exit receives an error when the node must stop on its own (a clock that
// drifted, with ExitOnDrift); the caller then closes it.
func (n *Node) Exit() <-chan error { return n.exitc }

func (n *Node) exit(err error) {
	select {
	case n.exitc <- err:
	default:
	}
}

// Addr returns the address the node serves on (UDP and TCP, one port).
func (n *Node) Addr() string { return n.addr }

// Service returns the client API as QUIC and HTTP clients reach it: the
// coordinator, which retries while the cluster moves, behind the request
// metrics. In-process clients (the simulation, with Config.NoListen) call
// it; it is valid after Start returned.
func (n *Node) Service() wire.Service { return n.api.Load().client }

// Config returns the node's configuration; after Start, Partitions and
// Replicas are the cluster's.
func (n *Node) Config() Config { return n.cfg }

// ID returns the node's id.
func (n *Node) ID() uint64 { return n.id }

// placementView is the registry's placement as refreshMeta last saw it.
type placementView struct {
	cohorts [][]uint64 // by partition; shared, never modified
	leaders []uint64   // by partition; 0: none
	epochs  []uint64   // by partition: the registry's epoch
}

// apiFaces are the coordinator plane's faces as the servers call them.
type apiFaces struct {
	// client is the client API as QUIC and HTTP clients reach it.
	client wire.Service
	// clientHandler and peerHandler serve client and forwarded requests
	// over QUIC and the peer transport.
	clientHandler, peerHandler wire.Handler
}

// errStarting refuses a client op before the coordinator plane exists.
var errStarting = fmt.Errorf("%w: node is starting", wire.ErrUnavailable)

// serveClient serves a client's request on a QUIC connection, as the
// principal its hello proved (the credential's id, or 0 for the cluster
// token; node/access checks what it may do).
func (n *Node) serveClient(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	if a := n.api.Load(); a != nil {
		a.clientHandler.Serve(wire.WithPrincipal(ctx, wire.Principal{Credential: req.PeerID}), req, w)
		return
	}
	_ = w.Error(errStarting)
}

// serveForwarded serves a client op a peer forwarded: served here only,
// no retries (the forwarding node retries).
func (n *Node) serveForwarded(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	if a := n.api.Load(); a != nil {
		a.peerHandler.Serve(ctx, req, w)
		return
	}
	_ = w.Error(errStarting)
}

// serving is nil while the node serves client requests, else why not.
func (n *Node) serving() error {
	switch {
	case n.stopping.Load():
		return wire.ErrShuttingDown
	case !n.ready.Load():
		return errStarting
	}
	return nil
}

// drifting reports whether this node's clock is ahead of the cluster's by
// more than allowed, or not yet judged (control.Control.Drifting); reason
// says why. Never before Start.
func (n *Node) drifting() (bool, string) {
	if n.ctl == nil {
		return false, ""
	}
	return n.ctl.Drifting()
}

// errDrifting is the refusal of a drifting node.
func (n *Node) errDrifting() error { return n.ctl.ErrDrifting() }

// clockView is the drift state for ctl cluster and the metrics; nil
// before Start.
func (n *Node) clockView() *wire.ClockView {
	if n.ctl == nil {
		return nil
	}
	return n.ctl.ClockView()
}
