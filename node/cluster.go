package node

import (
	"context"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/node/membership"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// Cluster plumbing: the peer connections and the peer protocol's handler
// (membership, node/membership, owns raft, gossip and joining).

// Peer-protocol limits and timeouts.
const (
	// peerCallTimeout bounds one peer request (a raft batch, a gossip
	// packet, a join).
	peerCallTimeout = 5 * time.Second
	// peerDialTimeout bounds dialing a peer; a dead address costs this
	// long (QUIC ignores ICMP), so it stays short.
	peerDialTimeout = 2 * time.Second
	// peerStreams is the number of streams a peer connection spreads its
	// calls over (partition transfers have a stream of their own, see
	// wire.ClientConfig.Streams). Two, so raft messages and forwarded
	// requests need not wait behind a large replication frame; replication
	// keeps one request in flight per follower, so it batches as well on
	// two as on one (measured: no difference in datagrams or CPU per task).
	peerStreams = 2
)

// raftGroup returns the metadata group once it exists (the peer handlers
// and shutdown can run before it does).
func (n *Node) raftGroup() *raftgroup.Group {
	if n.ms == nil {
		return nil
	}
	return n.ms.Group()
}

// membershipConfig is membership's part of the node's configuration
// (validated with it), once the node knows its id and address.
func (n *Node) membershipConfig() membership.Config {
	return membership.Config{
		Self: n.id, Addr: n.addr, Join: n.cfg.Join, JoinRetry: n.cfg.JoinRetry,
		RejoinInterval: n.cfg.RejoinInterval, LocalGossip: n.cfg.GossipProfile == "local", RaftTick: n.cfg.RaftTick,
		Partitions: n.cfg.Partitions, Replicas: n.cfg.Replicas, Store: n.store,
		Ready: n.ready.Load, OnChange: n.ctl.MembersChanged,
		Clock: n.clock, Log: n.log, RaftLog: n.cfg.Logger, Version: n.supports(),
	}
}

// peerHandlers returns what the node serves its peers with: each op's
// handler registered on a Mux, behind learn (where a peer that proved its
// id calls from) and the test faults.
func (n *Node) peerHandlers() peer.Handlers {
	mux := peer.NewMux()
	n.registerPeerOps(mux)
	h := wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		n.ms.Learn(req.PeerID, req.Remote)
		mux.Serve(ctx, req, w)
	})
	return n.cfg.Faults.WrapHandlers(peer.Handlers{Peer: h, Raw: n.ms.RawHandler})
}

// registerPeerOps registers the handler of every peer op. Ops on
// partition replicas wait for the partitions to be loaded (loaded).
func (n *Node) registerPeerOps(mux *peer.Mux) {
	n.ms.Register(mux)
	mux.Handle(wire.OpSummary, peer.Unary(func(_ context.Context, req *wire.Request, r *wire.Summary) (any, error) {
		n.serveSummary(req.PeerID, r)
		return nil, nil
	}))
	mux.Handle(wire.OpBuildInfo, peer.Unary(func(context.Context, *wire.Request, *wire.BuildInfoRequest) (any, error) {
		return n.buildInfo(), nil
	}))
	replica := func(op wire.Op, h wire.Handler) { mux.Handle(op, n.loaded(h)) }
	replica(wire.OpPromise, peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.PromiseRequest) (any, error) {
		return n.ctl.ServePromise(r)
	}))
	replica(wire.OpTakeover, peer.Unary(func(ctx context.Context, _ *wire.Request, r *wire.TakeoverRequest) (any, error) {
		return nil, n.ctl.ServeTakeover(ctx, r)
	}))
	replica(wire.OpPull, peer.Unary(func(ctx context.Context, _ *wire.Request, r *wire.PullRequest) (any, error) {
		return n.ctl.ServePull(ctx, r)
	}))
	replica(wire.OpRelease, peer.Unary(func(ctx context.Context, req *wire.Request, r *wire.ReleaseRequest) (any, error) {
		return nil, n.ctl.ServeRelease(ctx, req.PeerID, r)
	}))
	replica(wire.OpAbandoned, peer.Unary(func(_ context.Context, req *wire.Request, r *wire.AbandonedRequest) (any, error) {
		return nil, n.ctl.ServeAbandoned(req.PeerID, r)
	}))
	n.repl.Register(mux, n.loaded)
	n.deps.Register(mux, n.loaded)
	replica(wire.OpHintPut, peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.HintPutRequest) (any, error) {
		// The hints plane exists once the coordinator plane does (Start).
		if n.coord.Load() == nil {
			return nil, errStarting
		}
		return nil, n.hints.ServePut(r)
	}))
	// The rest are client ops another node forwards: served here only.
	mux.Fallback(wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		if req.Op >= wire.OpRaft {
			_ = w.Error(wire.Errorf(wire.CodeUnknownOp, "unknown peer op %d", req.Op))
			return
		}
		n.serveForwarded(ctx, req, w)
	}))
}

// loaded refuses h's requests until the node has loaded its partitions.
func (n *Node) loaded(h wire.Handler) wire.Handler {
	return wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		select {
		case <-n.partsLoaded:
			h.Serve(ctx, req, w)
		default:
			_ = w.Error(fmt.Errorf("%w: node is starting (partitions not loaded)", wire.ErrUnavailable))
		}
	})
}

// clusterView answers `ctl cluster`: membership's view, with this node's
// clock and anti-entropy.
func (n *Node) clusterView() (*wire.ClusterResponse, error) {
	if n.ms == nil {
		return nil, fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	resp, err := n.ms.View()
	if err != nil {
		return nil, err
	}
	resp.Clock = n.clockView()
	resp.AAE = n.repl.AAEView()
	return resp, nil
}
