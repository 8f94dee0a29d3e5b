package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Workers are separate processes, so the pause-worker nemesis can SIGSTOP
// one: the harness runs its own executable as `faults worker`, which reads
// its LoopConfig as the first line of stdin, runs one Loop, and writes
// what the loop records as JSON lines on stdout. The harness gives the
// events their Index, runs the fenced sink for the worker's offers and
// answers them on the worker's stdin. Times are the worker's own
// CLOCK_MONOTONIC readings, so a paused worker's events arrive late but
// carry the times they happened at.

// workerMsg is one line a worker writes.
type workerMsg struct {
	Event   *Event    `json:"event,omitempty"`
	Offer   *offerMsg `json:"offer,omitempty"`
	Holding *bool     `json:"holding,omitempty"`
}

type offerMsg struct {
	Proc  int    `json:"proc"`
	Task  string `json:"task"`
	Claim uint32 `json:"claim"`
}

// parentMsg is one line the harness writes to a worker.
type parentMsg struct {
	Stop     bool  `json:"stop,omitempty"`
	Accepted *bool `json:"accepted,omitempty"`
	// Task and Claim name the offer Accepted answers: an answer that
	// comes after its offer timed out must not answer the next one.
	Task  string `json:"task,omitempty"`
	Claim uint32 `json:"claim,omitempty"`
}

// answer is the sink's answer to one offer.
type answer struct {
	task  string
	claim uint32
	ok    bool
}

// offerWait bounds a worker's wait for the sink's answer: the harness
// answers at once, so a longer wait means it is gone.
const offerWait = 30 * time.Second

// RunWorker is `faults worker`: it reads its LoopConfig from the first
// line of in, runs the loop until told to stop (or in closes), and writes
// its messages to out.
func RunWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	br := bufio.NewReaderSize(in, lineBufSize)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("worker: read config: %w", err)
	}
	var cfg LoopConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("worker: config: %w", err)
	}
	pr := newParentReader()
	go pr.read(br)
	em := &pipeEmitter{w: bufio.NewWriter(out), answers: pr.answers, closed: pr.closed}
	stop := pr.stop
	loop := NewLoop(cfg, em)
	defer loop.Close()
	loop.Run(ctx, stop)
	return em.err
}

// parentReader reads a worker's stdin: the harness's stop and the sink's
// answers.
type parentReader struct {
	stop    chan struct{} // closed at the stop, or when stdin closes
	closed  chan struct{} // closed when stdin closes: no answer can come
	answers chan answer
	once    sync.Once
}

func newParentReader() *parentReader {
	return &parentReader{stop: make(chan struct{}), closed: make(chan struct{}), answers: make(chan answer, 1)}
}

// read reads until the harness closes stdin (at the latest when it exits),
// and on past a stop: the sink's answer to an offer the loop made just
// before the stop may come after it, and the loop finishes the operation
// it is in. (It once stopped reading at the stop, and a worker whose offer
// crossed the stop waited for an answer it never read until the harness
// killed it.)
func (pr *parentReader) read(in io.Reader) {
	defer close(pr.closed)
	defer pr.once.Do(func() { close(pr.stop) })
	_ = scanJSONLines(in, "stdin", func(b []byte) error {
		var m parentMsg
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		if m.Stop {
			pr.once.Do(func() { close(pr.stop) })
		}
		if m.Accepted != nil {
			pr.answers <- answer{task: m.Task, claim: m.Claim, ok: *m.Accepted}
		}
		return nil
	})
}

// pipeEmitter is a worker's Emitter: lines on stdout, answers on stdin.
type pipeEmitter struct {
	w       *bufio.Writer
	answers chan answer
	// closed: the harness closed stdin, so no answer can come.
	closed chan struct{}
	err    error
}

func (p *pipeEmitter) write(m workerMsg) {
	if p.err != nil {
		return
	}
	b, err := json.Marshal(&m)
	if err == nil {
		_, err = p.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = p.w.Flush()
	}
	if err != nil {
		p.err = fmt.Errorf("worker: write: %w", err)
	}
}

func (p *pipeEmitter) Emit(e Event)   { p.write(workerMsg{Event: &e}) }
func (p *pipeEmitter) Holding(h bool) { p.write(workerMsg{Holding: &h}) }

func (p *pipeEmitter) Offer(proc int, task string, claim uint32) (bool, error) {
	p.write(workerMsg{Offer: &offerMsg{Proc: proc, Task: task, Claim: claim}})
	if p.err != nil {
		return false, p.err
	}
	t := time.NewTimer(offerWait)
	defer t.Stop()
	for {
		select {
		case a := <-p.answers:
			if a.task != task || a.claim != claim {
				continue // the late answer to an offer that timed out
			}
			return a.ok, nil
		case <-p.closed:
			return false, errors.New("worker: the harness closed the pipe before the sink answered")
		case <-t.C:
			return false, errors.New("worker: the sink did not answer")
		}
	}
}

// RecEmitter is the Emitter of a loop inside the harness (the drain): it
// records straight into the history.
type RecEmitter struct {
	Rec  *Recorder
	Sink *Sink
	TL   Timeline
}

func (r *RecEmitter) Emit(e Event) { r.Rec.Record(e) }
func (r *RecEmitter) Holding(bool) {}
func (r *RecEmitter) Offer(proc int, task string, claim uint32) (bool, error) {
	return offer(r.Rec, r.Sink, r.TL, proc, task, claim), nil
}

// offer runs the sink and records the Effect event, at the time the sink
// decided.
func offer(rec *Recorder, sink *Sink, tl Timeline, proc int, task string, claim uint32) bool {
	ok := sink.Offer(task, claim)
	c := claim
	rec.Record(Event{Proc: proc, Type: Effect, F: Effect, TNs: tl.Now(), Task: task, Claim: &c, Accepted: &ok})
	return ok
}

// WorkerProc is one worker process as the harness sees it.
type WorkerProc struct {
	Loop int
	cmd  *exec.Cmd
	// inMu serialises writes to the worker's stdin.
	inMu    sync.Mutex
	in      io.WriteCloser
	done    chan struct{}
	holding atomic.Bool
	// holdSince is when the worker last said it holds a claim (ns of
	// the timeline).
	holdSince atomic.Int64
	paused    atomic.Bool
	lines     atomic.Int64
	// stopping: the harness told the worker to stop; killed: it did not
	// within the grace, and the harness killed it. An exit before the stop,
	// or a kill, is a harness fault (NoteWorkerExit).
	stopping atomic.Bool
	killed   atomic.Bool
}

// WorkerPool runs the worker processes.
type WorkerPool struct {
	Procs []*WorkerProc
	rec   *Recorder
	sink  *Sink
	tl    Timeline
	log   *slog.Logger
	wg    sync.WaitGroup
}

// StartWorkers starts one worker process per config, running exe
// ("exe worker"), with stderr to dir/w<N>.log.
func StartWorkers(exe, dir string, cfgs []LoopConfig, rec *Recorder, sink *Sink, tl Timeline, log *slog.Logger) (*WorkerPool, error) {
	p := &WorkerPool{rec: rec, sink: sink, tl: tl, log: log}
	for _, cfg := range cfgs {
		w, err := p.start(exe, dir, cfg)
		if err != nil {
			p.Stop(0)
			return nil, err
		}
		p.Procs = append(p.Procs, w)
	}
	return p, nil
}

func (p *WorkerPool) start(exe, dir string, cfg LoopConfig) (*WorkerProc, error) {
	ef, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d.log", cfg.Loop)))
	if err != nil {
		return nil, fmt.Errorf("worker %d: log: %w", cfg.Loop, err)
	}
	defer ef.Close()
	cmd := exec.Command(exe, "worker")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = ef
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", cfg.Loop, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", cfg.Loop, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker %d: start: %w", cfg.Loop, err)
	}
	w := &WorkerProc{Loop: cfg.Loop, cmd: cmd, in: in, done: make(chan struct{})}
	b, _ := json.Marshal(&cfg)
	if _, err := in.Write(append(b, '\n')); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("worker %d: send config: %w", cfg.Loop, err)
	}
	p.wg.Add(1)
	go p.read(w, out)
	return w, nil
}

// read handles worker w's lines until its stdout closes, then reaps it.
func (p *WorkerPool) read(w *WorkerProc, out io.Reader) {
	defer p.wg.Done()
	defer close(w.done)
	err := scanJSONLines(out, fmt.Sprintf("worker %d", w.Loop), func(b []byte) error {
		var m workerMsg
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		w.lines.Add(1)
		switch {
		case m.Event != nil:
			p.rec.Record(*m.Event)
		case m.Offer != nil:
			ok := offer(p.rec, p.sink, p.tl, m.Offer.Proc, m.Offer.Task, m.Offer.Claim)
			w.send(parentMsg{Accepted: &ok, Task: m.Offer.Task, Claim: m.Offer.Claim})
		case m.Holding != nil:
			w.holding.Store(*m.Holding)
			if *m.Holding {
				w.holdSince.Store(p.tl.Now())
			}
		}
		return nil
	})
	if err != nil {
		p.log.Error("worker output", "worker", w.Loop, "err", err)
	}
	err = w.cmd.Wait()
	if err != nil {
		p.log.Warn("worker exited", "worker", w.Loop, "status", err)
	}
	var why string
	switch {
	case w.killed.Load():
		why = "did not stop within the grace; killed"
	case !w.stopping.Load():
		why = "exited before it was told to stop"
	default:
		return
	}
	status := "0"
	if err != nil {
		status = err.Error()
	}
	detail, _ := json.Marshal(map[string]any{"worker": w.Loop, "why": why, "status": status})
	p.rec.Record(Event{Proc: -1, Type: Nemesis, F: "note", TNs: p.tl.Now(), Nemesis: NoteWorkerExit, Detail: detail})
}

func (w *WorkerProc) send(m parentMsg) {
	b, _ := json.Marshal(&m)
	w.inMu.Lock()
	defer w.inMu.Unlock()
	_, _ = w.in.Write(append(b, '\n'))
}

// Holder returns a worker that holds a claim now (the one holding it
// longest, so probably at work on a slow task), or nil.
func (p *WorkerPool) Holder() *WorkerProc {
	var best *WorkerProc
	for _, w := range p.Procs {
		if w.holding.Load() && !w.paused.Load() {
			if best == nil || w.holdSince.Load() < best.holdSince.Load() {
				best = w
			}
		}
	}
	return best
}

// Pid returns the worker's pid.
func (w *WorkerProc) Pid() int { return w.cmd.Process.Pid }

// Pause sends SIGSTOP; Resume SIGCONT.
func (w *WorkerProc) Pause() error {
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("worker %d: SIGSTOP: %w", w.Loop, err)
	}
	w.paused.Store(true)
	return nil
}

func (w *WorkerProc) Resume() error {
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("worker %d: SIGCONT: %w", w.Loop, err)
	}
	w.paused.Store(false)
	return nil
}

// ResumeAll resumes every paused worker.
func (p *WorkerPool) ResumeAll() {
	for _, w := range p.Procs {
		if w.paused.Load() {
			if err := w.Resume(); err != nil {
				p.log.Warn("resume worker", "err", err)
			}
		}
	}
}

// Stop tells every worker to stop after its current operation, waits up
// to grace for them, kills those still running, and waits for their
// output to be read.
func (p *WorkerPool) Stop(grace time.Duration) {
	p.ResumeAll()
	for _, w := range p.Procs {
		w.stopping.Store(true)
		w.send(parentMsg{Stop: true})
	}
	end := time.Now().Add(grace)
	for _, w := range p.Procs {
		t := time.NewTimer(max(time.Until(end), 0))
		select {
		case <-w.done:
		case <-t.C:
			p.log.Warn("worker did not stop; killing it", "worker", w.Loop, "grace", grace)
			w.killed.Store(true)
			_ = w.cmd.Process.Kill()
		}
		t.Stop()
		w.inMu.Lock()
		_ = w.in.Close()
		w.inMu.Unlock()
	}
	p.wg.Wait()
}
