package faults

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
)

// arrival is one datagram a test endpoint received.
type arrival struct {
	seq  uint32
	from netip.AddrPort
	at   time.Time
}

// endpoint is a test node: a UDP socket on loopback that records what it
// receives.
type endpoint struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  []arrival
	done chan struct{}
}

func newEndpoint(t *testing.T) *endpoint {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{conn: c, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n >= 4 {
				e.mu.Lock()
				e.got = append(e.got, arrival{binary.BigEndian.Uint32(buf), from, time.Now()})
				e.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-e.done })
	return e
}

func (e *endpoint) addr() netip.AddrPort { return e.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (e *endpoint) arrivals() []arrival {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]arrival(nil), e.got...)
}

func (e *endpoint) send(t *testing.T, to netip.AddrPort, seq uint32) {
	t.Helper()
	var b [32]byte
	binary.BigEndian.PutUint32(b[:], seq)
	if _, err := e.conn.WriteToUDPAddrPort(b[:], to); err != nil {
		t.Fatal(err)
	}
}

// relayFixture starts n endpoints and a relay in front of them.
func relayFixture(t *testing.T, n int) ([]*endpoint, *Relay) {
	t.Helper()
	eps := make([]*endpoint, n)
	cfg := RelayConfig{Seed: 1, MaxDelayed: DefaultMaxDelayed, Logger: slog.New(slog.DiscardHandler)}
	for i := range eps {
		eps[i] = newEndpoint(t)
		cfg.Nodes = append(cfg.Nodes, RelayNode{Real: eps[i].addr(), Relay: netip.MustParseAddrPort("127.0.0.1:0")})
	}
	r, err := StartRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return eps, r
}

// pump sends count datagrams from eps[from] to node to's relay address,
// in batches the relay has read before the next goes, so no socket
// buffer overflows and every loss is the relay's doing.
func pump(t *testing.T, r *Relay, eps []*endpoint, from, to, count int) {
	t.Helper()
	const batch = 50
	dst := r.Nodes()[to].Relay
	base := r.Stats().Received
	for sent := 0; sent < count; {
		for i := 0; i < batch && sent < count; i++ {
			eps[from].send(t, dst, uint32(sent))
			sent++
		}
		want := base + uint64(sent)
		testkit.WaitFor(t, 5*time.Second, func() error {
			if got := r.Stats().Received; got < want {
				return fmt.Errorf("relay received %d; want %d", got, want)
			}
			return nil
		})
	}
}

// In normal mode the relay delivers every datagram, each node sees the
// other at its relay address, and answers find their way back.
func TestRelayTransparent(t *testing.T) {
	eps, r := relayFixture(t, 2)
	nodes := r.Nodes()
	const count = 200
	pump(t, r, eps, 0, 1, count)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := len(eps[1].arrivals()); got != count {
			return fmt.Errorf("node 2 got %d datagrams; want %d", got, count)
		}
		return nil
	})
	for _, a := range eps[1].arrivals() {
		if a.from != nodes[0].Relay {
			t.Fatalf("node 2 saw a datagram from %v; want node 1's relay address %v", a.from, nodes[0].Relay)
		}
	}
	// Node 2 answers the address it saw.
	eps[1].send(t, nodes[0].Relay, 7)
	testkit.WaitFor(t, 5*time.Second, func() error {
		got := eps[0].arrivals()
		if len(got) != 1 {
			return fmt.Errorf("node 1 got %d answers; want 1", len(got))
		}
		if got[0].from != nodes[1].Relay {
			return fmt.Errorf("answer from %v; want node 2's relay address %v", got[0].from, nodes[1].Relay)
		}
		return nil
	})
	if st := r.Stats(); st.Dropped != 0 || st.Duplicated != 0 || st.Unknown != 0 {
		t.Errorf("stats %+v; want no drops, duplicates or unknown senders", st)
	}
}

func TestRelayDrops(t *testing.T) {
	eps, r := relayFixture(t, 2)
	if err := r.SetChaos(Chaos{Drop: 0.3}); err != nil {
		t.Fatal(err)
	}
	const count = 2000
	pump(t, r, eps, 0, 1, count)
	st := r.Stats()
	// 30% of 2000 is 600 with a standard deviation of about 20.
	if st.Dropped < 500 || st.Dropped > 700 {
		t.Errorf("dropped %d of %d; want about 600", st.Dropped, count)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got, want := len(eps[1].arrivals()), count-int(st.Dropped); got != want {
			return fmt.Errorf("delivered %d; want %d (sent %d, dropped %d)", got, want, count, st.Dropped)
		}
		return nil
	})
}

func TestRelayDuplicates(t *testing.T) {
	eps, r := relayFixture(t, 2)
	if err := r.SetChaos(Chaos{Dup: 0.05}); err != nil {
		t.Fatal(err)
	}
	const count = 4000
	pump(t, r, eps, 0, 1, count)
	st := r.Stats()
	// 5% of 4000 is 200, standard deviation about 14.
	if st.Duplicated < 140 || st.Duplicated > 260 {
		t.Errorf("duplicated %d of %d; want about 200", st.Duplicated, count)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		seen := make(map[uint32]int)
		for _, a := range eps[1].arrivals() {
			seen[a.seq]++
		}
		twice := 0
		for _, n := range seen {
			if n == 2 {
				twice++
			}
		}
		if len(seen) != count || twice != int(st.Duplicated) {
			return fmt.Errorf("%d distinct datagrams, %d twice; want %d and %d", len(seen), twice, count, st.Duplicated)
		}
		return nil
	})
}

func TestRelayDelays(t *testing.T) {
	eps, r := relayFixture(t, 2)
	const lo, hi = 30 * time.Millisecond, 60 * time.Millisecond
	if err := r.SetChaos(Chaos{DelayMin: lo, DelayMax: hi}); err != nil {
		t.Fatal(err)
	}
	const count = 200
	sent := make([]time.Time, count)
	dst := r.Nodes()[1].Relay
	for i := range count {
		sent[i] = time.Now()
		eps[0].send(t, dst, uint32(i))
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := len(eps[1].arrivals()); got != count {
			return fmt.Errorf("delivered %d; want %d", got, count)
		}
		return nil
	})
	reordered := 0
	var last uint32
	for i, a := range eps[1].arrivals() {
		if d := a.at.Sub(sent[a.seq]); d < lo {
			t.Errorf("datagram %d arrived after %v; want at least %v", a.seq, d, lo)
		}
		if i > 0 && a.seq < last {
			reordered++
		}
		last = a.seq
	}
	// Delays drawn over a 30 ms span for datagrams sent microseconds
	// apart reorder many of them.
	if reordered == 0 {
		t.Errorf("no datagram overtook another; want reordering")
	}
	if st := r.Stats(); st.Delayed != count {
		t.Errorf("delayed %d; want %d", st.Delayed, count)
	}
}

// Chaos limited to some nodes leaves the other links alone.
func TestRelayChaosScope(t *testing.T) {
	eps, r := relayFixture(t, 3)
	if err := r.SetChaos(Chaos{Drop: 1, Nodes: []int{3}}); err != nil {
		t.Fatal(err)
	}
	pump(t, r, eps, 0, 1, 100) // 1 -> 2: untouched
	pump(t, r, eps, 0, 2, 100) // 1 -> 3: all dropped
	pump(t, r, eps, 2, 1, 100) // 3 -> 2: all dropped
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := len(eps[1].arrivals()); got != 100 {
			return fmt.Errorf("node 2 got %d; want the 100 node 1 sent", got)
		}
		return nil
	})
	if got := len(eps[2].arrivals()); got != 0 {
		t.Errorf("node 3 got %d datagrams; want 0", got)
	}
	if st := r.Stats(); st.Dropped != 200 {
		t.Errorf("dropped %d; want 200", st.Dropped)
	}
	r.Heal()
	pump(t, r, eps, 0, 2, 10)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if got := len(eps[2].arrivals()); got != 10 {
			return fmt.Errorf("after heal node 3 got %d; want 10", got)
		}
		return nil
	})
}

// A datagram from an address that is no node's is dropped and counted.
func TestRelayUnknownSender(t *testing.T) {
	eps, r := relayFixture(t, 2)
	stranger := newEndpoint(t)
	stranger.send(t, r.Nodes()[1].Relay, 1)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if st := r.Stats(); st.Unknown != 1 {
			return fmt.Errorf("unknown %d; want 1", st.Unknown)
		}
		return nil
	})
	if got := len(eps[1].arrivals()); got != 0 {
		t.Errorf("node 2 got %d datagrams from a stranger; want 0", got)
	}
}

func TestChaosValidate(t *testing.T) {
	for _, c := range []Chaos{{Drop: -0.1}, {Dup: 1.5}, {DelayMin: time.Second, DelayMax: time.Millisecond}} {
		if c.Validate() == nil {
			t.Errorf("Chaos %+v validated; want an error", c)
		}
	}
}
