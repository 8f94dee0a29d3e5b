package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/store"
)

const (
	testTick = 10 * time.Millisecond
	// testWait bounds every poll: generous, since -race on two cores is
	// slow, but each wait normally ends in milliseconds.
	testWait = 15 * time.Second
	// memInboxCap is the per-node queue of the in-memory network; when it
	// is full, messages are dropped, as a real transport would.
	memInboxCap = 1024
	// memStepTimeout bounds one delivery into Group.Step.
	memStepTimeout = time.Second
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openStore(t *testing.T, fs vfs.FS) *store.Store {
	t.Helper()
	s, err := store.Open(store.Config{Dir: "/db", FS: fs, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// testStore is a fresh in-memory store closed at cleanup.
func testStore(t *testing.T) *store.Store {
	s := openStore(t, vfs.NewMem())
	t.Cleanup(func() { s.Close() })
	return s
}

type nopTransport struct{}

func (nopTransport) Send([]Outbound) {}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// memNet is an in-memory network for raft messages: one bounded inbox and
// one delivery goroutine per attached node, and directed links that can
// be cut (rafttest/network.go and NATS raftTransportHub are the models).
type memNet struct {
	mu    sync.Mutex
	nodes map[uint64]*memNode
	cut   map[[2]uint64]bool // {from, to} -> messages dropped
	// drop, when set, drops each message from a node for which it
	// returns true (data: the marshaled raftpb.Message).
	drop func(from, to uint64, data []byte) bool
	wg   sync.WaitGroup
}

type memNode struct {
	inbox chan []byte
	stop  chan struct{}
}

func newMemNet(t *testing.T) *memNet {
	n := &memNet{nodes: map[uint64]*memNode{}, cut: map[[2]uint64]bool{}}
	t.Cleanup(n.close)
	return n
}

// transport returns the Transport of node from.
func (n *memNet) transport(from uint64) Transport { return memTransport{n, from} }

type memTransport struct {
	net  *memNet
	from uint64
}

func (t memTransport) Send(msgs []Outbound) {
	for _, m := range msgs {
		t.net.deliver(t.from, m)
	}
}

func (n *memNet) deliver(from uint64, m Outbound) {
	n.mu.Lock()
	dst, blocked := n.nodes[m.To], n.cut[[2]uint64{from, m.To}]
	if n.drop != nil && !blocked {
		blocked = n.drop(from, m.To, m.Data)
	}
	n.mu.Unlock()
	if dst == nil || blocked {
		return
	}
	select {
	case dst.inbox <- m.Data:
	default: // full: drop, raft retries
	}
}

// attach starts delivering messages for id into g.
func (n *memNet) attach(id uint64, g *Group) {
	node := &memNode{inbox: make(chan []byte, memInboxCap), stop: make(chan struct{})}
	n.mu.Lock()
	n.nodes[id] = node
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case data := <-node.inbox:
				ctx, cancel := context.WithTimeout(context.Background(), memStepTimeout)
				err := g.Step(ctx, data)
				cancel()
				if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
					panic(fmt.Sprintf("memnet: step into node %d: %v", id, err))
				}
			case <-node.stop:
				return
			}
		}
	}()
}

// detach stops delivering to id; messages to it are dropped.
func (n *memNet) detach(id uint64) {
	n.mu.Lock()
	node := n.nodes[id]
	delete(n.nodes, id)
	n.mu.Unlock()
	if node != nil {
		close(node.stop)
	}
}

// isolate cuts every link to and from id.
func (n *memNet) isolate(id uint64, others []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range others {
		if o != id {
			n.cut[[2]uint64{id, o}] = true
			n.cut[[2]uint64{o, id}] = true
		}
	}
}

func (n *memNet) heal() {
	n.mu.Lock()
	n.cut = map[[2]uint64]bool{}
	n.mu.Unlock()
}

func (n *memNet) close() {
	n.mu.Lock()
	ids := make([]uint64, 0, len(n.nodes))
	for id := range n.nodes {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.detach(id)
	}
	n.wg.Wait()
}

// cluster is a set of groups on one memNet, each with its own store.
// The groups in boot bootstrap the raft group; those added by join start
// with no peers and wait to be added.
type cluster struct {
	t      *testing.T
	ids    []uint64 // every node, in the order started
	boot   []uint64 // the bootstrap voters
	net    *memNet
	log    *slog.Logger
	tweak  func(*Config)
	stores map[uint64]*store.Store
	groups map[uint64]*Group
}

func newCluster(t *testing.T, ids []uint64, tweak func(*Config)) *cluster {
	c := &cluster{
		t: t, ids: slices.Clone(ids), boot: slices.Clone(ids), log: testkit.Logger(t), net: newMemNet(t), tweak: tweak,
		stores: map[uint64]*store.Store{}, groups: map[uint64]*Group{},
	}
	for _, id := range ids {
		c.stores[id] = testStore(t)
	}
	for _, id := range ids {
		c.start(id)
	}
	return c
}

func (c *cluster) config(id uint64) Config {
	cfg := DefaultLocalConfig()
	cfg.NodeID = id
	if slices.Contains(c.boot, id) {
		cfg.Peers = c.boot
	}
	cfg.Store = c.stores[id]
	cfg.Transport = c.net.transport(id)
	cfg.Logger = c.log
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	return cfg
}

func (c *cluster) start(id uint64) {
	c.t.Helper()
	g, err := New(c.config(id))
	if err != nil {
		c.t.Fatalf("new group %d: %v", id, err)
	}
	c.net.attach(id, g)
	if err := g.Start(); err != nil {
		c.t.Fatalf("start group %d: %v", id, err)
	}
	c.t.Cleanup(func() { g.Close() })
	c.groups[id] = g
}

// join starts a new node with an empty store and no peers ("join" mode):
// it takes part once a member adds it.
func (c *cluster) join(id uint64) *Group {
	c.t.Helper()
	if slices.Contains(c.ids, id) {
		c.t.Fatalf("node %d exists", id)
	}
	c.ids = append(c.ids, id)
	c.stores[id] = testStore(c.t)
	c.start(id)
	return c.groups[id]
}

// kill closes a group and cuts it off the network.
func (c *cluster) kill(id uint64) {
	c.net.detach(id)
	if err := c.groups[id].Close(); err != nil {
		c.t.Fatalf("close group %d: %v", id, err)
	}
	delete(c.groups, id)
}

// restart closes a group and starts a new one on the same store, as a
// process restart would.
func (c *cluster) restart(id uint64) {
	c.t.Helper()
	c.kill(id)
	c.start(id)
}

// leader waits until every running group names the same running leader.
func (c *cluster) leader() uint64 {
	c.t.Helper()
	var lead uint64
	testkit.WaitFor(c.t, testWait, func() error {
		lead = 0
		for id, g := range c.groups {
			l := g.Leader()
			if l == 0 {
				return fmt.Errorf("node %d knows no leader", id)
			}
			if lead != 0 && l != lead {
				return fmt.Errorf("nodes disagree on the leader: %d and %d", lead, l)
			}
			lead = l
		}
		if c.groups[lead] == nil {
			return fmt.Errorf("leader %d is not running", lead)
		}
		return nil
	})
	return lead
}

func (c *cluster) follower(lead uint64) uint64 {
	for _, id := range c.ids {
		if id != lead && c.groups[id] != nil {
			return id
		}
	}
	c.t.Fatalf("no follower of %d is running", lead)
	return 0
}

// converged waits until every running group holds the same content as
// want (Applied may differ: the state is what must agree).
func (c *cluster) converged(want Meta) {
	c.t.Helper()
	testkit.WaitFor(c.t, testWait, func() error {
		for id, g := range c.groups {
			if err := sameContent(g.Meta(), want); err != nil {
				return fmt.Errorf("node %d: %w", id, err)
			}
		}
		return nil
	})
}

// sameContent compares all of Meta but Applied.
func sameContent(got, want Meta) error {
	got.Applied, want.Applied = 0, 0
	if !metaEqual(got, want) {
		return fmt.Errorf("state differs:\ngot  %s\nwant %s", fmtMeta(got), fmtMeta(want))
	}
	return nil
}
