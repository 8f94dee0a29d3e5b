package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Transport carries this group's raft messages to other nodes.
type Transport interface {
	// Send delivers raft messages to other nodes. It is called on the raft
	// goroutine, never concurrently, after the state the messages depend
	// on was persisted. It must not block: queue, and drop when the queue
	// is full (raft retries whatever is lost). Send owns msgs and their
	// Data from the call on.
	Send(msgs []Outbound)
}

// Outbound is one raft message for one node.
type Outbound struct {
	// To is the recipient's node id.
	To uint64
	// Data is the marshaled raftpb.Message; the recipient passes it to its
	// Group.Step.
	Data []byte
}

// Limits of the raft core and of what Step accepts.
const (
	// maxSizePerMsg bounds the entries in one append message.
	maxSizePerMsg = 1 << 20
	// maxInflightMsgs bounds the appends in flight to one follower.
	maxInflightMsgs = 256
	// maxUncommittedBytes bounds the proposals a leader holds that are not
	// yet committed; beyond it proposals fail rather than grow memory.
	maxUncommittedBytes = 64 << 20
	// maxStepBytes bounds one incoming message: the largest is a snapshot
	// of a state with MaxPartitions partitions.
	maxStepBytes = 64 << 20
	// maxCommandBytes bounds one proposal. Commands are small records; a
	// CAS with MaxCohort ids is well under a kilobyte.
	maxCommandBytes = 64 << 10
	// dropLogInterval rate-limits the log line about messages that could
	// not be sent.
	dropLogInterval = time.Second
)

type lifecycle int

const (
	stateNew lifecycle = iota
	stateRunning
	stateClosed
)

// Group is this node's member of the metadata raft group. See the package
// doc for its concurrency contract.
type Group struct {
	cfg  Config
	log  *slog.Logger
	boot uint64 // random per instance; see command

	leader atomic.Uint64 // raft leader id, 0 if unknown

	// snapshotsInstalled counts snapshots received from a leader.
	snapshotsInstalled atomic.Uint64

	// removed is set once this node applied a conf change that took it
	// out of the group: raft then drops its proposals for good, so
	// proposing fails fast with ErrRemoved. removedc is closed after the
	// apply batch that set it was published, waking proposals that were
	// already waiting (their fate is unknown, as at Close).
	removed     atomic.Bool
	removedc    chan struct{}
	removedOnce sync.Once

	stopc chan struct{} // closed by Close
	donec chan struct{} // closed once the raft goroutine has exited

	// lifeMu serialises Start and Close. Lock order: lifeMu, then mu.
	lifeMu sync.Mutex

	// Set by Start before the raft goroutine starts; after that only the
	// raft goroutine touches them (node is also used by proposers, which
	// raft.Node allows, once they saw stateRunning under mu).
	node      raft.Node
	storage   *raft.MemoryStorage
	state     Meta          // the live state machine; mu.meta is its published copy
	confState *pb.ConfState // the latest from a snapshot or ApplyConfChange
	snapIndex uint64        // index of the latest snapshot
	snapConf  *pb.ConfState // the ConfState of the latest snapshot; nil without one
	// restored: Start found raft state in the store (see Restored).
	restored bool
	dropped  int // messages dropped for want of a transport, since lastDrop
	lastDrop time.Time

	// mu guards the state shared with callers. It is never held across I/O
	// or a channel send.
	mu struct {
		sync.Mutex
		lifecycle lifecycle
		seq       uint64                 // last proposal sequence number
		waiters   map[uint64]chan result // by seq; buffered, capacity 1
		meta      Meta                   // published copy: never mutated
		conf      *pb.ConfState          // published copy of confState: never mutated
		changed   chan struct{}          // closed when meta's content changes
		leaderCh  chan struct{}          // closed when the leader changes
	}
}

// New returns a Group that is not started. Zero fields of cfg take their
// defaults; the result must pass Validate.
func New(cfg Config) (*Group, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	g := &Group{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.NodeID, "group", "meta"),
		boot:     rand.Uint64(),
		stopc:    make(chan struct{}),
		donec:    make(chan struct{}),
		removedc: make(chan struct{}),
		state:    Meta{Members: map[uint64]Member{}},
	}
	g.mu.waiters = make(map[uint64]chan result)
	g.mu.meta = g.state.Clone()
	g.mu.changed = make(chan struct{})
	g.mu.leaderCh = make(chan struct{})
	return g, nil
}

// Start loads the persisted raft state, restores the state machine from
// the latest snapshot and starts the raft goroutine; committed entries
// after the snapshot are applied again through raft. A brand-new store
// bootstraps the group from Config.Peers. A node that is the only voter
// campaigns at once instead of waiting out an election timeout.
func (g *Group) Start() error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	g.mu.Lock()
	lc := g.mu.lifecycle
	g.mu.Unlock()
	switch lc {
	case stateRunning:
		return errors.New("raftgroup: start: already started")
	case stateClosed:
		return fmt.Errorf("raftgroup: start: %w", ErrClosed)
	}
	rs, err := g.cfg.Store.LoadRaft()
	if err != nil {
		return fmt.Errorf("raftgroup: start: %w", err)
	}
	r, err := restore(rs)
	if err != nil {
		return fmt.Errorf("raftgroup: start: restore: %w", err)
	}
	g.storage, g.state, g.confState, g.snapIndex = r.storage, r.meta, r.confState, r.snapIndex
	g.restored = r.hasLog
	g.snapConf = r.confState
	rc := &raft.Config{
		ID:                        g.cfg.NodeID,
		ElectionTick:              g.cfg.ElectionTicks,
		HeartbeatTick:             g.cfg.HeartbeatTicks,
		Storage:                   g.storage,
		Applied:                   r.snapIndex,
		MaxSizePerMsg:             maxSizePerMsg,
		MaxInflightMsgs:           maxInflightMsgs,
		MaxUncommittedEntriesSize: maxUncommittedBytes,
		// CheckQuorum makes a leader cut off from a majority step down, and
		// PreVote keeps a rejoining node from disrupting a healthy leader.
		CheckQuorum: true,
		PreVote:     true,
		// Without it a leader that removed or demoted itself stays leader
		// (CheckQuorum counts only the voters, which keep answering), yet
		// drops every proposal: the group could never commit again.
		StepDownOnRemoval: true,
		Logger:            raftLogger{g.log.With("component", "raft")},
	}
	if r.hasLog || len(g.cfg.Peers) == 0 {
		g.node = raft.RestartNode(rc)
	} else {
		peers := make([]raft.Peer, len(g.cfg.Peers))
		for i, id := range g.cfg.Peers {
			peers[i] = raft.Peer{ID: id}
		}
		g.node = raft.StartNode(rc, peers)
	}
	g.log.Info("raft group starting", "bootstrap", !r.hasLog && len(g.cfg.Peers) > 0, "peers", g.cfg.Peers,
		"snapshot", r.snapIndex, "entries", len(rs.Entries))
	g.mu.Lock()
	g.mu.meta = g.state.Clone()
	g.mu.conf = cloneConfState(g.confState)
	g.mu.lifecycle = stateRunning
	g.mu.Unlock()
	go g.run()
	return nil
}

// Close stops the raft goroutine and waits for it. Proposals still
// pending fail with ErrClosed; each may or may not have been applied.
// Close the Group before the Store it uses. Calling Close again is a
// no-op.
func (g *Group) Close() error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	g.mu.Lock()
	prev := g.mu.lifecycle
	g.mu.lifecycle = stateClosed
	g.mu.Unlock()
	switch prev {
	case stateClosed:
		return nil
	case stateNew:
		close(g.stopc)
		close(g.donec)
		return nil
	}
	close(g.stopc)
	<-g.donec
	g.mu.Lock()
	waiters := g.mu.waiters
	g.mu.waiters = make(map[uint64]chan result)
	g.mu.Unlock()
	for _, ch := range waiters {
		select {
		case ch <- result{err: ErrClosed}:
		default: // already holds its result
		}
	}
	g.log.Info("raft group closed")
	return nil
}

// Step hands an incoming raft message from the transport to raft. Bytes
// that are not a raft message for this node are refused with
// ErrBadMessage. Step blocks until the raft goroutine takes the message
// or ctx ends; transports should pass a short deadline. Safe for
// concurrent use.
func (g *Group) Step(ctx context.Context, data []byte) error {
	if len(data) > maxStepBytes {
		return fmt.Errorf("raftgroup: step: %w: %d bytes, limit %d", ErrBadMessage, len(data), maxStepBytes)
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("raftgroup: step: %w: %v", ErrBadMessage, err)
	}
	if err := g.checkInbound(m); err != nil {
		return fmt.Errorf("raftgroup: step: %w", err)
	}
	n, err := g.runningNode()
	if err != nil {
		return fmt.Errorf("raftgroup: step: %w", err)
	}
	if err := n.Step(ctx, m); err != nil {
		if errors.Is(err, raft.ErrStopped) {
			err = ErrClosed
		}
		return fmt.Errorf("raftgroup: step %v from %d: %w", m.GetType(), m.GetFrom(), err)
	}
	return nil
}

// checkInbound refuses messages no peer may send: raft-local types (raft
// would ignore them silently, which hides a bug), messages addressed to
// another node or from no node, and proposals raft would panic on (an
// empty MsgProp, or a conf change that does not decode: the leader's raft
// decodes it when appending and panics if it cannot).
func (g *Group) checkInbound(m *pb.Message) error {
	if m.GetType() == pb.MsgProp {
		if len(m.GetEntries()) == 0 {
			return fmt.Errorf("%w: empty proposal from %d", ErrBadMessage, m.GetFrom())
		}
		for _, e := range m.GetEntries() {
			if e.GetType() != pb.EntryConfChange && e.GetType() != pb.EntryConfChangeV2 {
				continue
			}
			if _, err := decodeConfChange(e); err != nil {
				return fmt.Errorf("%w: proposed conf change from %d: %v", ErrBadMessage, m.GetFrom(), err)
			}
		}
	}
	switch {
	case raft.IsLocalMsg(m.GetType()):
		return fmt.Errorf("%w: local message type %v from the network", ErrBadMessage, m.GetType())
	case m.GetTo() != g.cfg.NodeID:
		return fmt.Errorf("%w: %v for node %d delivered to node %d", ErrBadMessage, m.GetType(), m.GetTo(), g.cfg.NodeID)
	case m.GetFrom() == 0 || m.GetFrom() == g.cfg.NodeID:
		return fmt.Errorf("%w: %v from node %d", ErrBadMessage, m.GetType(), m.GetFrom())
	}
	return nil
}

func (g *Group) runningNode() (raft.Node, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.lifecycle != stateRunning {
		return nil, ErrClosed
	}
	return g.node, nil
}

// Meta returns a deep copy of the applied state.
func (g *Group) Meta() Meta {
	g.mu.Lock()
	m := g.mu.meta // published copies are never mutated
	g.mu.Unlock()
	return m.Clone()
}

// Restored reports whether Start found raft state in the store: false
// only for a node that never took part in a group. A restored group's
// Meta fills in as the committed entries after its snapshot are applied
// again, after Start returns, so an empty Meta right after Start does
// not mean a new node.
func (g *Group) Restored() bool {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	return g.restored
}

// Leader returns the raft leader's node id as this node knows it, 0 if
// unknown.
func (g *Group) Leader() uint64 { return g.leader.Load() }

// WaitLeader blocks until this node knows a leader, ctx ends, or the group
// is closed.
func (g *Group) WaitLeader(ctx context.Context) error {
	for {
		g.mu.Lock()
		ch := g.mu.leaderCh
		g.mu.Unlock()
		if g.Leader() != 0 {
			return nil
		}
		select {
		case <-ch:
		case <-g.stopc:
			return fmt.Errorf("raftgroup: wait for leader: %w", ErrClosed)
		case <-ctx.Done():
			return fmt.Errorf("raftgroup: wait for leader: %w", ctx.Err())
		}
	}
}

// Changed returns a channel that is closed after the next apply batch
// that changes Meta's content (Config, Members or Partitions; not an
// Applied that merely grew) or the group's configuration (Group.Config).
// To wait for a change after reading:
//
//	ch := g.Changed()
//	m := g.Meta()
//	... act on m ...
//	<-ch
func (g *Group) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.changed
}

// setLeader is called on the raft goroutine when raft's soft state says
// the leader changed.
func (g *Group) setLeader(lead uint64) {
	if g.leader.Load() == lead {
		return
	}
	g.leader.Store(lead) // before waking waiters, so they see it
	g.mu.Lock()
	close(g.mu.leaderCh)
	g.mu.leaderCh = make(chan struct{})
	g.mu.Unlock()
	g.log.Info("raft leader changed", "leader", lead)
}

// SnapshotsInstalled returns how many snapshots this member received from
// a leader and installed (it had fallen behind the leader's compacted
// log), for metrics.
func (g *Group) SnapshotsInstalled() uint64 { return g.snapshotsInstalled.Load() }
