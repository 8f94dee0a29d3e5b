package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/wire"
)

func validConfig(t *testing.T) Config {
	return Config{
		Self: 1, Addr: "127.0.0.1:1", JoinRetry: 20 * time.Millisecond, RejoinInterval: time.Second,
		LocalGossip: true, RaftTick: 10 * time.Millisecond, Partitions: 4, Replicas: 3,
		Store: &store.Store{}, Ready: func() bool { return true }, Clock: clock.Real{},
		Log: testkit.Logger(t), RaftLog: testkit.Logger(t),
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig(t).Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no id", func(c *Config) { c.Self = 0 }, "no node id"},
		{"no address", func(c *Config) { c.Addr = "" }, "no address"},
		{"no join retry", func(c *Config) { c.JoinRetry = 0 }, "join retry"},
		{"no rejoin interval", func(c *Config) { c.RejoinInterval = 0 }, "rejoin interval"},
		{"no raft tick", func(c *Config) { c.RaftTick = 0 }, "raft tick"},
		{"no replicas", func(c *Config) { c.Replicas = 0 }, "replicas 0"},
		{"no store", func(c *Config) { c.Store = nil }, "no store"},
		{"no readiness", func(c *Config) { c.Ready = nil }, "no readiness"},
		{"no clock", func(c *Config) { c.Clock = nil }, "no clock"},
		{"no raft logger", func(c *Config) { c.RaftLog = nil }, "no logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

// testMember is one node's membership on a MemNet, not started: start
// it with start.
type testMember struct {
	*Membership
	pool    *peer.Pool
	loopCtx context.Context
}

func newTestMember(t *testing.T, mn *peer.MemNet, id uint64, ready *atomic.Bool, join ...string) *testMember {
	t.Helper()
	st, err := store.Open(store.Config{Dir: "/db", FS: vfs.NewMem(), Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := validConfig(t)
	cfg.Self, cfg.Addr, cfg.Join, cfg.Store, cfg.Ready = id, addrOf(id), join, st, ready.Load
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := peer.NewMux()
	m.Register(mux)
	h := wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
		m.Learn(req.PeerID, req.Remote)
		mux.Serve(ctx, req, w)
	})
	end, err := mn.Attach(cfg.Addr, id, peer.Handlers{Peer: h, Raw: m.RawHandler})
	if err != nil {
		t.Fatal(err)
	}
	pool := peer.NewPool(end, time.Second, 5*time.Second)
	loopCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		m.Leave(time.Second)
		cancel()
		m.Stop()
		pool.Close()
		_ = end.Close()
		m.Close()
		_ = st.Close()
	})
	return &testMember{Membership: m, pool: pool, loopCtx: loopCtx}
}

func addrOf(id uint64) string { return fmt.Sprintf("127.0.0.1:%d", 7000+id) }

// TestFoundAndJoin: a node without a join list founds a cluster with its
// flags' counts; a fresh node with one is admitted through it, takes the
// cluster's counts whatever its own flags, and both registries and
// views name both nodes at their addresses. Admission refuses before
// the admitting node serves, and bad ids or addresses.
func TestFoundAndJoin(t *testing.T) {
	mn := peer.NewMemNet()
	var ready1, ready2 atomic.Bool
	a := newTestMember(t, mn, 1, &ready1)
	if g := a.Group(); g != nil {
		t.Fatal("metadata group before Start")
	}
	if _, err := a.View(); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("View before Start = %v; want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cc, err := a.Start(ctx, a.loopCtx, a.pool)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Partitions != 4 || cc.Replicas != 3 || cc.ClusterID == "" {
		t.Fatalf("founded %+v; want 4 partitions, 3 replicas, an id", cc)
	}

	// Admission waits for the node to serve.
	if _, err := a.admit(ctx, 2, addrOf(2)); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("admit before the node serves = %v; want ErrUnavailable", err)
	}
	ready1.Store(true)
	for _, tc := range []struct {
		id   uint64
		addr string
	}{{0, addrOf(2)}, {1, addrOf(2)}, {2, "no port"}} {
		if _, err := a.admit(ctx, tc.id, tc.addr); wire.CodeOf(err) != wire.CodeInvalid {
			t.Errorf("admit(%d, %q) = %v; want invalid", tc.id, tc.addr, err)
		}
	}

	b := newTestMember(t, mn, 2, &ready2, addrOf(1))
	b.cfg.Partitions, b.cfg.Replicas = 8, 5 // a joiner's flags do not count
	cc2, err := b.Start(ctx, b.loopCtx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if cc2 != cc {
		t.Fatalf("joiner's config %+v; want the cluster's %+v", cc2, cc)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, m := range []*testMember{a, b} {
			v, err := m.View()
			if err != nil {
				return err
			}
			var ids []uint64
			for _, mv := range v.Members {
				if mv.Addr != addrOf(mv.ID) {
					return fmt.Errorf("node %d sees node %d at %q", m.cfg.Self, mv.ID, mv.Addr)
				}
				ids = append(ids, mv.ID)
			}
			if !slices.Equal(ids, []uint64{1, 2}) || v.ClusterID != cc.ClusterID {
				return fmt.Errorf("node %d's view: members %v, cluster %q", m.cfg.Self, ids, v.ClusterID)
			}
			if !m.Alive(3 - m.cfg.Self) {
				return fmt.Errorf("node %d does not see node %d alive", m.cfg.Self, 3-m.cfg.Self)
			}
		}
		return nil
	})
	if got := b.AddrOf(1); got != addrOf(1) {
		t.Errorf("node 2's address of node 1 = %q", got)
	}
	if got := a.AddrOf(9); got != "" {
		t.Errorf("address of an unknown node = %q; want none", got)
	}
}
