package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/control"
	"github.com/skuldd/skuldd/node/metrics"
	"github.com/skuldd/skuldd/node/peer"
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
	pressure pressureState // whether the store holds busy syncs (pressure.go)
	raft     *raftgroup.Group
	parts    []*partition.Replica
	fresh    *partition.FreshBudget // the replicas' claim cache; nil: none
	heads    *headIndex
	deps     *depSet
	ids      *task.IDGen

	// Cluster plumbing (cluster.go). raftReady is closed once raft is set;
	// the peer handler may run before that.
	member *member.Member
	peers  *peer.Pool
	// peerEnd is the node on Config.PeerNet, when it uses one.
	peerEnd *peer.MemEndpoint
	raftTr  raftTransport
	// repl is the replication data plane (node/replication).
	repl      *replication.Plane
	sums      summaries
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
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, heads: newHeadIndex(), deps: newDepSet(), stopc: make(chan struct{}),
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
	if err := n.store.DepTargets(n.deps.add); err != nil {
		return fmt.Errorf("node: load dependency edges: %w", err)
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
	n.wg.Go(func() { n.pressureLoop(loopCtx) })
	if !n.cfg.NoListen {
		if err := n.serveHTTP(); err != nil {
			return err
		}
	}
	n.reconcileDeps()
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

// idReserveAhead is how far past an id's millisecond the node records
// that its ids may reach: one synced write per this much time of issuing.
const idReserveAhead = 2 * time.Second

// startIDs starts the id generator past every id this node may have
// issued before (the reservation it recorded), and makes it record
// reservations from now on. Never issue an id twice, even if the clock was
// set back across a restart: a reissued id would conflict with, or for a
// forwarded fresh id overwrite, the task that holds it, in any partition.
func (n *Node) startIDs() error {
	n.ids = task.NewIDGen(n.id, n.clock)
	ms, found, err := n.store.IDReservation()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if found {
		n.ids.After(task.MakeID(ms, n.id, math.MaxUint32))
	}
	n.ids.Reserve(func(ms int64) error {
		err := n.store.PutIDReservation(ms)
		if err != nil {
			n.log.Error("recording the id reservation failed", "err", err)
		}
		return err
	}, idReserveAhead.Milliseconds())
	return nil
}

func (n *Node) openStore() error {
	dir := filepath.Join(n.cfg.DataDir, "store")
	sc := store.DefaultConfig(dir)
	sc.Logger = n.cfg.Logger
	// No hold until pressureLoop finds the CPU contended.
	sc.WALMinSyncInterval = 0
	sc.NoWALZeroAhead = n.cfg.NoWALZeroAhead
	if n.cfg.StoreFS != nil {
		sc.FS = n.cfg.StoreFS
	}
	s, err := store.Open(sc)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.store = s
	meta, err := s.NodeMeta()
	switch {
	case errors.Is(err, store.ErrNotFound):
		meta = store.NodeMeta{NodeID: newNodeID(), CreatedAt: clock.UnixMilli(n.clock)}
	case err != nil:
		return fmt.Errorf("node: read identity: %w", err)
	}
	if len(meta.ResetKey) != len(n.resetKey) {
		meta.ResetKey = make([]byte, len(n.resetKey))
		_, _ = rand.Read(meta.ResetKey)
		if err := s.PutNodeMeta(meta); err != nil {
			return fmt.Errorf("node: save identity: %w", err)
		}
	}
	copy(n.resetKey[:], meta.ResetKey)
	n.id = meta.NodeID
	return nil
}

// newNodeID returns a random non-zero id. Node ids are durable and never
// reused (raft requires it), so they are random rather than derived from an
// address.
func newNodeID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]) >> 1; id != 0 {
			return id // kept below 2^63 so it survives JSON number decoders
		}
	}
}

// bind opens UDP (QUIC) and TCP (HTTP) on one port number. With port 0,
// UDP picks the port and TCP takes the same number.
func (n *Node) bind() error {
	udp, err := net.ListenPacket("udp", n.cfg.Bind)
	if err != nil {
		return fmt.Errorf("node: bind udp %s: %w", n.cfg.Bind, err)
	}
	n.udp = udp
	host, _, _ := net.SplitHostPort(n.cfg.Bind)
	port := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
	addr := net.JoinHostPort(host, port)
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node: bind tcp %s: %w", addr, err)
	}
	n.tcp = tcp
	n.addr = addr
	if a := n.cfg.Advertise; a != "" {
		ahost, aport, _ := net.SplitHostPort(a)
		if aport == "0" {
			aport = port
		}
		n.addr = net.JoinHostPort(ahost, aport)
	} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		n.addr = net.JoinHostPort(hostIP(), port)
		n.log.Info("advertising a host address for the wildcard bind (set --advertise to choose)", "addr", n.addr)
	}
	return nil
}

// hostIP returns the first non-loopback IPv4 address of the host's
// interfaces, or 127.0.0.1 when there is none.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(p.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
					return ip.Unmap().String()
				}
			}
		}
	}
	return "127.0.0.1"
}

func (n *Node) startRaft(ctx context.Context) error {
	rc := raftgroup.DefaultConfig()
	rc.NodeID = n.id
	// With a join list a node with no raft state waits to be added by the
	// cluster; without one it founds a cluster of one. A node with raft
	// state ignores Peers and comes back as what it was.
	if len(n.cfg.Join) == 0 {
		rc.Peers = []uint64{n.id}
	}
	rc.TickInterval = n.cfg.RaftTick
	rc.Store = n.store
	rc.Transport = n.raftTr
	rc.Logger = n.cfg.Logger // the group adds the node id itself
	g, err := raftgroup.New(rc)
	if err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	if err := g.Start(); err != nil {
		return fmt.Errorf("node: raft start: %w", err)
	}
	n.raft = g
	// Fresh: this node never took part in the metadata group (no raft
	// state). Not "no config applied yet": a restarted node applies its
	// committed entries again after Start returns, and one that took
	// itself for new would wait to be admitted through its join list,
	// which may be a node restarting too, that waits for it.
	fresh := !g.Restored()
	close(n.raftReady)
	// Gossip first: a restarted member finds its peers' addresses there
	// and in the registry it kept.
	n.gossipJoin()
	if fresh && len(n.cfg.Join) > 0 {
		if _, err := n.join(ctx); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := g.WaitLeader(ctx); err != nil {
		return fmt.Errorf("node: waiting for a metadata leader: %w", err)
	}
	var cc raftgroup.ClusterConfig
	if joined := fresh && len(n.cfg.Join) > 0; joined {
		c, err := n.waitConfig(ctx)
		if err != nil {
			return err
		}
		cc = *c
	} else {
		// Founding, or restarting: Init is idempotent and refuses flags
		// that disagree with the cluster's fixed P and N.
		cc, err = g.Init(ctx, raftgroup.ClusterConfig{
			ClusterID:  newClusterID(),
			Partitions: n.cfg.Partitions,
			Replicas:   n.cfg.Replicas,
			CreatedAt:  clock.UnixMilli(n.clock),
		})
		if err != nil {
			return fmt.Errorf("node: cluster config (the partition and replica counts are fixed when the cluster is created): %w", err)
		}
	}
	// A joiner takes the cluster's P and N, whatever its flags say.
	n.cfg.Partitions, n.cfg.Replicas = cc.Partitions, cc.Replicas
	if mem, ok := g.Meta().Members[n.id]; !ok || mem.Addr != n.addr {
		if err := g.PutMember(ctx, raftgroup.Member{ID: n.id, Addr: n.addr, Since: clock.UnixMilli(n.clock)}); err != nil {
			return fmt.Errorf("node: register: %w", err)
		}
	}
	n.log.Info("metadata group ready", "cluster", cc.ClusterID, "partitions", cc.Partitions, "replicas", cc.Replicas)
	return nil
}

// waitConfig waits until this node applied the cluster config (a joiner
// gets it from the metadata leader's log or snapshot).
func (n *Node) waitConfig(ctx context.Context) (*raftgroup.ClusterConfig, error) {
	for {
		ch := n.raft.Changed()
		if c := n.raft.Meta().Config; c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: waiting for the cluster config from the metadata group: %w", ctx.Err())
		case <-ch:
		}
	}
}

func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// loadPartitions creates the replicas and rebuilds their indexes from the
// store, on as many goroutines as there are CPUs.
func (n *Node) loadPartitions() error {
	n.parts = make([]*partition.Replica, n.cfg.Partitions)
	// One claim cache budget for all the replicas: only those this node
	// leads fill it, and which those are changes with the cluster.
	n.fresh = partition.NewFreshBudget(n.cfg.FreshSpecBytes)
	for p := range n.parts {
		n.parts[p] = partition.New(partition.Config{
			Part:       uint16(p),
			Partitions: n.cfg.Partitions,
			Self:       n.id,
			Store:      n.store,
			SkewBound:  n.cfg.SkewBound,
			TreeShape:  n.cfg.AAE.Shape,
			RetryBase:  n.cfg.RetryBase,
			RetryMax:   n.cfg.RetryMax,
			Logger:     n.log,
			OnHead:     n.heads.set,
			OnTimer:    n.noteTimer,
			Fresh:      n.fresh,
		})
	}
	now := clock.UnixMilli(n.clock)
	work := make(chan *partition.Replica, len(n.parts))
	for _, r := range n.parts {
		work <- r
	}
	close(work)
	errs := make(chan error, len(n.parts))
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for r := range work {
				if err := r.Load(now); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

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

// tickLoop moves due timers (delays, claim expiries) every TickInterval.
func (n *Node) tickLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.tick(clock.UnixMilli(n.clock))
		}
	}
}

// noteTimer lowers nextDue to due: the partitions' OnTimer callback.
func (n *Node) noteTimer(due int64) {
	for {
		cur := n.nextDue.Load()
		if due >= cur || n.nextDue.CompareAndSwap(cur, due) {
			return
		}
	}
}

// tick moves every partition's due timers and recomputes nextDue.
func (n *Node) tick(now int64) {
	if drifting, _ := n.drifting(); drifting {
		return // no expiry by a clock that is ahead; the clock loop reruns them
	}
	n.tickMu.Lock()
	defer n.tickMu.Unlock()
	// Reset first: timers set while the partitions are walked lower it
	// again through noteTimer, so none is missed.
	n.nextDue.Store(math.MaxInt64)
	for _, r := range n.parts {
		r.Tick(now)
		if due, ok := r.NextDue(); ok {
			n.noteTimer(due)
		}
	}
}

// catchUp runs the timers that are due before a request looks at states,
// so what a claim, a count or a get sees agrees to the millisecond rather
// than to the tick.
func (n *Node) catchUp() {
	if now := n.now(); now >= n.nextDue.Load() {
		n.tick(now)
	}
}

// refreshMeta caches what requests need from the metadata group.
func (n *Node) refreshMeta() {
	m := n.raft.Meta()
	if m.Config == nil {
		return
	}
	// Writes are acknowledged by the partition's cohort as placed in the
	// registry; the smallest cohort bounds what a request may ask for.
	size := m.Config.Replicas
	np := len(m.Partitions)
	pl := &placementView{cohorts: make([][]uint64, np), leaders: make([]uint64, np), epochs: make([]uint64, np)}
	for i, p := range m.Partitions {
		if len(p.Cohort) > 0 {
			size = min(size, len(p.Cohort))
		}
		pl.cohorts[i], pl.leaders[i], pl.epochs[i] = p.Cohort, p.Leader, p.Epoch
	}
	n.placement.Store(pl)
	n.cohort.Store(int32(max(1, size)))
}

// metaLoop refreshes the cached metadata after every change.
func (n *Node) metaLoop(ctx context.Context) {
	for {
		ch := n.raft.Changed()
		n.refreshMeta()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// reconcileLoop re-checks blocked tasks' deps every ReconcileInterval.
func (n *Node) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.reconcileDeps()
		}
	}
}

// placementView is the registry's placement as refreshMeta last saw it.
type placementView struct {
	cohorts [][]uint64 // by partition; shared, never modified
	leaders []uint64   // by partition; 0: none
	epochs  []uint64   // by partition: the registry's epoch
}

// leaders returns the registry's leader of every partition, from the copy
// refreshMeta keeps (a request never copies the metadata group's state).
// The slice is shared: callers must not modify it.
func (n *Node) leaders() []uint64 {
	if pl := n.placement.Load(); pl != nil {
		return pl.leaders
	}
	return nil
}
