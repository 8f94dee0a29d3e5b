package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The partition connect check: after a grudge is installed, and after the
// network is healed, the harness verifies that the rules cut exactly what
// the grudge names (TESTING.md section 5: a partition must act on the
// traffic it names, or the history's windows lie), by a TCP connect on
// every path whose packets the rules match:
//
//   - direct: from node a's namespace to node b's address. A TCP handshake
//     needs both directions, so it is cut when b drops a (the SYN) or a
//     drops b (the SYN-ACK, or a down node's RST). Joins and any direct
//     traffic take this path; the rules match it by the node addresses.
//   - relay: from a's relay address (on the bridge, in the root namespace
//     where the relay runs) to node b's address: the path of every
//     datagram a sends b through the relay, which is what the nodes use
//     (each advertises its relay address), and the one b's rules match by
//     a's relay address. It is cut only when b drops a: one way, as the
//     grudge says. b's answers to a take the pair (b, a).
//   - client: from the harness's address to node b: never cut, so the
//     clients and the harness reach every node.
//
// A connect that completes or is refused or reset at once (RST: the node
// is down or dying, yet its namespace answers) is open; one that has not completed by
// connectCutTimeout is cut (DROP answers nothing). iptables matches only
// addresses, so TCP probes speak for the nodes' QUIC over UDP too.
//
// A direct probe must start in a's namespace. It runs on a goroutine
// locked to its OS thread, which joins the namespace with setns for the
// dial and joins the harness's own namespace again before it unlocks, so
// no other goroutine ever runs in a's namespace. The thread must outlive
// the probe: the nodes and workers are started with Pdeathsig, which the
// kernel sends when the *thread* that forked them ends, and any thread may
// have forked one, so letting the runtime end the thread (a goroutine
// that exits locked) would kill them. Should the return fail, the
// goroutine parks for good instead of exiting: a thread lost, no process
// killed. Threads the runtime starts meanwhile come from its template
// thread, not from a locked one, so none inherits the namespace. This
// costs no process, where `ip netns exec skN faults probe` would start
// twenty per check on a loaded 2-core machine.

// Bounds of the connect check.
const (
	// connectCutTimeout: a connect not done by then is taken for cut. A
	// handshake across the bridge is the kernels' alone (a paused or
	// down node's included) and takes well under a millisecond; this
	// leaves room for the harness's own scheduling delay, and every
	// probe runs at once, so a check costs about this much.
	connectCutTimeout = 300 * time.Millisecond
	// connectRecheckTimeout: a probe meant to be open that timed out is
	// tried once more, this long, before it counts as cut, so a harness
	// descheduled on the loaded machine is not taken for a DROP. A cut
	// pair that connected needs no second try: no connect crosses a DROP.
	connectRecheckTimeout = 2 * time.Second
	// netnsDir is where `ip netns add` keeps the namespaces' handles.
	netnsDir = "/var/run/netns"
)

// Connect probe paths (ConnectProbe.Path).
const (
	pathDirect = "direct"
	pathRelay  = "relay"
	pathClient = "client"
)

// Connect outcomes (ProbeResult.Got); any other is "error: ...".
const (
	connConnected = "connected"
	connRefused   = "refused"
	connTimeout   = "timeout"
)

// ConnectProbe is one connect of the check and what the grudge says of
// it: From is a node (0 for the client path), To the node connected to.
type ConnectProbe struct {
	Path string `json:"path"`
	From int    `json:"from"`
	To   int    `json:"to"`
	Cut  bool   `json:"cut"`
}

// ProbeResult is a probe and what the connect did.
type ProbeResult struct {
	ConnectProbe
	Got string `json:"got"`
}

// Matches reports whether the connect did what the grudge says.
func (p ProbeResult) Matches() bool {
	switch p.Got {
	case connConnected, connRefused:
		return !p.Cut
	case connTimeout:
		return p.Cut
	}
	return false
}

// ExpectedConnects lists the check's probes for grudge g (nil: a healed
// network) among nodes 1..nodes: direct and relay for every ordered pair,
// client for every node, each with whether g cuts it.
func ExpectedConnects(g Grudge, nodes int) []ConnectProbe {
	drops := func(a, b int) bool { return slices.Contains(g[a], b) } // a drops b
	var out []ConnectProbe
	for a := 1; a <= nodes; a++ {
		for b := 1; b <= nodes; b++ {
			if a == b {
				continue
			}
			out = append(out,
				ConnectProbe{Path: pathDirect, From: a, To: b, Cut: drops(b, a) || drops(a, b)},
				ConnectProbe{Path: pathRelay, From: a, To: b, Cut: drops(b, a)})
		}
	}
	for b := 1; b <= nodes; b++ {
		out = append(out, ConnectProbe{Path: pathClient, To: b})
	}
	return out
}

// Mismatches returns the results that differ from what the grudge says.
func Mismatches(res []ProbeResult) []ProbeResult {
	var out []ProbeResult
	for _, p := range res {
		if !p.Matches() {
			out = append(out, p)
		}
	}
	return out
}

// mismatchNodes lists the nodes of the mismatched probes, sorted.
func mismatchNodes(bad []ProbeResult) []int {
	var out []int
	for _, p := range bad {
		for _, n := range []int{p.From, p.To} {
			if n > 0 && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// RunProbes runs every probe at once, then tries again, at once and
// longer, those meant to be open that timed out.
func RunProbes(ctx context.Context, t Topology, probes []ConnectProbe) []ProbeResult {
	res := make([]ProbeResult, len(probes))
	for k, p := range probes {
		res[k].ConnectProbe = p
	}
	runAll(ctx, t, res, func(ProbeResult) bool { return true }, connectCutTimeout)
	runAll(ctx, t, res, func(p ProbeResult) bool { return !p.Cut && p.Got == connTimeout }, connectRecheckTimeout)
	return res
}

// runAll runs the results picked by which, all at once, with timeout.
func runAll(ctx context.Context, t Topology, res []ProbeResult, which func(ProbeResult) bool, timeout time.Duration) {
	var wg sync.WaitGroup
	for k := range res {
		if which(res[k]) {
			wg.Go(func() { res[k].Got = probeOnce(ctx, t, res[k].ConnectProbe, timeout) })
		}
	}
	wg.Wait()
}

// probeOnce runs one connect and classifies it.
func probeOnce(ctx context.Context, t Topology, p ConnectProbe, timeout time.Duration) string {
	dst := t.NodeAddr(p.To)
	switch p.Path {
	case pathDirect:
		return dialInNS(ctx, filepath.Join(netnsDir, t.NS(p.From)), dst, timeout)
	case pathRelay:
		return dialFrom(ctx, t.RelayIP(p.From), dst, timeout)
	default:
		return dialFrom(ctx, t.HostIP(), dst, timeout)
	}
}

// dialFrom connects to dst from local (invalid: any address) in the
// calling thread's network namespace, and classifies the outcome.
func dialFrom(ctx context.Context, local netip.Addr, dst netip.AddrPort, timeout time.Duration) string {
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	conn, err := d.DialContext(ctx, "tcp", dst.String())
	if err == nil {
		_ = conn.Close()
		return connConnected
	}
	return classifyDial(err)
}

// classifyDial names a failed connect's outcome.
func classifyDial(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		// Both are a RST that came back: the path is open both ways
		// (a reset is a node dying as the connect completed).
		return connRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return connTimeout
	}
	return "error: " + err.Error()
}

// dialInNS connects to dst from inside the network namespace whose handle
// is at path (see the file's comment: a goroutine's thread joins it for
// the dial, and joins the harness's namespace again before it is let go).
func dialInNS(ctx context.Context, path string, dst netip.AddrPort, timeout time.Duration) string {
	out := make(chan string, 1)
	go func() {
		runtime.LockOSThread()
		// Every return below but the park leaves the thread in the
		// harness's namespace, so it may serve other goroutines.
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			out <- fmt.Sprintf("error: open the harness's namespace: %v", err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			out <- fmt.Sprintf("error: open %s: %v", path, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		_ = unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread() // setns failed: still at home
			out <- fmt.Sprintf("error: setns %s: %v", path, err)
			return
		}
		got := dialFrom(ctx, netip.Addr{}, dst, timeout)
		if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
			out <- fmt.Sprintf("error: back from %s: %v (thread parked)", path, err)
			select {} // neither run others in ns nor end the thread
		}
		runtime.UnlockOSThread()
		out <- got
	}()
	return <-out
}

// checkPartition runs the connect check against grudge g (nil: a healed
// network) and records NotePartitionMismatch with the probes that differ.
// after says what was just done ("installed partition-one", "healed
// partition-one", "heal phase").
func (r *Run) checkPartition(ctx context.Context, g Grudge, after string) {
	start := time.Now()
	res := RunProbes(ctx, r.cfg.Topology, ExpectedConnects(g, r.cfg.Topology.Nodes))
	if ctx.Err() != nil {
		return // the run is ending: a probe cut short says nothing
	}
	bad := Mismatches(res)
	r.sum.ConnectChecks++
	r.log.Info("connect check", "after", after, "probes", len(res), "mismatches", len(bad), "ms", time.Since(start).Milliseconds())
	if len(bad) == 0 {
		return
	}
	r.log.Warn("partition connect check: the rules do not cut what they name", "after", after, "mismatches", bad)
	d := map[string]any{"after": after, "mismatches": bad, "probes": len(res)}
	if g != nil {
		d["grudge"] = g
	}
	r.note(NotePartitionMismatch, mismatchNodes(bad), d)
}
