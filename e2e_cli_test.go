package main_test

// The command line beyond ctl's single requests: a node configured wholly
// from SKULD_ variables and logging JSON, `skuldd bench` with its phases,
// its --json output and its errors, and the shell worker (`ctl work`).

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/wire"
)

// TestNodeFromEnv runs a node with no flags at all: every setting from the
// environment, logs as JSON lines, and a clean exit on SIGTERM.
func TestNodeFromEnv(t *testing.T) {
	bin := skulddBin(t)
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	n := &node{bin: bin, dir: dir, addr: addr, out: &lockedBuffer{}, done: make(chan struct{})}
	n.cmd = exec.Command(bin)
	n.cmd.Env = append(os.Environ(),
		"SKULD_BIND="+addr,
		"SKULD_DATA_DIR="+dir,
		"SKULD_PARTITIONS=8",
		"SKULD_CLOCK_SKEW_BOUND=1s",
		"SKULD_LOG_LEVEL=info",
		"SKULD_LOG_FORMAT=json",
	)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
		if t.Failed() {
			t.Logf("skuldd output:\n%s", n.out.String())
		}
	})
	if err := n.waitHealthy(time.Minute); err != nil {
		t.Fatal(err)
	}
	// The setting took: the cluster has the partition count from the
	// environment, and the node serves.
	var cluster struct {
		Partitions []json.RawMessage `json:"partitions"`
	}
	lines := n.ok(t, "cluster")
	if err := json.Unmarshal([]byte(lines[0]), &cluster); err != nil || len(cluster.Partitions) != 8 {
		t.Fatalf("ctl cluster: %d partitions (%v); want 8 from SKULD_PARTITIONS:\n%s", len(cluster.Partitions), err, lines[0])
	}
	n.ok(t, "enqueue", "--queue", "env", "--data", "payload")
	n.stop(t)

	var serving, stopped bool
	for _, l := range strings.Split(strings.TrimSpace(n.out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("log line %q has no %q", l, k)
			}
		}
		switch rec["msg"] {
		case "serving":
			serving = rec["addr"] == addr && rec["partitions"] == float64(8)
		case "stopped":
			stopped = true
		}
	}
	if !serving || !stopped {
		t.Errorf("JSON log: serving on %s with 8 partitions %v, stopped %v; want both", addr, serving, stopped)
	}
}

// benchLine is the part of a --json phase line the tests read.
type benchLine struct {
	Phase   string  `json:"phase"`
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Rate    float64 `json:"ops_per_sec"`
	P99     float64 `json:"p99_ms"`
	Clients int     `json:"clients"`
	Depth   int     `json:"depth"`
}

func TestBench(t *testing.T) {
	n := startNode(t, t.TempDir(), 0, "--partitions", "8")
	bench := func(args ...string) result {
		t.Helper()
		r, err := runBinary(n.bin, nil, append([]string{"bench", "--addr", n.addr}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	phases := func(args ...string) []benchLine {
		t.Helper()
		r := bench(append(args, "--json")...)
		// --json: only the phase lines on stdout, and no progress line
		// (terminal escapes) on stderr.
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("bench %s: %v; want exit 0 and no stderr", strings.Join(args, " "), r)
		}
		var out []benchLine
		for _, l := range r.lines() {
			var b benchLine
			if err := json.Unmarshal([]byte(l), &b); err != nil {
				t.Fatalf("bench %s: line %q: %v", strings.Join(args, " "), l, err)
			}
			out = append(out, b)
		}
		return out
	}
	check := func(got []benchLine, want ...benchLine) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("bench phases %+v; want %+v", got, want)
		}
		for i, w := range want {
			g := got[i]
			if g.Phase != w.Phase || g.Ops != w.Ops || g.Errors != 0 || g.Depth != w.Depth || g.Clients != w.Clients || g.Rate <= 0 || g.P99 <= 0 {
				t.Errorf("phase %d: %+v; want %s with %d ops at depth %d from %d clients, no errors, a rate and a p99", i, g, w.Phase, w.Ops, w.Depth, w.Clients)
			}
		}
	}

	t.Run("enqueue then claim", func(t *testing.T) {
		check(phases("-n", "600", "-c", "4", "--queue", "b1"),
			benchLine{Phase: "enqueue", Ops: 600, Clients: 4}, benchLine{Phase: "claim+complete", Ops: 600, Clients: 4})
		// Every task the bench enqueued it also completed.
		var st struct {
			Queue                     string
			Ready, Claimed, Completed int
		}
		for _, l := range n.ok(t, "queues") {
			if err := json.Unmarshal([]byte(l), &st); err != nil {
				t.Fatal(err)
			}
			if st.Queue == "b1" {
				break
			}
		}
		if st.Queue != "b1" || st.Ready != 0 || st.Claimed != 0 || st.Completed != 600 {
			t.Errorf("ctl queues after the bench: %+v; want b1 with 600 completed, none left", st)
		}
	})
	t.Run("batched enqueue then work", func(t *testing.T) {
		check(phases("-n", "500", "-c", "3", "--batch", "7", "--phases", "enqueue,work"),
			benchLine{Phase: "enqueue", Ops: 500, Clients: 3}, benchLine{Phase: "work", Ops: 500, Clients: 3})
	})
	t.Run("enqueue then worker", func(t *testing.T) {
		got := phases("-n", "400", "-c", "4", "--phases", "enqueue,worker")
		check(got[:1], benchLine{Phase: "enqueue", Ops: 400, Clients: 4})
		if w := got[len(got)-1]; len(got) != 2 || w.Phase != "worker" || w.Ops != 400 || w.Clients != 4 || w.Rate <= 0 {
			t.Errorf("worker phase %+v; want 400 tasks handled by 4 handlers at a rate", got)
		}
	})
	t.Run("ping", func(t *testing.T) {
		check(phases("-n", "300", "-c", "2", "--phases", "ping"), benchLine{Phase: "ping", Ops: 300, Clients: 2})
	})
	t.Run("claim scaling", func(t *testing.T) {
		check(phases("--claim-scaling", "--scaling-sizes", "50,200", "--scaling-claims", "20"),
			benchLine{Phase: "claim", Ops: 20, Depth: 50, Clients: 1}, benchLine{Phase: "claim", Ops: 20, Depth: 200, Clients: 1})
	})
	t.Run("text", func(t *testing.T) {
		// Without --json and with stderr not a terminal: one line a phase,
		// no progress line.
		r := bench("-n", "100", "-c", "2")
		if r.code != 0 || r.stderr != "" || len(r.lines()) != 2 ||
			!strings.HasPrefix(r.lines()[0], "enqueue") || !strings.Contains(r.lines()[1], "ops=100 errors=0") {
			t.Errorf("bench: %v; want two phase lines and a quiet stderr", r)
		}
	})

	// A request the node refuses as such ends the run at once with the
	// node's reason, instead of being retried forever.
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"--phases", "claim", "--queue", "bad queue"}, "claim+complete: invalid"},
		{[]string{"--phases", "enqueue", "--queue", "bad queue"}, "enqueue: task 1 of 1: invalid"},
		{[]string{"--phases", "work", "--queue", "bad queue"}, "work: invalid"},
		{[]string{"--phases", "enqueue", "--size", "2000000"}, "enqueue: "},
	}
	for _, tc := range refused {
		r := bench(append(tc.args, "-n", "50", "-c", "4")...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("bench %s: %v; want exit 1 and one line naming %q", strings.Join(tc.args, " "), r, tc.want)
		}
	}
	usage := [][]string{
		{"--phases", "enqueue,nope"},
		{"-n", "0"},
		{"--size", "-1"},
		{"--claim-scaling", "--scaling-sizes", "10,x"},
		{"extra"},
	}
	for _, args := range usage {
		if r := bench(args...); r.code != 2 {
			t.Errorf("bench %s: %v; want exit 2", strings.Join(args, " "), r)
		}
	}
}

// TestBenchNodeGone: a bench whose node stops under it ends instead of
// retrying for ever. (After a kill -9 the same holds, once QUIC's idle
// timeout has found the peer gone.)
func TestBenchNodeGone(t *testing.T) {
	n := startNode(t, t.TempDir(), 0, "--partitions", "4")
	cmd := exec.Command(n.bin, "bench", "--addr", n.addr, "-n", "100000000", "-c", "4", "--phases", "enqueue", "--json")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Let it run, then take the node away.
	time.Sleep(500 * time.Millisecond)
	began := time.Now()
	n.stop(t)
	select {
	case err := <-done:
		// The phase reports what it did (exit 0 with errors counted) or
		// that nothing succeeded (exit 1); either way it ended.
		if err != nil && !strings.Contains(out.String(), "enqueue") {
			t.Errorf("bench after the node stopped: %v, output %q", err, out.String())
		}
		t.Logf("bench ended %v after its node was told to stop: %v; output %q", time.Since(began).Round(time.Millisecond), err, out.String())
	case <-time.After(time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("bench still running a minute after its node died; output %q", out.String())
	}
}

// TestGarbageOnThePort: bytes that are not QUIC on the UDP port and not
// HTTP on the TCP port neither crash the node nor stop it serving.
func TestGarbageOnThePort(t *testing.T) {
	n := startNode(t, t.TempDir(), 0, "--partitions", "4")
	rng := rand.New(rand.NewPCG(1, 2))
	junk := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// UDP: random datagrams of every size class, and ones shaped like a
	// QUIC long header (first bit set) with garbage after it.
	udp, err := net.Dial("udp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for i := range 2000 {
		d := junk(1 + rng.IntN(1400))
		if i%2 == 0 {
			d[0] |= 0xc0
		}
		if _, err := udp.Write(d); err != nil {
			t.Fatalf("udp write: %v", err)
		}
	}
	// TCP: connections that send garbage, a half request, or nothing.
	for i := range 50 {
		c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("tcp dial: %v", err)
		}
		switch i % 3 {
		case 0:
			_, _ = c.Write(junk(1 + rng.IntN(8192)))
		case 1:
			_, _ = c.Write([]byte("POST /v1/enqueue HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"tasks\":["))
		}
		_ = c.Close()
	}
	// Still serving, over both transports.
	n.ok(t, "enqueue", "--queue", "after-junk", "--data", "x")
	if err := n.waitHealthy(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.done:
		t.Fatalf("the node exited: %v", n.waitErr)
	default:
	}
}

// TestShellWorker runs README's `ctl work` line against a node: a task
// with a name is greeted, its progress line logged and the task
// completed; one without fails with the exit status and stderr as its
// reason; SIGINT drains and exits 0.
func TestShellWorker(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(readme)) {
		if rest, ok := strings.CutPrefix(l, "    $ skuldd ctl work "); ok {
			line = strings.TrimSpace(rest)
			break
		}
	}
	if line == "" {
		t.Fatal("no `$ skuldd ctl work` line in README.md")
	}
	// The queue's lease and backoff apply to ctl work, which names
	// neither (it once sent its own 30 s lease and 1 s backoff always).
	n.ok(t, "queue", "set", "--default-ttl", "3m", "--backoff", "1h,2h", "greet")
	ada := n.enqueue(t, "--queue", "greet", "--data", "ada")
	nobody := n.enqueue(t, "--queue", "greet", "--max-attempts", "1")
	again := n.enqueue(t, "--queue", "greet", "--max-attempts", "2")
	cmd := exec.Command("sh", "-c", "exec \"$SKULDD\" ctl work --poll 200ms "+line)
	cmd.Env = append(os.Environ(), "SKULDD="+n.bin, "SKULD_ADDR="+n.addr)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	testkit.WaitFor(t, 30*time.Second, func() error {
		if got := n.get(t, ada); got.State != "completed" {
			return fmt.Errorf("ada's task is %s", got.State)
		}
		if got := n.get(t, nobody); got.State != "dead" {
			return fmt.Errorf("the nameless task is %s", got.State)
		}
		if got := n.get(t, again); got.State != "retrying" {
			return fmt.Errorf("the nameless task with 2 attempts is %s", got.State)
		}
		return nil
	})
	if c := n.get(t, ada).Claims; len(c) != 1 || c[0].End-c[0].Start != (3*time.Minute).Milliseconds() {
		t.Errorf("ada's claims %+v; want one leased for the queue's 3m", c)
	}
	if got := n.get(t, again); len(got.Failures) != 1 ||
		got.NotBefore-got.Failures[0].At < (45*time.Minute).Milliseconds() || got.NotBefore-got.Failures[0].At > (75*time.Minute).Milliseconds() {
		t.Errorf("the retried task: failures %+v, not before %d; want one failure and the queue's 1h backoff ±25%%", got.Failures, got.NotBefore)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ctl work after SIGINT: %v; stderr %q", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "hello, ada\n") {
		t.Errorf("stdout %q; want the greeting", stdout.String())
	}
	if got := n.get(t, ada); len(got.Updates) != 1 || string(got.Updates[0].Data) != "greeted ada" {
		t.Errorf("ada's updates %+v; want the progress line", got.Updates)
	}
	got := n.get(t, nobody)
	if len(got.Failures) != 1 || !strings.Contains(got.Failures[0].Reason, "exit status 3") || !strings.Contains(got.Failures[0].Reason, "no name") {
		t.Errorf("the nameless task's failures %+v; want exit status 3 and the stderr", got.Failures)
	}
}

// TestShellWorkerExitCodes: the exit statuses README documents for `ctl
// work` commands: 0 completes, 75 snoozes (no attempt counted), 65 fails
// for good (dead at its first of ten attempts), 79 cancels with the end of
// stderr as the reason, and any other fails the attempt, to be retried.
func TestShellWorkerExitCodes(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	ids := map[string]string{}
	for _, code := range []string{"0", "75", "65", "79", "3"} {
		ids[code] = n.enqueue(t, "--queue", "codes", "--data", code)
	}
	cmd := exec.Command(n.bin, "ctl", "work", "--queue", "codes", "--poll", "200ms", "--snooze", "1h", "--",
		"sh", "-c", `read code; echo "exiting $code" >&2; exit $code`)
	cmd.Env = append(os.Environ(), "SKULD_ADDR="+n.addr)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	want := map[string]string{"0": "completed", "75": "snoozed", "65": "dead", "79": "cancelled", "3": "retrying"}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for code, id := range ids {
			if got := n.get(t, id).State; got != want[code] {
				return fmt.Errorf("the task whose command exits %s is %s; want %s", code, got, want[code])
			}
		}
		return nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ctl work after SIGINT: %v; stderr %q", err, stderr.String())
	}
	if v := n.get(t, ids["75"]); v.Attempts != 0 || v.NotBefore-v.Failures[0].At != time.Hour.Milliseconds() {
		t.Errorf("exit 75: attempts %d, failures %+v, not before %d; want none counted, an hour's snooze", v.Attempts, v.Failures, v.NotBefore)
	}
	if v := n.get(t, ids["65"]); v.Attempts != 1 || len(v.Failures) != 1 || !v.Failures[0].NoRetry ||
		!strings.Contains(v.Failures[0].Reason, "exiting 65") {
		t.Errorf("exit 65: attempts %d, failures %+v; want one no-retry failure with the stderr", v.Attempts, v.Failures)
	}
	if v := n.get(t, ids["79"]); v.Cancelled == nil || v.Cancelled.Reason != "exiting 79" {
		t.Errorf("exit 79: cancelled %+v; want the stderr as the reason", v.Cancelled)
	}
	if v := n.get(t, ids["3"]); v.Attempts != 1 || len(v.Failures) != 1 || v.Failures[0].NoRetry {
		t.Errorf("exit 3: attempts %d, failures %+v; want one failure, to be retried", v.Attempts, v.Failures)
	}
}

// TestREADMEQueueSettings runs the shell session of README's "Queue
// settings" against a node with a task in the queue: each `$` line's
// output must be the lines README shows after it.
func TestREADMEQueueSettings(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	n.enqueue(t, "--queue", "mail")
	runREADMESession(t, n, "Queue settings", 4)
	// Resumed: the task is claimable again.
	if lines := n.ok(t, "claim", "--queue", "mail"); len(lines) != 1 {
		t.Fatalf("claim after the resume: %q; want the task", lines)
	}
}

// TestREADMETaskControl runs README's task-control session: cancel a
// claimed task, see its claim refused, delete it, requeue a dead one.
func TestREADMETaskControl(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	runREADMESession(t, n, "Task control", 8)
	if lines := n.ok(t, "list", "--queue", "reports"); len(lines) != 1 || !strings.Contains(lines[0], `"state":"ready"`) {
		t.Fatalf("reports after the session: %q; want the one requeued task, ready", lines)
	}
}

// runREADMESession runs the `    $ ` commands of README.md's section
// (at least minSteps of them) in one shell against n, in order, so that
// a variable one sets reaches the next, and checks that their stdout is
// the lines the section shows under them.
func runREADMESession(t *testing.T, n *node, section string, minSteps int) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(readme), "\n## "+section+"\n")
	if !ok {
		t.Fatalf("README.md has no %s section", section)
	}
	text, _, _ = strings.Cut(text, "\n## ")
	var script strings.Builder
	var want []string
	steps := 0
	for l := range strings.Lines(text) {
		l = strings.TrimRight(l, "\n")
		switch {
		case strings.HasPrefix(l, "    $ "):
			steps++
			script.WriteString(strings.TrimPrefix(l, "    $ ") + "\n")
		case strings.HasPrefix(l, "    ") && steps > 0:
			want = append(want, strings.TrimPrefix(l, "    "))
		}
	}
	if steps < minSteps {
		t.Fatalf("README's %s session has %d commands; want at least %d", section, steps, minSteps)
	}
	cmd := exec.Command("sh", "-c", script.String())
	cmd.Env = append(os.Environ(), "SKULD_ADDR="+n.addr, "PATH="+filepath.Dir(n.bin)+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("README's %s session: %v\n%s", section, err, out)
	}
	if got := strings.Split(strings.TrimRight(string(out), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README's %s session:\ngot  %q\nwant %q", section, got, want)
	}
}

// TestREADMEGroups runs README's task-group session: a group's counts and
// failure, a subtopic's count, the group cancelled as one.
func TestREADMEGroups(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	runREADMESession(t, n, "Task groups", 7)
	if lines := n.ok(t, "list", "--group", "batch-1", "--state", "cancelled"); len(lines) != 4 {
		t.Fatalf("cancelled tasks of the group after the session: %q; want 4", lines)
	}
}

// TestREADMEPeriodicTasks runs README's periodic-task session: a cron
// schedule and an every-second one, whose first occurrence is claimed,
// then deleted.
func TestREADMEPeriodicTasks(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	runREADMESession(t, n, "Periodic tasks", 6)
	lines := n.ok(t, "schedule", "list", "--name", "nightly-report")
	if len(lines) != 1 || !strings.Contains(lines[0], `"cron":"0 3 * * mon-fri"`) || !strings.Contains(lines[0], `"data":"bmlnaHRseQ=="`) {
		t.Fatalf("the cron schedule after the session: %q", lines)
	}
}

// TestREADMEUniqueKeys runs README's unique-key session: a key enqueued
// again yields its task, a cancel frees the key.
func TestREADMEUniqueKeys(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	runREADMESession(t, n, "Unique keys", 7)
}

// TestREADMEWorkerShards runs README's worker-shard session: two members
// split indexes 0 and 1; one leaves and the other holds 0 alone.
func TestREADMEWorkerShards(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	runREADMESession(t, n, "Worker shards", 8)
}

// TestShardsJoinCommand drives `ctl shards join` as a user does: a first
// member runs its command as index 0 of 1; a second joins and, once the
// first stopped its command (SIGTERM), both run as 0 and 1 of 2; SIGTERM
// to the second's ctl stops its command and leaves, and the first runs
// as 0 of 1 again; kill -9 of the first's ctl takes its command with it,
// and the cluster expires the member after its lease.
func TestShardsJoinCommand(t *testing.T) {
	n := startNode(t, t.TempDir(), 0)
	dir := t.TempDir()
	script := filepath.Join(dir, "w.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "start $$ $SKULD_SHARD_INDEX $SKULD_SHARD_COUNT $SKULD_SHARD_GENERATION" >> "$OUT"
trap 'echo "term $$" >> "$OUT"; exit 0' TERM
while :; do sleep 0.1; done
`), 0o755); err != nil {
		t.Fatal(err)
	}
	join := func(name string) (*exec.Cmd, string) {
		out := filepath.Join(dir, name+".log")
		cmd := exec.Command(n.bin, "ctl", "shards", "join", "--ttl", "2s", "crawl", "--", script)
		cmd.Env = append(os.Environ(), "SKULD_ADDR="+n.addr, "OUT="+out)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, out
	}
	// last returns the fields of the last line of a member's log.
	last := func(out string) []string {
		b, _ := os.ReadFile(out)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.Fields(lines[len(lines)-1])
	}
	running := func(out, index, count string) func() error {
		return func() error {
			if f := last(out); len(f) != 5 || f[0] != "start" || f[2] != index || f[3] != count {
				return fmt.Errorf("%s: last line %q; want index %s of %s", filepath.Base(out), f, index, count)
			}
			return nil
		}
	}
	a, aOut := join("a")
	testkit.WaitFor(t, 30*time.Second, running(aOut, "0", "1"))
	b, bOut := join("b")
	testkit.WaitFor(t, 30*time.Second, func() error {
		if err := running(aOut, "0", "2")(); err != nil {
			return err
		}
		return running(bOut, "1", "2")()
	})
	if b, _ := os.ReadFile(aOut); !strings.Contains(string(b), "term ") {
		t.Fatalf("a's command was not stopped before the new generation:\n%s", b)
	}
	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("ctl shards join after SIGTERM: %v", err)
	}
	if f := last(bOut); f[0] != "term" {
		t.Fatalf("b's command after its ctl's SIGTERM: %q; want stopped", f)
	}
	testkit.WaitFor(t, 30*time.Second, running(aOut, "0", "1"))
	pid, _ := strconv.Atoi(last(aOut)[1])
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.Wait()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if err := syscall.Kill(pid, 0); err == nil {
			return fmt.Errorf("a's command (pid %d) outlived its ctl", pid)
		}
		return nil
	})
	testkit.WaitFor(t, 30*time.Second, func() error {
		var v wire.ShardView
		n.okJSON(t, &v, "shards", "members", "crawl")
		if len(v.Members) != 0 {
			return fmt.Errorf("members %+v; want a expired", v.Members)
		}
		return nil
	})
}

// TestCtlForPeople drives ctl as a person types it: --version; ctl's own
// flags after the subcommand and a subcommand's flags after its
// arguments; --addr with a dead node first (the next one is used, the
// dead one costs about --dial-timeout) and with only dead nodes (an error
// that says so); -o table (aligned columns, local times, a payload as
// text, or base64 when it is not); and the token printed bare, used as
// --token.
func TestCtlForPeople(t *testing.T) {
	bin := skulddBin(t)
	dir := t.TempDir()
	secret := writeSecret(t, dir)
	n := startNode(t, filepath.Join(dir, "data"), 0, "--cluster-secret-file", secret)
	defer n.stop(t)

	r, err := runBinary(bin, nil, "--version")
	if err != nil || r.code != 0 || !strings.HasPrefix(r.stdout, "skuldd version ") || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("--version: %v, %v", r, err)
	}

	r, err = runBinary(bin, nil, "ctl", "token", "--raw", "--cluster-secret-file", secret)
	tok := strings.TrimSpace(r.stdout)
	if err != nil || r.code != 0 || len(tok) != 64 || strings.ContainsAny(tok, "{\" ") {
		t.Fatalf("ctl token --raw: %v, %v; want the bare token", r, err)
	}

	// Flags anywhere after ctl: ctl's after the subcommand, the
	// subcommand's after an argument.
	ctl := func(args ...string) result {
		t.Helper()
		r, err := runBinary(bin, nil, append([]string{"ctl"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r = ctl("enqueue", "--queue", "people", "--data", "hello world", "--addr", n.addr, "--token", tok)
	if r.code != 0 || !strings.Contains(r.stdout, `"acks":1`) {
		t.Fatalf("enqueue with --addr and --token after it: %v", r)
	}
	if r = ctl("enqueue", "--queue", "people", "--data-file", "-", "--addr="+n.addr, "--token", tok); r.code != 0 {
		t.Fatalf("enqueue of an empty payload from stdin: %v", r)
	}
	binPath := filepath.Join(dir, "payload.bin")
	if err := os.WriteFile(binPath, []byte{0, 1, 'b', 'i', 'n'}, 0o600); err != nil {
		t.Fatal(err)
	}
	if r = ctl("--token", tok, "enqueue", "--queue", "people", "--data-file", binPath, "--addr", n.addr); r.code != 0 {
		t.Fatalf("enqueue of a binary payload: %v", r)
	}
	if r = ctl("schedule", "set", "nightly", "--queue", "people", "--cron", "@daily", "--addr", n.addr, "--token", tok); r.code != 0 {
		t.Fatalf("schedule set NAME --flags: %v", r)
	}

	// A dead node first in --addr: the next answers.
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	began := time.Now()
	r = ctl("count", "--queue", "people", "--addr", dead+","+n.addr, "--token", tok, "--dial-timeout", "300ms")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"count":3}` {
		t.Fatalf("count through a dead node, then a live one: %v", r)
	}
	t.Logf("a dead node first in --addr cost %v (--dial-timeout 300ms)", time.Since(began).Round(time.Millisecond))
	// Only dead nodes: the error names each and says what happened.
	r = ctl("count", "--addr", dead+","+dead, "--dial-timeout", "300ms")
	if r.code != 1 || !strings.Contains(r.stderr, "no node of --addr answered") || !strings.Contains(r.stderr, "no answer within 300ms (the node is down, or not listening at this address)") {
		t.Fatalf("count with only dead nodes: %v", r)
	}

	// -o table: a header, aligned columns, the payload as text (or
	// base64), times in local time; columns no row uses are left out.
	r = ctl("list", "--queue", "people", "-o", "table", "--addr", n.addr, "--token", tok)
	lines := r.lines()
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("list -o table: %v; want a header and 3 rows", r)
	}
	header := strings.Fields(lines[0])
	for _, col := range []string{"ID", "QUEUE", "DATA", "STATE", "ENQUEUED_AT"} {
		if !slices.Contains(header, col) {
			t.Errorf("list -o table: header %q lacks %s", lines[0], col)
		}
	}
	if slices.Contains(header, "TIME_LIMIT") {
		t.Errorf("list -o table: header %q shows a column no task uses", lines[0])
	}
	dataCol := strings.Index(lines[0], "DATA")
	var texts []string
	for _, l := range lines[1:] {
		texts = append(texts, strings.Fields(l[dataCol:])[0])
		if !regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}`).MatchString(l) {
			t.Errorf("list -o table: row %q has no local time", l)
		}
	}
	slices.Sort(texts)
	if want := []string{"-", "base64:AAFiaW4=", "hello"}; !slices.Equal(texts, want) {
		t.Errorf("list -o table: payloads %q; want %q", texts, want)
	}
	if r = ctl("cluster", "-o", "table", "--addr", n.addr, "--token", tok); r.code != 0 || !strings.Contains(r.stdout, "MEMBERS\nID ") || !strings.Contains(r.stdout, "PARTITIONS\nPARTITION ") {
		t.Fatalf("cluster -o table: %v", r)
	}
	if r = ctl("count", "-o", "yaml", "--addr", n.addr, "--token", tok); r.code != 2 || !strings.Contains(r.stderr, `--output "yaml": want json or table`) {
		t.Fatalf("-o yaml: %v; want a usage error", r)
	}
}

// TestSystemdNotify runs the node as systemd's Type=notify does: with a
// datagram socket in NOTIFY_SOCKET. The node says READY=1 once it serves
// (GET /readyz answers 200 by then), and STOPPING=1 when SIGTERM begins
// its shutdown; then it exits 0.
func TestSystemdNotify(t *testing.T) {
	bin := skulddBin(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "--bind", addr, "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("skuldd output:\n%s", out.String())
		}
	})
	// next returns the next datagram the node sent.
	next := func(within time.Duration) string {
		t.Helper()
		buf := make([]byte, 4096)
		if err := ln.SetReadDeadline(time.Now().Add(within)); err != nil {
			t.Fatal(err)
		}
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification from the node: %v", err)
		}
		return string(buf[:n])
	}
	for {
		msg := next(time.Minute)
		if strings.HasPrefix(msg, "STATUS=not ready") {
			continue
		}
		if !strings.Contains(msg, "READY=1") {
			t.Fatalf("notification %q; want READY=1 (or a not-ready STATUS)", msg)
		}
		break
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after READY=1: %s", resp.Status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := next(10 * time.Second); msg != "STOPPING=1" {
		t.Fatalf("notification after SIGTERM %q; want STOPPING=1", msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30 s of SIGTERM")
	}
}

// TestSystemdUnit: the unit in scripts/systemd is Type=notify and
// systemd-analyze rates its sandbox 4.0 or lower (lower is safer). It
// skips, saying so, where systemd-analyze is not installed.
func TestSystemdUnit(t *testing.T) {
	const unit = "scripts/systemd/skuldd.service"
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=main\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", unit, strings.TrimSpace(want))
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit's sandbox is not rated")
	}
	out, err := exec.Command(sa, "security", "--offline=true", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for skuldd.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security gave no overall level:\n%s", out)
	}
	level, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", level)
	if level > 4.0 {
		t.Errorf("the unit's exposure is %.1f; want 4.0 or lower:\n%s", level, out)
	}
}
