package member

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
)

// detectTimeout bounds how long any membership change may take to be seen
// in these tests. Expected times are 1-3 s with DefaultLocalConfig; the
// rest is headroom for -race on a loaded 2-core machine.
const detectTimeout = 15 * time.Second

func allAlive(ids ...uint64) map[uint64]State {
	want := make(map[uint64]State, len(ids))
	for _, id := range ids {
		want[id] = Alive
	}
	return want
}

// Three members join through one seed; each sees all three alive, with
// the right addresses and metadata, sorted by ID.
func TestJoinThroughOneSeed(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 3)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	for _, m := range ms {
		got := m.Members()
		for i, p := range got {
			id := uint64(i + 1)
			if p.ID != id || p.Addr != testAddr(id) || string(p.Meta) != fmt.Sprintf("meta-%d", id) {
				t.Errorf("node %d: Members()[%d] = %+v; want id %d at %s with meta-%d",
					m.LocalID(), i, p, id, testAddr(id), id)
			}
		}
		if alive := m.Alive(); len(alive) != 3 {
			t.Errorf("node %d: Alive() = %v; want 3 peers", m.LocalID(), alive)
		}
	}
}

// A member that leaves gracefully is reported Left, and the leaver sees
// itself Left.
func TestLeaveIsReportedAsLeft(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 3)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	if err := ms[2].Leave(5 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if got := stateOf(ms[2], 3); got != Left {
		t.Errorf("leaver sees itself %v; want left", got)
	}
	if _, err := ms[2].Join([]string{testAddr(1)}); !errors.Is(err, ErrLeft) {
		t.Errorf("Join after Leave: got %v; want ErrLeft", err)
	}
	if err := ms[2].SetMeta([]byte("x")); !errors.Is(err, ErrLeft) {
		t.Errorf("SetMeta after Leave: got %v; want ErrLeft", err)
	}
	if err := ms[2].Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	want := map[uint64]State{1: Alive, 2: Alive, 3: Left}
	for _, m := range ms[:2] {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, want) })
	}
	// Left is final: failure detection must not turn it into Dead.
	time.Sleep(time.Second)
	for _, m := range ms[:2] {
		if err := viewIs(m, want); err != nil {
			t.Error(err)
		}
	}
}

// A member that stops without leaving (a crash) is reported Dead.
func TestCrashIsReportedAsDead(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 3)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	n.detach(testAddr(3))
	if err := ms[2].Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	want := map[uint64]State{1: Alive, 2: Alive, 3: Dead}
	for _, m := range ms[:2] {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, want) })
	}
}

// A member cut off from the network is reported Dead; once healed, it and
// the others see each other alive again.
func TestCutOffIsDeadThenAliveAfterHeal(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 3)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	n.setCut(testAddr(3), true)
	want := map[uint64]State{1: Alive, 2: Alive, 3: Dead}
	for _, m := range ms[:2] {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, want) })
	}
	testkit.WaitFor(t, detectTimeout, func() error {
		return viewIs(ms[2], map[uint64]State{1: Dead, 2: Dead, 3: Alive})
	})
	n.setCut(testAddr(3), false)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
}

// A partition that outlasts GossipToTheDeadTime (after which memberlist
// forgets the dead and neither probes nor gossips to them) still heals:
// the reconnect loop rejoins dead peers.
func TestLongPartitionHealsThroughReconnect(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := make([]*Member, 0, 3)
	for id := uint64(1); id <= 3; id++ {
		cfg := testConfig(t, n, id)
		cfg.GossipToTheDeadTime = 300 * time.Millisecond
		ms = append(ms, startMember(t, n, cfg))
	}
	for _, m := range ms[1:] {
		if _, err := m.Join([]string{testAddr(1)}); err != nil {
			t.Fatalf("Join: %v", err)
		}
	}
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	n.setCut(testAddr(3), true)
	for _, m := range ms[:2] {
		testkit.WaitFor(t, detectTimeout, func() error {
			return viewIs(m, map[uint64]State{1: Alive, 2: Alive, 3: Dead})
		})
	}
	// Several GossipToTheDeadTimes, so memberlist has dropped node 3.
	time.Sleep(1500 * time.Millisecond)
	n.setCut(testAddr(3), false)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
}

// Dead and Left peers are forgotten after DeadRetention.
func TestDeadPeersAreForgotten(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	cfg1 := testConfig(t, n, 1)
	cfg1.DeadRetention = 500 * time.Millisecond
	m1 := startMember(t, n, cfg1)
	m2 := startMember(t, n, testConfig(t, n, 2))
	if _, err := m2.Join([]string{testAddr(1)}); err != nil {
		t.Fatalf("Join: %v", err)
	}
	testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m1, allAlive(1, 2)) })
	n.detach(testAddr(2))
	if err := m2.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m1, allAlive(1)) })
}

// A crashed member restarted with the same ID and address rejoins and is
// alive again, with its new metadata.
func TestRestartWithSameIDRejoins(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 3)
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	n.detach(testAddr(3))
	if err := ms[2].Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	want := map[uint64]State{1: Alive, 2: Alive, 3: Dead}
	for _, m := range ms[:2] {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, want) })
	}

	cfg := testConfig(t, n, 3)
	cfg.Meta = []byte("restarted")
	again := startMember(t, n, cfg)
	if _, err := again.Join([]string{testAddr(1)}); err != nil {
		t.Fatalf("Join after restart: %v", err)
	}
	for _, m := range []*Member{ms[0], ms[1], again} {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2, 3)) })
	}
	testkit.WaitFor(t, detectTimeout, func() error {
		for _, p := range ms[0].Members() {
			if p.ID == 3 && string(p.Meta) != "restarted" {
				return fmt.Errorf("node 1 sees meta %q for node 3; want %q", p.Meta, "restarted")
			}
		}
		return nil
	})
}

// SetMeta reaches the other members, and OnChange fires for it.
func TestSetMetaPropagates(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	var changes atomic.Int64
	cfg1 := testConfig(t, n, 1)
	cfg1.OnChange = func() { changes.Add(1) }
	m1 := startMember(t, n, cfg1)
	m2 := startMember(t, n, testConfig(t, n, 2))
	if _, err := m2.Join([]string{testAddr(1)}); err != nil {
		t.Fatalf("Join: %v", err)
	}
	testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m1, allAlive(1, 2)) })
	before := changes.Load()
	if err := m2.SetMeta([]byte("v2")); err != nil {
		t.Fatalf("SetMeta: %v", err)
	}
	testkit.WaitFor(t, detectTimeout, func() error {
		got := m1.Members()[1].Meta
		if !bytes.Equal(got, []byte("v2")) {
			return fmt.Errorf("node 1 sees meta %q for node 2; want %q", got, "v2")
		}
		return nil
	})
	testkit.WaitFor(t, detectTimeout, func() error {
		if changes.Load() == before {
			return errors.New("OnChange not called after the meta update")
		}
		return nil
	})
	if err := m2.SetMeta(make([]byte, MaxMetaSize+1)); err == nil {
		t.Error("SetMeta over MaxMetaSize: got nil error")
	}
}

// The ping hook carries the ack payload of the probed peer.
func TestPingHookCarriesAckPayload(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	got := make(chan string, 16)
	cfg1 := testConfig(t, n, 1)
	cfg1.OnPing = func(id uint64, rtt time.Duration, payload []byte) {
		select {
		case got <- fmt.Sprintf("%d:%s", id, payload):
		default:
		}
	}
	cfg2 := testConfig(t, n, 2)
	cfg2.AckPayload = func() []byte { return []byte("clock") }
	m1 := startMember(t, n, cfg1)
	startMember(t, n, cfg2)
	if _, err := m1.Join([]string{testAddr(2)}); err != nil {
		t.Fatalf("Join: %v", err)
	}
	select {
	case s := <-got:
		if s != "2:clock" {
			t.Errorf("OnPing got %q; want %q", s, "2:clock")
		}
	case <-time.After(detectTimeout):
		t.Fatal("OnPing never called")
	}
}

// After Shutdown, delivering traffic neither panics nor blocks, streams
// are closed, and the lifecycle methods return errors instead of
// panicking (memberlist panics on a Leave after Shutdown).
func TestDeliverAfterShutdown(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	m := startMember(t, n, testConfig(t, n, 1))
	if err := m.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	before := m.DroppedPackets()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2*inboundPacketQueueLen; i++ {
			m.DeliverPacket(testAddr(2), []byte("junk"))
		}
		m.DeliverPacket(testAddr(2), nil)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("DeliverPacket blocked after Shutdown")
	}
	if got, want := m.DroppedPackets()-before, uint64(2*inboundPacketQueueLen+1); got != want {
		t.Errorf("dropped after Shutdown: got %d; want %d", got, want)
	}

	local, remote := net.Pipe()
	m.DeliverStream(remote)
	_ = local.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := local.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read from stream delivered after Shutdown: got %v; want EOF (closed)", err)
	}

	if err := m.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("Leave after Shutdown: got %v; want ErrShutdown", err)
	}
	if _, err := m.Join([]string{testAddr(2)}); !errors.Is(err, ErrShutdown) {
		t.Errorf("Join after Shutdown: got %v; want ErrShutdown", err)
	}
	if err := m.SetMeta(nil); !errors.Is(err, ErrShutdown) {
		t.Errorf("SetMeta after Shutdown: got %v; want ErrShutdown", err)
	}
	if got := m.Members(); len(got) != 1 || got[0].ID != 1 {
		t.Errorf("Members after Shutdown: got %v; want only node 1", got)
	}
}

// Join refuses host names (membership does no DNS) and wildcards.
func TestJoinRefusesNonLiteralAddresses(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	m := startMember(t, n, testConfig(t, n, 1))
	for _, addrs := range [][]string{nil, {"localhost:20002"}, {"0.0.0.0:20002"}, {"127.0.0.1"}} {
		if got, err := m.Join(addrs); err == nil || got != 0 {
			t.Errorf("Join(%q): got %d, %v; want 0 and an error", addrs, got, err)
		}
	}
}

// Garbage from peers must not crash a node: random packets are ignored.
func TestGarbagePacketsAreHarmless(t *testing.T) {
	t.Parallel()
	n := newMemNet()
	ms := startCluster(t, n, 2)
	for i := 0; i < 500; i++ {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%300)
		ms[0].DeliverPacket(testAddr(2), b)
	}
	ms[0].DeliverPacket(testAddr(2), make([]byte, MaxPacketSize+1))
	for _, m := range ms {
		testkit.WaitFor(t, detectTimeout, func() error { return viewIs(m, allAlive(1, 2)) })
	}
}

func TestNodeNameRoundTrip(t *testing.T) {
	for _, id := range []uint64{1, 0xabc, 1<<64 - 1} {
		name := nodeName(id)
		if len(name) != 16 {
			t.Errorf("nodeName(%d) = %q; want 16 chars", id, name)
		}
		got, err := parseNodeName(name)
		if err != nil || got != id {
			t.Errorf("parseNodeName(%q) = %d, %v; want %d", name, got, err, id)
		}
	}
	for _, bad := range []string{"", "0000000000000000", "00000000000000AB", "xyz", "00000000000000001", "host.example"} {
		if _, err := parseNodeName(bad); err == nil {
			t.Errorf("parseNodeName(%q): got nil error", bad)
		}
	}
}

func TestMetaEnvelope(t *testing.T) {
	for _, tc := range []struct {
		meta    []byte
		leaving bool
	}{{nil, false}, {[]byte("x"), true}, {bytes.Repeat([]byte{7}, MaxMetaSize), false}} {
		b := encodeMeta(tc.meta, tc.leaving)
		meta, leaving, err := decodeMeta(b)
		if err != nil || !bytes.Equal(meta, tc.meta) || leaving != tc.leaving {
			t.Errorf("decodeMeta(encodeMeta(%q, %v)) = %q, %v, %v", tc.meta, tc.leaving, meta, leaving, err)
		}
	}
	if len(encodeMeta(make([]byte, MaxMetaSize), true)) > 512 {
		t.Error("envelope of MaxMetaSize bytes exceeds memberlist.MetaMaxSize")
	}
	for _, bad := range [][]byte{nil, {metaVersion}, {9, 0, 'x'}} {
		if _, _, err := decodeMeta(bad); err == nil {
			t.Errorf("decodeMeta(%v): got nil error", bad)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Alive: "alive", Suspect: "suspect", Dead: "dead", Left: "left", 0: "state(0)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q; want %q", s, got, want)
		}
	}
}
