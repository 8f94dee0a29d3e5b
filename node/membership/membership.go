package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/store"
)

// Config configures a node's membership. Node fills it from its own
// Config (where the defaults live) once it knows its id and address.
type Config struct {
	// Self is this node's id; Addr the address it advertises.
	Self uint64
	Addr string
	// Join lists nodes to ask for admission when this node has no raft
	// state; empty: a node without raft state founds a cluster.
	Join []string
	// JoinRetry is the pause between rounds of join attempts.
	JoinRetry time.Duration
	// RejoinInterval is how often gossip is asked to join the registry's
	// members it does not see (RejoinLoop).
	RejoinInterval time.Duration
	// LocalGossip picks member's timing for one host (tests) instead of
	// a LAN's.
	LocalGossip bool
	// RaftTick is the metadata group's tick.
	RaftTick time.Duration
	// Partitions and Replicas are the counts a founding node proposes;
	// an existing cluster's win (Start returns them).
	Partitions, Replicas int
	// Store keeps the raft state.
	Store *store.Store
	// Ready reports whether the node serves: joiners are admitted only by
	// a node that does.
	Ready func() bool
	// OnChange is gossip's callback after the membership view changed.
	OnChange func()
	// Clock stamps registry entries.
	Clock clock.Clock
	// Log is the node's logger (with its id); RaftLog the one the group
	// gets (it adds the id itself).
	Log, RaftLog *slog.Logger
	// Version is the highest cluster version the node supports: a
	// cluster it founds starts at it.
	Version version.V
}

// Validate checks c.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Self != 0, "membership: no node id")
	check(c.Addr != "", "membership: no address")
	check(c.JoinRetry > 0, "membership: join retry %v: want > 0", c.JoinRetry)
	check(c.RejoinInterval > 0, "membership: rejoin interval %v: want > 0", c.RejoinInterval)
	check(c.RaftTick > 0, "membership: raft tick %v: want > 0", c.RaftTick)
	check(c.Partitions > 0 && c.Replicas > 0, "membership: partitions %d, replicas %d: want > 0", c.Partitions, c.Replicas)
	check(c.Store != nil, "membership: no store")
	check(c.Ready != nil, "membership: no readiness")
	check(c.Clock != nil, "membership: no clock")
	check(c.Log != nil && c.RaftLog != nil, "membership: no logger")
	return errors.Join(errs...)
}

// Membership is one node's part in its cluster. The peer ops it
// registers run from the start of the transport, before Start: they read
// the group and gossip through Group and Gossip, nil until then.
type Membership struct {
	cfg Config
	log *slog.Logger

	raft      *raftgroup.Group
	raftReady chan struct{} // closed once raft is set
	member    *member.Member
	gossipUp  chan struct{} // closed once member is set
	carrier   *peer.RaftCarrier

	learnedMu sync.Mutex
	learned   map[uint64]string // where peers that proved their id called from
}

// New validates cfg and returns a membership that has not started.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Membership{
		cfg: cfg, log: cfg.Log,
		raftReady: make(chan struct{}), gossipUp: make(chan struct{}),
		learned: make(map[uint64]string),
	}, nil
}

// Group returns the metadata group once it exists, else nil.
func (m *Membership) Group() *raftgroup.Group {
	select {
	case <-m.raftReady:
		return m.raft
	default:
		return nil
	}
}

// Gossip returns the gossip member once it exists, else nil: a peer's
// gossip can reach a restarting node before it started its own.
func (m *Membership) Gossip() *member.Member {
	select {
	case <-m.gossipUp:
		return m.member
	default:
		return nil
	}
}

// Start starts gossip and the metadata group over pool (raft's sender
// goroutines live until loopCtx ends), joins the cluster when this node
// is fresh and has a join list, or founds or restores it, and registers
// this node's address. It returns the cluster's config: a joiner takes
// its partition and replica counts, whatever its flags say. ctx bounds
// the start.
func (m *Membership) Start(ctx, loopCtx context.Context, pool *peer.Pool) (raftgroup.ClusterConfig, error) {
	if err := m.startGossip(pool); err != nil {
		return raftgroup.ClusterConfig{}, err
	}
	m.carrier = peer.NewRaftCarrier(loopCtx, pool, m.AddrOf, m.log)
	return m.startRaft(ctx, pool)
}

// startGossip starts gossip over pool.
func (m *Membership) startGossip(pool *peer.Pool) error {
	mc := member.DefaultConfig()
	if m.cfg.LocalGossip {
		mc = member.DefaultLocalConfig()
	}
	mc.ID = m.cfg.Self
	mc.Addr = m.cfg.Addr
	mc.Net = peer.GossipNet{Pool: pool}
	mc.Logger = m.log
	mc.OnChange = m.cfg.OnChange
	g, err := member.New(mc)
	if err != nil {
		return fmt.Errorf("membership: gossip: %w", err)
	}
	m.member = g
	close(m.gossipUp)
	return nil
}

// startRaft starts the metadata group and makes this node a registered
// member of a cluster with a config.
func (m *Membership) startRaft(ctx context.Context, pool *peer.Pool) (raftgroup.ClusterConfig, error) {
	var cc raftgroup.ClusterConfig
	rc := raftgroup.DefaultConfig()
	rc.NodeID = m.cfg.Self
	// With a join list a node with no raft state waits to be added by the
	// cluster; without one it founds a cluster of one. A node with raft
	// state ignores Peers and comes back as what it was.
	if len(m.cfg.Join) == 0 {
		rc.Peers = []uint64{m.cfg.Self}
	}
	rc.TickInterval = m.cfg.RaftTick
	rc.Store = m.cfg.Store
	rc.Transport = raftTransport{m.carrier}
	rc.Logger = m.cfg.RaftLog
	rc.FoundingVersion = m.cfg.Version
	g, err := raftgroup.New(rc)
	if err != nil {
		return cc, fmt.Errorf("membership: raft: %w", err)
	}
	if err := g.Start(); err != nil {
		return cc, fmt.Errorf("membership: raft start: %w", err)
	}
	m.raft = g
	// Fresh: this node never took part in the metadata group (no raft
	// state). Not "no config applied yet": a restarted node applies its
	// committed entries again after Start returns, and one that took
	// itself for new would wait to be admitted through its join list,
	// which may be a node restarting too, that waits for it.
	fresh := !g.Restored()
	close(m.raftReady)
	// Gossip first: a restarted member finds its peers' addresses there
	// and in the registry it kept.
	m.gossipJoin()
	joins := fresh && len(m.cfg.Join) > 0
	if joins {
		if _, err := m.join(ctx, pool); err != nil {
			return cc, err
		}
	}
	if err := g.WaitLeader(ctx); err != nil {
		return cc, fmt.Errorf("membership: waiting for a metadata leader: %w", err)
	}
	if joins {
		c, err := m.waitConfig(ctx)
		if err != nil {
			return cc, err
		}
		cc = *c
	} else {
		// Founding, or restarting: Init is idempotent and refuses flags
		// that disagree with the cluster's fixed P and N.
		cc, err = g.Init(ctx, raftgroup.ClusterConfig{
			ClusterID:  newClusterID(),
			Partitions: m.cfg.Partitions,
			Replicas:   m.cfg.Replicas,
			CreatedAt:  clock.UnixMilli(m.cfg.Clock),
		})
		if errors.Is(err, raftgroup.ErrRemoved) {
			return cc, fmt.Errorf("membership: this node was removed from the cluster (ctl remove, ctl decommission): wipe its data dir to join again as a new node: %w", err)
		}
		if err != nil {
			return cc, fmt.Errorf("membership: cluster config (the partition and replica counts are fixed when the cluster is created): %w", err)
		}
	}
	if mem, ok := g.Meta().Members[m.cfg.Self]; !ok || mem.Addr != m.cfg.Addr {
		if err := g.PutMember(ctx, raftgroup.Member{ID: m.cfg.Self, Addr: m.cfg.Addr, Since: clock.UnixMilli(m.cfg.Clock)}); err != nil {
			return cc, fmt.Errorf("membership: register: %w", err)
		}
	}
	m.log.Info("metadata group ready", "cluster", cc.ClusterID, "partitions", cc.Partitions, "replicas", cc.Replicas)
	return cc, nil
}

// waitConfig waits until this node applied the cluster config (a joiner
// gets it from the metadata leader's log or snapshot).
func (m *Membership) waitConfig(ctx context.Context) (*raftgroup.ClusterConfig, error) {
	for {
		ch := m.raft.Changed()
		if c := m.raft.Meta().Config; c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("membership: waiting for the cluster config from the metadata group: %w", ctx.Err())
		case <-ch:
		}
	}
}

func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AddrOf returns the address of node id: from gossip, else from the
// metadata registry, else where it last called from; "" when unknown.
func (m *Membership) AddrOf(id uint64) string {
	if g := m.Gossip(); g != nil {
		if addr, _, ok := g.Lookup(id); ok && addr != "" {
			return addr
		}
	}
	if g := m.Group(); g != nil {
		if mem, ok := g.Meta().Members[id]; ok {
			return mem.Addr
		}
	}
	m.learnedMu.Lock()
	defer m.learnedMu.Unlock()
	return m.learned[id]
}

// Learn records where a peer that proved its id called from: a joining
// node hears from the metadata leader before it has applied the registry
// entry that names the leader's address.
func (m *Membership) Learn(id uint64, remote net.Addr) {
	if id == 0 || remote == nil {
		return
	}
	m.learnedMu.Lock()
	m.learned[id] = remote.String()
	m.learnedMu.Unlock()
}

// States maps node ids to their gossip state, with this node alive; nil
// before Start.
func (m *Membership) States() map[uint64]member.State {
	g := m.Gossip()
	if g == nil {
		return nil
	}
	out := make(map[uint64]member.State)
	for _, p := range g.Members() {
		out[p.ID] = p.State
	}
	out[m.cfg.Self] = member.Alive
	return out
}

// Alive reports whether gossip holds node id alive (this node always is).
func (m *Membership) Alive(id uint64) bool {
	if id == m.cfg.Self {
		return true
	}
	g := m.Gossip()
	if g == nil {
		return false
	}
	_, st, ok := g.Lookup(id)
	return ok && st == member.Alive
}

// Leave tells the other members that this node leaves, within timeout;
// nothing before Start.
func (m *Membership) Leave(timeout time.Duration) {
	if g := m.Gossip(); g != nil {
		if err := g.Leave(timeout); err != nil {
			m.log.Warn("gossip leave", "err", err)
		}
	}
}

// Stop waits for raft's senders (their loopCtx ended) and stops gossip.
func (m *Membership) Stop() {
	if m.carrier != nil {
		m.carrier.Wait()
	}
	if g := m.Gossip(); g != nil {
		if err := g.Shutdown(); err != nil {
			m.log.Warn("gossip shutdown", "err", err)
		}
	}
}

// Close closes the metadata group, after Stop.
func (m *Membership) Close() {
	if g := m.Group(); g != nil {
		if err := g.Close(); err != nil {
			m.log.Warn("raft close", "err", err)
		}
	}
}

// raftTransport is raftgroup.Transport over the peer carrier.
type raftTransport struct{ *peer.RaftCarrier }

// Send implements raftgroup.Transport.
func (t raftTransport) Send(msgs []raftgroup.Outbound) {
	for _, msg := range msgs {
		if !t.RaftCarrier.Send(msg.To, msg.Data) {
			return
		}
	}
}

// gossipJoin contacts the known members: the join list, and every node of
// the metadata registry (so a restarted node finds the cluster without
// --join).
func (m *Membership) gossipJoin() {
	addrs := slices.Clone(m.cfg.Join)
	for id, mem := range m.raft.Meta().Members {
		if id != m.cfg.Self && mem.Addr != "" {
			addrs = append(addrs, mem.Addr)
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) == 0 {
		return
	}
	if k, err := m.member.Join(addrs); err != nil && k == 0 {
		m.log.Warn("gossip: could not reach any known member yet", "tried", addrs, "err", err)
	}
}

// RejoinLoop keeps gossip joined to the metadata registry's members
// (Config.RejoinInterval) until ctx ends: a node restarted after a
// graceful leave, whom the others saw leave and no longer contact, finds
// them from what it stored whatever its flags, and two gossip islands
// that the registry knows as one cluster merge again. Run after Start.
func (m *Membership) RejoinLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		m.rejoin()
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
func (m *Membership) rejoin() {
	states := m.States()
	var addrs []string
	for id, mem := range m.raft.Meta().Members {
		if id == m.cfg.Self || mem.Addr == "" {
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
	k, err := m.member.Join(addrs)
	m.log.Debug("gossip: joining registry members it does not see", "addrs", addrs, "reached", k, "err", err)
}
