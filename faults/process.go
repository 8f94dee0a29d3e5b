package faults

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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
		// causes are what the harness did since the start that may
		// end the process (kill, term, crash). An exit is the
		// harness's doing only if one of them explains its status
		// (Exit.explainedBy): a node asked to crash that exits with
		// another status, or that exited before a kill landed, exited
		// on its own, and is counted in Unexpected.
		causes     exitCause
		starts     int
		unexpected []string
		last       Exit
	}
}

// exitCause is a set of the harness's actions that end a process.
type exitCause uint8

const (
	// causeKill: SIGKILL sent; explains a death by SIGKILL.
	causeKill exitCause = 1 << iota
	// causeTerm: SIGTERM sent; explains any exit, since a node asked
	// to stop may stop however its shutdown ends (a panic on the way
	// is in its log, which the run scans for panics).
	causeTerm
	// causeCrash: the crash hook asked; explains exit status
	// CrashExitStatus.
	causeCrash
)

// CrashExitStatus is the exit status of a node that ran the skuldtest
// crash hook (POST /debug/crash: cli/testhooks_skuldtest.go exits 137,
// the status a shell shows for kill -9, without being killed).
const CrashExitStatus = 137

// Exit is how a process ended.
type Exit struct {
	// Code is the exit status, or -1 if a signal ended it (Signal).
	Code   int
	Signal syscall.Signal
	// Text is the status as exec reports it ("exit status 2",
	// "signal: killed").
	Text string
	// Expected: the harness caused it (explainedBy its causes).
	Expected bool
	// TNs is when the harness reaped it.
	TNs int64
}

// exitOf reads cmd's exit after Wait returned err.
func exitOf(cmd *exec.Cmd, err error) Exit {
	e := Exit{Code: -1, Text: exitText(err)}
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Exited():
				e.Code = ws.ExitStatus()
			case ws.Signaled():
				e.Signal = ws.Signal()
			}
		}
	}
	return e
}

// explainedBy reports whether the harness's causes account for this exit.
func (e Exit) explainedBy(c exitCause) bool {
	switch {
	case c&causeTerm != 0:
		return true
	case c&causeKill != 0 && e.Code == -1 && e.Signal == syscall.SIGKILL:
		return true
	case c&causeCrash != 0 && e.Code == CrashExitStatus:
		return true
	}
	return false
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
	p.mu.cmd, p.mu.done, p.mu.paused, p.mu.causes = cmd, done, false, 0
	go p.reap(cmd, done)
	p.log.Info("node started", "node", p.Index, "pid", pid, "start", p.mu.starts)
	return nil
}

// Args returns a copy of the command of the next Start.
func (p *NodeProc) Args() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.Argv)
}

// SetArgv replaces the command of the next Start (a wiped node starts
// again with another join list); a running process is not affected.
func (p *NodeProc) SetArgv(argv []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Argv = slices.Clone(argv)
}

// reap waits for cmd to exit, marks the node down, and reports an exit
// the harness did not cause (OnUnexpectedExit) as soon as it is seen.
func (p *NodeProc) reap(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	ex := exitOf(cmd, err)
	p.mu.Lock()
	ex.Expected, ex.TNs = ex.explainedBy(p.mu.causes), p.tl.Now()
	status := ex.Text
	if p.mu.causes != 0 && !ex.Expected {
		status += " (while the harness expected " + p.mu.causes.String() + ")"
	}
	if p.mu.cmd == cmd {
		p.mu.cmd = nil
	}
	p.mu.last = ex
	if !ex.Expected {
		p.mu.unexpected = append(p.mu.unexpected, fmt.Sprintf("t=%.3fs: %s", float64(ex.TNs)/1e9, status))
	}
	p.mu.Unlock()
	_ = os.Remove(p.PidPath)
	close(done)
	if ex.Expected {
		p.log.Info("node exited", "node", p.Index, "status", ex.Text)
		return
	}
	p.log.Error("node exited on its own", "node", p.Index, "status", status, "log", p.LogPath)
	if p.OnUnexpectedExit != nil {
		p.OnUnexpectedExit(p.Index, status)
	}
}

// String names the causes.
func (c exitCause) String() string {
	var out []string
	for _, x := range []struct {
		c    exitCause
		name string
	}{{causeKill, "kill -9"}, {causeTerm, "SIGTERM"}, {causeCrash, "the crash hook's exit 137"}} {
		if c&x.c != 0 {
			out = append(out, x.name)
		}
	}
	return strings.Join(out, ", ")
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

// LastExit returns how the process last ended (zero before any exit).
func (p *NodeProc) LastExit() Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.last
}

// ErrNotRunning: the node's process is not running (down).
var ErrNotRunning = errors.New("not running")

// signal sends sig to the running process; cause (0: none) is added to
// the harness's causes that explain the exit it may bring.
func (p *NodeProc) signal(sig syscall.Signal, cause exitCause) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return nil, fmt.Errorf("node %d: %w", p.Index, ErrNotRunning)
	}
	p.mu.causes |= cause
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
	done, err := p.signal(syscall.SIGKILL, causeKill)
	if err != nil {
		return err
	}
	return waitDone(done, procWaitBound, p.Index, "kill -9")
}

// Pause sends SIGSTOP; Resume SIGCONT.
func (p *NodeProc) Pause() error {
	_, err := p.signal(syscall.SIGSTOP, 0)
	return err
}

func (p *NodeProc) Resume() error {
	_, err := p.signal(syscall.SIGCONT, 0)
	return err
}

// Term stops the node gracefully: SIGTERM (and SIGCONT, should it be
// paused), then SIGKILL if it has not exited within grace.
func (p *NodeProc) Term(grace time.Duration) error {
	done, err := p.signal(syscall.SIGTERM, causeTerm)
	if err != nil {
		return err
	}
	_, _ = p.signal(syscall.SIGCONT, 0)
	if waitDone(done, grace, p.Index, "SIGTERM") == nil {
		return nil
	}
	p.log.Warn("node did not stop on SIGTERM; killing it", "node", p.Index, "grace", grace)
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("node %d: did not stop within %v of SIGTERM", p.Index, grace)
}

// ExpectExit marks the next exit, whatever its status, as the harness's
// doing (a node asked to leave the cluster exits by itself) and returns
// the channel closed at the exit.
func (p *NodeProc) ExpectExit() (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return nil, fmt.Errorf("node %d: %w", p.Index, ErrNotRunning)
	}
	p.mu.causes |= causeTerm
	return p.mu.done, nil
}

// ExpectCrash marks an exit with CrashExitStatus as the harness's doing
// (a crash asked through the test hook) and returns the channel closed at
// the exit. Any other exit stays the node's own.
func (p *NodeProc) ExpectCrash() (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil {
		return nil, fmt.Errorf("node %d: %w", p.Index, ErrNotRunning)
	}
	p.mu.causes |= causeCrash
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
