package node

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// Cluster plumbing: the peer connections, the peer protocol's handler,
// raft and gossip over them, joining, and the shape of the metadata group.

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

// addrOf returns the address of node id: from gossip, else from the
// metadata registry, else "" when unknown.
func (n *Node) addrOf(id uint64) string {
	if m := n.gossip(); m != nil {
		if addr, _, ok := m.Lookup(id); ok && addr != "" {
			return addr
		}
	}
	if g := n.raftGroup(); g != nil {
		if mem, ok := g.Meta().Members[id]; ok {
			return mem.Addr
		}
	}
	n.learnedMu.Lock()
	defer n.learnedMu.Unlock()
	return n.learned[id]
}

// learn records where a peer that proved its id called from: a joining
// node hears from the metadata leader before it has applied the registry
// entry that names the leader's address.
func (n *Node) learn(id uint64, remote net.Addr) {
	if id == 0 || remote == nil {
		return
	}
	n.learnedMu.Lock()
	n.learned[id] = remote.String()
	n.learnedMu.Unlock()
}

// raftGroup returns the metadata group once it exists (the peer handler
// can run before it does).
func (n *Node) raftGroup() *raftgroup.Group {
	select {
	case <-n.raftReady:
		return n.raft
	default:
		return nil
	}
}

// gossip returns the gossip member once it exists: the peer handlers run
// from the start of the transport, before it does (a peer's gossip can
// reach a restarting node first), and read it through here.
func (n *Node) gossip() *member.Member {
	select {
	case <-n.memberReady:
		return n.member
	default:
		return nil
	}
}

// peerHandlers returns what the node serves its peers with: each op's
// handler registered on a Mux, behind learn (where a peer that proved its
// id calls from) and the test faults.
func (n *Node) peerHandlers() peer.Handlers {
	mux := peer.NewMux()
	n.registerPeerOps(mux)
	h := wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		n.learn(req.PeerID, req.Remote)
		mux.Serve(ctx, req, w)
	})
	return n.cfg.Faults.WrapHandlers(peer.Handlers{Peer: h, Raw: n.rawHandler})
}

// registerPeerOps registers the handler of every peer op. Ops on
// partition replicas wait for the partitions to be loaded (loaded).
func (n *Node) registerPeerOps(mux *peer.Mux) {
	mux.HandleFunc(wire.OpRaft, n.serveRaft)
	mux.HandleFunc(wire.OpGossip, n.serveGossip)
	mux.Handle(wire.OpJoin, peer.Unary(func(ctx context.Context, req *wire.Request, j *wire.JoinRequest) (any, error) {
		return n.admit(ctx, req.PeerID, j.Addr)
	}))
	mux.Handle(wire.OpSummary, peer.Unary(func(_ context.Context, req *wire.Request, r *wire.Summary) (any, error) {
		n.serveSummary(req.PeerID, r)
		return nil, nil
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
	replica(wire.OpRelease, peer.Unary(func(_ context.Context, req *wire.Request, r *wire.ReleaseRequest) (any, error) {
		return nil, n.ctl.ServeRelease(req.PeerID, r)
	}))
	n.repl.Register(mux, n.loaded)
	n.deps.Register(mux, n.loaded)
	// The rest are client ops another node forwards: served here only.
	mux.Fallback(wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		if req.Op >= wire.OpRaft {
			_ = w.Error(wire.Errorf(wire.CodeUnknownOp, "unknown peer op %d", req.Op))
			return
		}
		n.peerClientHandler.Serve(withForwarded(ctx), req, w)
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

// serveRaft steps a batch of raft messages into the metadata group.
func (n *Node) serveRaft(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	var b wire.RaftBatch
	if err := wire.Unmarshal(req.Body, &b); err != nil {
		_ = w.Error(wire.Errorf(wire.CodeBadFrame, "raft batch: %v", err))
		return
	}
	g := n.raftGroup()
	if g == nil {
		_ = w.Error(fmt.Errorf("%w: metadata group not started", wire.ErrUnavailable))
		return
	}
	for _, m := range b.Msgs {
		if err := g.Step(ctx, m); err != nil {
			_ = w.Error(err)
			return
		}
	}
	_ = w.Reply(nil)
}

// serveGossip hands a gossip packet to member.
func (n *Node) serveGossip(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
	var p wire.GossipPacket
	if err := wire.Unmarshal(req.Body, &p); err != nil {
		_ = w.Error(wire.Errorf(wire.CodeBadFrame, "gossip packet: %v", err))
		return
	}
	if m := n.gossip(); m != nil {
		m.DeliverPacket(req.Remote.String(), p.Data)
	}
	_ = w.Reply(nil)
}

// rawHandler serves the raw streams peers open.
func (n *Node) rawHandler(_ context.Context, rs wire.RawStream) {
	m := n.gossip()
	switch {
	case rs.Kind == wire.RawGossip && m != nil:
		m.DeliverStream(rs.Conn)
	default:
		_ = rs.Close()
	}
}

// admit adds node id, reachable at addr, to the cluster: it registers it
// and makes it a learner of the metadata group (the metadata leader
// promotes learners to voters; see node/control's voter loop).
func (n *Node) admit(ctx context.Context, id uint64, addr string) (*wire.JoinResponse, error) {
	g := n.raftGroup()
	if g == nil || !n.ready.Load() {
		return nil, fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	if id == 0 || id == n.id {
		return nil, wire.Errorf(wire.CodeInvalid, "join: bad node id %d", id)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "join: address %q: %v", addr, err)
	}
	meta := g.Meta()
	if meta.Config == nil {
		return nil, fmt.Errorf("%w: cluster not initialised", wire.ErrUnavailable)
	}
	if old, ok := meta.Members[id]; !ok || old.Addr != addr {
		if err := g.PutMember(ctx, raftgroup.Member{ID: id, Addr: addr, Since: clock.UnixMilli(n.clock)}); err != nil {
			return nil, fmt.Errorf("join: register node %d: %w", id, err)
		}
	}
	if err := g.AddLearner(ctx, id); err != nil {
		return nil, fmt.Errorf("join: add node %d to the metadata group: %w", id, err)
	}
	n.log.Info("node joined", "peer", id, "addr", addr)
	return &wire.JoinResponse{ClusterID: meta.Config.ClusterID, Partitions: meta.Config.Partitions, Replicas: meta.Config.Replicas}, nil
}

// join asks the nodes in cfg.Join, in turn, to admit this node, until one
// does or ctx ends.
func (n *Node) join(ctx context.Context) (*wire.JoinResponse, error) {
	var last error
	for {
		for _, addr := range n.cfg.Join {
			if addr == n.addr {
				continue
			}
			var resp wire.JoinResponse
			err := n.peers.Call(ctx, addr, wire.OpJoin, &wire.JoinRequest{Addr: n.addr}, &resp)
			if err == nil {
				n.log.Info("joined the cluster", "through", addr, "cluster", resp.ClusterID)
				return &resp, nil
			}
			last = err
			n.log.Warn("join attempt failed", "through", addr, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("join %v: %w (last: %v)", n.cfg.Join, ctx.Err(), last)
		case <-time.After(n.cfg.JoinRetry):
		}
	}
}

// raftTransport is raftgroup.Transport over the peer carrier.
type raftTransport struct{ *peer.RaftCarrier }

// Send implements raftgroup.Transport.
func (t raftTransport) Send(msgs []raftgroup.Outbound) {
	for _, m := range msgs {
		if !t.RaftCarrier.Send(m.To, m.Data) {
			return
		}
	}
}

// startMember starts gossip and, when joining, contacts the join list.
func (n *Node) startMember() error {
	mc := member.DefaultConfig()
	if n.cfg.GossipProfile == "local" {
		mc = member.DefaultLocalConfig()
	}
	mc.ID = n.id
	mc.Addr = n.addr
	mc.Net = peer.GossipNet{Pool: n.peers}
	mc.Logger = n.log
	mc.OnChange = n.ctl.MembersChanged
	m, err := member.New(mc)
	if err != nil {
		return fmt.Errorf("node: gossip: %w", err)
	}
	n.member = m
	close(n.memberReady)
	return nil
}

// gossipJoin contacts the known members: the join list, and every node of
// the metadata registry (so a restarted node finds the cluster without
// --join).
func (n *Node) gossipJoin() {
	addrs := slices.Clone(n.cfg.Join)
	if g := n.raftGroup(); g != nil {
		for id, mem := range g.Meta().Members {
			if id != n.id && mem.Addr != "" {
				addrs = append(addrs, mem.Addr)
			}
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) == 0 {
		return
	}
	if k, err := n.member.Join(addrs); err != nil && k == 0 {
		n.log.Warn("gossip: could not reach any known member yet", "tried", addrs, "err", err)
	}
}

// rejoinLoop keeps gossip joined to the metadata registry's members
// (Config.RejoinInterval): a node restarted after a graceful leave, whom
// the others saw leave and no longer contact, finds them from what it
// stored whatever its flags, and two gossip islands that the registry
// knows as one cluster merge again.
func (n *Node) rejoinLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.RejoinInterval)
	defer t.Stop()
	for {
		n.rejoin()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rejoin asks gossip to join every registry member it does not see alive
// or suspect. Joining a member gossip knows does nothing; one that is
// down costs a failed attempt per interval.
func (n *Node) rejoin() {
	states := n.gossipStates()
	var addrs []string
	for id, mem := range n.raft.Meta().Members {
		if id == n.id || mem.Addr == "" {
			continue
		}
		if st := states[id]; st == member.Alive || st == member.Suspect {
			continue
		}
		addrs = append(addrs, mem.Addr)
	}
	if len(addrs) == 0 {
		return
	}
	slices.Sort(addrs)
	k, err := n.member.Join(addrs)
	n.log.Debug("gossip: joining registry members it does not see", "addrs", addrs, "reached", k, "err", err)
}

// Cluster answers `ctl cluster`.
func (n *Node) Cluster(context.Context) (*wire.ClusterResponse, error) {
	g := n.raftGroup()
	if g == nil {
		return nil, fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	meta := g.Meta()
	voters, learners := g.Config()
	resp := &wire.ClusterResponse{
		Self: n.id,
		Raft: wire.RaftView{Leader: g.Leader(), Voters: voters, Learners: learners, Applied: meta.Applied},
	}
	if meta.Config != nil {
		resp.ClusterID = meta.Config.ClusterID
	}
	role := func(id uint64) string {
		switch {
		case slices.Contains(voters, id):
			return "voter"
		case slices.Contains(learners, id):
			return "learner"
		}
		return "none"
	}
	seen := make(map[uint64]bool)
	if n.member != nil {
		for _, p := range n.member.Members() {
			seen[p.ID] = true
			resp.Members = append(resp.Members, wire.MemberView{ID: p.ID, Addr: p.Addr, State: p.State.String(), Raft: role(p.ID)})
		}
	}
	for id, mem := range meta.Members {
		if !seen[id] {
			state := "unknown"
			if id == n.id {
				state = "alive"
			}
			resp.Members = append(resp.Members, wire.MemberView{ID: id, Addr: mem.Addr, State: state, Raft: role(id)})
		}
	}
	slices.SortFunc(resp.Members, func(a, b wire.MemberView) int { return cmp.Compare(a.ID, b.ID) })
	for p, pi := range meta.Partitions {
		resp.Partitions = append(resp.Partitions, wire.PartitionView{Partition: p, Cohort: slices.Clone(pi.Cohort), Leader: pi.Leader, Epoch: pi.Epoch})
	}
	resp.Clock = n.clockView()
	resp.AAE = n.repl.AAEView()
	return resp, nil
}
