package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/skuldd/skuldd/internal/testkit"
)

// memNet connects Members in one process: packets go straight to the
// destination's DeliverPacket, streams are net.Pipe halves handed to its
// DeliverStream. A node can be cut off (its packets dropped both ways and
// its streams refused) and healed.
type memNet struct {
	mu    sync.Mutex
	nodes map[string]*Member
	cut   map[string]bool
}

var errCut = errors.New("memnet: node is cut off")

func newMemNet() *memNet {
	return &memNet{nodes: make(map[string]*Member), cut: make(map[string]bool)}
}

func (n *memNet) attach(addr string, m *Member) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[addr] = m
}

func (n *memNet) detach(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nodes, addr)
}

func (n *memNet) setCut(addr string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[addr] = cut
}

// endpoint is the Net of the node listening at self.
func (n *memNet) endpoint(self string) Net { return &memEndpoint{n: n, self: self} }

func (n *memNet) route(from, to string) (*Member, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[from] || n.cut[to] {
		return nil, errCut
	}
	m := n.nodes[to]
	if m == nil {
		return nil, fmt.Errorf("memnet: nobody listens at %s", to)
	}
	return m, nil
}

type memEndpoint struct {
	n    *memNet
	self string
}

func (e *memEndpoint) SendPacket(ctx context.Context, addr string, b []byte) error {
	dst, err := e.n.route(e.self, addr)
	if err != nil {
		return err
	}
	dst.DeliverPacket(e.self, b)
	return nil
}

func (e *memEndpoint) OpenStream(ctx context.Context, addr string) (net.Conn, error) {
	dst, err := e.n.route(e.self, addr)
	if err != nil {
		return nil, err
	}
	local, remote := net.Pipe()
	dst.DeliverStream(remote)
	return local, nil
}

// testAddr is the address of test node id.
func testAddr(id uint64) string { return fmt.Sprintf("127.0.0.1:%d", 20000+id) }

// testConfig is DefaultLocalConfig for node id on n.
func testConfig(t *testing.T, n *memNet, id uint64) Config {
	cfg := DefaultLocalConfig()
	cfg.ID = id
	cfg.Addr = testAddr(id)
	cfg.Meta = []byte(fmt.Sprintf("meta-%d", id))
	cfg.Net = n.endpoint(cfg.Addr)
	cfg.Logger = testkit.LoggerAt(t, slog.LevelDebug)
	return cfg
}

// startMember creates a Member from cfg and attaches it to n; it is shut
// down when the test ends.
func startMember(t *testing.T, n *memNet, cfg Config) *Member {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%d): %v", cfg.ID, err)
	}
	n.attach(cfg.Addr, m)
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("Shutdown(%d): %v", cfg.ID, err)
		}
	})
	return m
}

// startCluster starts members 1..size, all joined through member 1.
func startCluster(t *testing.T, n *memNet, size int) []*Member {
	t.Helper()
	ms := make([]*Member, 0, size)
	for id := uint64(1); id <= uint64(size); id++ {
		ms = append(ms, startMember(t, n, testConfig(t, n, id)))
	}
	for _, m := range ms[1:] {
		if got, err := m.Join([]string{testAddr(1)}); err != nil || got != 1 {
			t.Fatalf("Join from %d: got %d, %v; want 1, nil", m.LocalID(), got, err)
		}
	}
	return ms
}

// viewIs reports how m's view differs from want (ID -> state), or nil.
func viewIs(m *Member, want map[uint64]State) error {
	got := m.Members()
	if len(got) != len(want) {
		return fmt.Errorf("node %d sees %v; want %v", m.LocalID(), got, want)
	}
	for _, p := range got {
		if s, ok := want[p.ID]; !ok || s != p.State {
			return fmt.Errorf("node %d sees %v; want %v", m.LocalID(), got, want)
		}
		// Lookup must agree with Members (the view may move between the
		// two reads, so a mismatch is reported as not there yet).
		if addr, st, ok := m.Lookup(p.ID); !ok || addr != p.Addr || st != p.State {
			return fmt.Errorf("node %d: Lookup(%d) = %q, %v, %v; Members says %q, %v", m.LocalID(), p.ID, addr, st, ok, p.Addr, p.State)
		}
	}
	if _, _, ok := m.Lookup(1 << 62); ok {
		return fmt.Errorf("node %d: Lookup of an unknown id found it", m.LocalID())
	}
	return nil
}

// stateOf returns the state of peer id in m's view, or 0 if absent.
func stateOf(m *Member, id uint64) State {
	for _, p := range m.Members() {
		if p.ID == id {
			return p.State
		}
	}
	return 0
}
