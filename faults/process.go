package faults

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// NodeProc is one skuldd process, run in its node's namespace and
// restarted with the same flags and data dir. Safe for concurrent use.
type NodeProc struct {
	Index int
	// Argv is the whole command: ip netns exec NS skuldd FLAGS... Read
	// under mu by Start; change it with SetArgv once the process runs.
	Argv []string
	// Env is added to the harness's environment (GOMAXPROCS=1).
	Env     []string
	LogPath string
	PidPath string
	// OnUnexpectedExit, if set, is called (from the reaping goroutine)
	// when the process exits without the harness having caused it.
	OnUnexpectedExit func(node int, status string)
	log              *slog.Logger
	tl               Timeline

	mu struct {
		sync.Mutex
		cmd    *exec.Cmd
		done   chan struct{}
		paused bool
		// expected marks an exit the harness caused (kill, term,
		// crash); any other exit is the node's own doing and is
		// counted in Unexpected.
		expected   bool
		starts     int
		unexpected []string
	}
}

// Process states.
const (
	StateDown    = "down"
	StateRunning = "running"
	StatePaused  = "paused"
)

// procWaitBound bounds the wait for a process to die after SIGKILL: the
// kernel reaps it in milliseconds, unless the machine is stuck.
const procWaitBound = 10 * time.Second

// Start starts the process; it fails if it is already running.
func (p *NodeProc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd != nil {
		return fmt.Errorf("node %d: already running (pid %d)", p.Index, p.mu.cmd.Process.Pid)
	}
	lf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %d: log: %w", p.Index, err)
	}
	defer lf.Close() // the child has its own descriptor
	p.mu.starts++
	fmt.Fprintf(lf, "=== faults: start %d of node %d at t=%.3fs ===\n", p.mu.starts, p.Index, float64(p.tl.Now())/1e9)
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group: a Ctrl-C at the terminal reaches the harness,
	// which stops the nodes itself. Pdeathsig: a harness that dies
	// takes its nodes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %d: start: %w", p.Index, err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(p.PidPath, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		p.log.Warn("pid file", "node", p.Index, "err", err)
	}
	done := make(chan struct{})
	p.mu.cmd, p.mu.done, p.mu.paused, p.mu.expected = cmd, done, false, false
	go p.reap(cmd, done)
	p.log.Info("node started", "node", p.Index, "pid", pid, "start", p.mu.starts)
	return nil
}

// SetArgv replaces the command of the next Start (a wiped node starts
// again with another join list); a running process is not affected.
func (p *NodeProc) SetArgv(argv []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Argv = slices.Clone(argv)
}

// reap waits for cmd to exit and marks the node down.
func (p *NodeProc) reap(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	p.mu.Lock()
	expected := p.mu.expected
	if p.mu.cmd == cmd {
		p.mu.cmd = nil
	}
	if !expected {
		p.mu.unexpected = append(p.mu.unexpected, fmt.Sprintf("t=%.3fs: %v", float64(p.tl.Now())/1e9, exitText(err)))
	}
	p.mu.Unlock()
	_ = os.Remove(p.PidPath)
	close(done)
	if expected {
		p.log.Info("node exited", "node", p.Index, "status", exitText(err))
		return
	}
	p.log.Error("node exited on its own", "node", p.Index, "status", exitText(err), "log", p.LogPath)
	if p.OnUnexpectedExit != nil {
		p.OnUnexpectedExit(p.Index, exitText(err))
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// State returns down, running or paused.
func (p *NodeProc) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mu.cmd == nil:
		return StateDown
	case p.mu.paused:
		return StatePaused
	}
	return StateRunning
}

// Pid returns the running process's pid, or 0.
func (p *NodeProc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return 0
	}
	return p.mu.cmd.Process.Pid
}

// Unexpected lists the exits the harness did not cause.
func (p *NodeProc) Unexpected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.mu.unexpected...)
}

// signal sends sig to the running process; expectExit marks the exit it
// may cause as the harness's doing.
func (p *NodeProc) signal(sig syscall.Signal, expectExit bool) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return nil, fmt.Errorf("node %d: not running", p.Index)
	}
	if expectExit {
		p.mu.expected = true
	}
	if err := p.mu.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("node %d: %v: %w", p.Index, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.mu.paused = true
	case syscall.SIGCONT:
		p.mu.paused = false
	}
	return p.mu.done, nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *NodeProc) Kill() error {
	done, err := p.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	return waitDone(done, procWaitBound, p.Index, "kill -9")
}

// Pause sends SIGSTOP; Resume SIGCONT.
func (p *NodeProc) Pause() error {
	_, err := p.signal(syscall.SIGSTOP, false)
	return err
}

func (p *NodeProc) Resume() error {
	_, err := p.signal(syscall.SIGCONT, false)
	return err
}

// Term stops the node gracefully: SIGTERM (and SIGCONT, should it be
// paused), then SIGKILL if it has not exited within grace.
func (p *NodeProc) Term(grace time.Duration) error {
	done, err := p.signal(syscall.SIGTERM, true)
	if err != nil {
		return err
	}
	_, _ = p.signal(syscall.SIGCONT, true)
	if waitDone(done, grace, p.Index, "SIGTERM") == nil {
		return nil
	}
	p.log.Warn("node did not stop on SIGTERM; killing it", "node", p.Index, "grace", grace)
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("node %d: did not stop within %v of SIGTERM", p.Index, grace)
}

// ExpectExit marks the next exit as the harness's doing (a crash asked
// through the test hook) and returns the channel closed at the exit.
func (p *NodeProc) ExpectExit() (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return nil, fmt.Errorf("node %d: not running", p.Index)
	}
	p.mu.expected = true
	return p.mu.done, nil
}

// WaitExit waits up to bound for the process to exit.
func (p *NodeProc) WaitExit(done chan struct{}, bound time.Duration) error {
	return waitDone(done, bound, p.Index, "exit")
}

func waitDone(done chan struct{}, bound time.Duration, node int, what string) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("node %d: still running %v after %s", node, bound, what)
	}
}
