package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// probe answers GET path of node i: the status and the body.
func probe(c *nodetest.Cluster, i int, path string) (int, httpapi.Health, error) {
	var h httpapi.Health
	resp, err := http.Get(c.HTTP(i) + path)
	if err != nil {
		return 0, h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h, err
}

// TestReadiness: /readyz of a node cut off from its peers fails, saying
// it reaches one of the metadata group's three voters and not a majority
// of the cohorts of the partitions it leads; /healthz still says it is
// alive (a restart would not bring its peers back). Once the network
// heals it is ready again; the two nodes that kept a majority are ready
// all along the way once they settle.
func TestReadiness(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	for i := range 3 {
		nodetest.WaitFor(t, clusterWait, func() error {
			code, h, err := probe(c, i, "/readyz")
			if err != nil || code != http.StatusOK || h.Status != "ready" {
				return fmt.Errorf("node %d: /readyz %d %+v %v", i, code, h, err)
			}
			return nil
		})
	}
	const cut = 2
	c.Isolate(cut)
	nodetest.WaitFor(t, clusterWait, func() error {
		code, h, err := probe(c, cut, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || h.Status != "not ready" {
			return fmt.Errorf("the cut-off node: /readyz %d %+v", code, h)
		}
		joined := strings.Join(h.Reasons, "; ")
		if !strings.Contains(joined, "metadata group: this node reaches 1 of its 3 voters, not a majority") {
			return fmt.Errorf("the cut-off node's reasons: %q", h.Reasons)
		}
		return nil
	})
	if code, h, err := probe(c, cut, "/healthz"); err != nil || code != http.StatusOK || h.Status != "ok" {
		t.Fatalf("the cut-off node: /healthz %d %+v %v; want 200 ok", code, h, err)
	}
	for i := range 2 {
		nodetest.WaitFor(t, clusterWait, func() error {
			code, h, err := probe(c, i, "/readyz")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("node %d with a majority: /readyz %d %+v %v", i, code, h, err)
			}
			return nil
		})
	}
	c.Heal()
	nodetest.WaitFor(t, clusterWait, func() error {
		code, h, err := probe(c, cut, "/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("the healed node: /readyz %d %+v %v", code, h, err)
		}
		return nil
	})
}

// TestQuorumLostSaysSo: with two of three nodes down, a request that
// needs a partition or the metadata group is refused as unavailable with
// the reason (which partition, how many of its replicas are in reach,
// which nodes do not answer) once gossip holds them dead, instead of
// being retried for the node's whole retry time and answered with the
// last attempt's error; a metadata write is refused before it is tried.
// A read the node answers alone still works.
func TestQuorumLostSaysSo(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	c.Kill(1)
	c.Kill(2)
	nodetest.WaitFor(t, clusterWait, func() error { return aliveOnly(c, 0, all[0]) })
	ctx := t.Context()
	key := "k"
	_, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q", Key: key}}})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "of its 3 replicas within this node's reach") ||
		!strings.Contains(fmt.Sprint(err), "it needs a majority") || !strings.Contains(fmt.Sprint(err), c.Addr(1)) {
		t.Fatalf("keyed enqueue with its partition's majority down: %v; want unavailable saying so", err)
	}
	_, err = c.Client(0).QueueSet(ctx, &wire.QueueSetRequest{Queue: "q", MaxAttempts: new(uint32(3))})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "the metadata group has 1 of its 3 voters within this node's reach") {
		t.Fatalf("queue setting with the metadata group's majority down: %v; want unavailable saying so", err)
	}
	if _, err := c.Client(0).QueueGet(ctx, &wire.QueueGetRequest{Queue: "q"}); err != nil {
		t.Fatalf("queue get (a local read): %v", err)
	}
}

// aliveOnly reports an error unless node i's gossip holds only id alive.
func aliveOnly(c *nodetest.Cluster, i int, id uint64) error {
	v, err := c.View(i)
	if err != nil {
		return err
	}
	for _, m := range v.Members {
		if m.ID != id && m.State == "alive" {
			return fmt.Errorf("node %d still alive in node %d's view", m.ID, i)
		}
	}
	return nil
}
