package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cutSet renders the probes a grudge cuts as "path:from>to" strings.
func cutSet(probes []ConnectProbe) map[string]bool {
	out := map[string]bool{}
	for _, p := range probes {
		if p.Cut {
			out[fmt.Sprintf("%s:%d>%d", p.Path, p.From, p.To)] = true
		}
	}
	return out
}

// The check's expected matrix: a direct connect needs both directions of
// the pair, a relayed one only the receiver's; the client is never cut;
// a healed network cuts nothing.
func TestExpectedConnects(t *testing.T) {
	set := func(keys ...string) map[string]bool {
		out := map[string]bool{}
		for _, k := range keys {
			out[k] = true
		}
		return out
	}
	cases := []struct {
		name string
		g    Grudge
		n    int
		want map[string]bool
	}{
		{"healed", nil, 3, set()},
		{"isolate 2 of 3", Isolate(2, 3), 3, set(
			"direct:1>2", "direct:2>1", "direct:2>3", "direct:3>2",
			"relay:1>2", "relay:2>1", "relay:2>3", "relay:3>2")},
		// Node 1 drops 2 and 3; they still hear it. Their datagrams to
		// 1 are cut; 1's to them are not; a TCP handshake either way
		// needs 1 to hear them, so every direct pair with 1 is cut.
		{"asymmetric 1 of 3", Asymmetric(1, 3), 3, set(
			"direct:1>2", "direct:2>1", "direct:1>3", "direct:3>1",
			"relay:2>1", "relay:3>1")},
		// The middle node 2 is cut from no one.
		{"bridge 1 | 2 | 3", Bridge([]int{1}, 2, []int{3}), 3, set(
			"direct:1>3", "direct:3>1", "relay:1>3", "relay:3>1")},
	}
	for _, c := range cases {
		probes := ExpectedConnects(c.g, c.n)
		if want := 2*c.n*(c.n-1) + c.n; len(probes) != want {
			t.Errorf("%s: %d probes; want %d", c.name, len(probes), want)
		}
		if got := cutSet(probes); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: cut %v; want %v", c.name, got, c.want)
		}
		for _, p := range probes {
			if p.Path == pathClient && (p.Cut || p.From != 0) {
				t.Errorf("%s: client probe %+v", c.name, p)
			}
		}
	}
	// Symmetric splits cut both paths both ways for exactly the pairs
	// across the sides.
	g := Split([]int{1, 2, 3}, []int{4, 5})
	for _, p := range ExpectedConnects(g, 5) {
		if p.Path == pathClient {
			continue
		}
		across := (p.From <= 3) != (p.To <= 3)
		if p.Cut != across {
			t.Errorf("split: %+v cut %v; want %v", p, p.Cut, across)
		}
	}
}

// A connect that completes or is refused matches an open pair; a timeout
// matches a cut pair; an error matches nothing.
func TestProbeMatches(t *testing.T) {
	cases := []struct {
		cut  bool
		got  string
		want bool
	}{
		{false, connConnected, true},
		{false, connRefused, true},
		{false, connTimeout, false},
		{true, connTimeout, true},
		{true, connConnected, false},
		{true, connRefused, false},
		{true, "error: setns: operation not permitted", false},
		{false, "error: no route to host", false},
	}
	var res []ProbeResult
	for k, c := range cases {
		p := ProbeResult{ConnectProbe{Path: pathRelay, From: 1, To: k + 2, Cut: c.cut}, c.got}
		if p.Matches() != c.want {
			t.Errorf("cut %v, got %q: matches %v; want %v", c.cut, c.got, !c.want, c.want)
		}
		res = append(res, p)
	}
	bad := Mismatches(res)
	if len(bad) != 5 {
		t.Errorf("mismatches %v; want 5", bad)
	}
	if got, want := mismatchNodes(bad), []int{1, 4, 6, 7, 8, 9}; !reflect.DeepEqual(got, want) {
		t.Errorf("mismatch nodes %v; want %v", got, want)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyDial(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, connRefused},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNRESET)}, connRefused},
		{&net.OpError{Op: "dial", Err: timeoutErr{}}, connTimeout},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), connTimeout},
		{errors.New("connect: no route to host"), "error: connect: no route to host"},
	}
	for _, c := range cases {
		if got := classifyDial(c.err); got != c.want {
			t.Errorf("%v: %q; want %q", c.err, got, c.want)
		}
	}
}

// dialFrom, without namespaces: a listener connects, a closed port is
// refused, each well within the cut timeout.
func TestDialFrom(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback:", err)
	}
	open := netip.MustParseAddrPort(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	// A port just freed: nothing listens there.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(ln2.Addr().String())
	_ = ln2.Close()
	defer ln.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	for dst, want := range map[netip.AddrPort]string{open: connConnected, closed: connRefused} {
		start := time.Now()
		if got := dialFrom(context.Background(), lo, dst, connectCutTimeout); got != want {
			t.Errorf("%v: %q; want %q", dst, got, want)
		}
		if d := time.Since(start); d >= connectCutTimeout {
			t.Errorf("%v: took %v", dst, d)
		}
	}
}

// A probe in a namespace must not end its thread: children started with
// Pdeathsig (the nodes, the workers) get their signal when the thread
// that forked them ends, and any thread may have. Run as root (setns),
// into the test's own namespace: a child started before a hundred probes
// outlives them, and each probe connects.
func TestDialInNSKeepsChildren(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setns needs root")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback:", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	dst := netip.MustParseAddrPort(ln.Addr().String())
	// Children forked from many goroutines at once, so from many of the
	// runtime's threads, as the harness's restarts are.
	kids := make([]*exec.Cmd, 16)
	var fork sync.WaitGroup
	for k := range kids {
		fork.Go(func() {
			// A blocking syscall first: the runtime hands the P to
			// another thread meanwhile, so the forks come from several.
			ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
			_ = unix.Nanosleep(&ts, nil)
			cmd := exec.Command("sleep", "30")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			kids[k] = cmd
		})
	}
	fork.Wait()
	kids = slices.DeleteFunc(kids, func(c *exec.Cmd) bool { return c == nil })
	defer func() {
		for _, k := range kids {
			_ = k.Process.Kill()
			_ = k.Wait()
		}
	}()
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if got := dialInNS(context.Background(), "/proc/self/ns/net", dst, connectRecheckTimeout); got != connConnected {
				t.Errorf("probe: %s", got)
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // a Pdeathsig would have landed
	for _, k := range kids {
		// Not reaped, a killed child is a zombie, which a signal 0
		// still reaches: read its state.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.Process.Pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			t.Errorf("child %d died during the probes: %q %v", k.Process.Pid, b, err)
		}
	}
}
