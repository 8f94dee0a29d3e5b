package node

import (
	"context"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/node/access"
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
	"github.com/skuldd/skuldd/wire"
)

// A node's lifecycle: New, Start (which builds and wires every plane in
// order), Close and Kill.

// New validates cfg and returns a node that is not started.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	if err := controlConfig(cfg, 0).Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	n := &Node{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, heads: heads.NewIndex(), stopc: make(chan struct{}),
		leaving: make(chan struct{}), partsLoaded: make(chan struct{}),
		exitc: make(chan error, 1), reconcileSoon: make(chan struct{}, 1),
	}
	n.queues = queues.New(metaGroup{n}, queues.Bounds{MaxTTL: cfg.MaxTTL, MaxDelay: cfg.MaxDelay, MaxWait: cfg.MaxWait, MaxBatch: coord.MaxClaimCount})
	return n, nil
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
	if err := n.startAccess(); err != nil {
		return err
	}
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
	} else {
		if n.ln, err = listen.Bind(n.listenConfig()); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.addr = n.ln.Addr()
		// HTTP answers from now on: "starting" until SetAPI below.
		n.ln.ServeHTTP(n.probes())
	}
	if n.ms, err = membership.New(n.membershipConfig()); err != nil {
		return fmt.Errorf("node: %w", err)
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
	cc, err := n.ms.Start(ctx, loopCtx, n.peers)
	if err != nil {
		if why := n.refused.Load(); why != nil {
			// Say why nobody answers: the peers refuse this node.
			return fmt.Errorf("node: %w; the cluster's nodes refuse this one: %s", err, *why)
		}
		return fmt.Errorf("node: %w", err)
	}
	n.raft = n.ms.Group()
	if err := n.checkOwnVersion(); err != nil {
		return err
	}
	// A joiner takes the cluster's P and N, whatever its flags say.
	n.cfg.Partitions, n.cfg.Replicas = cc.Partitions, cc.Replicas
	n.refreshMeta()
	// Gossip from the registry now, before this node leads anything: it
	// must see its cluster (and its clock be checked against it) first.
	n.wg.Go(func() { n.ms.RejoinLoop(loopCtx) })
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
	if n.hints, err = hints.New(n.hintsConfig(), hintsHost{n}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.sched, err = schedules.New(n.schedulesConfig(), schedulesHost{n}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.shards, err = shards.New(n.shardsConfig(), shardsHost{n}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.startCoord(); err != nil {
		return err
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
	n.wg.Go(func() { n.hints.Loop(loopCtx) })
	n.wg.Go(func() { n.sched.Loop(loopCtx) })
	n.wg.Go(func() { n.shards.Loop(loopCtx) })
	n.wg.Go(func() { n.upgradeLoop(loopCtx) })
	n.pressure = pressure.New(n.cfg.WALMinSyncInterval, pressureHost{n}, n.log)
	n.wg.Go(func() { n.pressure.Run(loopCtx) })
	if n.ln != nil {
		n.ln.SetAPI(n.api.Load().client, n.probes(), n.metrics)
	}
	if n.deps.Reconcile() {
		n.reconcileSoonAfter()
	}
	n.ready.Store(true)
	n.log.Info("serving", "addr", n.addr, "http", n.httpURL(), "partitions", n.cfg.Partitions, "startup", time.Since(began).Round(time.Millisecond))
	return nil
}

// startAccess makes the registry of client credentials (node/access):
// empty, and putting off the credentials it does not know, until the
// node is ready.
func (n *Node) startAccess() error {
	ac := access.Config{Enabled: n.cfg.ClusterSecret != nil, Group: metaGroup{n}, Now: n.now, Ready: n.ready.Load, Log: n.log}
	if ac.Enabled {
		keys, err := wire.DeriveKeys(n.cfg.ClusterSecret)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		ac.ClusterToken = keys.ClientToken
	}
	n.access = access.New(ac)
	return nil
}

// httpURL is the base URL of the node's HTTP port ("": none).
func (n *Node) httpURL() string {
	switch {
	case n.ln == nil:
		return ""
	case n.ln.HTTPS():
		return "https://" + n.addr
	default:
		return "http://" + n.addr
	}
}

// startQUIC starts the QUIC server: the peer protocol from now on, the
// client API once the node is ready (its ops refuse before). With
// Config.NoListen there is no server: the client API is Service, and
// peers reach the node on Config.PeerNet only.
func (n *Node) startQUIC() error {
	// Peer traffic goes over QUIC, or over Config.PeerNet: then the QUIC
	// server serves clients only.
	peerSide := n.peerHandlers()
	var tr peer.Transport
	if n.ln != nil {
		quicPeers := peerSide
		if n.cfg.PeerNet != nil {
			quicPeers = peer.Handlers{} // the peer protocol goes over PeerNet
		}
		srv, err := n.ln.ServeQUIC(wire.HandlerFunc(n.serveClient), quicPeers)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		tr = peer.QUIC{Server: srv, Config: wire.ClientConfig{Streams: peerStreams, DialTimeout: peerDialTimeout}}
	}
	if pn := n.cfg.PeerNet; pn != nil {
		end, err := pn.Attach(n.addr, n.id, peerSide)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.peerEnd, tr = end, end
	}
	if tr != nil {
		tr = refusalWatch{tr, &n.refused}
	}
	n.peers = peer.NewPool(n.cfg.Faults.Wrap(tr), peerDialTimeout, peerCallTimeout)
	return nil
}

// listenConfig is node/listen's part of the node's configuration.
func (n *Node) listenConfig() listen.Config {
	lc := listen.Config{
		Bind: n.cfg.Bind, Advertise: n.cfg.Advertise, NodeID: n.id, ResetKey: &n.resetKey,
		ClusterSecret: n.cfg.ClusterSecret, TLSCert: n.cfg.TLSCert, TLSKey: n.cfg.TLSKey,
		Credentials: n.access.Keys, Authenticate: n.access.Authenticate, IsAdmin: n.access.IsAdmin,
		Pprof: n.cfg.Pprof, Debug: n.cfg.Debug, Log: n.log,
		AdmitPeer: n.admitPeer, MaxPeerVersion: n.cfg.MaxVersion,
	}
	if f := n.cfg.Faults; f != nil {
		lc.Gate = f.Gate
	}
	return lc
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
	if n.ln != nil {
		n.ln.Silence()
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
		if n.ln != nil {
			n.ln.Drain(n.cfg.ShutdownTimeout)
		}
		// The client ops still in flight (past the drain, forwarded by
		// peers, or called in-process) end before anything they act
		// through closes: an op that outlived the store would write to a
		// closed one.
		if c := n.coord.Load(); c != nil {
			c.Close()
		}
		// Hand the partitions this node leads to other members, then tell
		// the others we leave, while the transport still works.
		n.departing.Store(true)
		if !n.killed.Load() && n.raftGroup() != nil && n.parts != nil {
			if moved, failed := n.ctl.HandOffAll(context.Background()); moved+failed > 0 {
				n.log.Info("handed off partitions", "moved", moved, "failed", failed)
			}
		}
		if n.ms != nil && !n.killed.Load() {
			n.ms.Leave(n.cfg.LeaveTimeout)
		}
		if n.cancel != nil {
			n.cancel() // loops and raft senders
		}
		if n.repl != nil {
			n.repl.Wait()
		}
		if n.deps != nil {
			n.deps.Wait()
		}
		if n.ms != nil {
			n.ms.Stop()
		}
		if n.peers != nil {
			n.peers.Close()
		}
		if n.peerEnd != nil {
			_ = n.peerEnd.Close()
		}
		if n.ln != nil {
			n.ln.Close()
		}
		n.wg.Wait()
		if n.ctl != nil {
			n.ctl.Wait()
		}
		if n.hints != nil {
			n.hints.Close() // before the store: a request may still hint
		}
		for _, r := range n.parts {
			if r != nil {
				r.Resign()
			}
		}
		if n.ms != nil {
			n.ms.Close()
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				n.log.Warn("store close", "err", err)
			}
		}
		n.log.Info("stopped")
	})
}
