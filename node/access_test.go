package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// TestCredentials: on a 3-node cluster with a secret, the admin (the
// cluster token) makes a worker credential through one node; its holder
// works through another (claims, completes, reads) and is refused what
// its role does not allow (enqueue, gc, the credentials); a revocation
// through a third node refuses its next request on the connection it
// already has, and its next dial, on every node.
func TestCredentials(t *testing.T) {
	c := nodetest.NewCluster(t, 3, nodetest.Secret([]byte("the cluster's secret, 32 bytes..")))
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*clusterWait)
	defer cancel()
	tok, id, keys, err := wire.NewCredentialToken()
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Client(0).AuthCreate(ctx, &wire.AuthCreateRequest{ID: id, Name: "w1", Role: "worker", StoredKey: keys.Stored[:], ServerKey: keys.Server[:]})
	if err != nil || v.ID != id || v.Role != "worker" {
		t.Fatalf("create: %+v, %v", v, err)
	}
	dial := func(i int) (*wire.Client, error) {
		conn, err := wire.Dial(ctx, c.Addr(i), wire.ClientConfig{Token: tok})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { conn.Close() })
		return wire.NewClient(conn), nil
	}
	// Every node holds it once the entry applied there.
	var w [3]*wire.Client
	for i := range 3 {
		nodetest.WaitFor(t, clusterWait, func() error {
			cl, err := dial(i)
			if err != nil {
				return err
			}
			w[i] = cl
			return nil
		})
	}
	if _, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "creds"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w[1].Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "creds"}}}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("a worker's enqueue: %v; want forbidden", err)
	}
	var r *wire.ClaimResponse
	nodetest.WaitFor(t, clusterWait, func() error {
		r, err = w[1].Claim(ctx, &wire.ClaimRequest{Queue: "creds", TTLMs: 60_000})
		if err == nil && len(r.Tasks) != 1 {
			err = fmt.Errorf("claimed %d tasks; want the one", len(r.Tasks))
		}
		return err
	})
	if _, err := w[2].Complete(ctx, &wire.CompleteRequest{ID: r.Tasks[0].ID, Claim: *r.Tasks[0].Claim}); err != nil {
		t.Fatalf("a worker's complete: %v", err)
	}
	if _, err := w[2].GC(ctx, &wire.GCRequest{DryRun: true}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("a worker's gc: %v; want forbidden", err)
	}
	if _, err := w[0].AuthList(ctx, &wire.AuthListRequest{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("a worker's auth list: %v; want forbidden", err)
	}
	if l, err := c.Client(1).AuthList(ctx, &wire.AuthListRequest{}); err != nil || len(l.Credentials) != 1 || l.Credentials[0].Name != "w1" {
		t.Fatalf("the admin's list: %+v, %v", l, err)
	}

	began := time.Now()
	if _, err := c.Client(2).AuthRevoke(ctx, &wire.AuthRevokeRequest{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	committed := time.Since(began)
	for i := range 3 {
		nodetest.WaitFor(t, clusterWait, func() error {
			if _, err := w[i].Count(ctx, &wire.CountRequest{}); !errors.Is(err, wire.ErrUnauthenticated) {
				return fmt.Errorf("node %d after the revocation: %v; want unauthenticated", i, err)
			}
			return nil
		})
		if _, err := dial(i); !errors.Is(err, wire.ErrAuth) {
			t.Fatalf("a dial to node %d after the revocation: %v; want refused", i, err)
		}
	}
	t.Logf("revocation committed in %v; refused on every node %v after it was sent", committed, time.Since(began))
}
