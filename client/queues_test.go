package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/node/nodetest"
)

func ptr[T any](v T) *T { return &v }

// threeNodes starts a placed 3-node cluster and returns a client of each
// node.
func threeNodes(t *testing.T) (*nodetest.Cluster, []*client.Client) {
	t.Helper()
	cl := nodetest.NewCluster(t, 3)
	cl.Placed(t, 0, cl.IDs(0, 1, 2), 3)
	clients := make([]*client.Client, 3)
	for i := range clients {
		clients[i] = newClient(t, client.Config{Nodes: []string{cl.Addr(i)}})
	}
	return cl, clients
}

// TestQueueSettings: settings changed through one node reach every node
// and survive a restart; the queue's max attempts, lease and backoff
// apply where a task or request gives none, and its own fields win.
func TestQueueSettings(t *testing.T) {
	cl, clients := threeNodes(t)
	ctx := t.Context()
	want := client.QueueSettings{Queue: "mail", MaxAttempts: 2, DefaultTTLMs: 60_000, BackoffBaseMs: 300_000, BackoffMaxMs: 600_000}
	got, err := clients[0].SetQueue(ctx, "mail", client.QueueChange{
		MaxAttempts: ptr(uint32(2)), DefaultTTL: ptr(time.Minute), BackoffBase: ptr(5 * time.Minute), BackoffMax: ptr(10 * time.Minute),
	})
	if err != nil || *got != want {
		t.Fatalf("SetQueue = %+v, %v; want %+v", got, err, want)
	}
	everywhere := func(want client.QueueSettings) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, func() error {
			for i, c := range clients {
				if s, err := c.QueueSettings(ctx, "mail"); err != nil || *s != want {
					return fmt.Errorf("node %d: %+v, %v", i, s, err)
				}
			}
			return nil
		})
	}
	everywhere(want)

	c := clients[1]
	e, err := c.Enqueue(ctx, client.Task{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.Enqueue(ctx, client.Task{Queue: "mail", MaxAttempts: 7})
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Get(ctx, e.ID); info == nil || info.MaxAttempts != 2 {
		t.Fatalf("a task without max attempts: %+v; want the queue's 2", info)
	}
	if info, _ := c.Get(ctx, own.ID); info == nil || info.MaxAttempts != 7 {
		t.Fatalf("a task with its own max attempts: %+v; want 7", info)
	}
	var claimed []client.Claimed
	testkit.WaitFor(t, 10*time.Second, func() error {
		got, err := c.Claim(ctx, "mail", client.ClaimOptions{Count: 2})
		claimed = append(claimed, got...)
		if err == nil && len(claimed) < 2 {
			err = fmt.Errorf("%d tasks claimed", len(claimed))
		}
		return err
	})
	for _, t2 := range claimed {
		if lease := time.Until(t2.End); lease < 50*time.Second || lease > 61*time.Second {
			t.Fatalf("lease of a claim without a TTL: %v; want the queue's minute", lease)
		}
		if err := c.Fail(ctx, t2.ID, t2.Claim, "boom", 0); err != nil {
			t.Fatal(err)
		}
		info, err := c.Get(ctx, t2.ID)
		if err != nil {
			t.Fatal(err)
		}
		if wait := time.Duration(info.NotBefore-info.Failures[0].At) * time.Millisecond; wait < 5*time.Minute*3/4 || wait > 5*time.Minute*5/4 {
			t.Fatalf("retry after a fail without retry-after: %v; want the queue's base, 5m ±25%%", wait)
		}
	}

	// Resetting a field to 0 goes back to the node's default; the rest
	// stay. A change survives the restart of every node.
	want.DefaultTTLMs = 0
	if _, err := clients[2].SetQueue(ctx, "mail", client.QueueChange{DefaultTTL: ptr(time.Duration(0))}); err != nil {
		t.Fatal(err)
	}
	everywhere(want)
	for i := range 3 {
		cl.Restart(i)
	}
	everywhere(want)

	if _, err := c.SetQueue(ctx, "mail", client.QueueChange{BackoffBase: ptr(time.Hour), BackoffMax: ptr(time.Minute)}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("backoff max below base = %v; want ErrInvalid", err)
	}
	if _, err := c.SetQueue(ctx, "no/such", client.QueueChange{Paused: ptr(true)}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a bad queue name = %v; want ErrInvalid", err)
	}
}

// TestPauseStopsClaimsClusterWide: a queue paused through one node grants
// no claim through any, still takes enqueues, and a long-poll waiting on
// it gets the task once the queue is resumed.
func TestPauseStopsClaimsClusterWide(t *testing.T) {
	_, clients := threeNodes(t)
	ctx := t.Context()
	if err := clients[0].PauseQueue(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for i, c := range clients {
			if s, err := c.QueueSettings(ctx, "jobs"); err != nil || !s.Paused {
				return fmt.Errorf("node %d: %+v, %v", i, s, err)
			}
		}
		return nil
	})
	enqueueN(t, clients[1], "jobs", 6, 0)
	for i, c := range clients {
		if got, err := c.Claim(ctx, "jobs", client.ClaimOptions{Count: 6}); err != nil || len(got) != 0 {
			t.Fatalf("claim through node %d of a paused queue = %d tasks, %v; want none", i, len(got), err)
		}
	}
	type result struct {
		got []client.Claimed
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		got, err := clients[2].Claim(ctx, "jobs", client.ClaimOptions{Wait: 20 * time.Second})
		waiting <- result{got, err}
	}()
	select {
	case r := <-waiting:
		t.Fatalf("a long-poll on the paused queue returned %+v, %v", r.got, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := clients[1].ResumeQueue(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	r := <-waiting
	if r.err != nil || len(r.got) != 1 {
		t.Fatalf("the long-poll after the resume = %+v, %v; want a task", r.got, r.err)
	}
	// Every node applies the resume soon.
	for i, c := range clients {
		testkit.WaitFor(t, 10*time.Second, func() error {
			got, err := c.Claim(ctx, "jobs", client.ClaimOptions{})
			if err == nil && len(got) == 0 {
				err = fmt.Errorf("node %d grants nothing after the resume", i)
			}
			return err
		})
	}
}
