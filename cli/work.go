package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The shell worker: `skuldd ctl work`.

const (
	// workStderrTail is how much of a failed command's stderr its
	// failure reason keeps (the end of it).
	workStderrTail = 2 << 10
	// workKillDelay is how long a command that is stopped (its claim was
	// lost, its time ran out, or the drain did) has to exit after SIGTERM
	// to its process group before SIGKILL to the group.
	workKillDelay = 10 * time.Second
	// workDrainBackstop is what the Worker's own drain timeout adds to
	// --drain and workKillDelay: ctl stops its commands itself when the
	// drain runs out, and the Worker's deadline only backs that up.
	workDrainBackstop = 5 * time.Second
	// workProgressFD is the command's file descriptor for progress lines
	// (the first of exec.Cmd.ExtraFiles).
	workProgressFD = 3
	// workStatusEvery is how often the status line is redrawn on a
	// terminal.
	workStatusEvery = time.Second
	// defaultWorkSnooze is how long a task whose command exits
	// ExitSnooze waits before it is ready again (--snooze).
	defaultWorkSnooze = time.Minute
)

// The exit statuses of a `ctl work` command that mean more than a failed
// attempt. 75 and 65 follow sysexits.h (EX_TEMPFAIL: try again later;
// EX_DATAERR: the input was wrong, so trying again cannot help); 79 is
// past its range.
const (
	// ExitSnooze hands the task back for --snooze, no attempt counted.
	ExitSnooze = 75
	// ExitNoRetry fails the task for good: dead at once (SkipRetry).
	ExitNoRetry = 65
	// ExitCancel cancels the task (client.Cancel).
	ExitCancel = 79
)

func ctlWorkCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "work",
		Usage: "claim tasks and run a command for each until interrupted (a shell worker)",
		Description: "Runs `command args` once per task: the payload on stdin; SKULD_TASK_ID, SKULD_CLAIM, SKULD_QUEUE,\n" +
			"SKULD_KIND, SKULD_SUBTOPIC and SKULD_ATTEMPT in its environment; each line it writes to the file descriptor named by SKULD_PROGRESS_FD\n" +
			"becomes a progress update. Exit 0 completes the task; exit 75 (EX_TEMPFAIL) snoozes it for --snooze, no\n" +
			"attempt counted; exit 65 (EX_DATAERR) fails it for good (dead at once, no retry); exit 79 cancels it; any\n" +
			"other exit fails the attempt, retried with backoff until its max attempts; the end of stderr is the reason\n" +
			"of a failure or cancel. The lease is\n" +
			"renewed while the command runs; if the claim is lost or the time limit passes, the command's process group\n" +
			"gets SIGTERM, then SIGKILL. Each command runs in a process group of its own, so Ctrl-C reaches ctl only.\n" +
			"SIGINT, SIGTERM (or SIGHUP) drains: no more claims, running commands may finish within --drain; then,\n" +
			"or at once on a second signal, they are stopped and their tasks handed back, no attempt counted.\n" +
			"--addr may list several nodes, comma-separated.",
		ArgsUsage: "-- command [args...]",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "queue", Usage: "queue to serve, NAME or NAME=WEIGHT (repeatable; the weight is its lottery tickets, default 1; " +
				"a NAME ending in ':' and digits needs the =WEIGHT, as NAME:W was once the weight syntax)"},
			&ucli.IntFlag{Name: "concurrency", Value: 1, Usage: "commands running at once"},
			&ucli.DurationFlag{Name: "time-limit", Usage: "per command, besides the task's own time limit; the attempt fails past it (default: only the task's)"},
			&ucli.DurationFlag{Name: "ttl", Usage: "lease of each claim, renewed at a third (default: the queue's default lease, else the node's)"},
			&ucli.DurationFlag{Name: "drain", Value: client.DefaultDrainTimeout, Usage: "how long running commands may finish after SIGINT/SIGTERM before they are stopped"},
			&ucli.DurationFlag{Name: "poll", Usage: "long-poll once every queue is empty (default: the queue's --long-poll, else 5s)"},
			&ucli.DurationFlag{Name: "snooze", Value: defaultWorkSnooze, Usage: "how long a task whose command exits 75 waits before it is ready again"},
		},
		Action: ctlWork,
	}
}

// workQueues parses the --queue values: each is NAME or NAME=WEIGHT.
// '=' is not a queue name character, so the split is never ambiguous, and
// any valid queue name can be served (with ':' in it too). A value without
// '=' that ends in ':' and digits after a nonempty prefix (P:N) is
// refused: it was once NAME:WEIGHT, but it is also a valid queue name, so
// reading it either way would serve the wrong queue for someone; the
// error names both spellings (P=N and P:N=1).
func workQueues(vals []string) ([]client.Queue, error) {
	if len(vals) == 0 {
		return nil, usagef("work: missing --queue")
	}
	var qs []client.Queue
	for _, v := range vals {
		name, weight, hasWeight := strings.Cut(v, "=")
		if err := task.ValidateQueue(name); err != nil {
			return nil, usagef("work: --queue %q: %v (the form is NAME or NAME=WEIGHT)", v, err)
		}
		q := client.Queue{Name: name, Weight: 1}
		if hasWeight {
			w, err := strconv.Atoi(weight)
			if err != nil || w < 1 {
				return nil, usagef("work: --queue %q: the weight after '=' must be a positive integer", v)
			}
			q.Weight = w
		} else if i := strings.LastIndexByte(name, ':'); i > 0 && isDigits(name[i+1:]) {
			return nil, usagef("work: --queue %q is ambiguous: ':' belongs to queue names, so give a weight after '=': "+
				"--queue %s=%s serves queue %q with weight %s, --queue %s=1 serves the queue named %q",
				v, name[:i], name[i+1:], name[:i], name[i+1:], name, name)
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// isDigits reports whether s is a nonempty run of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// goClient returns the Go client for --addr (a comma-separated list of
// nodes) with the token the flags give: ctl's long-running commands use
// it for its failover between nodes.
func goClient(c *ucli.Context) (*client.Client, error) {
	var token string
	tok, err := clientToken(c)
	if err != nil {
		return nil, err
	}
	if tok != nil {
		token = wire.FormatToken(tok)
	}
	cl, err := client.New(client.Config{Nodes: strings.Split(c.String("addr"), ","), Token: token})
	if err != nil {
		return nil, usageError{err}
	}
	return cl, nil
}

func ctlWork(c *ucli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return usagef("work: no command (give it after --)")
	}
	queues, err := workQueues(c.StringSlice("queue"))
	if err != nil {
		return err
	}
	cl, err := goClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	drain := c.Duration("drain")
	if drain < 0 {
		return usagef("work: --drain %v: want 0 or more", drain)
	}
	if c.Duration("snooze") < 0 {
		return usagef("work: --snooze %v: want 0 or more", c.Duration("snooze"))
	}
	st := &workStats{}
	sw := &shellWorker{args: args, stats: st, stdout: c.App.Writer, stderr: c.App.ErrWriter, procs: map[*workProc]struct{}{},
		snooze: c.Duration("snooze")}
	w, err := cl.NewWorker(client.WorkerConfig{
		Queues:      queues,
		Concurrency: c.Int("concurrency"),
		TTL:         c.Duration("ttl"),
		TimeLimit:   c.Duration("time-limit"),
		// ctl ends the drain itself (workSignals); this only backs it up.
		DrainTimeout: drain + workKillDelay + workDrainBackstop,
		PollWait:     c.Duration("poll"),
		Logger:       slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, sw.handle)
	if err != nil {
		return usageError{err}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, workSignals()...)
	defer signal.Stop(sigs)
	ctx, startDrain := context.WithCancelCause(c.Context)
	defer startDrain(nil)
	done := make(chan struct{})
	var bg sync.WaitGroup
	defer bg.Wait()
	defer close(done)
	bg.Go(func() { sw.onSignals(sigs, startDrain, drain, done) })
	if isTerminal(c.App.ErrWriter) {
		bg.Go(func() { st.show(c.App.ErrWriter, done) })
	}
	err = w.Run(ctx)
	// Every command ctl started has exited before ctl does: one it
	// stopped (or whose claim was lost) may still be on its way out, and
	// nothing else would ever stop it, in a process group of its own.
	sw.running.Wait()
	return err
}

// workSignals are the signals that drain ctl work: SIGINT (a terminal's
// Ctrl-C), SIGTERM (service managers, timeout), and SIGHUP (the terminal
// went away) unless ctl was started with it ignored (nohup). The
// commands are in process groups of their own, so these reach ctl only
// (unless sent to each process) and ctl decides what the commands get.
func workSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// onSignals drains on the first signal: it ends Run's context (no more
// claims; the running commands go on) and, when drain has passed, stops
// the commands still running (SIGTERM to each one's group, SIGKILL
// workKillDelay later); a second signal stops them at once (SIGKILL) and
// gives the signals their default action back, so a third ends ctl
// itself. A command ctl stopped has its task handed back, no attempt
// counted. It returns when done closes.
func (sw *shellWorker) onSignals(sigs chan os.Signal, startDrain context.CancelCauseFunc, drain time.Duration, done <-chan struct{}) {
	var sig os.Signal
	select {
	case <-done:
		return
	case sig = <-sigs:
	}
	startDrain(fmt.Errorf("work: %v", sig))
	sw.note("%v: draining: no more claims; %d running commands may finish within %v (another signal stops them now)",
		sig, sw.stats.running.Load(), drain)
	timer := time.NewTimer(drain)
	defer timer.Stop()
	for {
		select {
		case <-done:
			return
		case <-timer.C:
			if n := sw.stopAll(false); n > 0 {
				sw.note("the drain is over: SIGTERM to %d running commands (SIGKILL in %v); their tasks are handed back unless they exit 0",
					n, workKillDelay)
			}
		case sig = <-sigs:
			signal.Stop(sigs)
			if n := sw.stopAll(true); n > 0 {
				sw.note("%v: SIGKILL to %d running commands; their tasks are handed back", sig, n)
			}
			return
		}
	}
}

// workStats counts what the shell worker did, for the status line.
type workStats struct {
	running, completed, failed, handedBack atomic.Int64
}

// show redraws the status line every workStatusEvery until done.
func (s *workStats) show(w io.Writer, done <-chan struct{}) {
	t := time.NewTicker(workStatusEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintln(w)
			return
		case <-t.C:
			fmt.Fprintf(w, "\rrunning %d, completed %d, failed %d, handed back %d ",
				s.running.Load(), s.completed.Load(), s.failed.Load(), s.handedBack.Load())
		}
	}
}

// shellWorker runs the command for each task.
type shellWorker struct {
	args []string
	// snooze is how long an ExitSnooze hands the task back for.
	snooze         time.Duration
	stats          *workStats
	stdout, stderr io.Writer
	outMu          sync.Mutex // one command's line at a time on stdout and stderr

	mu sync.Mutex
	// procs are the commands running.
	procs map[*workProc]struct{}
	// stopped: the drain is over (or a second signal came): no command
	// starts any more.
	stopped bool
	// running counts the commands started and not yet exited.
	running sync.WaitGroup
}

// errHandBack is what the handler returns for a command ctl stopped (the
// drain ran out, or a second signal): the task goes back to its queue at
// once, with no attempt counted.
var errHandBack = client.SnoozeFor(0)

// handle runs the command for job: exit 0 completes it.
func (sw *shellWorker) handle(ctx context.Context, job *client.Job) error {
	sw.stats.running.Add(1)
	defer sw.stats.running.Add(-1)
	err := sw.run(ctx, job)
	switch {
	case err == nil:
		sw.stats.completed.Add(1)
	case err == errHandBack:
		sw.stats.handedBack.Add(1)
	default:
		sw.stats.failed.Add(1)
	}
	return err
}

// note writes a line about the worker to stderr.
func (sw *shellWorker) note(format string, args ...any) {
	sw.outMu.Lock()
	defer sw.outMu.Unlock()
	fmt.Fprintf(sw.stderr, "skuldd: "+format+"\n", args...)
}

// stopAll stops every running command (kill: SIGKILL to its group at
// once; else SIGTERM, then SIGKILL workKillDelay later) and every one
// about to start; it returns how many were running.
func (sw *shellWorker) stopAll(kill bool) int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.stopped = true
	for p := range sw.procs {
		p.stop(kill, true)
	}
	return len(sw.procs)
}

// start starts cmd in a process group of its own, unless the commands
// were stopped (false, nil: the task is to be handed back).
func (sw *shellWorker) start(cmd *exec.Cmd, p *workProc) (bool, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped {
		return false, nil
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	p.setGroup(cmd.Process.Pid)
	sw.procs[p] = struct{}{}
	sw.running.Add(1)
	return true, nil
}

// exited is called once cmd.Wait returned for p: a command that was
// stopped leaves nothing of its group behind (SIGKILL to what is left of
// it), and p is signalled no more. It reports whether ctl's drain
// stopped p (rather than its claim's end).
func (sw *shellWorker) exited(p *workProc) (byDrain bool) {
	sw.mu.Lock()
	delete(sw.procs, p)
	sw.mu.Unlock()
	defer sw.running.Done()
	return p.exited()
}

// workProc is a running command: its process group, and whether and why
// it was stopped.
type workProc struct {
	pgid   int
	mu     sync.Mutex
	termed bool        // SIGTERM sent to the group
	killed bool        // SIGKILL sent to the group
	drain  bool        // stopped by the drain (or a second signal), not by its claim's end
	timer  *time.Timer // the SIGKILL after a SIGTERM
	gone   bool        // exited and reaped: its pgid may be another's now
	// killDelay is how long SIGTERM precedes SIGKILL (0: workKillDelay).
	killDelay time.Duration
}

// setGroup records p's process group: with Setpgid, the id of its first
// process.
func (p *workProc) setGroup(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pgid == 0 {
		p.pgid = pid
	}
}

// stop signals p's process group: SIGKILL if kill, else SIGTERM and
// SIGKILL workKillDelay later. byDrain says the drain stopped it.
func (p *workProc) stop(kill, byDrain bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone || p.pgid <= 1 {
		return // never kill(0) or kill(-1): ctl's own group, or everything
	}
	p.drain = p.drain || byDrain
	switch {
	case kill && !p.killed:
		p.killed = true
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	case !kill && !p.termed && !p.killed:
		p.termed = true
		_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
		delay := p.killDelay
		if delay == 0 {
			delay = workKillDelay
		}
		p.timer = time.AfterFunc(delay, func() { p.stop(true, false) })
	}
}

// exited marks p gone after a last SIGKILL to its group if it was
// signalled (whatever of it outlived its first process), and reports
// whether the drain stopped it.
func (p *workProc) exited() (byDrain bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if (p.termed || p.killed) && p.pgid > 1 {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	}
	p.gone = true
	return p.drain
}

func (sw *shellWorker) run(ctx context.Context, job *client.Job) error {
	progress, progressW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("progress pipe: %w", err)
	}
	defer progress.Close()
	cmd := exec.CommandContext(ctx, sw.args[0], sw.args[1:]...)
	// A process group of its own: a signal to ctl's group (a terminal's
	// Ctrl-C, timeout -s INT) reaches ctl only, whose drain decides what
	// the command gets; and ctl signals the whole group, so nothing the
	// command started outlives it once it is stopped.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &workProc{}
	cmd.Cancel = func() error { // the claim ended; maybe before start returned
		p.setGroup(cmd.Process.Pid)
		p.stop(false, false)
		return nil
	}
	cmd.WaitDelay = workKillDelay
	cmd.Stdin = bytes.NewReader(job.Data)
	tail := &tailBuffer{max: workStderrTail}
	cmd.Stdout = &lockedWriter{mu: &sw.outMu, w: sw.stdout}
	cmd.Stderr = io.MultiWriter(tail, &lockedWriter{mu: &sw.outMu, w: sw.stderr})
	cmd.ExtraFiles = []*os.File{progressW}
	cmd.Env = append(os.Environ(),
		"SKULD_TASK_ID="+job.ID.String(),
		"SKULD_CLAIM="+strconv.FormatUint(uint64(job.Claim), 10),
		"SKULD_QUEUE="+job.Queue,
		"SKULD_KIND="+job.Kind,
		"SKULD_SUBTOPIC="+job.Subtopic,
		"SKULD_ATTEMPT="+strconv.FormatUint(uint64(job.Attempts)+1, 10),
		"SKULD_PROGRESS_FD="+strconv.Itoa(workProgressFD),
	)
	started, err := sw.start(cmd, p)
	progressW.Close() // the command holds its own copy
	switch {
	case err != nil:
		return fmt.Errorf("start %s: %w", sw.args[0], err)
	case !started:
		return errHandBack
	}
	progressDone := make(chan error, 1)
	go func() { progressDone <- forwardProgress(ctx, job, progress) }()
	werr := cmd.Wait()
	byDrain := sw.exited(p)
	var perr error
	select {
	case perr = <-progressDone:
	case <-time.After(workKillDelay):
		// Something that left the command's group holds the progress
		// pipe open: stop reading it, and take what came as all of it.
		progress.Close()
		if perr = <-progressDone; errors.Is(perr, os.ErrClosed) {
			perr = nil
		}
	}
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case byDrain && werr != nil:
		return errHandBack
	case werr != nil:
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return werr
		}
		reason := strings.TrimSpace(tail.String())
		switch ee.ExitCode() {
		case ExitSnooze:
			return client.SnoozeFor(sw.snooze)
		case ExitNoRetry:
			return client.SkipRetry(fmt.Errorf("%s (no retry): %s", ee.ProcessState, reason))
		case ExitCancel:
			if reason == "" {
				reason = ee.ProcessState.String()
			}
			return client.Cancel(reason)
		}
		return fmt.Errorf("%s: %s", ee.ProcessState, reason)
	case perr != nil:
		return fmt.Errorf("progress: %w", perr)
	}
	return nil
}

// forwardProgress turns each line read from r into a progress update of
// job, in order, until r ends.
func forwardProgress(ctx context.Context, job *client.Job, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var first error
	for sc.Scan() {
		if first != nil {
			continue // drain, so the command never blocks on a full pipe
		}
		if err := job.Progress(ctx, append([]byte(nil), sc.Bytes()...)); err != nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return sc.Err()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
