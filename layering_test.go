package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/skuldd/skuldd"

// allowedInternal lists, for each package, the internal packages it may
// import (STYLE.md §3: dependencies point one way, node at the top, store
// and wire at the bottom).
var allowedInternal = map[string][]string{
	"": {"cli"},
	// cli's test build (tag skuldtest) makes the store's crash filesystem.
	"cli":       {"node", "client", "wire", "task", "clock", "store", "internal/buildinfo"},
	"node":      {"internal/version", "internal/buildinfo", "node/coord", "node/peer", "node/membership", "node/listen", "node/control", "node/replication", "node/retrying", "node/queues", "node/access", "node/config", "node/heads", "node/deps", "node/hints", "node/schedules", "node/shards", "node/metrics", "node/pressure", "partition", "antientropy", "raftgroup", "member", "epoch", "ring", "store", "wire", "task", "clock"},
	"node/peer": {"wire"},
	// The coordinator plane: the client API, routed to the leaders.
	"node/coord":   {"node/peer", "node/replication", "node/deps", "node/hints", "node/heads", "node/queues", "node/schedules", "node/shards", "partition", "ring", "store", "task", "wire", "clock"},
	"node/control": {"node/peer", "member", "ring", "raftgroup", "epoch", "partition", "antientropy", "clock", "wire", "task"},
	// The metadata group's bring-up, joining, gossip, peers' addresses.
	"node/membership": {"node/peer", "member", "raftgroup", "store", "clock", "wire", "internal/version"},
	// How clients and peers reach a node: sockets, QUIC and HTTP servers.
	"node/listen": {"node/peer", "httpapi", "wire", "internal/version"},
	// When a node holds its log's busy syncs back.
	"node/pressure": {},
	// The client API with the coordinator's retry policy.
	"node/retrying": {"wire", "task"},
	// A node's configuration: fields, defaults, validation.
	"node/config": {"node/listen", "node/peer", "antientropy", "clock", "ring", "store", "task", "internal/version"},
	// The queues' settings, kept in the metadata group.
	"node/queues": {"raftgroup", "task", "wire"},
	"node/access": {"raftgroup", "task", "wire"},
	// The dependency protocol across partitions.
	"node/deps": {"node/peer", "node/replication", "partition", "ring", "store", "task", "wire", "clock"},
	// Where a claim looks for work: this node's heads and its peers'.
	"node/heads": {"partition", "wire"},
	// hints: the enqueues a node holds for cohorts it cannot reach.
	"node/hints": {"node/replication", "partition", "ring", "store", "clock", "task", "wire"},
	// The replication data plane: shipping, anti-entropy, the carry, GC.
	"node/replication": {"node/peer", "partition", "antientropy", "epoch", "ring", "wire", "task", "clock"},
	// The node's Prometheus registry and exposition: it reads the node
	// through its Source, the replication plane's Stats among them.
	"node/metrics": {"node/replication", "wire", "task", "internal/buildinfo"},
	// The periodic-task plane: the schedules in the metadata group, the
	// client API's enqueue.
	"node/schedules": {"raftgroup", "internal/cron", "wire", "task", "clock"},
	// The worker shards: the sets in the metadata group, their expiry.
	"node/shards": {"raftgroup", "wire", "clock"},
	// The Go client: the wire protocol and task ids, nothing of the node.
	"client":             {"wire", "task"},
	"member":             {},
	"httpapi":            {"wire", "task"},
	"partition":          {"store", "antientropy", "epoch", "ring", "task", "clock", "internal/invariant", "internal/cbormode"},
	"raftgroup":          {"store", "internal/invariant", "internal/cbormode", "internal/cron", "internal/version"},
	"antientropy":        {},
	"store":              {"task", "clock", "internal/cbormode", "internal/buildinfo"},
	"wire":               {"task", "clock", "internal/cbormode", "internal/version"},
	"epoch":              {},
	"ring":               {},
	"task":               {"clock"},
	"clock":              {},
	"internal/invariant": {},
	// skuldd's CBOR encoding and decoders, configured once.
	"internal/cbormode": {},
	// Cron expressions of periodic tasks: a leaf.
	"internal/cron": {},
	// Which build a binary is (--version, skuldd_build_info): a leaf.
	"internal/buildinfo": {},
	// The cluster versions and what each adds: a leaf.
	"internal/version": {},
	"node/nodetest":    nil, // test harness: may import anything
	// The tests' shared helpers (waiting, logging): stdlib only. Only
	// _test.go files and node/nodetest import it, which the lists above
	// enforce by not naming it.
	"internal/testkit": {},
	// The fault-testing tool drives the real binary from outside (HTTP,
	// processes, network namespaces); it reads the wire's JSON views and
	// task ids, nothing of a node's insides.
	"faults":            {"wire", "task", "ring"},
	"faults/cmd/faults": {"faults"},
	// The seeded simulation runs real nodes in one process, on the
	// in-memory network and disks, and judges them with the fault
	// suite's checkers.
	"sim": {"node", "node/peer", "store", "wire", "task", "clock", "faults"},
}

// owners names the one package allowed to import each heavyweight
// dependency, so each stays behind its seam.
var owners = map[string]string{
	"github.com/cockroachdb/pebble":   "store",
	"github.com/quic-go/quic-go":      "wire",
	"go.etcd.io/raft":                 "raftgroup",
	"github.com/urfave/cli":           "cli",
	"github.com/hashicorp/memberlist": "member",
	// The metrics registry is node/metrics'; other packages keep plain
	// counters that it reads, through node, at scrape time.
	"github.com/prometheus/client_golang": "node/metrics",
}

// TestLayering enforces the package layering of STYLE.md §3 on non-test
// imports.
func TestLayering(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not on PATH")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		allowed, known := allowedInternal[pkg]
		if !known {
			t.Errorf("package %q is not in the layering table: add it with its allowed imports", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				if allowed != nil && !contains(allowed, rel) {
					t.Errorf("%s imports %s: not allowed by the layering", fields[0], imp)
				}
				continue
			}
			for dep, owner := range owners {
				if strings.HasPrefix(imp, dep) && pkg != owner && pkg != "node/nodetest" {
					t.Errorf("%s imports %s: only %s may", fields[0], imp, owner)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
