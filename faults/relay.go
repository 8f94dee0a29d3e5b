package faults

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The UDP relay stands between the nodes' QUIC endpoints so the harness
// can drop, delay and duplicate their datagrams: the kernel here has no
// netem (TESTING.md section 5, "Packet delay, loss, duplication").
//
// Each node advertises its relay address (--advertise), so every peer
// dials it there. The relay holds one socket per node, bound to that
// node's relay address, and keeps the mapping symmetric: a datagram from
// node m's real address arriving at node k's relay socket is sent to node
// k's real address from node m's relay socket. Node k therefore sees every
// peer at the peer's advertised address, and its answers come back to the
// peer from the address the peer dialled: the relay is invisible to QUIC
// (and to its TLS, which it never reads) and to gossip, which replies to
// the address a packet came from.

// RelayNode is one node behind the relay.
type RelayNode struct {
	// Real is where the node listens; Relay is the address it
	// advertises, where the relay listens for it.
	Real  netip.AddrPort
	Relay netip.AddrPort
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	Nodes []RelayNode
	// Seed draws the relay's drops, delays and duplicates.
	Seed int64
	// MaxDelayed bounds the datagrams waiting out a delay; past it a
	// datagram to delay is dropped and counted (Overflow).
	MaxDelayed int64
	Logger     *slog.Logger
}

// DefaultMaxDelayed: at 90 ms of delay and a few thousand datagrams a
// second between five nodes, a few hundred wait at once; ten times that
// means the relay is falling behind.
const DefaultMaxDelayed = 4096

// relayBufSize is the largest datagram the relay carries: a UDP datagram's
// maximum, since QUIC may probe MTUs larger than the usual 1500 bytes.
const relayBufSize = 64 << 10

// Validate checks the configuration.
func (c *RelayConfig) Validate() error {
	if len(c.Nodes) < 2 {
		return fmt.Errorf("relay: %d nodes; want 2 or more", len(c.Nodes))
	}
	seen := make(map[netip.AddrPort]bool)
	for i, n := range c.Nodes {
		if !n.Real.IsValid() || !n.Relay.IsValid() {
			return fmt.Errorf("relay: node %d: real %v, relay %v: both addresses are needed", i+1, n.Real, n.Relay)
		}
		if seen[n.Real] {
			return fmt.Errorf("relay: node %d: address %v given twice", i+1, n.Real)
		}
		seen[n.Real] = true
	}
	if c.MaxDelayed < 1 {
		return fmt.Errorf("relay: max delayed %d must be positive", c.MaxDelayed)
	}
	if c.Logger == nil {
		return errors.New("relay: no logger")
	}
	return nil
}

// Chaos is what the relay does to datagrams in fault mode.
type Chaos struct {
	// Drop and Dup are the probabilities of dropping a datagram and of
	// sending it twice.
	Drop float64 `json:"drop"`
	Dup  float64 `json:"dup"`
	// Each copy is held for a delay drawn uniformly from
	// [DelayMin, DelayMax]; copies held for different delays overtake
	// each other (reordering).
	DelayMin time.Duration `json:"delay_min"`
	DelayMax time.Duration `json:"delay_max"`
	// Nodes (1-based) limits the chaos to datagrams from or to these
	// nodes; empty means every link.
	Nodes []int `json:"nodes,omitempty"`
}

// Validate checks the chaos settings.
func (c Chaos) Validate() error {
	if c.Drop < 0 || c.Drop > 1 || c.Dup < 0 || c.Dup > 1 {
		return fmt.Errorf("chaos: drop %v, dup %v: probabilities must be in [0, 1]", c.Drop, c.Dup)
	}
	if c.DelayMin < 0 || c.DelayMax < c.DelayMin {
		return fmt.Errorf("chaos: delay [%v, %v] is not a range", c.DelayMin, c.DelayMax)
	}
	return nil
}

// RelayStats counts datagrams. Received counts what arrived from known
// nodes; Forwarded every copy sent on (duplicates included).
type RelayStats struct {
	Received   uint64 `json:"received"`
	Forwarded  uint64 `json:"forwarded"`
	Dropped    uint64 `json:"dropped"`
	Duplicated uint64 `json:"duplicated"`
	Delayed    uint64 `json:"delayed"`
	// Unknown counts datagrams from an address that is no node's real
	// address (dropped: the relay could not tell whom to show as their
	// sender). A working cluster has none.
	Unknown uint64 `json:"unknown"`
	// Overflow counts datagrams dropped because MaxDelayed were waiting.
	Overflow  uint64 `json:"overflow"`
	SendError uint64 `json:"send_errors"`
}

// Relay forwards datagrams between nodes. Start with StartRelay; Close
// stops it and waits for its goroutines.
type Relay struct {
	cfg   RelayConfig
	conns []*net.UDPConn
	index map[netip.AddrPort]int
	chaos atomic.Pointer[Chaos]

	closed  atomic.Bool
	wg      sync.WaitGroup
	delayed atomic.Int64

	received, forwarded, dropped, duplicated, delayedN, unknown, overflow, sendErr atomic.Uint64
}

// StartRelay binds one socket per node at its relay address and starts
// forwarding, transparently until SetChaos. A relay address with port 0
// gets a free port: Nodes reports the addresses bound.
func StartRelay(cfg RelayConfig) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, index: make(map[netip.AddrPort]int)}
	r.cfg.Nodes = slices.Clone(cfg.Nodes)
	for i, n := range r.cfg.Nodes {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(n.Relay))
		if err != nil {
			r.closeConns()
			return nil, fmt.Errorf("relay: node %d: listen on %v: %w", i+1, n.Relay, err)
		}
		r.conns = append(r.conns, c)
		r.cfg.Nodes[i].Relay = c.LocalAddr().(*net.UDPAddr).AddrPort()
		r.index[unmapAP(n.Real)] = i
	}
	for k := range r.conns {
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(k)))
		r.wg.Add(1)
		go r.serve(k, rng)
	}
	return r, nil
}

// Nodes returns the nodes with the relay addresses bound.
func (r *Relay) Nodes() []RelayNode { return slices.Clone(r.cfg.Nodes) }

// SetChaos puts the relay in fault mode with c.
func (r *Relay) SetChaos(c Chaos) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c.Nodes = slices.Clone(c.Nodes)
	r.chaos.Store(&c)
	return nil
}

// Heal makes the relay transparent again (datagrams already held for a
// delay are still delivered).
func (r *Relay) Heal() { r.chaos.Store(nil) }

// Stats returns the counters so far.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Received: r.received.Load(), Forwarded: r.forwarded.Load(), Dropped: r.dropped.Load(),
		Duplicated: r.duplicated.Load(), Delayed: r.delayedN.Load(), Unknown: r.unknown.Load(),
		Overflow: r.overflow.Load(), SendError: r.sendErr.Load(),
	}
}

// Close stops the relay and waits for its goroutines and for the
// datagrams held for a delay (which are dropped).
func (r *Relay) Close() error {
	r.closed.Store(true)
	err := r.closeConns()
	r.wg.Wait()
	return err
}

func (r *Relay) closeConns() error {
	var errs []error
	for _, c := range r.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serve reads node k's relay socket: what arrives there is for node k.
// One goroutine per socket, each with its own random source, so the
// draws need no lock.
func (r *Relay) serve(k int, rng *rand.Rand) {
	defer r.wg.Done()
	buf := make([]byte, relayBufSize)
	for {
		n, src, err := r.conns[k].ReadFromUDPAddrPort(buf)
		if err != nil {
			if r.closed.Load() {
				return
			}
			r.cfg.Logger.Warn("relay: read failed", "node", k+1, "err", err)
			continue
		}
		from, ok := r.index[unmapAP(src)]
		if !ok || from == k {
			r.unknown.Add(1)
			continue
		}
		r.received.Add(1)
		r.forward(from, k, buf[:n], rng)
	}
}

// forward sends b, which node from sent to node to, on to node to as
// coming from node from's relay address, applying the chaos if any.
func (r *Relay) forward(from, to int, b []byte, rng *rand.Rand) {
	c := r.chaos.Load()
	if c == nil || !c.covers(from+1, to+1) {
		r.send(from, to, b)
		return
	}
	if rng.Float64() < c.Drop {
		r.dropped.Add(1)
		return
	}
	copies := 1
	if rng.Float64() < c.Dup {
		copies = 2
		r.duplicated.Add(1)
	}
	for range copies {
		d := c.DelayMin
		if span := c.DelayMax - c.DelayMin; span > 0 {
			d += time.Duration(rng.Int64N(int64(span) + 1))
		}
		if d <= 0 {
			r.send(from, to, b)
			continue
		}
		r.sendLater(from, to, b, d)
	}
}

// sendLater sends a copy of b after d, unless MaxDelayed copies wait
// already.
func (r *Relay) sendLater(from, to int, b []byte, d time.Duration) {
	if r.delayed.Add(1) > r.cfg.MaxDelayed {
		r.delayed.Add(-1)
		r.overflow.Add(1)
		return
	}
	r.delayedN.Add(1)
	cp := slices.Clone(b)
	r.wg.Add(1)
	time.AfterFunc(d, func() {
		defer r.wg.Done()
		defer r.delayed.Add(-1)
		if !r.closed.Load() {
			r.send(from, to, cp)
		}
	})
}

func (r *Relay) send(from, to int, b []byte) {
	if _, err := r.conns[from].WriteToUDPAddrPort(b, r.cfg.Nodes[to].Real); err != nil {
		r.sendErr.Add(1)
		return
	}
	r.forwarded.Add(1)
}

// covers reports whether the chaos applies to the link between nodes a
// and b (1-based).
func (c *Chaos) covers(a, b int) bool {
	return len(c.Nodes) == 0 || slices.Contains(c.Nodes, a) || slices.Contains(c.Nodes, b)
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
