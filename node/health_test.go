package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/node/nodetest"
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
