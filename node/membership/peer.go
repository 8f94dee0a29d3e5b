package membership

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// The peer side: the ops membership serves (raft batches, gossip packets
// and streams, joins) and the join it asks for.

// Register registers membership's peer ops on mux.
func (m *Membership) Register(mux *peer.Mux) {
	mux.HandleFunc(wire.OpRaft, m.serveRaft)
	mux.HandleFunc(wire.OpGossip, m.serveGossip)
	mux.Handle(wire.OpJoin, peer.Unary(func(ctx context.Context, req *wire.Request, j *wire.JoinRequest) (any, error) {
		return m.admit(ctx, req.PeerID, j.Addr)
	}))
}

// serveRaft steps a batch of raft messages into the metadata group.
func (m *Membership) serveRaft(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	var b wire.RaftBatch
	if err := wire.Unmarshal(req.Body, &b); err != nil {
		_ = w.Error(wire.Errorf(wire.CodeBadFrame, "raft batch: %v", err))
		return
	}
	g := m.Group()
	if g == nil {
		_ = w.Error(fmt.Errorf("%w: metadata group not started", wire.ErrUnavailable))
		return
	}
	for _, msg := range b.Msgs {
		if err := g.Step(ctx, msg); err != nil {
			_ = w.Error(err)
			return
		}
	}
	_ = w.Reply(nil)
}

// serveGossip hands a gossip packet to member.
func (m *Membership) serveGossip(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
	var p wire.GossipPacket
	if err := wire.Unmarshal(req.Body, &p); err != nil {
		_ = w.Error(wire.Errorf(wire.CodeBadFrame, "gossip packet: %v", err))
		return
	}
	if g := m.Gossip(); g != nil {
		g.DeliverPacket(req.Remote.String(), p.Data)
	}
	_ = w.Reply(nil)
}

// RawHandler serves the raw streams peers open: gossip's.
func (m *Membership) RawHandler(_ context.Context, rs wire.RawStream) {
	g := m.Gossip()
	switch {
	case rs.Kind == wire.RawGossip && g != nil:
		g.DeliverStream(rs.Conn)
	default:
		_ = rs.Close()
	}
}

// admit adds node id, reachable at addr, to the cluster: it registers it
// and makes it a learner of the metadata group (the metadata leader
// promotes learners to voters; see node/control's voter loop).
func (m *Membership) admit(ctx context.Context, id uint64, addr string) (*wire.JoinResponse, error) {
	g := m.Group()
	if g == nil || !m.cfg.Ready() {
		return nil, fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	if id == 0 || id == m.cfg.Self {
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
		if err := g.PutMember(ctx, raftgroup.Member{ID: id, Addr: addr, Since: clock.UnixMilli(m.cfg.Clock)}); err != nil {
			return nil, fmt.Errorf("join: register node %d: %w", id, err)
		}
	}
	if err := g.AddLearner(ctx, id); err != nil {
		return nil, fmt.Errorf("join: add node %d to the metadata group: %w", id, err)
	}
	m.log.Info("node joined", "peer", id, "addr", addr)
	return &wire.JoinResponse{ClusterID: meta.Config.ClusterID, Partitions: meta.Config.Partitions, Replicas: meta.Config.Replicas}, nil
}

// join asks the nodes in Config.Join, in turn, to admit this node, until
// one does or ctx ends.
func (m *Membership) join(ctx context.Context, pool *peer.Pool) (*wire.JoinResponse, error) {
	var last error
	for {
		for _, addr := range m.cfg.Join {
			if addr == m.cfg.Addr {
				continue
			}
			var resp wire.JoinResponse
			err := pool.Call(ctx, addr, wire.OpJoin, &wire.JoinRequest{Addr: m.cfg.Addr}, &resp)
			if err == nil {
				m.log.Info("joined the cluster", "through", addr, "cluster", resp.ClusterID)
				return &resp, nil
			}
			last = err
			m.log.Warn("join attempt failed", "through", addr, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("membership: join %v: %w (last: %v)", m.cfg.Join, ctx.Err(), last)
		case <-time.After(m.cfg.JoinRetry):
		}
	}
}

// View is `ctl cluster`'s view of the membership: the metadata group,
// every member gossip or the registry knows with its gossip state and
// raft role, and the placement. The node adds its clock and
// anti-entropy views.
func (m *Membership) View() (*wire.ClusterResponse, error) {
	g := m.Group()
	if g == nil {
		return nil, fmt.Errorf("%w: node is starting", wire.ErrUnavailable)
	}
	meta := g.Meta()
	voters, learners := g.Config()
	resp := &wire.ClusterResponse{
		Self: m.cfg.Self, ClusterVersion: uint32(meta.Version()),
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
	if gm := m.Gossip(); gm != nil {
		for _, p := range gm.Members() {
			seen[p.ID] = true
			state := p.State.String()
			if meta.Removed[p.ID] {
				state = "removed" // started again after its removal
			}
			resp.Members = append(resp.Members, wire.MemberView{ID: p.ID, Addr: p.Addr, State: state, Raft: role(p.ID), Retiring: meta.Retiring[p.ID]})
		}
	}
	for id, mem := range meta.Members {
		if !seen[id] {
			state := "unknown"
			if id == m.cfg.Self {
				state = "alive"
			}
			resp.Members = append(resp.Members, wire.MemberView{ID: id, Addr: mem.Addr, State: state, Raft: role(id), Retiring: meta.Retiring[id]})
		}
	}
	slices.SortFunc(resp.Members, func(a, b wire.MemberView) int { return cmp.Compare(a.ID, b.ID) })
	for p, pi := range meta.Partitions {
		resp.Partitions = append(resp.Partitions, wire.PartitionView{Partition: p, Cohort: slices.Clone(pi.Cohort), Leader: pi.Leader, Epoch: pi.Epoch})
	}
	return resp, nil
}
