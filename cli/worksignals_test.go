package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/internal/testkit"
)

// TestWorkSignals runs the real binary's `ctl work`, in a process group of
// its own as a shell starts a foreground job, on a command that blocks,
// and signals it as a terminal's Ctrl-C, `timeout -s INT|TERM` or a
// service manager does: to the whole process group (and once to ctl
// alone, as docker does). SIGINT and SIGTERM drain alike: the command
// goes on and its outcome counts if it finishes within --drain; past
// --drain, or at once on a second signal, ctl stops the command's whole
// process group (a background grandchild included) and hands the task
// back with no attempt counted; ctl exits 0, promptly.
func TestWorkSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildSkuldd(t)
	addr := startWorkNode(t, bin)
	cl, err := client.New(client.Config{Nodes: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	for i, tc := range []struct {
		name    string
		sigs    []syscall.Signal // the second, if any, once ctl drains
		toGroup bool             // to ctl's process group, else to ctl only
		drain   time.Duration
		finish  bool // the command is let finish within the drain
	}{
		{name: "INT to the group, the command finishes", sigs: []syscall.Signal{syscall.SIGINT}, toGroup: true, drain: time.Minute, finish: true},
		{name: "TERM to the group, the command finishes", sigs: []syscall.Signal{syscall.SIGTERM}, toGroup: true, drain: time.Minute, finish: true},
		{name: "INT to the group, the drain runs out", sigs: []syscall.Signal{syscall.SIGINT}, toGroup: true, drain: time.Second},
		{name: "TERM to the group, the drain runs out", sigs: []syscall.Signal{syscall.SIGTERM}, toGroup: true, drain: time.Second},
		{name: "TERM to ctl, the drain runs out", sigs: []syscall.Signal{syscall.SIGTERM}, drain: time.Second},
		{name: "INT then TERM to the group", sigs: []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, toGroup: true, drain: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			queue := fmt.Sprintf("sig%d", i)
			ctx := context.Background()
			enq, err := cl.Enqueue(ctx, client.Task{Queue: queue, Data: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			// The command starts a background grandchild in its process
			// group, says it started, and runs until released.
			script := `sleep 1000 </dev/null >/dev/null 2>&1 3>&- & echo $! >grandchild; echo run >>started; ` +
				`while [ ! -e release ]; do sleep 0.02; done; kill $!; echo done`
			cmd := exec.Command(bin, "ctl", "work", "--queue", queue, "--poll", "200ms", "--drain", tc.drain.String(), "--", "sh", "-c", script)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SKULD_ADDR="+addr)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, as a shell's job
			var stdout, stderr workBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// exited closes once ctl is reaped; waitErr is its exit then.
			exited := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(exited) }()
			defer func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
				}
				if t.Failed() {
					t.Logf("ctl work stdout %q, stderr %q", stdout.String(), stderr.String())
				}
			}()
			signal := func(sig syscall.Signal) {
				t.Helper()
				target := cmd.Process.Pid
				if tc.toGroup {
					target = -target
				}
				if err := syscall.Kill(target, sig); err != nil {
					t.Fatalf("kill(%d, %v): %v", target, sig, err)
				}
			}
			testkit.WaitFor(t, 30*time.Second, func() error {
				if _, err := os.Stat(filepath.Join(dir, "grandchild")); err != nil {
					return fmt.Errorf("the command has not started: %v", err)
				}
				_, err := os.Stat(filepath.Join(dir, "started"))
				return err
			})
			grandchild, err := os.ReadFile(filepath.Join(dir, "grandchild"))
			if err != nil {
				t.Fatal(err)
			}

			signal(tc.sigs[0])
			// ctl got it: it says it drains, and the command goes on
			// (were it killed too, its task would leave its claim).
			testkit.WaitFor(t, 10*time.Second, func() error {
				if strings.Contains(stderr.String(), "draining") {
					return nil
				}
				if info, err := cl.Get(ctx, enq.ID); err == nil && info.State != "claimed" {
					return nil // the assertions below say what went wrong
				}
				return fmt.Errorf("ctl's stderr %q: no drain yet", stderr.String())
			})
			began := time.Now()
			if len(tc.sigs) > 1 {
				signal(tc.sigs[1])
			}
			if tc.finish {
				if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// Promptly: within the drain when it matters, well before
			// the kill delay otherwise (sh dies of SIGTERM).
			limit := 10 * time.Second
			if tc.drain < time.Minute {
				limit += tc.drain
			}
			select {
			case <-exited:
				if waitErr != nil {
					t.Fatalf("ctl work after %v: %v; want exit status 0", tc.sigs, waitErr)
				}
			case <-time.After(limit):
				t.Fatalf("ctl work still runs %v after %v", limit, tc.sigs)
			}
			took := time.Since(began)

			info, err := cl.Get(ctx, enq.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range info.Failures {
				if !f.Snooze {
					t.Errorf("failure %+v: want none but hand-backs", f)
				}
			}
			if info.Attempts != 0 {
				t.Errorf("attempts %d; want 0 (no attempt charged)", info.Attempts)
			}
			want := "ready" // handed back
			if tc.finish {
				want = "completed"
				if !strings.Contains(stdout.String(), "done") {
					t.Errorf("stdout %q; want the command's done", stdout.String())
				}
			}
			if info.State != want {
				t.Errorf("state %s; want %s", info.State, want)
			}
			if runs, _ := os.ReadFile(filepath.Join(dir, "started")); string(runs) != "run\n" {
				t.Errorf("the command ran %q; want once", runs)
			}
			if tc.drain == time.Minute && !tc.finish && took > 5*time.Second {
				t.Errorf("ctl took %v after the second signal; want it at once", took)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(grandchild)))
			if err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 5*time.Second, func() error {
				if alive(pid) {
					return fmt.Errorf("the command's grandchild %d outlived ctl", pid)
				}
				return nil
			})
		})
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: a zombie counts as alive
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// buildSkuldd builds the binary into a temporary directory.
func buildSkuldd(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the skuldd binary")
	}
	bin := filepath.Join(t.TempDir(), "skuldd")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/skuldd/skuldd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startWorkNode runs a one-node cluster and waits until it is healthy.
func startWorkNode(t *testing.T, bin string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out workBuffer
	cmd := exec.Command(bin, "--bind", addr, "--data-dir", t.TempDir(), "--clock-skew-bound", "1s", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("skuldd output:\n%s", out.String())
		}
	})
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	testkit.WaitEvery(t, time.Minute, 25*time.Millisecond, func() error {
		select {
		case <-done:
			return errors.New("skuldd exited")
		default:
		}
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	return addr
}

// workBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads at once.
type workBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *workBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *workBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
