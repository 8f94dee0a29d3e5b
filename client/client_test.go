package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// newClient returns a client of nodes, closed at the end of the test.
func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	_ = pc.Close()
	return addr
}

func TestNewChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  client.Config
	}{
		{"no nodes", client.Config{}},
		{"no port", client.Config{Nodes: []string{"127.0.0.1"}}},
		{"bad token", client.Config{Nodes: []string{"127.0.0.1:1"}, Token: "zz"}},
		{"negative retry", client.Config{Nodes: []string{"127.0.0.1:1"}, RetryFor: -time.Second}},
	} {
		if _, err := client.New(tc.cfg); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: New = %v; want ErrInvalid", tc.name, err)
		}
	}
}

func TestNewIDsGrowAndDiffer(t *testing.T) {
	a := newClient(t, client.Config{Nodes: []string{"127.0.0.1:1"}})
	b := newClient(t, client.Config{Nodes: []string{"127.0.0.1:1"}})
	seen := map[client.ID]bool{}
	var last client.ID
	for i := range 1000 {
		id := a.NewID()
		if i > 0 && id.Compare(last) <= 0 {
			t.Fatalf("id %s after %s: not growing", id, last)
		}
		if err := id.Check(); err != nil {
			t.Fatal(err)
		}
		seen[id], last = true, id
		if other := b.NewID(); seen[other] {
			t.Fatalf("two clients drew id %s", other)
		}
	}
}

// TestTaskLifecycle: enqueue, claim, progress, complete and read back,
// on one node.
func TestTaskLifecycle(t *testing.T) {
	cl := nodetest.NewCluster(t, 1)
	c := newClient(t, client.Config{Nodes: []string{cl.Addr(0)}})
	ctx := t.Context()
	e, err := c.Enqueue(ctx, client.Task{Queue: "q", Data: []byte("payload"), Priority: 3})
	if err != nil || e.ID.IsZero() || e.Acks != 1 {
		t.Fatalf("Enqueue = %+v, %v", e, err)
	}
	got, err := c.Claim(ctx, "q", client.ClaimOptions{TTL: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %+v, %v; want one task", got, err)
	}
	tk := got[0]
	if tk.ID != e.ID || string(tk.Data) != "payload" || tk.Claim != 0 || time.Until(tk.End) < 50*time.Second {
		t.Fatalf("claimed %+v; want task %s, claim 0, a minute's lease", tk, e.ID)
	}
	if _, err := c.Renew(ctx, tk.ID, tk.Claim, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(2) {
		if err := c.Update(ctx, tk.ID, tk.Claim, seq, []byte{byte('a' + seq)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Update(ctx, tk.ID, tk.Claim, 1, []byte("b")); err != nil {
		t.Fatalf("the same update again = %v; want nil", err)
	}
	if err := c.Complete(ctx, tk.ID, tk.Claim); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, tk.ID, tk.Claim); err != nil {
		t.Fatalf("the same completion again = %v; want nil", err)
	}
	info, err := c.Get(ctx, tk.ID)
	if err != nil || info.State != "completed" || len(info.Updates) != 2 {
		t.Fatalf("Get = %+v, %v; want completed with 2 updates", info, err)
	}
	if none, err := c.Claim(ctx, "q", client.ClaimOptions{}); err != nil || len(none) != 0 {
		t.Fatalf("Claim of an empty queue = %+v, %v; want none", none, err)
	}
}

// TestEnqueueIsIdempotent: a task enqueued again with its id is not
// duplicated; another spec under the same id is a conflict.
func TestEnqueueIsIdempotent(t *testing.T) {
	cl := nodetest.NewCluster(t, 1)
	c := newClient(t, client.Config{Nodes: []string{cl.Addr(0)}})
	ctx := t.Context()
	tk := client.Task{ID: c.NewID(), Queue: "q", Data: []byte("x")}
	batch := []client.Task{tk, {Queue: "q"}, {Queue: "q"}}
	first, err := c.EnqueueBatch(ctx, batch)
	if err != nil || len(first) != 3 || first[0].ID != tk.ID {
		t.Fatalf("EnqueueBatch = %+v, %v", first, err)
	}
	if _, err := c.Enqueue(ctx, tk); err != nil {
		t.Fatalf("the same task again = %v; want nil", err)
	}
	if n, err := c.Count(ctx, "q"); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
	tk.Data = []byte("other")
	if _, err := c.Enqueue(ctx, tk); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("another spec under the id = %v; want ErrConflict", err)
	}
}

// TestErrors: the node's refusals match the package's errors.
func TestErrors(t *testing.T) {
	cl := nodetest.NewCluster(t, 1)
	c := newClient(t, client.Config{Nodes: []string{cl.Addr(0)}})
	ctx := t.Context()
	var cerr *client.Error
	if _, err := c.Get(ctx, c.NewID()); !errors.Is(err, client.ErrNotFound) || !errors.As(err, &cerr) || cerr.Code != "not_found" {
		t.Fatalf("Get of an unknown id = %v; want ErrNotFound, code not_found", err)
	}
	if _, err := c.Enqueue(ctx, client.Task{}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Enqueue without a queue = %v; want ErrInvalid", err)
	}
	// A claim whose lease ran out is superseded by the next claim.
	if _, err := c.Enqueue(ctx, client.Task{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	first, err := c.Claim(ctx, "q", client.ClaimOptions{TTL: 50 * time.Millisecond})
	if err != nil || len(first) != 1 {
		t.Fatalf("Claim = %+v, %v", first, err)
	}
	var second []client.Claimed
	for len(second) == 0 {
		if second, err = c.Claim(ctx, "q", client.ClaimOptions{TTL: time.Minute, Wait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if second[0].Claim != first[0].Claim+1 {
		t.Fatalf("second claim %d after %d", second[0].Claim, first[0].Claim)
	}
	err = c.Complete(ctx, first[0].ID, first[0].Claim)
	if !errors.Is(err, client.ErrClaimSuperseded) || !errors.Is(err, client.ErrClaimLost) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("complete under the superseded claim = %v; want ErrClaimSuperseded and ErrClaimLost", err)
	}
	if err := c.Complete(ctx, second[0].ID, second[0].Claim); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, second[0].ID, second[0].Claim, 0); !errors.Is(err, client.ErrCompleted) || !errors.Is(err, client.ErrClaimLost) {
		t.Fatalf("renew after completion = %v; want ErrCompleted and ErrClaimLost", err)
	}
}

// TestFailover: a client moves past a node that does not answer and past
// one that stopped, and gives up with ErrUnavailable once no node
// answers for RetryFor.
func TestFailover(t *testing.T) {
	cl := nodetest.NewCluster(t, 3)
	cl.Placed(t, 0, cl.IDs(0, 1, 2), 3)
	c := newClient(t, client.Config{Nodes: []string{deadAddr(t), cl.Addr(0), cl.Addr(1)}, DialTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	var ids []client.ID
	for range 5 {
		e, err := c.Enqueue(ctx, client.Task{Queue: "q"})
		if err != nil {
			t.Fatalf("enqueue past a dead node: %v", err)
		}
		ids = append(ids, e.ID)
	}
	cl.Stop(0)
	for _, id := range ids {
		if _, err := c.Get(ctx, id); err != nil {
			t.Fatalf("get after the node in use stopped: %v", err)
		}
	}

	dead := newClient(t, client.Config{Nodes: []string{deadAddr(t)}, DialTimeout: 100 * time.Millisecond, RetryFor: 300 * time.Millisecond})
	_, err := dead.Count(ctx, "")
	var cerr *client.Error
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &cerr) || cerr.Code != "unreachable" {
		t.Fatalf("no node answering = %v; want ErrUnavailable, unreachable", err)
	}
	// The caller's context ends the retries first.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	long := newClient(t, client.Config{Nodes: []string{deadAddr(t)}, DialTimeout: 20 * time.Millisecond, RetryFor: time.Hour})
	if _, err := long.Count(cctx, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("retries past the context = %v; want DeadlineExceeded", err)
	}
}

// TestToken: a cluster with a secret serves a client with its token and
// refuses one without.
func TestToken(t *testing.T) {
	secret := []byte("a secret long enough for the keys")
	cl := nodetest.NewCluster(t, 1, nodetest.Secret(secret))
	keys, err := wire.DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	good := newClient(t, client.Config{Nodes: []string{cl.Addr(0)}, Token: wire.FormatToken(keys.ClientToken)})
	if _, err := good.Count(ctx, ""); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	bad := newClient(t, client.Config{Nodes: []string{cl.Addr(0)}, RetryFor: 200 * time.Millisecond})
	if _, err := bad.Count(ctx, ""); err == nil {
		t.Fatal("served without the token")
	}
}
