package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/control"
	"github.com/skuldd/skuldd/node/deps"
	"github.com/skuldd/skuldd/node/heads"
	"github.com/skuldd/skuldd/node/metrics"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/pressure"
	"github.com/skuldd/skuldd/node/replication"
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
	raft     *raftgroup.Group
	parts    []*partition.Replica
	fresh    *partition.FreshBudget // the replicas' claim cache; nil: none
	heads    *heads.Index
	// deps is this node's part of the dependency protocol (node/deps).
	deps *deps.Plane
	ids  *task.IDGen

	// Cluster plumbing (cluster.go). raftReady is closed once raft is set;
	// the peer handler may run before that.
	member *member.Member
	peers  *peer.Pool
	// peerEnd is the node on Config.PeerNet, when it uses one.
	peerEnd *peer.MemEndpoint
	raftTr  raftTransport
	// repl is the replication data plane (node/replication).
	repl      *replication.Plane
	sums      heads.Summaries
	raftReady chan struct{}
	// memberReady is closed once member is set (gossip).
	memberReady chan struct{}
	learnedMu   sync.Mutex
	learned     map[uint64]string
	// clientHandler serves the client API, on client connections and for
	// requests peers forward.
	clientHandler wire.Handler
	// peerClientHandler serves client ops peers forward: no retries here,
	// the forwarding node retries.
	peerClientHandler wire.Handler

	udp     net.PacketConn
	tcp     net.Listener
	quicSrv *wire.Server
	httpSrv *http.Server
	addr    string
	ready   atomic.Bool
	// nextDue is the earliest timer of any partition (MaxInt64: none);
	// tickMu serialises tick.
	nextDue atomic.Int64
	tickMu  sync.Mutex
	// cohort caches the cohort size from the metadata group, so requests
	// never copy the group's state.
	cohort atomic.Int32
	// placement caches every partition's cohort, refreshed with cohort.
	placement atomic.Pointer[placementView]
	stopping  atomic.Bool
	killed    atomic.Bool // Kill: no graceful leave
	// departing: the node hands off its partitions and stops; it takes
	// no leadership any more.
	departing atomic.Bool
	// partsLoaded is closed once the partitions are loaded: peer ops on
	// partitions wait for it (the peer protocol serves from the start).
	partsLoaded chan struct{}
	// leaving is closed by Leave (ctl leave).
	leaving   chan struct{}
	leaveOnce sync.Once
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

// New validates cfg and returns a node that is not started.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	if err := controlConfig(cfg, 0).Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	return &Node{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, heads: heads.NewIndex(), stopc: make(chan struct{}),
		raftReady: make(chan struct{}), memberReady: make(chan struct{}), learned: make(map[uint64]string),
		leaving: make(chan struct{}), partsLoaded: make(chan struct{}),
		exitc: make(chan error, 1),
	}, nil
}

// Exit receives an error when the node must stop on its own (a clock that
// drifted, with ExitOnDrift); the caller then closes it.
func (n *Node) Exit() <-chan error { return n.exitc }

func (n *Node) exit(err error) {
	select {
	case n.exitc <- err:
	default:
	}
}

// Start opens the store, binds the address, brings up the metadata group
// and the partitions, wins leadership of the partitions this node should
// lead, and starts serving. On error everything started is closed again.
func (n *Node) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			n.shutdown()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.StartTimeout)
	defer cancel()
	began := time.Now()

	if err := n.openStore(); err != nil {
		return err
	}
	n.log = n.cfg.Logger.With("node", n.id)
	n.metrics = metrics.New(metricsSource{n}, n.log)
	if err := n.startControl(); err != nil {
		return err
	}
	if err := n.startIDs(); err != nil {
		return err
	}
	if n.cfg.NoListen {
		n.addr = n.cfg.Bind
		if a := n.cfg.Advertise; a != "" {
			n.addr = a
		}
	} else if err := n.bind(); err != nil {
		return err
	}
	loopCtx, loopCancel := context.WithCancel(context.Background())
	n.cancel = loopCancel
	if n.repl, err = replication.New(loopCtx, n.replicationConfig(), replHost{n}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.deps, err = deps.New(loopCtx, n.depsConfig(), depsHost{n}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.startQUIC(); err != nil {
		return err
	}
	n.raftTr = raftTransport{peer.NewRaftCarrier(loopCtx, n.peers, n.addrOf, n.log)}
	if err := n.startMember(); err != nil {
		return err
	}
	if err := n.startRaft(ctx); err != nil {
		return err
	}
	n.refreshMeta()
	// Gossip from the registry now, before this node leads anything: it
	// must see its cluster (and its clock be checked against it) first.
	n.wg.Go(func() { n.rejoinLoop(loopCtx) })
	if err := n.checkAway(); err != nil {
		return err
	}
	n.nextDue.Store(0) // tick once right after the load
	if err := n.loadPartitions(); err != nil {
		return err
	}
	close(n.partsLoaded)
	if err := n.deps.Load(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// The reservation (startIDs) covers every id issued; the ids held
	// are a second floor, for a data dir from before reservations.
	for _, r := range n.parts {
		n.ids.After(r.MaxOwnID())
	}
	// The clock is judged before this node leads anything.
	n.ctl.StartClock(loopCtx)
	n.ctl.AwaitClock(ctx)
	if err := n.ctl.ElectLeaders(ctx); err != nil {
		return err
	}
	n.wg.Go(func() { n.tickLoop(loopCtx) })
	n.wg.Go(func() { n.reconcileLoop(loopCtx) })
	n.wg.Go(func() { n.metaLoop(loopCtx) })
	n.ctl.Start(loopCtx) // voters, failover, placement, zombies
	n.wg.Go(func() { n.repl.AAELoop(loopCtx) })
	n.wg.Go(func() { n.repl.GCLoop(loopCtx) })
	n.wg.Go(func() { n.aliveLoop(loopCtx) })
	n.wg.Go(func() { n.summaryLoop(loopCtx) })
	n.pressure = pressure.New(n.cfg.WALMinSyncInterval, pressureHost{n}, n.log)
	n.wg.Go(func() { n.pressure.Run(loopCtx) })
	if !n.cfg.NoListen {
		if err := n.serveHTTP(); err != nil {
			return err
		}
	}
	n.deps.Reconcile()
	n.ready.Store(true)
	n.log.Info("serving", "addr", n.addr, "partitions", n.cfg.Partitions, "startup", time.Since(began).Round(time.Millisecond))
	return nil
}

// Addr returns the address the node serves on (UDP and TCP, one port).
func (n *Node) Addr() string { return n.addr }

// Service returns the client API as QUIC and HTTP clients reach it: the
// coordinator, which retries while the cluster moves, behind the request
// metrics. In-process clients (the simulation, with Config.NoListen) call
// it; it is valid after Start returned.
func (n *Node) Service() wire.Service { return n.metrics.Meter(coordinator{n}) }

// Config returns the node's configuration; after Start, Partitions and
// Replicas are the cluster's.
func (n *Node) Config() Config { return n.cfg }

// ID returns the node's id.
func (n *Node) ID() uint64 { return n.id }

// startQUIC starts the QUIC server: the peer protocol from now on, the
// client API once the node is ready (its ops refuse before). With
// Config.NoListen there is no server: the client API is Service, and
// peers reach the node on Config.PeerNet only.
func (n *Node) startQUIC() error {
	n.clientHandler = wire.ServiceHandler(n.metrics.Meter(coordinator{n}))
	n.peerClientHandler = wire.ServiceHandler(n)
	// Peer traffic goes over QUIC, or over Config.PeerNet: then the QUIC
	// server serves clients only.
	peerSide := n.peerHandlers()
	var tr peer.Transport
	if !n.cfg.NoListen {
		srv, err := n.newQUICServer(peerSide)
		if err != nil {
			return err
		}
		n.quicSrv = srv
		tr = peer.QUIC{Server: srv, Config: wire.ClientConfig{Streams: peerStreams, DialTimeout: peerDialTimeout}}
		n.wg.Go(func() {
			if err := srv.Serve(n.udp); err != nil {
				n.log.Error("quic server stopped", "err", err)
			}
		})
	}
	if pn := n.cfg.PeerNet; pn != nil {
		end, err := pn.Attach(n.addr, n.id, peerSide)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.peerEnd, tr = end, end
	}
	n.peers = peer.NewPool(n.cfg.Faults.Wrap(tr), peerDialTimeout, peerCallTimeout)
	return nil
}

// newQUICServer returns the QUIC server of the client API and, unless the
// node uses Config.PeerNet, of peerSide.
func (n *Node) newQUICServer(peerSide peer.Handlers) (*wire.Server, error) {
	cert, err := wire.SelfSignedCert()
	if err != nil {
		return nil, fmt.Errorf("node: tls: %w", err)
	}
	var keys wire.Keys
	if n.cfg.ClusterSecret != nil {
		if keys, err = wire.DeriveKeys(n.cfg.ClusterSecret); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	handlers := peerSide
	if n.cfg.PeerNet != nil {
		handlers = peer.Handlers{}
	}
	srv, err := wire.NewServer(wire.ServerConfig{
		TLS:      wire.ServerTLS(cert),
		Logger:   n.log,
		ResetKey: &n.resetKey,
		NodeID:   n.id,
		Keys:     keys,
		// In tests a handler's panic fails the test (invariant's rule).
		RethrowPanics: testing.Testing(),
		PeerHandler:   handlers.Peer,
		RawHandler:    handlers.Raw,
	}, n.clientHandler)
	if err != nil {
		return nil, fmt.Errorf("node: quic server: %w", err)
	}
	return srv, nil
}

// serveHTTP starts the HTTP server.
func (n *Node) serveHTTP() error {
	var handler http.Handler = httpapi.New(n.metrics.Meter(coordinator{n}), n.health, n.log)
	{
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("GET /metrics", n.metrics)
		handler = mux
	}
	// The test hooks first: pprof's own /debug/pprof/ then takes
	// precedence over their /debug/.
	if n.cfg.Debug != nil {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/debug/", n.cfg.Debug)
		handler = mux
	}
	if n.cfg.Pprof {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
	}
	if f := n.cfg.Faults; f != nil {
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := f.Gate(r.Context()); err != nil {
				return // the client went away while the node was frozen
			}
			inner.ServeHTTP(w, r)
		})
	}
	// With a secret every endpoint but /healthz (pprof included) needs
	// the client token.
	if n.cfg.ClusterSecret != nil {
		keys, err := wire.DeriveKeys(n.cfg.ClusterSecret)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		handler = httpapi.RequireToken(handler, wire.FormatToken(keys.ClientToken))
	}
	n.httpSrv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
	}
	n.wg.Go(func() {
		if err := n.httpSrv.Serve(n.tcp); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	})
	return nil
}

// HTTP server timeouts: a slow client must not hold a connection forever.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 2 * time.Minute
)

// health reports why the node cannot serve, or nil.
func (n *Node) health() error {
	switch {
	case n.stopping.Load():
		return wire.ErrShuttingDown
	case !n.ready.Load():
		return fmt.Errorf("%w: starting", wire.ErrUnavailable)
	}
	if drifting, reason := n.drifting(); drifting {
		return fmt.Errorf("%w: this node's clock is not trusted: %s", wire.ErrUnavailable, reason)
	}
	// Healthy when this node leads every partition the registry says it
	// leads.
	meta := n.raft.Meta()
	for _, r := range n.parts {
		if p := int(r.Part()); p < len(meta.Partitions) && meta.Partitions[p].Leader == n.id && r.Epoch() == 0 {
			return fmt.Errorf("%w: partition %d has no leader here", wire.ErrUnavailable, r.Part())
		}
	}
	return nil
}

// Close stops serving, waits for in-flight requests (up to
// ShutdownTimeout), and closes everything. Safe to call more than once.
func (n *Node) Close() error {
	n.shutdown()
	return nil
}

// Kill stops the node the way a crash looks to its peers: it goes silent.
// Its socket closes first, so no gossip leave and no QUIC close reaches
// them: they find it dead by probing, and requests they sent it wait as
// they would for a machine that lost power. (Everything acknowledged is
// durable either way.) Tests use it for kill -9 in one process.
func (n *Node) Kill() error {
	n.killed.Store(true)
	if n.udp != nil {
		_ = n.udp.Close()
	}
	if n.peerEnd != nil {
		_ = n.peerEnd.Close()
	}
	n.shutdown()
	return nil
}

func (n *Node) shutdown() {
	n.closed.Do(func() {
		n.stopping.Store(true)
		close(n.stopc)
		n.ready.Store(false)
		if n.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
			if err := n.httpSrv.Shutdown(ctx); err != nil {
				n.log.Warn("http shutdown", "err", err)
			}
			cancel()
		} else if n.tcp != nil {
			_ = n.tcp.Close()
		}
		// Hand the partitions this node leads to other members, then tell
		// the others we leave, while the transport still works.
		n.departing.Store(true)
		if !n.killed.Load() && n.member != nil && n.raftGroup() != nil && n.parts != nil {
			if moved, failed := n.ctl.HandOffAll(context.Background()); moved+failed > 0 {
				n.log.Info("handed off partitions", "moved", moved, "failed", failed)
			}
		}
		if n.member != nil && !n.killed.Load() {
			if err := n.member.Leave(n.cfg.LeaveTimeout); err != nil {
				n.log.Warn("gossip leave", "err", err)
			}
		}
		if n.cancel != nil {
			n.cancel() // loops and raft senders
		}
		if n.raftTr.RaftCarrier != nil {
			n.raftTr.Wait()
		}
		if n.repl != nil {
			n.repl.Wait()
		}
		if n.deps != nil {
			n.deps.Wait()
		}
		if n.member != nil {
			if err := n.member.Shutdown(); err != nil {
				n.log.Warn("gossip shutdown", "err", err)
			}
		}
		if n.peers != nil {
			n.peers.Close()
		}
		if n.peerEnd != nil {
			_ = n.peerEnd.Close()
		}
		if n.quicSrv != nil {
			if err := n.quicSrv.Close(); err != nil {
				n.log.Warn("quic shutdown", "err", err)
			}
		}
		if n.udp != nil {
			_ = n.udp.Close()
		}
		n.wg.Wait()
		if n.ctl != nil {
			n.ctl.Wait()
		}
		for _, r := range n.parts {
			if r != nil {
				r.Resign()
			}
		}
		if n.raft != nil {
			if err := n.raft.Close(); err != nil {
				n.log.Warn("raft close", "err", err)
			}
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				n.log.Warn("store close", "err", err)
			}
		}
		n.log.Info("stopped")
	})
}
