package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Grudge is a network partition as the set of one-way cuts it makes
// (Jepsen's grudge): Grudge[a] lists the nodes whose packets node a drops.
// A symmetric cut between a and b is a in Grudge[b] and b in Grudge[a].
// Nodes are 1-based.
type Grudge map[int][]int

// Isolate cuts node n off from every other of nodes.
func Isolate(n, nodes int) Grudge {
	var rest []int
	for i := 1; i <= nodes; i++ {
		if i != n {
			rest = append(rest, i)
		}
	}
	return Split([]int{n}, rest)
}

// Split cuts every node of a off from every node of b, both ways.
func Split(a, b []int) Grudge {
	g := Grudge{}
	for _, x := range a {
		g[x] = append(g[x], b...)
	}
	for _, y := range b {
		g[y] = append(g[y], a...)
	}
	return g.normal()
}

// Bridge cuts a off from b both ways; mid, in neither, still sees both
// sides (nemesis.clj's bridge).
func Bridge(a []int, mid int, b []int) Grudge { return Split(a, b) }

// Asymmetric makes node v drop everything its peers send it while they
// still hear v (TESTING.md section 7, row 7).
func Asymmetric(v, nodes int) Grudge {
	var rest []int
	for i := 1; i <= nodes; i++ {
		if i != v {
			rest = append(rest, i)
		}
	}
	return Grudge{v: rest}.normal()
}

// normal sorts and dedups each list, so equal grudges compare equal.
func (g Grudge) normal() Grudge {
	for k, v := range g {
		slices.Sort(v)
		g[k] = slices.Compact(v)
	}
	return g
}

// Exchanges reports whether a and b hear each other under g: neither
// drops the other's packets (a request and its answer both pass).
func (g Grudge) Exchanges(a, b int) bool {
	return !slices.Contains(g[a], b) && !slices.Contains(g[b], a)
}

// Partners counts the nodes of 1..nodes other than n that n exchanges
// packets with under g.
func (g Grudge) Partners(n, nodes int) int {
	k := 0
	for m := 1; m <= nodes; m++ {
		if m != n && g.Exchanges(n, m) {
			k++
		}
	}
	return k
}

// Nodes returns the nodes that drop something, sorted.
func (g Grudge) Nodes() []int { return slices.Sorted(maps.Keys(g)) }

// RestoreInput returns the iptables-restore input that installs node n's
// cuts in its namespace, or "" if it has none. Each peer is dropped by
// both of its addresses: its own (join and direct traffic) and its
// relay's, which is the source of everything it sends through the relay.
// Only INPUT is cut: a symmetric cut is two one-way cuts, each made where
// the packets arrive. The harness's own address is never cut, so clients
// keep reaching every node.
func (g Grudge) RestoreInput(t Topology, n int) string {
	peers := g[n]
	if len(peers) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, p := range peers {
		for _, ip := range []string{t.NodeIP(p).String(), t.RelayIP(p).String()} {
			fmt.Fprintf(&b, "-A INPUT -s %s/32 -j DROP\n", ip)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// Apply installs g's cuts, each node's in one iptables-restore (added to
// the rules already there, so two partitions can hold at once), in node
// order, stopping at the first failure. It returns the nodes whose cuts
// were installed: on a failure, those hold until healed.
func (g Grudge) Apply(ctx context.Context, t Topology) (installed []int, err error) {
	for _, n := range g.Nodes() {
		in := g.RestoreInput(t, n)
		if in == "" {
			continue
		}
		if err := runCmd(ctx, restoreCmd(t, n), in); err != nil {
			return installed, fmt.Errorf("partition: node %d: %w", n, err)
		}
		installed = append(installed, n)
	}
	return installed, nil
}

func restoreCmd(t Topology, n int) []string {
	return []string{"ip", "netns", "exec", t.NS(n), "iptables-restore", "-w", "--noflush"}
}

// FlushCmd is the command that heals node n: every rule of its
// namespace's filter table goes.
func FlushCmd(t Topology, n int) []string {
	return []string{"ip", "netns", "exec", t.NS(n), "iptables", "-w", "-F"}
}

// HealNetwork flushes every node's rules; it tries them all and returns
// the errors.
func HealNetwork(ctx context.Context, t Topology) error {
	var errs []string
	for n := 1; n <= t.Nodes; n++ {
		if err := runCmd(ctx, FlushCmd(t, n), ""); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("heal network: %s", strings.Join(errs, "; "))
	}
	return nil
}
