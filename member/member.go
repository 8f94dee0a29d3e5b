package member

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// metaUpdateWait bounds how long SetMeta waits for memberlist to finish
// gossiping the new metadata. The update is applied locally at once and
// push/pull spreads it anyway, so running out of time is not an error.
const metaUpdateWait = 5 * time.Second

// Member is this node's membership in the cluster. Create it with New,
// Join a seed, and Shutdown when done (after Leave, for a graceful exit).
type Member struct {
	id    uint64
	addr  string // canonical advertise "ip:port"
	log   *slog.Logger
	tr    *transport
	ml    *memberlist.Memberlist // set in New before any goroutine of Member starts
	deleg *delegate

	onChange          func()
	ackPayload        func() []byte
	onPing            func(uint64, time.Duration, []byte)
	reconnectInterval time.Duration
	deadRetention     time.Duration

	// opMu serializes Leave, SetMeta and Shutdown: memberlist panics on a
	// Leave after Shutdown, and silently ignores an UpdateNode after Leave.
	opMu sync.Mutex

	mu struct {
		sync.Mutex
		meta     []byte // the caller's Meta for this node
		leaving  bool   // set by Leave before memberlist's leave
		left     bool   // memberlist's leave was broadcast (or timed out)
		shutdown bool
		// peers holds every other node seen, by ID; never this node.
		peers map[uint64]*peerState
	}

	// changed holds a pending OnChange call (capacity 1: coalescing).
	changed chan struct{}
	stop    chan struct{}
	loops   sync.WaitGroup
}

type peerState struct {
	addr  string
	state State
	meta  []byte
	since time.Time // when state last changed
}

// New validates cfg, starts memberlist over cfg.Net and returns the
// Member, alone in a cluster of one until Join.
func New(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	adv, _ := parseAddr(cfg.Addr) // valid: checked by Validate
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "member")

	m := &Member{
		id:                cfg.ID,
		addr:              adv.String(),
		log:               logger,
		tr:                newTransport(cfg.Net, adv, logger),
		onChange:          cfg.OnChange,
		ackPayload:        cfg.AckPayload,
		onPing:            cfg.OnPing,
		reconnectInterval: cfg.ReconnectInterval,
		deadRetention:     cfg.DeadRetention,
		changed:           make(chan struct{}, 1),
		stop:              make(chan struct{}),
	}
	m.deleg = &delegate{m: m}
	m.mu.meta = cloneMeta(cfg.Meta)
	m.mu.peers = make(map[uint64]*peerState)

	mlLog := log.New(logWriter{log: logger}, "", 0)
	mc := cfg.memberlistConfig(nodeName(cfg.ID), adv, m.tr, m.deleg, mlLog)
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = m.tr.Shutdown() // memberlist does not on every failure path
		return nil, fmt.Errorf("member: start memberlist: %w", err)
	}
	m.ml = ml
	if m.onChange != nil {
		m.loops.Go(m.notifyLoop)
	}
	m.loops.Go(m.reconnectLoop)
	logger.Info("membership started", "id", nodeName(cfg.ID), "addr", m.addr)
	return m, nil
}

// LocalID returns this node's ID.
func (m *Member) LocalID() uint64 { return m.id }

// LocalAddr returns the address this node advertises, canonicalized.
func (m *Member) LocalAddr() string { return m.addr }

// Join contacts each address (literal "ip:port"; host names are refused,
// membership does no DNS) and merges state with it. It returns how many
// were reached, and an error only if none was.
func (m *Member) Join(addrs []string) (int, error) {
	if err := m.checkActive(); err != nil {
		return 0, err
	}
	if len(addrs) == 0 {
		return 0, errors.New("member: join: no addresses")
	}
	valid := make([]string, 0, len(addrs))
	var bad []error
	for _, a := range addrs {
		ap, err := parseAddr(a)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		valid = append(valid, ap.String())
	}
	if len(valid) == 0 {
		return 0, fmt.Errorf("member: join: %w", errors.Join(bad...))
	}
	n, err := m.ml.Join(valid)
	if n == 0 {
		return 0, fmt.Errorf("member: join %v: %w", valid, errors.Join(append(bad, err)...))
	}
	if len(bad) > 0 {
		m.log.Warn("join skipped invalid addresses", "err", errors.Join(bad...))
	}
	return n, nil
}

// SetMeta replaces this node's metadata (at most MaxMetaSize bytes) and
// gossips it; peers see it as an update. It waits up to a few seconds for
// the gossip to go out.
func (m *Member) SetMeta(b []byte) error {
	if len(b) > MaxMetaSize {
		return fmt.Errorf("member: set meta: %d bytes, over the %d limit", len(b), MaxMetaSize)
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.checkActive(); err != nil {
		return err
	}
	m.mu.Lock()
	m.mu.meta = cloneMeta(b)
	m.mu.Unlock()
	m.signalChange()
	if err := m.ml.UpdateNode(metaUpdateWait); err != nil {
		m.log.Debug("meta update still gossiping", "err", err)
	}
	return nil
}

// Leave announces that this node is leaving, so peers report it Left
// rather than Dead, and waits up to timeout (> 0) for the announcement to
// go out. The node still answers probes until Shutdown, which should
// follow. Leave after Leave does nothing.
func (m *Member) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("member: leave: timeout must be positive, got %v", timeout)
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	switch {
	case m.mu.shutdown:
		m.mu.Unlock()
		return ErrShutdown
	case m.mu.left:
		m.mu.Unlock()
		return nil
	}
	m.mu.leaving = true
	m.mu.Unlock()

	deadline := time.Now().Add(timeout)
	// First re-advertise with the leaving flag, so that peers know the
	// coming departure is graceful even if they miss the leave message
	// itself. Half the time for this, the rest for the leave.
	if err := m.ml.UpdateNode(timeout / 2); err != nil {
		m.log.Debug("leaving flag still gossiping", "err", err)
	}
	// memberlist waits forever for a timeout of 0: never pass one.
	err := m.ml.Leave(max(time.Until(deadline), time.Millisecond))
	m.mu.Lock()
	m.mu.left = true
	m.mu.Unlock()
	m.signalChange()
	if err != nil {
		return fmt.Errorf("member: leave: %w", err)
	}
	m.log.Info("left the cluster")
	return nil
}

// Shutdown stops memberlist without a leave (peers will see this node as
// dead unless Leave came first), stops this package's goroutines and waits
// for them. Idempotent. It must not be called from OnChange.
func (m *Member) Shutdown() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	if m.mu.shutdown {
		m.mu.Unlock()
		return nil
	}
	m.mu.shutdown = true
	m.mu.Unlock()

	// memberlist shuts the transport down first, which stops and waits
	// for the per-peer senders and closes open streams.
	err := m.ml.Shutdown()
	close(m.stop)
	m.loops.Wait()
	if err != nil {
		return fmt.Errorf("member: shutdown: %w", err)
	}
	m.log.Info("membership stopped")
	return nil
}

func (m *Member) checkActive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.mu.shutdown:
		return ErrShutdown
	case m.mu.left || m.mu.leaving:
		return ErrLeft
	}
	return nil
}

// Members returns every node this node knows of, itself included, sorted
// by ID. After Shutdown it is the last view seen.
func (m *Member) Members() []Peer {
	m.mu.Lock()
	out := make([]Peer, 0, len(m.mu.peers)+1)
	self := Peer{ID: m.id, Addr: m.addr, State: Alive, Meta: cloneMeta(m.mu.meta)}
	if m.mu.left {
		self.State = Left
	}
	out = append(out, self)
	for id, p := range m.mu.peers {
		out = append(out, Peer{ID: id, Addr: p.addr, State: p.state, Meta: cloneMeta(p.meta)})
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Lookup returns the address and state of node id as Members would,
// without copying the member list: it serves the request paths, which
// ask about one peer at a time.
func (m *Member) Lookup(id uint64) (addr string, state State, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == m.id {
		if m.mu.left {
			return m.addr, Left, true
		}
		return m.addr, Alive, true
	}
	p, ok := m.mu.peers[id]
	if !ok {
		return "", 0, false
	}
	return p.addr, p.state, true
}

// Alive returns the Alive subset of Members.
func (m *Member) Alive() []Peer {
	return slices.DeleteFunc(m.Members(), func(p Peer) bool { return p.State != Alive })
}

// DroppedPackets counts gossip packets dropped so far, outgoing (queue
// full, send failed or backing off) and incoming (queue full, oversized,
// or after Shutdown).
func (m *Member) DroppedPackets() uint64 { return m.tr.droppedPackets() }

// DeliverPacket hands in one gossip packet that the node received from the
// peer listening at from ("host:port"). It copies b and never blocks: when
// memberlist is behind, the packet is dropped and counted.
func (m *Member) DeliverPacket(from string, b []byte) { m.tr.deliverPacket(from, b) }

// DeliverStream hands in a stream a peer opened for memberlist. Member owns
// c from then on; if it is shut down or too many streams are waiting, c is
// closed at once.
func (m *Member) DeliverStream(c net.Conn) { m.tr.deliverStream(c) }

// observe records what memberlist's event delegate reported about n. Runs
// with memberlist's node lock held (see delegate).
func (m *Member) observe(n *memberlist.Node, alive bool) {
	id, err := parseNodeName(n.Name)
	if err != nil {
		m.log.Debug("ignoring event for unnamed node", "err", err)
		return
	}
	if id == m.id {
		return // this node's own state comes from Leave, not from events
	}
	meta, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.Debug("peer meta undecodable", "peer", n.Name, "err", err)
	}
	state := Alive
	if !alive {
		state = Dead
		if leaving {
			state = Left
		}
	}
	addr := n.Address()

	m.mu.Lock()
	p := m.mu.peers[id]
	if p == nil {
		p = &peerState{}
		m.mu.peers[id] = p
	}
	old := p.state
	changed := old != state || p.addr != addr || !bytes.Equal(p.meta, meta)
	if old != state {
		p.since = time.Now()
	}
	p.addr, p.state, p.meta = addr, state, meta
	m.mu.Unlock()

	if old != state {
		m.log.Info("peer state changed", "peer", n.Name, "addr", addr, "from", old, "to", state)
	}
	if changed {
		m.signalChange()
	}
}

func (m *Member) signalChange() {
	select {
	case m.changed <- struct{}{}:
	default: // a call is already pending and will see this change too
	}
}

// notifyLoop calls OnChange, outside any lock, once per pending signal.
func (m *Member) notifyLoop() {
	for {
		select {
		case <-m.stop:
			return
		case <-m.changed:
			m.onChange()
		}
	}
}

// reconnectLoop forgets peers dead or left for longer than DeadRetention
// and tries to rejoin one random dead peer per ReconnectInterval.
// memberlist alone never merges the two sides of a partition that lasted
// longer than GossipToTheDeadTime: it neither probes nor gossips to nodes
// it believes dead.
func (m *Member) reconnectLoop() {
	tick := time.NewTicker(m.reconnectInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		addr, ok := m.reapAndPick(time.Now())
		if !ok {
			continue
		}
		if _, err := m.ml.Join([]string{addr}); err != nil {
			m.log.Debug("rejoining dead peer failed", "addr", addr, "err", err)
		}
	}
}

// reapAndPick forgets expired Dead and Left peers and picks a random Dead
// one to retry, unless this node is leaving or shut down.
func (m *Member) reapAndPick(now time.Time) (string, bool) {
	m.mu.Lock()
	reaped := false
	var dead []string
	for id, p := range m.mu.peers {
		if p.state != Dead && p.state != Left {
			continue
		}
		if now.Sub(p.since) > m.deadRetention {
			delete(m.mu.peers, id)
			reaped = true
			continue
		}
		if p.state == Dead {
			dead = append(dead, p.addr)
		}
	}
	inactive := m.mu.leaving || m.mu.left || m.mu.shutdown
	m.mu.Unlock()
	if reaped {
		m.signalChange()
	}
	if inactive || len(dead) == 0 {
		return "", false
	}
	return dead[rand.IntN(len(dead))], true
}
