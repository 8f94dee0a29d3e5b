package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
)

// blockingNet blocks every send until its context ends, like a peer whose
// connection hangs, and counts calls.
type blockingNet struct {
	sends atomic.Int64
}

func (b *blockingNet) SendPacket(ctx context.Context, addr string, p []byte) error {
	b.sends.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (b *blockingNet) OpenStream(ctx context.Context, addr string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// failingNet fails every send at once, like an unreachable peer.
type failingNet struct {
	sends atomic.Int64
}

func (f *failingNet) SendPacket(context.Context, string, []byte) error {
	f.sends.Add(1)
	return errors.New("unreachable")
}

func (f *failingNet) OpenStream(context.Context, string) (net.Conn, error) {
	return nil, errors.New("unreachable")
}

// countingNet accepts every send.
type countingNet struct {
	sends atomic.Int64
}

func (c *countingNet) SendPacket(context.Context, string, []byte) error {
	c.sends.Add(1)
	return nil
}

func (c *countingNet) OpenStream(context.Context, string) (net.Conn, error) {
	return nil, errors.New("no streams")
}

func newTestTransport(t *testing.T, n Net) *transport {
	tr := newTransport(n, netip.MustParseAddrPort("127.0.0.1:20001"), slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

// WriteTo never waits for the network: 20,000 packets to peers whose sends
// hang all return quickly, the excess is dropped and counted, and Shutdown
// still returns promptly.
func TestWriteToNeverBlocks(t *testing.T) {
	t.Parallel()
	bn := &blockingNet{}
	tr := newTestTransport(t, bn)
	const writes = 20000
	const peers = 4
	pkt := make([]byte, PacketSize)
	start := time.Now()
	for i := 0; i < writes; i++ {
		if _, err := tr.WriteTo(pkt, fmt.Sprintf("10.0.0.%d:7000", i%peers)); err != nil {
			t.Fatalf("WriteTo #%d: %v", i, err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("%d WriteTo calls took %v; want well under 2s", writes, took)
	}
	// Each peer holds at most one packet in flight and peerQueueLen
	// queued; everything else was dropped.
	if got, min := tr.droppedPackets(), uint64(writes-peers*(peerQueueLen+1)); got < min {
		t.Errorf("dropped %d packets; want at least %d", got, min)
	}

	start = time.Now()
	if err := tr.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Shutdown with hanging sends took %v", took)
	}
	if _, err := tr.WriteTo(pkt, "10.0.0.1:7000"); !errors.Is(err, ErrShutdown) {
		t.Errorf("WriteTo after Shutdown: got %v; want ErrShutdown", err)
	}
	if _, err := tr.DialTimeout("10.0.0.1:7000", time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("DialTimeout after Shutdown: got %v; want ErrShutdown", err)
	}
}

// After a failed send the sender backs off instead of trying every packet
// against an unreachable peer, and counts what it drops.
func TestFailingPeerBacksOff(t *testing.T) {
	t.Parallel()
	fn := &failingNet{}
	tr := newTestTransport(t, fn)
	const writes = 200
	for i := 0; i < writes; i++ {
		if _, err := tr.WriteTo([]byte("ping"), "10.0.0.1:7000"); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := tr.droppedPackets(); got != writes {
			return fmt.Errorf("dropped %d packets; want all %d", got, writes)
		}
		return nil
	})
	// About 200 ms of writes against a backoff of 50 ms growing to 1 s:
	// a handful of attempts, nowhere near one per packet.
	if got := fn.sends.Load(); got > writes/4 {
		t.Errorf("%d send attempts for %d packets; want backoff to skip most", got, writes)
	}
}

// Per-peer senders end once their peer has been idle, so peers that are
// gone do not leak goroutines; a later packet starts a new sender.
func TestIdleSendersRetire(t *testing.T) {
	t.Parallel()
	cn := &countingNet{}
	tr := newTestTransport(t, cn)
	tr.idleTimeout = 50 * time.Millisecond
	peers := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.mu.peers)
	}
	for i := 0; i < 10; i++ {
		if _, err := tr.WriteTo([]byte("x"), fmt.Sprintf("10.0.0.%d:7000", i)); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if n := peers(); n != 0 {
			return fmt.Errorf("%d senders still running; want 0", n)
		}
		return nil
	})
	if _, err := tr.WriteTo([]byte("x"), "10.0.0.1:7000"); err != nil {
		t.Fatalf("WriteTo after retire: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := cn.sends.Load(); got != 11 {
			return fmt.Errorf("%d packets sent; want 11", got)
		}
		return nil
	})
}

// DeliverPacket never blocks: past the inbound queue, packets are dropped
// and counted.
func TestDeliverPacketDropsWhenFull(t *testing.T) {
	t.Parallel()
	tr := newTestTransport(t, &countingNet{})
	const extra = 100
	for i := 0; i < inboundPacketQueueLen+extra; i++ {
		tr.deliverPacket("10.0.0.2:7000", []byte("x"))
	}
	if got := tr.droppedPackets(); got != extra {
		t.Errorf("dropped %d; want %d", got, extra)
	}
	p := <-tr.PacketCh()
	if p.From.String() != "10.0.0.2:7000" || string(p.Buf) != "x" {
		t.Errorf("packet from %v with %q; want from 10.0.0.2:7000 with %q", p.From, p.Buf, "x")
	}
}

// Shutdown closes streams that were delivered but not picked up, and
// streams opened by DialTimeout.
func TestShutdownClosesStreams(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	tr := newTestTransport(t, n.endpoint("127.0.0.1:20001"))
	other := newTestTransport(t, &countingNet{})
	m := &Member{tr: other}
	n.attach("127.0.0.1:20002", m)

	inLocal, inRemote := net.Pipe()
	tr.deliverStream(inRemote)
	out, err := tr.DialTimeout("127.0.0.1:20002", time.Second)
	if err != nil {
		t.Fatalf("DialTimeout: %v", err)
	}
	if err := tr.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	_ = inLocal.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := inLocal.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("undelivered stream: read got %v; want closed", err)
	}
	if _, err := out.Write([]byte("x")); err == nil {
		t.Error("dialed stream still writable after Shutdown")
	}
}

func TestFinalAdvertiseAddr(t *testing.T) {
	tr := newTestTransport(t, &countingNet{})
	ip, port, err := tr.FinalAdvertiseAddr("0.0.0.0", 1)
	if err != nil || ip.String() != "127.0.0.1" || port != 20001 {
		t.Errorf("FinalAdvertiseAddr = %v, %d, %v; want 127.0.0.1, 20001, nil", ip, port, err)
	}
	wild := newTransport(&countingNet{}, netip.MustParseAddrPort("0.0.0.0:1"), slog.New(slog.DiscardHandler))
	if _, _, err := wild.FinalAdvertiseAddr("", 0); err == nil {
		t.Error("FinalAdvertiseAddr with a wildcard: got nil error")
	}
}

func TestSendBackoff(t *testing.T) {
	if got := sendBackoff(1); got != sendBackoffMin {
		t.Errorf("sendBackoff(1) = %v; want %v", got, sendBackoffMin)
	}
	if got := sendBackoff(2); got != 2*sendBackoffMin {
		t.Errorf("sendBackoff(2) = %v; want %v", got, 2*sendBackoffMin)
	}
	if got := sendBackoff(1000); got != sendBackoffMax {
		t.Errorf("sendBackoff(1000) = %v; want %v", got, sendBackoffMax)
	}
}
