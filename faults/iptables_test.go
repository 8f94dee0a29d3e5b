package faults

import (
	"reflect"
	"strings"
	"testing"
)

var testTopo = Topology{Nodes: 5, Bridge: DefaultBridge, Port: DefaultPort}

func TestGrudgeShapes(t *testing.T) {
	cases := []struct {
		name string
		g    Grudge
		want Grudge
	}{
		{"isolate", Isolate(2, 5), Grudge{1: {2}, 2: {1, 3, 4, 5}, 3: {2}, 4: {2}, 5: {2}}},
		{"split", Split([]int{3, 1, 2}, []int{5, 4}), Grudge{1: {4, 5}, 2: {4, 5}, 3: {4, 5}, 4: {1, 2, 3}, 5: {1, 2, 3}}},
		// The middle node is cut from no one and no one from it.
		{"bridge", Bridge([]int{1, 2}, 3, []int{4, 5}), Grudge{1: {4, 5}, 2: {4, 5}, 4: {1, 2}, 5: {1, 2}}},
		// One way: only the victim drops.
		{"asymmetric", Asymmetric(4, 5), Grudge{4: {1, 2, 3, 5}}},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.g, c.want) {
			t.Errorf("%s: got %v; want %v", c.name, c.g, c.want)
		}
	}
}

// A node's rules drop each cut peer by its own and its relay's address,
// on INPUT only, and never the harness's address.
func TestRestoreInput(t *testing.T) {
	g := Asymmetric(1, 3)
	got := g.RestoreInput(testTopo, 1)
	want := "*filter\n" +
		"-A INPUT -s 10.77.0.2/32 -j DROP\n" +
		"-A INPUT -s 10.77.0.102/32 -j DROP\n" +
		"-A INPUT -s 10.77.0.3/32 -j DROP\n" +
		"-A INPUT -s 10.77.0.103/32 -j DROP\n" +
		"COMMIT\n"
	if got != want {
		t.Errorf("rules:\n%s\nwant:\n%s", got, want)
	}
	if g.RestoreInput(testTopo, 2) != "" {
		t.Errorf("node 2 has rules in an asymmetric cut of node 1")
	}
	for n := 1; n <= 5; n++ {
		if strings.Contains(Isolate(3, 5).RestoreInput(testTopo, n), testTopo.HostIP().String()) {
			t.Errorf("node %d's rules cut the harness's address", n)
		}
	}
	if got, want := restoreCmd(testTopo, 4), []string{"ip", "netns", "exec", "sk4", "iptables-restore", "-w", "--noflush"}; !reflect.DeepEqual(got, want) {
		t.Errorf("restore command %v; want %v", got, want)
	}
	if got, want := FlushCmd(testTopo, 2), []string{"ip", "netns", "exec", "sk2", "iptables", "-w", "-F"}; !reflect.DeepEqual(got, want) {
		t.Errorf("flush command %v; want %v", got, want)
	}
}

func TestTopology(t *testing.T) {
	if got := testTopo.NodeAddr(3).String(); got != "10.77.0.3:13000" {
		t.Errorf("node 3 at %s", got)
	}
	if got := testTopo.RelayAddr(3).String(); got != "10.77.0.103:13000" {
		t.Errorf("node 3's relay at %s", got)
	}
	for addr, want := range map[string]int{"10.77.0.4:13000": 4, "10.77.0.105:13000": 5, "10.77.0.1": 1, "10.77.0.254:13000": 0, "10.77.0.9:13000": 0, "bogus": 0} {
		if got := testTopo.IndexOf(addr); got != want {
			t.Errorf("IndexOf(%s) = %d; want %d", addr, got, want)
		}
	}
	// Every command of setup and teardown acts on our names and our
	// range only.
	for _, c := range append(testTopo.SetupCmds(), testTopo.TeardownCmds()...) {
		line := strings.Join(c, " ")
		if c[0] != "ip" {
			t.Errorf("command %q is not ip", line)
		}
		for _, f := range c {
			if strings.Contains(f, ".") && !strings.HasPrefix(f, "10.77.0.") {
				t.Errorf("command %q names an address outside 10.77.0.0/24", line)
			}
		}
		if !strings.Contains(line, "sk") {
			t.Errorf("command %q names none of our links or namespaces", line)
		}
	}
	if (Topology{Nodes: 10, Bridge: "skb0", Port: 1}).Validate() == nil {
		t.Errorf("10 nodes validated")
	}
}
