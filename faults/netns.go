package faults

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The network the harness builds (TESTING.md section 5, "Topology"): a
// bridge in the root namespace and one namespace per node, joined to the
// bridge by a veth pair. Everything lives in 10.77.0.0/24, the one range
// the harness may touch, and only in namespaces and links it made:
//
//	node i          10.77.0.i      in namespace sk<i>, veth skv<i> (peer skv<i>b on the bridge)
//	node i's relay  10.77.0.(100+i) on the bridge (the address node i advertises)
//	the harness     10.77.0.254    on the bridge (clients and the relay run in the root namespace)
const (
	subnetBase     = "10.77.0.0"
	subnetBits     = 24
	hostOctet      = 254
	relayOctetBase = 100
	// MaxNodes keeps the relay addresses (101..) below the harness's
	// address and node names short.
	MaxNodes = 9
	// DefaultBridge is the bridge's name.
	DefaultBridge = "skb0"
	// DefaultPort is every node's port (QUIC on UDP, HTTP on TCP).
	DefaultPort = 13000
	// cmdTimeout bounds one ip or iptables command: they answer in
	// milliseconds, so a longer one is stuck (the xtables lock, say).
	cmdTimeout = 20 * time.Second
)

// Topology names the namespaces, links and addresses of a run.
type Topology struct {
	Nodes  int
	Bridge string
	Port   int
}

// Validate checks the topology.
func (t Topology) Validate() error {
	if t.Nodes < 1 || t.Nodes > MaxNodes {
		return fmt.Errorf("topology: %d nodes; want 1..%d", t.Nodes, MaxNodes)
	}
	if t.Bridge == "" || len(t.Bridge) > 15 {
		return fmt.Errorf("topology: bridge name %q: want 1..15 characters", t.Bridge)
	}
	if t.Port < 1 || t.Port > 65535 {
		return fmt.Errorf("topology: port %d out of range", t.Port)
	}
	return nil
}

func octet(o int) netip.Addr {
	b := netip.MustParseAddr(subnetBase).As4()
	b[3] = byte(o)
	return netip.AddrFrom4(b)
}

// NS is node i's namespace (1-based).
func (t Topology) NS(i int) string { return "sk" + strconv.Itoa(i) }

// Veth is the name of node i's veth end inside its namespace; VethPeer
// the end on the bridge.
func (t Topology) Veth(i int) string     { return "skv" + strconv.Itoa(i) }
func (t Topology) VethPeer(i int) string { return "skv" + strconv.Itoa(i) + "b" }

// NodeIP is node i's address; RelayIP the address it advertises (its
// relay's); HostIP the harness's on the bridge.
func (t Topology) NodeIP(i int) netip.Addr  { return octet(i) }
func (t Topology) RelayIP(i int) netip.Addr { return octet(relayOctetBase + i) }
func (t Topology) HostIP() netip.Addr       { return octet(hostOctet) }

// NodeAddr and RelayAddr add the port.
func (t Topology) NodeAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(t.NodeIP(i), uint16(t.Port))
}
func (t Topology) RelayAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(t.RelayIP(i), uint16(t.Port))
}

// IndexOf maps an address a node is known by (its own or its relay's,
// with or without the port) to its index, or 0.
func (t Topology) IndexOf(addr string) int {
	host := addr
	if h, _, err := splitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return 0
	}
	for i := 1; i <= t.Nodes; i++ {
		if ip == t.NodeIP(i) || ip == t.RelayIP(i) {
			return i
		}
	}
	return 0
}

func splitHostPort(s string) (string, string, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return "", "", err
	}
	return ap.Addr().String(), strconv.Itoa(int(ap.Port())), nil
}

// SetupCmds are the commands that build the network, in order.
func (t Topology) SetupCmds() [][]string {
	cidr := func(a netip.Addr) string { return a.String() + "/" + strconv.Itoa(subnetBits) }
	// The harness's address goes first: it is the bridge's primary
	// address, the source of the clients' connections.
	cmds := [][]string{
		{"ip", "link", "add", t.Bridge, "type", "bridge"},
		{"ip", "addr", "add", cidr(t.HostIP()), "dev", t.Bridge},
	}
	for i := 1; i <= t.Nodes; i++ {
		cmds = append(cmds, []string{"ip", "addr", "add", cidr(t.RelayIP(i)), "dev", t.Bridge})
	}
	cmds = append(cmds, []string{"ip", "link", "set", t.Bridge, "up"})
	for i := 1; i <= t.Nodes; i++ {
		ns := t.NS(i)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", t.Veth(i), "type", "veth", "peer", "name", t.VethPeer(i)},
			[]string{"ip", "link", "set", t.Veth(i), "netns", ns},
			[]string{"ip", "link", "set", t.VethPeer(i), "master", t.Bridge},
			[]string{"ip", "link", "set", t.VethPeer(i), "up"},
			[]string{"ip", "-n", ns, "addr", "add", cidr(t.NodeIP(i)), "dev", t.Veth(i)},
			[]string{"ip", "-n", ns, "link", "set", t.Veth(i), "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
		)
	}
	return cmds
}

// TeardownCmds remove everything SetupCmds made; each may fail because
// its object is already gone (teardown is idempotent). Deleting a
// namespace deletes the veth end in it and so its peer.
func (t Topology) TeardownCmds() [][]string {
	var cmds [][]string
	for i := 1; i <= t.Nodes; i++ {
		cmds = append(cmds, []string{"ip", "netns", "del", t.NS(i)})
		// A veth left in the root namespace by a setup cut short.
		cmds = append(cmds, []string{"ip", "link", "del", t.VethPeer(i)})
	}
	return append(cmds, []string{"ip", "link", "del", t.Bridge})
}

// runCmd runs one command and wraps its failure with its output.
func runCmd(ctx context.Context, argv []string, stdin string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SetupNetwork builds the network, after removing what a run cut short
// may have left.
func (t Topology) SetupNetwork(ctx context.Context) error {
	t.TeardownNetwork(ctx)
	for _, c := range t.SetupCmds() {
		if err := runCmd(ctx, c, ""); err != nil {
			return fmt.Errorf("network setup: %w", err)
		}
	}
	return nil
}

// TeardownNetwork removes the network; what is already gone is skipped.
func (t Topology) TeardownNetwork(ctx context.Context) {
	for _, c := range t.TeardownCmds() {
		_ = runCmd(ctx, c, "")
	}
}

// NSPids lists the processes in node i's namespace (ip netns pids): at
// teardown, the nodes a harness that died left running.
func (t Topology) NSPids(ctx context.Context, i int) []int {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", t.NS(i)).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil && p > 1 {
			pids = append(pids, p)
		}
	}
	return pids
}
