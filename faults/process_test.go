package faults

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// An exit is the harness's doing only if what it did explains the
// status.
func TestExitExplainedBy(t *testing.T) {
	killed := Exit{Code: -1, Signal: syscall.SIGKILL}
	crashed := Exit{Code: CrashExitStatus}
	panicked := Exit{Code: 2}
	clean := Exit{Code: 0}
	cases := []struct {
		name   string
		exit   Exit
		causes exitCause
		want   bool
	}{
		{"nothing asked", panicked, 0, false},
		{"nothing asked, a kill -9 from elsewhere (the OOM killer)", killed, 0, false},
		{"kill -9 that killed", killed, causeKill, true},
		{"kill -9 too late: it had exited by itself", panicked, causeKill, false},
		{"crash hook that crashed", crashed, causeCrash, true},
		{"crash hook, but it panicked", panicked, causeCrash, false},
		{"crash hook, then the fallback kill", killed, causeCrash | causeKill, true},
		{"SIGTERM, clean exit", clean, causeTerm, true},
		{"SIGTERM, then the grace's kill", killed, causeTerm | causeKill, true},
		{"SIGTERM, any status", panicked, causeTerm, true},
	}
	for _, c := range cases {
		if got := c.exit.explainedBy(c.causes); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}

// On stand-in processes: an exit the harness did not cause is reported
// as soon as it happens (the run records NoteExit then), with its
// status; one it caused is not.
func TestNodeProcUnexpectedExit(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	type report struct {
		node   int
		status string
	}
	var mu sync.Mutex
	var got []report
	newProc := func(i int, script string) *NodeProc {
		return &NodeProc{Index: i, Argv: []string{"sh", "-c", script},
			LogPath: filepath.Join(dir, "n.log"), PidPath: filepath.Join(dir, "n.pid"),
			OnUnexpectedExit: func(node int, status string) {
				mu.Lock()
				got = append(got, report{node, status})
				mu.Unlock()
			},
			log: log, tl: NewTimeline()}
	}
	wait := func(p *NodeProc) {
		t.Helper()
		deadline := time.Now().Add(procWaitBound)
		for p.State() != StateDown {
			if time.Now().After(deadline) {
				t.Fatalf("node %d still running", p.Index)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// 1: exits by itself.
	p1 := newProc(1, "exit 3")
	// 2: killed by the harness.
	p2 := newProc(2, "sleep 60")
	// 3: asked to crash, exits with the crash status.
	p3 := newProc(3, "sleep 0.2; exit 137")
	// 4: asked to crash, exits with another status.
	p4 := newProc(4, "sleep 0.2; exit 2")
	for _, p := range []*NodeProc{p1, p2, p3, p4} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*NodeProc{p3, p4} {
		if _, err := p.ExpectCrash(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*NodeProc{p1, p3, p4} {
		wait(p)
	}
	// The reaper calls back after it marks the node down.
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].node+got[1].node != 5 {
		t.Fatalf("unexpected exits reported %v; want nodes 1 and 4", got)
	}
	for _, r := range got {
		want := map[int]string{1: "exit status 3", 4: "exit status 2 (while the harness expected the crash hook's exit 137)"}[r.node]
		if r.status != want {
			t.Errorf("node %d: status %q; want %q", r.node, r.status, want)
		}
	}
	if ex := p3.LastExit(); !ex.Expected || ex.Code != CrashExitStatus {
		t.Errorf("node 3's exit %+v", ex)
	}
	if ex := p2.LastExit(); !ex.Expected || ex.Signal != syscall.SIGKILL {
		t.Errorf("node 2's exit %+v", ex)
	}
	if u := p1.Unexpected(); len(u) != 1 || !strings.Contains(u[0], "exit status 3") {
		t.Errorf("node 1's unexpected exits %v", u)
	}
	if err := p2.Kill(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("kill of a down node: %v", err)
	}
}
