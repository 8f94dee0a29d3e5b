package member

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Net is what member needs from the node's transport. Implementations must
// be safe for concurrent use.
type Net interface {
	// SendPacket delivers one gossip packet to the node listening at addr,
	// best effort (it may fail or be lost). It may block up to ctx's
	// deadline, and must return when ctx is done. b is at most
	// MaxPacketSize bytes and usually at most PacketSize; member does not
	// touch b after SendPacket returns.
	SendPacket(ctx context.Context, addr string, b []byte) error
	// OpenStream opens a reliable two-way byte stream to the node at addr.
	// The returned conn must support deadlines; member closes it.
	OpenStream(ctx context.Context, addr string) (net.Conn, error)
}

const (
	// PacketSize is the size memberlist aims its gossip packets at: it
	// fills compound packets up to this, so that one packet fits a QUIC
	// datagram together with a one-byte type tag. A lone message larger
	// than that is still sent as one packet (memberlist does not split),
	// so Net must also cope with packets up to MaxPacketSize, for example
	// by sending them on a short stream.
	PacketSize = 1200
	// MaxPacketSize bounds one packet in either direction. memberlist
	// never builds one near this without user messages (which member does
	// not send); WriteTo refuses and DeliverPacket drops anything larger.
	MaxPacketSize = 64 << 10

	// memberlistPacketBudget is memberlist's UDPBufferSize. memberlist
	// under-counts what it adds to a packet: the 5-byte CRC header of
	// protocol 5 and the 2-byte length of the first part of a compound
	// packet come on top of its budget. 16 bytes of slack keep packets
	// within PacketSize.
	memberlistPacketBudget = PacketSize - 16

	// peerQueueLen bounds packets waiting to be sent to one peer. A few
	// seconds of memberlist traffic to a peer; when full, WriteTo drops.
	peerQueueLen = 64
	// maxPeerSenders bounds per-peer sender goroutines (one per address
	// recently written to). Past it, packets to new addresses are refused.
	maxPeerSenders = 4096
	// packetSendTimeout bounds one Net.SendPacket call, including any
	// connection set-up it does. Later than this a gossip packet is stale
	// anyway: probes time out well before.
	packetSendTimeout = time.Second
	// sendBackoffMin and sendBackoffMax bound the pause after a failed
	// send to a peer, doubling per consecutive failure. Packets dequeued
	// during the pause are dropped (they would be stale after it). The
	// max stays well under memberlist's suspicion time, so a peer that
	// comes back is reached again before it is declared dead.
	sendBackoffMin = 50 * time.Millisecond
	sendBackoffMax = time.Second
	// peerIdleTimeout is how long a per-peer sender waits for a packet
	// before it ends, so peers that are gone do not keep goroutines.
	peerIdleTimeout = 30 * time.Second
	// inboundPacketQueueLen bounds received packets waiting for
	// memberlist; when full, DeliverPacket drops.
	inboundPacketQueueLen = 1024
	// inboundStreamQueueLen bounds received streams waiting for
	// memberlist to pick them up; when full, DeliverStream closes them.
	inboundStreamQueueLen = 64
)

// transport is memberlist's Transport over Net. memberlist calls WriteTo
// from its probe and gossip loops, so WriteTo never waits on the network:
// it copies the packet into a bounded per-peer queue, and one goroutine per
// peer sends them in order, one at a time.
type transport struct {
	net Net
	adv netip.AddrPort
	log *slog.Logger
	// idleTimeout is peerIdleTimeout; a field so tests can shorten it.
	idleTimeout time.Duration

	// life is canceled by Shutdown so that in-flight SendPacket and
	// OpenStream calls return promptly. It is the transport's lifetime,
	// not a request's, hence stored.
	life     context.Context
	stopLife context.CancelFunc

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	mu struct {
		sync.Mutex
		closed bool
		// peers maps an address to its sender. A sender removes itself
		// only under mu and only with an empty queue, and WriteTo
		// enqueues only under mu, so no packet is stranded in the
		// queue of a sender that has ended.
		peers map[string]*peerSender
		// conns are the streams DialTimeout opened and memberlist has
		// not closed yet; Shutdown closes them so nothing waits on a
		// stream deadline.
		conns map[*trackedConn]struct{}
	}
	senders      sync.WaitGroup
	shutdownOnce sync.Once

	droppedOut     atomic.Uint64
	droppedIn      atomic.Uint64
	droppedStreams atomic.Uint64
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

type peerSender struct {
	addr  string
	queue chan []byte
}

func newTransport(n Net, adv netip.AddrPort, logger *slog.Logger) *transport {
	t := &transport{
		net:         n,
		adv:         adv,
		log:         logger,
		idleTimeout: peerIdleTimeout,
		packetCh:    make(chan *memberlist.Packet, inboundPacketQueueLen),
		streamCh:    make(chan net.Conn, inboundStreamQueueLen),
	}
	t.life, t.stopLife = context.WithCancel(context.Background())
	t.mu.peers = make(map[string]*peerSender)
	t.mu.conns = make(map[*trackedConn]struct{})
	return t
}

// FinalAdvertiseAddr returns the configured address and ignores
// memberlist's: it must be the address peers dial, never a bind wildcard.
func (t *transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	ip := t.adv.Addr()
	if !ip.IsValid() || ip.IsUnspecified() || t.adv.Port() == 0 {
		return nil, 0, fmt.Errorf("member: advertise address %v is not dialable", t.adv)
	}
	return net.IP(ip.AsSlice()), int(t.adv.Port()), nil
}

// WriteTo queues a copy of b for addr and returns at once. A full queue
// drops the packet (counted), as a lossy network would; memberlist copes.
// The returned time is when the packet was queued, not sent, so probe RTTs
// include queueing.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	if len(b) > MaxPacketSize {
		t.droppedOut.Add(1)
		return time.Time{}, fmt.Errorf("member: packet to %s is %d bytes, over the %d limit",
			addr, len(b), MaxPacketSize)
	}
	buf := bytes.Clone(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return time.Time{}, ErrShutdown
	}
	p := t.mu.peers[addr]
	if p == nil {
		if len(t.mu.peers) >= maxPeerSenders {
			t.droppedOut.Add(1)
			return time.Time{}, fmt.Errorf("member: packet to %s: %d peers already have senders",
				addr, maxPeerSenders)
		}
		p = &peerSender{addr: addr, queue: make(chan []byte, peerQueueLen)}
		t.mu.peers[addr] = p
		t.senders.Go(func() { t.runSender(p) })
	}
	// A non-blocking send: holding mu here cannot stall anyone.
	select {
	case p.queue <- buf:
	default:
		t.droppedOut.Add(1)
	}
	return time.Now(), nil
}

// WriteToAddress implements memberlist.NodeAwareTransport; the node name
// is not needed, the address is.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// runSender sends p's packets until p has been idle for idleTimeout or the
// transport shuts down. After a failed send it drops packets for a backoff
// period instead of trying each one against an unreachable peer.
func (t *transport) runSender(p *peerSender) {
	idle := time.NewTimer(t.idleTimeout)
	defer idle.Stop()
	var failures int
	var pauseUntil time.Time
	for {
		select {
		case <-t.life.Done():
			return
		case <-idle.C:
			if t.retire(p) {
				return
			}
			idle.Reset(t.idleTimeout)
		case b := <-p.queue:
			idle.Reset(t.idleTimeout)
			if time.Now().Before(pauseUntil) {
				t.droppedOut.Add(1)
				continue
			}
			if err := t.sendOne(p.addr, b); err != nil {
				t.droppedOut.Add(1)
				failures++
				pauseUntil = time.Now().Add(sendBackoff(failures))
				if failures == 1 {
					t.log.Debug("sending gossip failed, backing off", "peer", p.addr, "err", err)
				}
				continue
			}
			if failures > 0 {
				t.log.Debug("sending gossip works again", "peer", p.addr, "failures", failures)
			}
			failures = 0
		}
	}
}

func (t *transport) sendOne(addr string, b []byte) error {
	ctx, cancel := context.WithTimeout(t.life, packetSendTimeout)
	defer cancel()
	return t.net.SendPacket(ctx, addr, b)
}

// retire removes p if nothing is queued for it, under mu so that WriteTo
// either sees p gone (and starts a new sender) or enqueued before.
func (t *transport) retire(p *peerSender) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p.queue) > 0 {
		return false
	}
	delete(t.mu.peers, p.addr)
	return true
}

// sendBackoff returns the pause after the given number (≥ 1) of
// consecutive failed sends.
func sendBackoff(failures int) time.Duration {
	d := sendBackoffMin
	for i := 1; i < failures && d < sendBackoffMax; i++ {
		d *= 2
	}
	return min(d, sendBackoffMax)
}

// PacketCh is where memberlist reads the packets DeliverPacket accepted.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh is where memberlist reads the streams DeliverStream accepted.
func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// DialTimeout opens a stream through Net.OpenStream, bounded by timeout and
// by the transport's lifetime.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isClosed() {
		return nil, ErrShutdown
	}
	ctx, cancel := context.WithTimeout(t.life, timeout)
	defer cancel()
	c, err := t.net.OpenStream(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("member: open stream to %s: %w", addr, err)
	}
	return t.track(c)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.closed
}

func (t *transport) track(c net.Conn) (net.Conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		_ = c.Close()
		return nil, ErrShutdown
	}
	tc := &trackedConn{Conn: c, t: t}
	t.mu.conns[tc] = struct{}{}
	return tc, nil
}

// trackedConn is a stream opened by DialTimeout; closing it forgets it.
type trackedConn struct {
	net.Conn
	t    *transport
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.mu.conns, c)
		c.t.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

// deliverPacket hands a received packet to memberlist without blocking.
func (t *transport) deliverPacket(from string, b []byte) {
	if len(b) == 0 || len(b) > MaxPacketSize {
		t.droppedIn.Add(1)
		return
	}
	p := &memberlist.Packet{Buf: bytes.Clone(b), From: peerAddr(from), Timestamp: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		t.droppedIn.Add(1)
		return
	}
	select {
	case t.packetCh <- p:
	default:
		t.droppedIn.Add(1)
	}
}

// deliverStream hands a received stream to memberlist without blocking,
// or closes it. Under mu, so Shutdown's drain sees every queued stream.
func (t *transport) deliverStream(c net.Conn) {
	t.mu.Lock()
	queued := false
	if !t.mu.closed {
		select {
		case t.streamCh <- c:
			queued = true
		default:
			t.droppedStreams.Add(1)
		}
	}
	t.mu.Unlock()
	if !queued {
		_ = c.Close()
	}
}

// Shutdown stops the senders and waits for them, closes open streams and
// streams nobody picked up. memberlist calls it first thing in its own
// Shutdown; it is idempotent.
func (t *transport) Shutdown() error {
	t.shutdownOnce.Do(func() {
		t.mu.Lock()
		t.mu.closed = true
		conns := make([]*trackedConn, 0, len(t.mu.conns))
		for c := range t.mu.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()

		t.stopLife()
		for _, c := range conns {
			_ = c.Close()
		}
		t.senders.Wait()
		for {
			select {
			case c := <-t.streamCh:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// droppedPackets counts packets dropped in both directions.
func (t *transport) droppedPackets() uint64 {
	return t.droppedOut.Load() + t.droppedIn.Load()
}

// peerAddr is the net.Addr of a packet's sender: its listen "host:port".
type peerAddr string

func (a peerAddr) Network() string { return "member" }
func (a peerAddr) String() string  { return string(a) }
