package main_test

// End-to-end tests: build the skuldd binary, run it as a real process, and
// drive it with `skuldd ctl` (and, for load, the Go QUIC client) the way a
// user would. They check the ctl contract (JSON out, one object a line;
// exit 1 with a message for errors, 2 for usage, 3 for an empty claim),
// clean shutdown on SIGTERM, and that every acknowledged enqueue survives
// a kill -9.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/wire"
)

// Flags every test node runs with: a short skew bound keeps claim expiry
// (end + bound) quick to wait out.
const skewBound = time.Second

var nodeFlags = []string{"--clock-skew-bound", skewBound.String(), "--log-level", "warn"}

// The binary is built once per test process, on first use.
var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// The test build (tag skuldtest: the fault suite's hooks), built once when
// a test asks for it, next to the production binary.
var (
	testBuildOnce sync.Once
	testBinPath   string
	testBuildErr  error
)

// skulddTestBin returns the path of a binary built with -tags skuldtest.
func skulddTestBin(t *testing.T) string {
	t.Helper()
	prod := skulddBin(t) // makes buildDir
	testBuildOnce.Do(func() {
		testBinPath = filepath.Join(filepath.Dir(prod), "skuldd-test")
		out, err := exec.Command("go", "build", "-tags", "skuldtest", "-o", testBinPath, ".").CombinedOutput()
		if err != nil {
			testBuildErr = fmt.Errorf("go build -tags skuldtest: %v\n%s", err, out)
		}
	})
	if testBuildErr != nil {
		t.Fatal(testBuildErr)
	}
	return testBinPath
}

// skulddBin returns the path of the freshly built binary; it skips the test
// if there is no go command to build it with.
func skulddBin(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the skuldd binary")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "skuldd-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "skuldd")
		began := time.Now()
		out, err := exec.Command(goBin, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		t.Logf("built %s in %v", binPath, time.Since(began).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// poll calls cond every interval until it returns true; it fails the test
// with what if timeout passes first. The e2e tests poll a child process,
// so they choose their interval (testkit.WaitEvery).
func poll(t *testing.T, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitEvery(t, timeout, interval, testkit.Cond(what, cond))
}

// lockedBuffer is a goroutine-safe buffer for a child's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// node is one skuldd process.
type node struct {
	bin, dir, addr string
	cmd            *exec.Cmd
	out            *lockedBuffer // stdout and stderr
	done           chan struct{} // closed when the process has exited
	waitErr        error         // cmd.Wait's result, set before done closes
	healthyAfter   time.Duration // from process start to /healthz 200
	// tls is the HTTPS client configuration of a node with a cluster
	// secret (trusting the secret's authority); nil: plain HTTP.
	tls *tls.Config
	// auth are ctl's flags that authenticate to the node (a cluster
	// secret's); none without a secret.
	auth []string
}

// url is the URL of path on the node's HTTP port: HTTPS when the node
// has a cluster secret.
func (n *node) url(path string) string {
	if n.tls != nil {
		return "https://" + n.addr + path
	}
	return "http://" + n.addr + path
}

// httpClient is an HTTP client of the node (of its HTTPS authority, when
// it has a secret), with timeout.
func (n *node) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: n.tls}}
}

// secretTLS is the HTTPS client configuration of a node started with
// args: trusting the authority of its --cluster-secret-file; nil without.
func secretTLS(t *testing.T, args []string) *tls.Config {
	t.Helper()
	i := slices.Index(args, "--cluster-secret-file")
	if i < 0 || i+1 >= len(args) {
		return nil
	}
	b, err := os.ReadFile(args[i+1])
	if err != nil {
		t.Fatal(err)
	}
	id, err := wire.DeriveHTTPS(bytes.TrimSpace(b))
	if err != nil {
		t.Fatal(err)
	}
	return id.ClientTLS()
}

// freePort returns a port that was free for UDP a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	return port
}

// startNode runs skuldd on dir and waits for /healthz. With port 0 it picks
// a free port, and picks again if the node finds it taken; with a given
// port (a restart) it retries that port a few times.
func startNode(t *testing.T, dir string, port int, extra ...string) *node {
	t.Helper()
	return startNodeBin(t, skulddBin(t), dir, port, extra...)
}

// startNodeBin is startNode running bin (skulddTestBin: the test build,
// whose hooks move the node's clock).
func startNodeBin(t *testing.T, bin, dir string, port int, extra ...string) *node {
	t.Helper()
	pick := port == 0
	const attempts = 5
	for i := 1; ; i++ {
		if pick {
			port = freePort(t)
		}
		n, err := launch(t, bin, dir, port, extra...)
		if err == nil {
			return n
		}
		if !strings.Contains(n.out.String(), "address already in use") || i == attempts {
			t.Fatalf("start skuldd on port %d: %v", port, err)
		}
		t.Logf("port %d taken (attempt %d): retrying", port, i)
	}
}

// launch starts one process and waits until it is healthy or has exited.
func launch(t *testing.T, bin, dir string, port int, extra ...string) (*node, error) {
	t.Helper()
	n := &node{bin: bin, dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), out: &lockedBuffer{}, done: make(chan struct{}), tls: secretTLS(t, extra)}
	args := append(append([]string{"--bind", n.addr, "--data-dir", dir}, nodeFlags...), extra...)
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout = n.out
	n.cmd.Stderr = n.out
	began := time.Now()
	if err := n.cmd.Start(); err != nil {
		return n, err
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
		default:
			_ = n.cmd.Process.Kill()
			<-n.done
		}
		if t.Failed() {
			t.Logf("skuldd %s (pid %d) output:\n%s", n.addr, n.cmd.Process.Pid, n.out.String())
		}
	})
	if err := n.waitHealthy(60 * time.Second); err != nil {
		return n, err
	}
	n.healthyAfter = time.Since(began)
	return n, nil
}

// waitHealthy polls /readyz until it answers 200: the node has started
// and serves.
func (n *node) waitHealthy(timeout time.Duration) error {
	hc := n.httpClient(time.Second)
	defer hc.CloseIdleConnections()
	url := n.url("/readyz")
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-n.done:
			return fmt.Errorf("skuldd exited before it was healthy: %v", n.waitErr)
		default:
		}
		resp, err := hc.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not 200 after %v (last: %v)", timeout, statusOrErr(resp, err))
		}
		select {
		case <-n.done: // reported at the top of the loop
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func statusOrErr(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// stop sends SIGTERM and requires a clean exit (status 0) within 10s.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-n.done:
		if n.waitErr != nil {
			t.Fatalf("skuldd after SIGTERM: %v; want exit status 0", n.waitErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("skuldd did not exit within 10s of SIGTERM")
	}
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (n *node) kill9(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-n.done
}

// result is one finished ctl run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// lines returns stdout's lines.
func (r result) lines() []string {
	s := strings.TrimSuffix(r.stdout, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// run runs `skuldd ctl --addr ADDR args...`, with stdin if not nil.
func (n *node) run(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	r, err := n.runErr(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runErr is run for any goroutine: an error means ctl did not run to an
// exit status.
func (n *node) runErr(stdin io.Reader, args ...string) (result, error) {
	return runBinary(n.bin, stdin, slices.Concat([]string{"ctl", "--addr", n.addr}, n.auth, args)...)
}

// runBinary runs `bin args...` to its exit status, within a minute.
func runBinary(bin string, stdin io.Reader, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, stdin
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		return r, fmt.Errorf("skuldd %s: %v (stderr %q)", strings.Join(args, " "), err, stderr.String())
	}
	return r, nil
}

func (n *node) ctl(t *testing.T, args ...string) result {
	t.Helper()
	return n.run(t, nil, args...)
}

// ok runs ctl, requires exit 0 and a quiet stderr, and checks that every
// output line is one JSON object.
func (n *node) ok(t *testing.T, args ...string) []string {
	t.Helper()
	r := n.ctl(t, args...)
	return checkOK(t, r, args)
}

func checkOK(t *testing.T, r result, args []string) []string {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("ctl %s: %v; want exit 0 and no stderr", strings.Join(args, " "), r)
	}
	lines := r.lines()
	for _, l := range lines {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("ctl %s: output line %q is not a JSON object: %v", strings.Join(args, " "), l, err)
		}
	}
	return lines
}

// okJSON runs ctl, requires exactly one output line and decodes it into v.
func (n *node) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	lines := n.ok(t, args...)
	if len(lines) != 1 {
		t.Fatalf("ctl %s: %d output lines %q; want 1", strings.Join(args, " "), len(lines), lines)
	}
	decode(t, lines[0], v)
}

func decode(t *testing.T, line string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(line), v); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
}

// The JSON of ctl's output, spelled out here (not borrowed from wire) so a
// renamed field breaks the test.
type enqueued struct {
	ID   string `json:"id"`
	Acks int    `json:"acks"`
}

type taskOut struct {
	ID          string         `json:"id"`
	Queue       string         `json:"queue"`
	Priority    int32          `json:"priority"`
	Data        []byte         `json:"data"`
	Deps        []string       `json:"deps"`
	State       string         `json:"state"`
	Claim       *uint32        `json:"claim"`
	Claims      []claimOut     `json:"claims"`
	Updates     []updateOut    `json:"updates"`
	Group       string         `json:"group"`
	MaxAttempts uint32         `json:"max_attempts"`
	Attempts    uint32         `json:"attempts"`
	NotBefore   int64          `json:"not_before"`
	Failures    []failureOut   `json:"failures"`
	Cancelled   *cancelOut     `json:"cancelled"`
	Raw         map[string]any `json:"-"`
}

type cancelOut struct {
	At     int64  `json:"at"`
	Reason string `json:"reason"`
}

type claimOut struct {
	Claim     uint32 `json:"claim"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	Completed *int64 `json:"completed"`
}

type updateOut struct {
	Claim uint32 `json:"claim"`
	Seq   uint64 `json:"seq"`
	Data  []byte `json:"data"`
}

type failureOut struct {
	Claim   uint32 `json:"claim"`
	At      int64  `json:"at"`
	Reason  string `json:"reason"`
	Snooze  bool   `json:"snooze"`
	NoRetry bool   `json:"no_retry"`
}

type ackOut struct {
	Acks *int `json:"acks"`
}

type queueStats struct {
	Queue     string `json:"queue"`
	Ready     int64  `json:"ready"`
	Claimed   int64  `json:"claimed"`
	Delayed   int64  `json:"delayed"`
	Blocked   int64  `json:"blocked"`
	Completed int64  `json:"completed"`
	Dead      int64  `json:"dead"`
}

var hexID = regexp.MustCompile(`^[0-9a-f]{40}$`)

// decodeTask decodes a task line and checks the fields the contract names
// are all there (a null "completed" included).
func decodeTask(t *testing.T, line string) taskOut {
	t.Helper()
	var v taskOut
	decode(t, line, &v)
	decode(t, line, &v.Raw)
	for _, k := range []string{"id", "queue", "priority", "data", "deps", "state", "claims", "updates"} {
		if _, ok := v.Raw[k]; !ok {
			t.Fatalf("task %s: no %q field", line, k)
		}
	}
	for _, c := range v.Raw["claims"].([]any) {
		for _, k := range []string{"claim", "start", "end", "completed"} {
			if _, ok := c.(map[string]any)[k]; !ok {
				t.Fatalf("task %s: claim without %q", line, k)
			}
		}
	}
	if !hexID.MatchString(v.ID) {
		t.Fatalf("task id %q: want 40 lowercase hex characters", v.ID)
	}
	return v
}

// enqueue runs ctl enqueue and returns the new id.
func (n *node) enqueue(t *testing.T, args ...string) string {
	t.Helper()
	var e enqueued
	n.okJSON(t, &e, append([]string{"enqueue"}, args...)...)
	if !hexID.MatchString(e.ID) || e.Acks < 1 {
		t.Fatalf("enqueue %v: got %+v; want a 40-hex id and acks >= 1", args, e)
	}
	return e.ID
}

func (n *node) get(t *testing.T, id string) taskOut {
	t.Helper()
	lines := n.ok(t, "get", "--id", id)
	if len(lines) != 1 {
		t.Fatalf("get %s: %d lines; want 1", id, len(lines))
	}
	return decodeTask(t, lines[0])
}

// claim claims one task of queue and requires it to be want (if not "").
func (n *node) claim(t *testing.T, queue, ttl, want string) taskOut {
	t.Helper()
	lines := n.ok(t, "claim", "--queue", queue, "--ttl", ttl)
	if len(lines) != 1 {
		t.Fatalf("claim --queue %s: %d lines; want 1", queue, len(lines))
	}
	v := decodeTask(t, lines[0])
	if v.Claim == nil || v.State != "claimed" {
		t.Fatalf("claim --queue %s: claim %v, state %q; want a claim id and state claimed", queue, v.Claim, v.State)
	}
	if want != "" && v.ID != want {
		t.Fatalf("claim --queue %s: got task %s; want %s", queue, v.ID, want)
	}
	return v
}

// claimSoon polls claim until it takes a task (exit 3 means "not yet"):
// a task whose delay or lease has run out becomes claimable at the node's
// next timer tick, which may come a little after get already says ready.
func (n *node) claimSoon(t *testing.T, queue, ttl string, timeout time.Duration) taskOut {
	t.Helper()
	var v taskOut
	args := []string{"claim", "--queue", queue, "--ttl", ttl}
	poll(t, timeout, 20*time.Millisecond, "a claimable task in "+queue, func() bool {
		r := n.ctl(t, args...)
		switch r.code {
		case 3:
			return false
		case 0:
			lines := checkOK(t, r, args)
			if len(lines) != 1 {
				t.Fatalf("claim --queue %s: %d lines; want 1", queue, len(lines))
			}
			v = decodeTask(t, lines[0])
			return true
		}
		t.Fatalf("ctl %s: %v; want exit 0 or 3", strings.Join(args, " "), r)
		return false
	})
	if v.Claim == nil || v.State != "claimed" {
		t.Fatalf("claim --queue %s: claim %v, state %q; want a claim id and state claimed", queue, v.Claim, v.State)
	}
	return v
}

// nothingToClaim requires claim to print nothing and exit 3.
func (n *node) nothingToClaim(t *testing.T, queue string, extra ...string) {
	t.Helper()
	args := append([]string{"claim", "--queue", queue}, extra...)
	if r := n.ctl(t, args...); r.code != 3 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("ctl %s: %v; want exit 3 and no output", strings.Join(args, " "), r)
	}
}

// ack runs a write that answers {"acks":N}.
func (n *node) ack(t *testing.T, args ...string) {
	t.Helper()
	var a ackOut
	n.okJSON(t, &a, args...)
	if a.Acks == nil || *a.Acks < 1 {
		t.Fatalf("ctl %s: acks %v; want >= 1", strings.Join(args, " "), a.Acks)
	}
}

func (n *node) count(t *testing.T, args ...string) int64 {
	t.Helper()
	var c struct {
		Count *int64 `json:"count"`
	}
	n.okJSON(t, &c, append([]string{"count"}, args...)...)
	if c.Count == nil {
		t.Fatalf("count %v: no count field", args)
	}
	return *c.Count
}

func (n *node) list(t *testing.T, args ...string) []taskOut {
	t.Helper()
	var out []taskOut
	for _, l := range n.ok(t, append([]string{"list"}, args...)...) {
		out = append(out, decodeTask(t, l))
	}
	return out
}

func (n *node) queues(t *testing.T) map[string]queueStats {
	t.Helper()
	lines := n.ok(t, "queues")
	m := map[string]queueStats{}
	var names []string
	for _, l := range lines {
		var s queueStats
		decode(t, l, &s)
		m[s.Queue] = s
		names = append(names, s.Queue)
	}
	if !slices.IsSorted(names) {
		t.Errorf("queues: %v; want sorted by name", names)
	}
	return m
}

// snapshot is what a rejected command must leave as it was: the total
// count, the per-queue stats and (if id is set) one task, as printed.
func (n *node) snapshot(t *testing.T, id string) string {
	t.Helper()
	s := n.ctl(t, "count").stdout + n.ctl(t, "queues").stdout
	if id != "" {
		s += n.ctl(t, "get", "--id", id).stdout
	}
	return s
}

// rejects runs a command that must fail with exit code code, print
// nothing on stdout, say something containing wantErr on stderr, and
// leave the snapshot around id unchanged.
func (n *node) rejects(t *testing.T, code int, id, wantErr string, args ...string) {
	t.Helper()
	before := n.snapshot(t, id)
	r := n.ctl(t, args...)
	if r.code != code || r.stdout != "" || !strings.Contains(r.stderr, wantErr) {
		t.Errorf("ctl %s: %v; want exit %d, no stdout, stderr containing %q", strings.Join(args, " "), r, code, wantErr)
	}
	if after := n.snapshot(t, id); after != before {
		t.Errorf("ctl %s changed the node:\nbefore:\n%s\nafter:\n%s", strings.Join(args, " "), before, after)
	}
}

func b64(s string) string {
	b, _ := json.Marshal([]byte(s))
	return string(b)
}

// TestCtlSession drives every ctl command against one node.
func TestCtlSession(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	t.Logf("node %s healthy after %v", n.addr, n.healthyAfter.Round(time.Millisecond))

	// The README's seed session.
	seed := n.enqueue(t, "--queue", "seed", "--data", "sup?")
	if got := n.count(t); got != 1 {
		t.Fatalf("count: got %d; want 1", got)
	}
	ls := n.list(t)
	if len(ls) != 1 || ls[0].ID != seed || ls[0].Queue != "seed" || string(ls[0].Data) != "sup?" || ls[0].State != "ready" {
		t.Fatalf("list: got %+v; want the one ready task %s with data sup?", ls, seed)
	}
	if raw := n.ok(t, "list")[0]; !strings.Contains(raw, `"data":`+b64("sup?")) {
		t.Errorf("list: %s; want data as base64 %s", raw, b64("sup?"))
	}
	c0 := n.claim(t, "seed", "2s", seed)
	if *c0.Claim != 0 || len(c0.Claims) != 1 || c0.Claims[0].End-c0.Claims[0].Start != 2000 {
		t.Fatalf("first claim: claim %d, claims %+v; want claim 0 with a 2000ms lease", *c0.Claim, c0.Claims)
	}
	n.nothingToClaim(t, "seed")
	// The claim lapses for the node at end + skew bound; until then every
	// claim exits 3.
	c1 := n.claimSoon(t, "seed", "5m", 15*time.Second)
	if c1.ID != seed || c1.Claim == nil || *c1.Claim != 1 {
		t.Fatalf("claim after expiry: got %s claim %v; want %s claim 1", c1.ID, c1.Claim, seed)
	}
	if lapse := c0.Claims[0].End + skewBound.Milliseconds(); c1.Claims[1].Start < lapse {
		t.Errorf("claim 1 started at %d; want no earlier than claim 0's end + skew bound, %d", c1.Claims[1].Start, lapse)
	}
	n.ack(t, "complete", "--id", seed, "--claim", "1")
	g := n.get(t, seed)
	if g.State != "completed" || len(g.Claims) != 2 || g.Claims[0].Completed != nil || g.Claims[1].Completed == nil {
		t.Fatalf("get after complete: state %q, claims %+v; want completed, two claims, only the second completed", g.State, g.Claims)
	}
	if g.Claims[0].Claim != 0 || g.Claims[1].Claim != 1 {
		t.Errorf("claims %+v; want claim ids 0 and 1", g.Claims)
	}

	t.Run("priority", func(t *testing.T) {
		low := n.enqueue(t, "--queue", "prio", "--priority", "-1", "--data", "low")
		high := n.enqueue(t, "--queue", "prio", "--priority", "10", "--data", "high")
		mid := n.enqueue(t, "--queue", "prio", "--priority", "3", "--data", "mid")
		var got []string
		for _, l := range n.ok(t, "claim", "--queue", "prio", "--count", "3", "--ttl", "5m") {
			v := decodeTask(t, l)
			if v.Claim == nil || *v.Claim != 0 {
				t.Errorf("claim %s: claim %v; want 0", v.ID, v.Claim)
			}
			got = append(got, v.ID)
		}
		if want := []string{high, mid, low}; !slices.Equal(got, want) {
			t.Errorf("claim --count 3: got %v; want %v (priority 10, 3, -1)", got, want)
		}
		if p := n.get(t, low).Priority; p != -1 {
			t.Errorf("priority of low: got %d; want -1", p)
		}
	})

	t.Run("deps", func(t *testing.T) {
		a := n.enqueue(t, "--queue", "dag", "--data", "a")
		b := n.enqueue(t, "--queue", "dag", "--data", "b")
		c := n.enqueue(t, "--queue", "dag", "--data", "c", "--dep", a, "--dep", b)
		v := n.get(t, c)
		if v.State != "blocked" || !sameSet(v.Deps, []string{a, b}) {
			t.Fatalf("get dependent: state %q, deps %v; want blocked on %v", v.State, v.Deps, []string{a, b})
		}
		lines := n.ok(t, "claim", "--queue", "dag", "--count", "10", "--ttl", "5m")
		var ids []string
		for _, l := range lines {
			ids = append(ids, decodeTask(t, l).ID)
		}
		if !sameSet(ids, []string{a, b}) {
			t.Fatalf("claim --count 10: got %v; want the two deps %v only", ids, []string{a, b})
		}
		n.nothingToClaim(t, "dag")
		n.ack(t, "complete", "--id", a, "--claim", "0")
		if s := n.get(t, c).State; s != "blocked" {
			t.Fatalf("one dep of two done: state %q; want blocked", s)
		}
		n.nothingToClaim(t, "dag")
		n.ack(t, "complete", "--id", b, "--claim", "0")
		if s := n.get(t, c).State; s != "ready" {
			t.Errorf("both deps done: state %q; want ready", s)
		}
		if v := n.claimSoon(t, "dag", "5m", 5*time.Second); v.ID != c {
			t.Errorf("claim after the deps completed: got %s; want %s", v.ID, c)
		}
		// A dep that is already completed does not block.
		d := n.enqueue(t, "--queue", "dag", "--dep", a)
		if s := n.get(t, d).State; s != "ready" {
			t.Errorf("task on a completed dep: state %q; want ready", s)
		}
	})

	t.Run("delay", func(t *testing.T) {
		began := time.Now()
		// Long enough that the checks below surely run before it is up.
		id := n.enqueue(t, "--queue", "later", "--delay", "1500ms")
		if v := n.get(t, id); v.State != "delayed" || v.NotBefore == 0 {
			t.Fatalf("delayed task: state %q, not_before %d; want delayed with a not_before", v.State, v.NotBefore)
		}
		n.nothingToClaim(t, "later")
		v := n.claimSoon(t, "later", "5m", 10*time.Second)
		if waited := time.Since(began); waited < 1500*time.Millisecond || v.ID != id {
			t.Errorf("claimed %s after %v; want %s after at least 1.5s", v.ID, waited, id)
		}
		if v.Claims[0].Start < v.NotBefore {
			t.Errorf("claimed at %d; want no earlier than not_before %d", v.Claims[0].Start, v.NotBefore)
		}
	})

	t.Run("long-poll", func(t *testing.T) {
		began := time.Now()
		n.nothingToClaim(t, "empty", "--wait", "300ms")
		if waited := time.Since(began); waited < 300*time.Millisecond {
			t.Errorf("claim --wait 300ms gave up after %v", waited)
		}
		type outcome struct {
			r   result
			err error
		}
		got := make(chan outcome, 1)
		go func() {
			r, err := n.runErr(nil, "claim", "--queue", "lp", "--wait", "20s", "--ttl", "5m")
			got <- outcome{r, err}
		}()
		// The claim is parked before or after the enqueue; either way it
		// must return the task long before its wait runs out.
		id := n.enqueue(t, "--queue", "lp")
		select {
		case o := <-got:
			if o.err != nil {
				t.Fatal(o.err)
			}
			lines := checkOK(t, o.r, []string{"claim", "--wait"})
			if len(lines) != 1 || decodeTask(t, lines[0]).ID != id {
				t.Errorf("long-poll claim: %q; want task %s", lines, id)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("long-poll claim did not return after an enqueue")
		}
	})

	t.Run("fail-dead-requeue", func(t *testing.T) {
		id := n.enqueue(t, "--queue", "flaky", "--max-attempts", "1", "--data", "x")
		if ma := n.get(t, id).MaxAttempts; ma != 1 {
			t.Errorf("max_attempts: got %d; want 1", ma)
		}
		n.claim(t, "flaky", "5m", id)
		n.ack(t, "fail", "--id", id, "--claim", "0", "--reason", "boom", "--retry-after", "0s")
		v := n.get(t, id)
		if v.State != "dead" || v.Attempts != 1 || len(v.Failures) != 1 || v.Failures[0].Reason != "boom" {
			t.Fatalf("after the only attempt failed: state %q, attempts %d, failures %+v; want dead, 1, reason boom", v.State, v.Attempts, v.Failures)
		}
		n.nothingToClaim(t, "flaky")
		if l := n.list(t, "--queue", "flaky", "--state", "dead"); len(l) != 1 || l[0].ID != id {
			t.Errorf("list --state dead: %+v; want %s", l, id)
		}
		if q := n.queues(t)["flaky"]; q.Dead != 1 {
			t.Errorf("queues flaky: %+v; want dead 1", q)
		}
		n.ack(t, "requeue", "--id", id)
		if s := n.get(t, id).State; s != "ready" {
			t.Fatalf("after requeue: state %q; want ready", s)
		}
		if c := n.claim(t, "flaky", "5m", id); *c.Claim != 1 {
			t.Errorf("claim after requeue: claim %d; want 1", *c.Claim)
		}
		n.ack(t, "complete", "--id", id, "--claim", "1")

		// A failure with attempts left is retried after --retry-after.
		r := n.enqueue(t, "--queue", "retry")
		n.claim(t, "retry", "5m", r)
		n.ack(t, "fail", "--id", r, "--claim", "0", "--retry-after", "0s")
		if s := n.get(t, r).State; s != "ready" {
			t.Fatalf("fail --retry-after 0 with attempts left: state %q; want ready", s)
		}
		n.claim(t, "retry", "5m", r)
		n.ack(t, "fail", "--id", r, "--claim", "1", "--retry-after", "1h")
		if s := n.get(t, r).State; s != "retrying" {
			t.Fatalf("fail --retry-after 1h: state %q; want retrying", s)
		}
	})

	t.Run("snooze", func(t *testing.T) {
		id := n.enqueue(t, "--queue", "nap")
		n.claim(t, "nap", "5m", id)
		n.ack(t, "snooze", "--id", id, "--claim", "0", "--delay", "1s")
		v := n.get(t, id)
		if v.State != "snoozed" || len(v.Failures) != 1 || !v.Failures[0].Snooze {
			t.Fatalf("after snooze: state %q, failures %+v; want snoozed", v.State, v.Failures)
		}
		n.nothingToClaim(t, "nap")
		c := n.claimSoon(t, "nap", "5m", 10*time.Second)
		if c.ID != id || *c.Claim != 1 || c.Attempts > 1 {
			t.Errorf("claim after snooze: claim %d, attempts %d; want claim 1, the snooze not counted", *c.Claim, c.Attempts)
		}
		n.ack(t, "complete", "--id", id, "--claim", "1")
	})

	t.Run("complete-claims-next", func(t *testing.T) {
		a := n.enqueue(t, "--queue", "nxt", "--priority", "2")
		b := n.enqueue(t, "--queue", "nxt", "--priority", "1")
		n.claim(t, "nxt", "5m", a)
		var out struct {
			Acks int       `json:"acks"`
			Next []taskOut `json:"next"`
		}
		n.okJSON(t, &out, "complete", "--id", a, "--claim", "0", "--next-queue", "nxt", "--next-ttl", "5m")
		if out.Acks < 1 || len(out.Next) != 1 || out.Next[0].ID != b || out.Next[0].Claim == nil || *out.Next[0].Claim != 0 {
			t.Fatalf("complete --next-queue: %+v; want acks and %s under claim 0", out, b)
		}
		if v := n.get(t, a); v.State != "completed" {
			t.Fatalf("after complete --next-queue: %s is %s; want completed", a, v.State)
		}
		n.ack(t, "complete", "--id", b, "--claim", "0")
	})

	t.Run("update-renew-complete", func(t *testing.T) {
		id := n.enqueue(t, "--queue", "prog", "--data", "job")
		c := n.claim(t, "prog", "5m", id)
		n.ack(t, "update", "--id", id, "--claim", "0", "--seq", "0", "--data", "step 0")
		n.ack(t, "update", "--id", id, "--claim", "0", "--seq", "1", "--data", "step 1")
		n.ack(t, "update", "--id", id, "--claim", "0", "--seq", "1", "--data", "step 1") // a retry
		v := n.get(t, id)
		want := []updateOut{{0, 0, []byte("step 0")}, {0, 1, []byte("step 1")}}
		if len(v.Updates) != 2 || v.Updates[0].Seq != 0 || string(v.Updates[0].Data) != "step 0" ||
			v.Updates[1].Seq != 1 || string(v.Updates[1].Data) != "step 1" || v.Updates[1].Claim != 0 {
			t.Fatalf("updates: got %+v; want %+v", v.Updates, want)
		}
		n.okJSON(t, new(map[string]any), "get", "--id", id, "--min-seq", "2")
		n.rejects(t, 1, id, "min_seq", "get", "--id", id, "--min-seq", "3")

		var rn struct {
			End  int64 `json:"end"`
			Acks int   `json:"acks"`
		}
		n.okJSON(t, &rn, "renew", "--id", id, "--claim", "0", "--ttl", "10m")
		if rn.End <= c.Claims[0].End || rn.Acks < 1 {
			t.Errorf("renew: %+v; want an end past %d and acks >= 1", rn, c.Claims[0].End)
		}
		if end := n.get(t, id).Claims[0].End; end != rn.End {
			t.Errorf("get after renew: end %d; want %d", end, rn.End)
		}
		n.ack(t, "renew", "--id", id, "--claim", "0") // the default ttl never shortens a lease

		// Wrong seq, wrong claim, conflicting data: refused, nothing changed.
		n.rejects(t, 1, id, "sequence", "update", "--id", id, "--claim", "0", "--seq", "5", "--data", "gap")
		n.rejects(t, 1, id, "conflict", "update", "--id", id, "--claim", "0", "--seq", "0", "--data", "other")
		n.rejects(t, 1, id, "sequence", "complete", "--id", id, "--claim", "0", "--seq", "1")
		n.rejects(t, 1, id, "no such claim", "complete", "--id", id, "--claim", "7")
		n.rejects(t, 1, id, "no such claim", "update", "--id", id, "--claim", "7", "--seq", "2", "--data", "x")

		n.ack(t, "complete", "--id", id, "--claim", "0", "--seq", "2")
		v = n.get(t, id)
		if v.State != "completed" || v.Claims[0].Completed == nil {
			t.Fatalf("after complete --seq 2: state %q, claims %+v; want completed by claim 0", v.State, v.Claims)
		}
		n.ack(t, "complete", "--id", id, "--claim", "0", "--seq", "2") // a retry is fine
		// A different completion by the same claim conflicts; another
		// claim finds the task completed (seed was completed by claim 1).
		n.rejects(t, 1, id, "conflict", "complete", "--id", id, "--claim", "0", "--seq", "3")
		n.rejects(t, 1, seed, "completed", "complete", "--id", seed, "--claim", "0")
		n.rejects(t, 1, id, "completed", "renew", "--id", id, "--claim", "0")
		n.rejects(t, 1, id, "not dead", "requeue", "--id", id)
	})

	t.Run("expired-and-superseded-claims", func(t *testing.T) {
		id := n.enqueue(t, "--queue", "exp")
		c := n.claim(t, "exp", "1s", id)
		// Ready again at end + skew bound, by when the end has long passed.
		// get derives the state from the clock, while the queue stats
		// follow the node's timer tick: wait for both, so the snapshots
		// around the refused renew see a settled node.
		poll(t, 10*time.Second, 50*time.Millisecond, "the 1s claim to lapse", func() bool {
			q := n.queues(t)["exp"]
			return n.get(t, id).State == "ready" && q.Ready == 1 && q.Claimed == 0
		})
		n.rejects(t, 1, id, "expired", "renew", "--id", id, "--claim", "0")
		if end := n.get(t, id).Claims[0].End; end != c.Claims[0].End {
			t.Errorf("refused renew moved the end: %d; want %d", end, c.Claims[0].End)
		}
		if c := n.claimSoon(t, "exp", "5m", 5*time.Second); c.ID != id || *c.Claim != 1 {
			t.Fatalf("claim after lapse: claim %d; want 1", *c.Claim)
		}
		n.rejects(t, 1, id, "superseded", "renew", "--id", id, "--claim", "0")
		n.rejects(t, 1, id, "superseded", "complete", "--id", id, "--claim", "0")
		n.rejects(t, 1, id, "superseded", "fail", "--id", id, "--claim", "0")
		n.rejects(t, 1, id, "superseded", "snooze", "--id", id, "--claim", "0", "--delay", "1s")
		n.ack(t, "renew", "--id", id, "--claim", "1", "--ttl", "5m")
	})

	t.Run("groups-and-lists", func(t *testing.T) {
		g1a := n.enqueue(t, "--queue", "grp", "--group", "g1")
		g1b := n.enqueue(t, "--queue", "grp", "--group", "g1")
		g2 := n.enqueue(t, "--queue", "grp", "--group", "g2")
		var ids []string
		for _, v := range n.list(t, "--group", "g1") {
			if v.Group != "g1" {
				t.Errorf("list --group g1: task %s in group %q", v.ID, v.Group)
			}
			ids = append(ids, v.ID)
		}
		if !sameSet(ids, []string{g1a, g1b}) {
			t.Errorf("list --group g1: %v; want %v", ids, []string{g1a, g1b})
		}
		n.claim(t, "grp", "5m", "")
		if l := n.list(t, "--queue", "grp", "--state", "ready"); len(l) != 2 {
			t.Errorf("list --queue grp --state ready: %d tasks; want 2", len(l))
		}
		if l := n.list(t, "--queue", "grp", "--group", "g2"); len(l) != 1 || l[0].ID != g2 {
			t.Errorf("list --queue grp --group g2: %+v; want %s", l, g2)
		}
		if l := n.list(t, "--queue", "grp", "--limit", "2"); len(l) != 2 {
			t.Errorf("list --limit 2: %d tasks", len(l))
		}
		for _, st := range []string{"ready", "claimed", "delayed", "snoozed", "retrying", "blocked", "completed", "dead"} {
			for _, v := range n.list(t, "--state", st) {
				if v.State != st {
					t.Errorf("list --state %s: task %s is %s", st, v.ID, v.State)
				}
			}
		}
		if l := n.list(t, "--queue", "prio"); len(l) != 3 {
			t.Errorf("list --queue prio: %d tasks; want 3", len(l))
		}
		if l := n.list(t, "--queue", "nosuch"); len(l) != 0 {
			t.Errorf("list --queue nosuch: %d tasks; want none", len(l))
		}
	})

	t.Run("data-file-and-w", func(t *testing.T) {
		payload := []byte("line 1\nline 2\x00\xff binary\n")
		f := filepath.Join(t.TempDir(), "payload")
		if err := os.WriteFile(f, payload, 0o644); err != nil {
			t.Fatal(err)
		}
		id := n.enqueue(t, "--queue", "files", "--data-file", f, "--description", "from a file")
		if d := n.get(t, id).Data; !bytes.Equal(d, payload) {
			t.Errorf("--data-file: data %q; want %q", d, payload)
		}
		var e enqueued
		r := n.run(t, bytes.NewReader(payload), "enqueue", "--queue", "files", "--data-file", "-", "-w", "1")
		decode(t, checkOK(t, r, []string{"enqueue", "--data-file", "-"})[0], &e)
		if e.Acks != 1 {
			t.Errorf("enqueue -w 1: acks %d; want 1", e.Acks)
		}
		if d := n.get(t, e.ID).Data; !bytes.Equal(d, payload) {
			t.Errorf("--data-file -: data %q; want %q", d, payload)
		}
		// Exactly at the node's payload limit (1 MiB by default) is fine.
		big := filepath.Join(t.TempDir(), "big")
		if err := os.WriteFile(big, bytes.Repeat([]byte{'x'}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		n.enqueue(t, "--queue", "files", "--data-file", big)
	})

	t.Run("bad-input", func(t *testing.T) {
		dir := t.TempDir()
		over := filepath.Join(dir, "over")
		if err := os.WriteFile(over, bytes.Repeat([]byte{'x'}, 1<<20+1), 0o644); err != nil {
			t.Fatal(err)
		}
		const unknown = "0000000000000000000000000000000000000001"
		open := n.enqueue(t, "--queue", "bad")
		n.claim(t, "bad", "5m", open)

		n.rejects(t, 1, "", "queue name", "enqueue", "--queue", "no spaces")
		n.rejects(t, 1, "", "queue name", "enqueue", "--queue", "")
		n.rejects(t, 1, "", "queue name", "enqueue", "--queue", strings.Repeat("q", 300))
		n.rejects(t, 1, "", "queue name", "claim", "--queue", "a/../b")
		n.rejects(t, 1, "", "queue name", "count", "--queue", "tab\there")
		n.rejects(t, 1, "", "too large", "enqueue", "--queue", "bad", "--data-file", over)
		n.rejects(t, 1, "", "dependency not found", "enqueue", "--queue", "bad", "--dep", unknown)
		n.rejects(t, 1, "", "dependency not found", "enqueue", "--queue", "bad", "--dep", seed, "--dep", unknown)
		n.rejects(t, 1, "", "malformed id", "enqueue", "--queue", "bad", "--dep", "xyz")
		n.rejects(t, 1, "", "malformed id", "get", "--id", "xyz")
		n.rejects(t, 1, "", "not hex", "get", "--id", strings.Repeat("g", 40))
		n.rejects(t, 1, "", "malformed id", "complete", "--id", seed[:39], "--claim", "0")
		n.rejects(t, 1, "", "not found", "get", "--id", unknown)
		n.rejects(t, 1, "", "not found", "requeue", "--id", unknown)
		n.rejects(t, 1, open, "no such claim", "complete", "--id", open, "--claim", "1")
		n.rejects(t, 1, open, "no such claim", "renew", "--id", open, "--claim", "9")
		n.rejects(t, 1, open, "sequence", "update", "--id", open, "--claim", "0", "--seq", "1", "--data", "x")
		n.rejects(t, 1, open, "sequence", "complete", "--id", open, "--claim", "0", "--seq", "4")
		n.rejects(t, 1, open, "not dead", "requeue", "--id", open)
		n.rejects(t, 1, "", "unknown state", "list", "--state", "bogus")
		n.rejects(t, 1, "", "w=2", "enqueue", "--queue", "bad", "-w", "2")
		n.rejects(t, 1, "", "negative", "enqueue", "--queue", "bad", "--delay", "-1s")
		n.rejects(t, 1, "", "data-file", "enqueue", "--queue", "bad", "--data-file", filepath.Join(dir, "missing"))
		n.rejects(t, 1, "", "connect", "--addr", "127.0.0.1:1", "--timeout", "300ms", "count")
		if s := n.get(t, open); s.State != "claimed" || len(s.Claims) != 1 || len(s.Updates) != 0 {
			t.Errorf("the task the bad input aimed at: %+v; want claimed once, no updates", s)
		}
	})

	t.Run("usage-errors", func(t *testing.T) {
		n.rejects(t, 2, "", "missing --queue", "enqueue", "--data", "x")
		n.rejects(t, 2, "", "missing --queue", "claim")
		n.rejects(t, 2, "", "missing --id", "get")
		n.rejects(t, 2, "", "missing --claim", "complete", "--id", seed)
		n.rejects(t, 2, "", "missing --seq", "update", "--id", seed, "--claim", "1")
		n.rejects(t, 2, "", "missing --delay", "snooze", "--id", seed, "--claim", "1")
		n.rejects(t, 2, "", "not defined", "enqueue", "--queue", "q", "--bogus")
		n.rejects(t, 2, "", "not defined", "count", "--nope")
		n.rejects(t, 2, "", "unexpected argument", "enqueue", "--queue", "q", "stray")
		n.rejects(t, 2, "", "not both", "enqueue", "--queue", "q", "--data", "x", "--data-file", "/dev/null")
		n.rejects(t, 2, "", "invalid value", "enqueue", "--queue", "q", "--priority", "high")
		n.rejects(t, 2, "", "int32", "enqueue", "--queue", "q", "--priority", "3000000000")
		n.rejects(t, 2, "", "frobnicate", "frobnicate")
	})

	// The totals agree with each other and with what the subtests did.
	all := n.list(t)
	if c := n.count(t); c != int64(len(all)) {
		t.Errorf("count %d, but list printed %d tasks", c, len(all))
	}
	q := n.queues(t)
	var sum int64
	for _, s := range q {
		sum += s.Ready + s.Claimed + s.Delayed + s.Blocked + s.Completed + s.Dead
	}
	if sum != int64(len(all)) {
		t.Errorf("queues sum to %d tasks; list printed %d", sum, len(all))
	}
	if s := q["seed"]; s != (queueStats{Queue: "seed", Completed: 1}) {
		t.Errorf("queues seed: %+v; want one completed", s)
	}
	if s := q["prio"]; s.Claimed != 3 {
		t.Errorf("queues prio: %+v; want 3 claimed", s)
	}
	if s := q["dag"]; s.Completed != 2 || s.Claimed != 1 || s.Ready != 1 {
		t.Errorf("queues dag: %+v; want 2 completed, 1 claimed, 1 ready", s)
	}
	if n.count(t, "--queue", "grp") != 3 {
		t.Errorf("count --queue grp: want 3")
	}
	n.stop(t)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestKill9DuringEnqueueLoad kills the node with SIGKILL under a
// concurrent enqueue load and checks, after a restart on the same data,
// that every acknowledged task is there.
func TestKill9DuringEnqueueLoad(t *testing.T) {
	const (
		enqueuers = 16
		loadFor   = 1500 * time.Millisecond
		enoughAck = 2000
		callLimit = 3 * time.Second // bounds a call the dead node never answers
	)
	dir := t.TempDir()
	n := startNode(t, dir, 0)
	t.Logf("node %s healthy after %v", n.addr, n.healthyAfter.Round(time.Millisecond))

	type ackRec struct{ id, data string }
	var (
		mu       sync.Mutex
		acked    []ackRec
		attempts atomic.Int64
		killed   atomic.Bool
		early    []error // errors before the kill: real failures
		late     []error // errors after it: expected
		nAcked   atomic.Int64
		enough   = make(chan struct{})
		once     sync.Once
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := make([]*wire.Client, enqueuers)
	for i := range conns {
		conn, err := wire.Dial(ctx, n.addr, wire.ClientConfig{})
		if err != nil {
			t.Fatalf("dial %s: %v", n.addr, err)
		}
		conns[i] = wire.NewClient(conn)
		defer conns[i].Close()
	}
	began := time.Now()
	for w, cl := range conns {
		wg.Go(func() {
			for i := 0; ; i++ {
				data := fmt.Sprintf("k9-%02d-%07d", w, i)
				attempts.Add(1)
				cctx, ccancel := context.WithTimeout(ctx, callLimit)
				resp, err := cl.Enqueue(cctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "k9", Data: []byte(data)}}})
				ccancel()
				if err != nil {
					mu.Lock()
					if killed.Load() {
						late = append(late, err)
					} else {
						early = append(early, fmt.Errorf("enqueuer %d: %w", w, err))
					}
					mu.Unlock()
					return
				}
				if len(resp.Results) != 1 {
					mu.Lock()
					early = append(early, fmt.Errorf("enqueuer %d: %d results for one task", w, len(resp.Results)))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked = append(acked, ackRec{resp.Results[0].ID.String(), data})
				mu.Unlock()
				if nAcked.Add(1) >= enoughAck {
					once.Do(func() { close(enough) })
				}
			}
		})
	}
	select {
	case <-time.After(loadFor):
	case <-enough:
	}
	loadTime := time.Since(began)
	atKill := nAcked.Load()
	killed.Store(true)
	n.kill9(t)
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(callLimit + 10*time.Second):
		t.Fatal("enqueuers did not stop after the kill")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("%d enqueue errors before the kill, first: %v", len(early), early[0])
	}
	if len(late) != enqueuers {
		t.Fatalf("%d enqueuers saw an error after the kill; want all %d (each stops at its first)", len(late), enqueuers)
	}
	if len(acked) < 100 {
		t.Fatalf("only %d enqueues acknowledged in %v of load: too few to test durability", len(acked), loadTime)
	}
	t.Logf("load: %d enqueuers, %d attempts, %d acked (%d before SIGKILL was sent) in %v (%.0f/s); first error after the kill: %v",
		enqueuers, attempts.Load(), len(acked), atKill, loadTime.Round(time.Millisecond), float64(atKill)/loadTime.Seconds(), late[0])

	port, _ := strconv.Atoi(n.addr[strings.LastIndex(n.addr, ":")+1:])
	n2 := startNode(t, dir, port)
	t.Logf("restart: /healthz 200 after %v", n2.healthyAfter.Round(time.Millisecond))

	// Every acknowledged id, in one streamed list.
	lines := n2.ok(t, "list", "--queue", "k9")
	found := make(map[string]string, len(lines))
	for _, l := range lines {
		var v taskOut
		decode(t, l, &v)
		if v.Queue != "k9" || v.State != "ready" {
			t.Errorf("list --queue k9: task %s in queue %q, state %q; want k9, ready", v.ID, v.Queue, v.State)
		}
		if _, dup := found[v.ID]; dup {
			t.Errorf("list --queue k9: task %s listed twice", v.ID)
		}
		found[v.ID] = string(v.Data)
	}
	var lost []string
	for _, a := range acked {
		d, ok := found[a.id]
		switch {
		case !ok:
			lost = append(lost, a.id)
		case d != a.data:
			t.Errorf("task %s: data %q; want %q", a.id, d, a.data)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged tasks lost after kill -9, e.g. %v", len(lost), len(acked), lost[:min(5, len(lost))])
	}
	c := n2.count(t, "--queue", "k9")
	if c < int64(len(acked)) || c != int64(len(found)) {
		t.Errorf("count --queue k9: %d; want >= %d acked and = %d listed", c, len(acked), len(found))
	}
	t.Logf("after restart: %d acked, %d of them found, %d listed in all (%d durable without an ack), count %d",
		len(acked), len(acked)-len(lost), len(found), len(found)-(len(acked)-len(lost)), c)

	// A sample, one ctl get each: spread over the run, and the last acks
	// before the kill, which are the likeliest to be lost.
	slices.SortFunc(acked, func(a, b ackRec) int { return strings.Compare(a.id, b.id) })
	const sample = 50
	var picks []ackRec
	for i := range sample - 10 {
		picks = append(picks, acked[i*len(acked)/(sample-10)])
	}
	picks = append(picks, acked[max(0, len(acked)-10):]...)
	for _, a := range picks {
		v := n2.get(t, a.id)
		if string(v.Data) != a.data || v.Queue != "k9" || v.State != "ready" {
			t.Errorf("get %s: queue %q, state %q, data %q; want k9, ready, %q", a.id, v.Queue, v.State, v.Data, a.data)
		}
	}
	n2.stop(t)
}

// TestCtlGC: `ctl gc --dry-run` shows what a pass would take and takes
// nothing; `ctl gc` takes it; a collected task reads as not found (exit
// 1); --retention takes days; a bad duration is a usage error. The
// retention passes by moving the node's clock (the test build's clock
// hook), not by waiting.
func TestCtlGC(t *testing.T) {
	n := startNodeBin(t, skulddTestBin(t), t.TempDir(), 0, "--retention", "1d2s", "--gc-interval", "1h")
	done := n.enqueue(t, "--queue", "gc")
	c := n.claim(t, "gc", "5m", done)
	n.ack(t, "complete", "--id", done, "--claim", strconv.Itoa(int(*c.Claim)))
	open := n.enqueue(t, "--queue", "gc-open")
	var clk struct {
		OffsetMs int64 `json:"offset_ms"`
	}
	past := (24*time.Hour + 3*time.Second).Milliseconds()
	hookJSON(t, "POST", "http://"+n.addr+"/debug/clock", fmt.Sprintf(`{"offset_ms": %d}`, past), &clk)
	type gcOut struct {
		DryRun      bool     `json:"dry_run"`
		Collectable int64    `json:"collectable"`
		Collected   int64    `json:"collected"`
		Sample      []string `json:"sample"`
		Queues      []struct {
			Queue string `json:"queue"`
			Tasks int64  `json:"tasks"`
		} `json:"queues"`
	}
	var dry gcOut
	n.okJSON(t, &dry, "gc", "--dry-run")
	if !dry.DryRun || dry.Collectable != 1 || dry.Collected != 0 || len(dry.Sample) != 1 || dry.Sample[0] != done ||
		len(dry.Queues) != 1 || dry.Queues[0].Queue != "gc" || dry.Queues[0].Tasks != 1 {
		t.Fatalf("gc --dry-run: %+v; want %s, the one completed task, collectable", dry, done)
	}
	if s := n.get(t, done).State; s != "completed" {
		t.Fatalf("after the dry run: %s is %q", done, s)
	}
	var run gcOut
	n.okJSON(t, &run, "gc")
	if run.DryRun || run.Collected != 1 {
		t.Fatalf("gc: %+v; want 1 collected", run)
	}
	n.rejects(t, 1, "", "not found", "get", "--id", done)
	if s := n.get(t, open).State; s != "ready" {
		t.Errorf("the open task: %q; want ready", s)
	}
	cmd := exec.Command(n.bin, "--retention", "7x", "--data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "retention") {
		t.Errorf("skuldd --retention 7x: %v, %q; want exit 2 naming the flag", err, out)
	}
}

// TestBadNodeFlags: a node flag with a value out of range stops the
// daemon before it opens anything, with an exit status saying whose fault
// it is (2: the invocation) and a message naming the flag or setting.
func TestBadNodeFlags(t *testing.T) {
	bin := skulddBin(t)
	tests := []struct {
		args []string
		env  []string // SKULD_ variables, in place of flags
		code int
		want string
	}{
		{[]string{"--claim-cache-mb", "-1"}, nil, 2, "--claim-cache-mb"},
		{[]string{"--wal-min-sync-interval", "-1ms"}, nil, 2, "--wal-min-sync-interval"},
		{[]string{"--wal-min-sync-interval", "2s"}, nil, 2, "WAL min sync interval"},
		{[]string{"--log-format", "xml"}, nil, 2, "--log-format"},
		{nil, []string{"SKULD_LOG_FORMAT=xml"}, 2, "--log-format"},
		{nil, []string{"SKULD_LOG_LEVEL=loud"}, 2, "--log-level"},
		{nil, []string{"SKULD_PARTITIONS=0"}, 2, "partitions"},
		// A non-loopback bind needs a secret or --insecure, checked
		// before anything is bound or written.
		{[]string{"--bind", "10.1.2.3:13000"}, nil, 2, "--insecure"},
		{nil, []string{"SKULD_BIND=10.1.2.3:13000"}, 2, "--insecure"},
		// With --insecure the bind is attempted: 10.1.2.3 is no address
		// of this machine, so it fails there, having passed the check.
		{[]string{"--bind", "10.1.2.3:13000", "--insecure"}, nil, 1, "assign requested address"},
		{[]string{"--bind", "10.1.2.3:13000"}, []string{"SKULD_INSECURE=true"}, 1, "assign requested address"},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		cmd := exec.Command(bin, append(tc.args, "--data-dir", dir)...)
		cmd.Env = append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("skuldd %s (env %v): %v, %q; want exit %d naming %q", strings.Join(tc.args, " "), tc.env, err, out, tc.code, tc.want)
		}
		if tc.code != 2 {
			continue // a node that got as far as binding may have made its data dir
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("skuldd %s wrote %d entries into its data dir", strings.Join(tc.args, " "), len(entries))
		}
	}
}
