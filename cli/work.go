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
	// workKillDelay is how long a command whose claim was lost (or whose
	// time ran out) has to exit after SIGTERM before SIGKILL.
	workKillDelay = 10 * time.Second
	// workProgressFD is the command's file descriptor for progress lines
	// (the first of exec.Cmd.ExtraFiles).
	workProgressFD = 3
	// workStatusEvery is how often the status line is redrawn on a
	// terminal.
	workStatusEvery = time.Second
)

func ctlWorkCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "work",
		Usage: "claim tasks and run a command for each until interrupted (a shell worker)",
		Description: "Runs `command args` once per task: the payload on stdin; SKULD_TASK_ID, SKULD_CLAIM, SKULD_QUEUE and\n" +
			"SKULD_ATTEMPT in its environment; each line it writes to the file descriptor named by SKULD_PROGRESS_FD\n" +
			"becomes a progress update. Exit 0 completes the task; any other exit fails the attempt, with the exit\n" +
			"status and the end of stderr as the reason (retried with backoff until its max attempts). The lease is\n" +
			"renewed while the command runs; if the claim is lost or the time limit passes, the command gets SIGTERM,\n" +
			"then SIGKILL. SIGINT or SIGTERM drains: no more claims, running commands finish (for --drain), the rest\n" +
			"are handed back. --addr may list several nodes, comma-separated.",
		ArgsUsage: "-- command [args...]",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "queue", Usage: "queue to serve, NAME or NAME=WEIGHT (repeatable; the weight is its lottery tickets, default 1; " +
				"a NAME ending in ':' and digits needs the =WEIGHT, as NAME:W was once the weight syntax)"},
			&ucli.IntFlag{Name: "concurrency", Value: 1, Usage: "commands running at once"},
			&ucli.DurationFlag{Name: "time-limit", Usage: "per task; the attempt fails past it (default none)"},
			&ucli.DurationFlag{Name: "ttl", Value: client.DefaultWorkerTTL, Usage: "lease of each claim, renewed at a third"},
			&ucli.DurationFlag{Name: "drain", Value: client.DefaultDrainTimeout, Usage: "how long running commands may finish after SIGINT/SIGTERM"},
			&ucli.DurationFlag{Name: "poll", Value: client.DefaultPollWait, Usage: "long-poll once every queue is empty"},
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

func ctlWork(c *ucli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return usagef("work: no command (give it after --)")
	}
	queues, err := workQueues(c.StringSlice("queue"))
	if err != nil {
		return err
	}
	var token string
	tok, err := clientToken(c)
	if err != nil {
		return err
	}
	if tok != nil {
		token = wire.FormatToken(tok)
	}
	cl, err := client.New(client.Config{Nodes: strings.Split(c.String("addr"), ","), Token: token})
	if err != nil {
		return usageError{err}
	}
	defer cl.Close()
	st := &workStats{}
	sw := &shellWorker{args: args, stats: st, stdout: c.App.Writer, stderr: c.App.ErrWriter}
	w, err := cl.NewWorker(client.WorkerConfig{
		Queues:       queues,
		Concurrency:  c.Int("concurrency"),
		TTL:          c.Duration("ttl"),
		TimeLimit:    c.Duration("time-limit"),
		DrainTimeout: c.Duration("drain"),
		PollWait:     c.Duration("poll"),
		Logger:       slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, sw.handle)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if isTerminal(c.App.ErrWriter) {
		done := make(chan struct{})
		defer close(done)
		go st.show(c.App.ErrWriter, done)
	}
	return w.Run(ctx)
}

// workStats counts what the shell worker did, for the status line.
type workStats struct {
	running, completed, failed atomic.Int64
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
			fmt.Fprintf(w, "\rrunning %d, completed %d, failed %d ", s.running.Load(), s.completed.Load(), s.failed.Load())
		}
	}
}

// shellWorker runs the command for each task.
type shellWorker struct {
	args           []string
	stats          *workStats
	stdout, stderr io.Writer
	outMu          sync.Mutex // one command's line at a time on stdout and stderr
}

// handle runs the command for job: exit 0 completes it.
func (sw *shellWorker) handle(ctx context.Context, job *client.Job) error {
	sw.stats.running.Add(1)
	defer sw.stats.running.Add(-1)
	err := sw.run(ctx, job)
	if err == nil {
		sw.stats.completed.Add(1)
	} else {
		sw.stats.failed.Add(1)
	}
	return err
}

func (sw *shellWorker) run(ctx context.Context, job *client.Job) error {
	progress, progressW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("progress pipe: %w", err)
	}
	defer progress.Close()
	cmd := exec.CommandContext(ctx, sw.args[0], sw.args[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
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
		"SKULD_ATTEMPT="+strconv.FormatUint(uint64(job.Attempts)+1, 10),
		"SKULD_PROGRESS_FD="+strconv.Itoa(workProgressFD),
	)
	if err := cmd.Start(); err != nil {
		progressW.Close()
		return fmt.Errorf("start %s: %w", sw.args[0], err)
	}
	progressW.Close() // the command holds its own copy
	progressDone := make(chan error, 1)
	go func() { progressDone <- forwardProgress(ctx, job, progress) }()
	werr := cmd.Wait()
	perr := <-progressDone
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case werr != nil:
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			return fmt.Errorf("%s: %s", ee.ProcessState, strings.TrimSpace(tail.String()))
		}
		return werr
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
