package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/node/nodetest"
)

// holders records which member works on which index, and fails the test
// the moment two work on one.
type holders struct {
	t  *testing.T
	mu sync.Mutex
	by map[int]string // index -> member at work on it
	// working: member -> its shard, while its work function runs.
	working map[string]client.Shard
}

func (h *holders) work(member string) func(ctx context.Context, s client.Shard) error {
	return func(ctx context.Context, s client.Shard) error {
		h.mu.Lock()
		if other, ok := h.by[s.Index]; ok {
			h.t.Errorf("member %s starts on index %d of generation %d while %s works on it", member, s.Index, s.Generation, other)
		}
		h.by[s.Index] = member
		h.working[member] = s
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		if h.by[s.Index] == member {
			delete(h.by, s.Index)
		}
		delete(h.working, member)
		h.mu.Unlock()
		return nil
	}
}

// settled waits until exactly members work, on the indexes 0..len-1 of
// one generation, and returns that generation.
func (h *holders) settled(members ...string) uint64 {
	var gen uint64
	nodetest.WaitFor(h.t, nodetest.ClusterWait, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		var idx []int
		gen = 0
		for _, m := range members {
			s, ok := h.working[m]
			if !ok {
				return fmt.Errorf("member %s not at work (working: %v)", m, h.working)
			}
			if gen != 0 && s.Generation != gen || s.Count != len(members) {
				return fmt.Errorf("shards %v", h.working)
			}
			gen = s.Generation
			idx = append(idx, s.Index)
		}
		if len(h.working) != len(members) {
			return fmt.Errorf("working: %v; want only %v", h.working, members)
		}
		slices.Sort(idx)
		for i, x := range idx {
			if x != i {
				return fmt.Errorf("indexes %v", idx)
			}
		}
		return nil
	})
	return gen
}

// TestShardsRebalance: three members of a set split indexes 0..2; one is
// cut off (it can renew no more) and, once its lease ran out, the other
// two split 0..1 in a later generation; a new member joins and the three
// split 0..2 again. No index is ever worked on by two members at once.
func TestShardsRebalance(t *testing.T) {
	cl := nodetest.NewCluster(t, 3)
	nodes := []string{cl.Addr(0), cl.Addr(1), cl.Addr(2)}
	h := &holders{t: t, by: map[int]string{}, working: map[string]client.Shard{}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := client.ShardConfig{TTL: 2 * time.Second, StopTimeout: time.Second}
	var wg sync.WaitGroup
	start := func(name string) (*client.ShardMember, *client.Client) {
		c, err := client.New(client.Config{Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		m, err := c.JoinShards(ctx, "indexers", cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := m.Run(ctx, h.work(name)); err != nil && !errors.Is(err, context.Canceled) && name != "b" {
				t.Errorf("member %s: Run: %v", name, err)
			}
		})
		return m, c
	}
	start("a")
	_, bc := start("b")
	start("c")
	g1 := h.settled("a", "b", "c")

	// b is cut off: its client is closed, so it can no longer renew. It
	// stops its work when its lease runs out; the cluster expires it 5 s
	// later, and a and c take 0..1.
	_ = bc.Close()
	g2 := h.settled("a", "c")
	if g2 <= g1 {
		t.Fatalf("generation %d after b's expiry, %d before", g2, g1)
	}
	v, err := newClient(t, client.Config{Nodes: nodes}).ShardMembers(ctx, "indexers")
	if err != nil || len(v.Members) != 2 || v.Count != 2 || v.Pending != nil {
		t.Fatalf("members after the expiry: %+v, %v", v, err)
	}

	start("d")
	g3 := h.settled("a", "c", "d")
	if g3 <= g2 {
		t.Fatalf("generation %d after d joined, %d before", g3, g2)
	}
	cancel()
	wg.Wait()
	v, err = newClient(t, client.Config{Nodes: nodes}).ShardMembers(context.Background(), "indexers")
	if err != nil || len(v.Members) != 0 {
		t.Fatalf("after every member left: %+v, %v", v, err)
	}
}
