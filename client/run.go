package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
)

// Run claims and handles tasks until ctx ends, then drains: it claims no
// more, waits up to DrainTimeout for the running handlers, and hands the
// tasks of those still running back (snoozed for 0, no attempt counted).
// It returns once every task it claimed is completed, failed or handed
// back; a claim in flight when ctx ends is let finish and what it brings
// is handed back too. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if w.ran.Swap(true) {
		return fmt.Errorf("%w: worker: Run called twice", ErrInvalid)
	}
	w.run = w.wrapped()
	// Handlers' contexts keep Run's values but not its end: a drain lets
	// them finish (DrainTimeout) before stopHandlers ends them.
	handlers, stopHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopHandlers(nil)
	rctx, rcancel := context.WithTimeout(ctx, queueDefaultsWait)
	w.defaults.read(rctx, w)
	rcancel()
	refreshCtx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go w.defaults.refresh(refreshCtx, w)
	sl := newSlots(w.cfg, w.rng, w.batch)
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		i, n, poll, ok := sl.reserve()
		if !ok {
			select {
			case <-ctx.Done():
			case <-sl.freed:
			}
			continue
		}
		tasks, sent, err := w.claim(ctx, i, n, poll)
		sl.claimed(i, n, len(tasks), err == nil)
		if err != nil {
			w.log.Warn("claim failed", "queue", w.cfg.Queues[i].Name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(claimErrorPause):
			}
			continue
		}
		ch := sl.chain(ctx, i)
		for _, t := range tasks {
			wg.Go(func() {
				defer sl.release(i)
				w.runSlot(ctx, handlers, i, t, sent, ch)
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.DrainTimeout):
		stopHandlers(ErrDraining)
		<-done
	}
	return nil
}

// runSlot runs t, a task of queue i, then each next task its completion
// claimed for the same slot, until none comes or ctx (Run's) ended: those
// are handed back.
func (w *Worker) runSlot(ctx, handlers context.Context, i int, first Claimed, sent time.Time, ch *chain) {
	for t := &first; t != nil; {
		if ctx.Err() != nil {
			w.handBack(*t) // claimed as the drain began
			return
		}
		var batchEnd time.Time
		if v := w.visibility(i); v > 0 {
			batchEnd = sent.Add(v) // from the claim that brought t
		}
		t, sent = w.runJob(handlers, *t, sent, batchEnd, ch)
	}
}

// slots are a Worker's handler slots: how many run per queue and in all,
// and the lottery that picks the queue of the next claim. Slots are
// reserved before a claim is sent, so concurrent claims never exceed the
// bounds.
type slots struct {
	cfg WorkerConfig
	// batch is the most tasks a claim of queue i asks for.
	batch   func(i int) int
	mu      sync.Mutex
	running []int // by queue
	total   int
	lot     *lottery
	// freed wakes Run when a slot frees up.
	freed chan struct{}
}

func newSlots(cfg WorkerConfig, rng *rand.Rand, batch func(i int) int) *slots {
	return &slots{cfg: cfg, batch: batch, running: make([]int, len(cfg.Queues)), lot: newLottery(cfg.Queues, rng), freed: make(chan struct{}, 1)}
}

// roomLocked reports whether queue i may run one more handler.
func (s *slots) roomLocked(i int) bool {
	q := s.cfg.Queues[i]
	return s.total < s.cfg.Concurrency && (q.Concurrency == 0 || s.running[i] < q.Concurrency)
}

// reserve draws the next queue and reserves n slots for its claim; poll
// says the claim should long-poll. ok is false when no slot is free.
func (s *slots) reserve() (i, n int, poll, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, poll, ok = s.lot.draw(s.roomLocked); !ok {
		return 0, 0, false, false
	}
	n = min(s.batch(i), s.cfg.Concurrency-s.total)
	if q := s.cfg.Queues[i]; q.Concurrency > 0 {
		n = min(n, q.Concurrency-s.running[i])
	}
	s.running[i] += n
	s.total += n
	return i, n, poll, true
}

// claimed gives back the slots of queue i a claim of n did not fill (it
// brought got tasks) and, when it answered (ok), records what it found.
func (s *slots) claimed(i, n, got int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[i] -= n - got
	s.total -= n - got
	if ok {
		s.lot.found(i, got == 0)
	}
}

// release frees one slot of queue i.
func (s *slots) release(i int) {
	s.mu.Lock()
	s.running[i]--
	s.total--
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// chain is how a slot of queue i asks for its next task with a
// completion (one request for both): when the lottery, drawn as if the
// slot were free, picks queue i again, and Run's ctx has not ended.
func (s *slots) chain(ctx context.Context, i int) *chain {
	return &chain{
		want: func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			if ctx.Err() != nil {
				return false
			}
			j, poll, ok := s.lot.draw(func(j int) bool { return j == i || s.roomLocked(j) })
			return ok && !poll && j == i
		},
		found: func(empty bool) {
			s.mu.Lock()
			s.lot.found(i, empty)
			s.mu.Unlock()
		},
	}
}

// claim claims up to n tasks of queue i, long-polling when poll. The
// claim does not end with ctx: what it brings is handed back if ctx ended
// meanwhile, rather than left to expire (an expiry counts an attempt).
// sent is when the claim was sent: the leases are measured from it.
func (w *Worker) claim(ctx context.Context, i, n int, poll bool) (tasks []Claimed, sent time.Time, err error) {
	queue := w.cfg.Queues[i].Name
	opts := ClaimOptions{TTL: w.cfg.TTL, Count: n}
	if poll {
		opts.Wait = w.pollWait(i)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Wait+writeTimeout)
	defer cancel()
	sent = time.Now()
	tasks, err = w.c.Claim(cctx, queue, opts)
	return tasks, sent, err
}

// chain is how a slot asks for its next task with a completion.
type chain struct {
	// want reports whether the completion should claim the slot's next
	// task from the same queue.
	want func() bool
	// found records what that claim found.
	found func(empty bool)
}

// runJob runs the handler on t and settles the task: complete, fail,
// snooze or hand back, or nothing when the claim was lost. A completion
// may bring the slot's next task (ch), returned with when its claim was
// sent.
func (w *Worker) runJob(parent context.Context, t Claimed, sent, batchEnd time.Time, ch *chain) (*Claimed, time.Time) {
	log := w.log.With("task", t.ID, "queue", t.Queue, "claim", t.Claim)
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if w.cfg.TimeLimit > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeoutCause(ctx, w.cfg.TimeLimit, ErrTimeLimit)
		defer c()
	}
	if limit := taskTimeLimit(t); limit > 0 {
		var c context.CancelFunc
		ctx, c = context.WithDeadlineCause(ctx, sent.Add(limit), ErrTimeLimit)
		defer c()
	}
	if !batchEnd.IsZero() {
		var c context.CancelFunc
		ctx, c = context.WithDeadlineCause(ctx, batchEnd, ErrVisibilityLimit)
		defer c()
	}
	alive, stopAlive := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() { defer close(kept); w.keepalive(alive, cancel, t, sent) }()

	job := &Job{Claimed: t, w: w}
	res := make(chan error, 1)
	go func() { res <- w.call(ctx, job) }()
	var herr error
	returned := false
	select {
	case herr = <-res:
		returned = true
	case <-ctx.Done():
		select { // both ready: the handler's answer counts
		case herr = <-res:
			returned = true
		default:
		}
	}
	var cause error
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	stopAlive()
	<-kept
	return w.settle(job, returned, herr, cause, ch, log)
}

// taskTimeLimit is how long after its claim was sent t's handler may
// run by the task's own time limit (0: none): the limit less a margin, a
// tenth of it, at most timeLimitMargin, so that the failure, written
// after, lands before the leader ends the claim at the limit. The
// claim's start is after sent (the leader granted it after the worker
// sent it), so the deadline comes before the leader's.
func taskTimeLimit(t Claimed) time.Duration {
	if t.TimeLimitMs <= 0 {
		return 0
	}
	limit := time.Duration(t.TimeLimitMs) * time.Millisecond
	return limit - min(limit/10, timeLimitMargin)
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return w.run(ctx, job)
}

// keepalive renews t's lease a third of the way into it until ctx ends,
// measuring the lease on this worker's own clock from when the claim (or
// the last renewal) was sent: a node's clock never enters into it. It
// ends the handler's context (cancel) when the claim is lost or the lease
// ran out before a renewal succeeded.
func (w *Worker) keepalive(ctx context.Context, cancel context.CancelCauseFunc, t Claimed, sent time.Time) {
	// The lease the node granted: the one asked for, or the queue's or
	// node's default when the worker asked for none. Each renewal asks
	// for as long again.
	ttl := w.cfg.TTL
	if ttl == 0 {
		ttl = t.Lease
	}
	if ttl <= 0 {
		// A Claimed not made by a claim (no lease in its view): what is
		// left of it by this clock, at least unknownLease.
		ttl = max(time.Until(t.End), unknownLease)
	}
	// A lease that reaches the task's time limit renews to the same end:
	// the renewals go on anyway, as they are how the worker learns that
	// the claim was lost or the task cancelled, and the handler's own
	// deadline (taskTimeLimit) comes before the limit.
	every := ttl / 3
	leaseEnd := sent.Add(ttl)
	timer := time.NewTimer(time.Until(sent.Add(every)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		rctx, rcancel := context.WithDeadline(ctx, leaseEnd)
		at := time.Now()
		// As long again as granted: the queue's default may have changed
		// since, and this loop's pace is the granted lease's.
		_, err := w.c.Renew(rctx, t.ID, t.Claim, ttl)
		rcancel()
		switch {
		case err == nil:
			leaseEnd = at.Add(ttl)
			timer.Reset(time.Until(at.Add(every)))
		case errors.Is(err, ErrClaimLost):
			cancel(fmt.Errorf("%w: %w", ErrClaimLost, err))
			return
		case errors.Is(err, ErrTimeLimit):
			// The lease reaches the task's time limit (the handler's own
			// deadline comes first unless this clock ran slow).
			cancel(ErrTimeLimit)
			return
		case ctx.Err() != nil:
			return
		case !time.Now().Before(leaseEnd):
			cancel(ErrLeaseExpired)
			return
		default:
			// Try again within what is left of the lease.
			w.log.Warn("renew failed", "task", t.ID, "claim", t.Claim, "err", err)
			timer.Reset(min(every/4, time.Until(leaseEnd)/2))
		}
	}
}

// settle writes what the handler's end means for the task, and returns
// the next task a completion claimed for the slot, if any, with when it
// was sent.
func (w *Worker) settle(job *Job, returned bool, herr, cause error, ch *chain, log *slog.Logger) (next *Claimed, sent time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if errors.Is(cause, ErrCancelled) {
		log.Info("task cancelled while held; its handler was stopped", "cause", cause)
		return nil, time.Time{}
	}
	if errors.Is(cause, ErrClaimLost) || errors.Is(cause, ErrLeaseExpired) {
		log.Warn("claim lost; the task is another claim's now", "cause", cause)
		return nil, time.Time{}
	}
	var snooze *snoozeError
	var retry *retryError
	var skip *skipRetryError
	var cancelled *cancelError
	var err error
	switch {
	case returned && herr == nil && ch != nil && ch.want():
		sent = time.Now()
		var got []Claimed
		if got, err = w.c.CompleteAndClaim(ctx, job.ID, job.Claim, job.Queue, ClaimOptions{TTL: w.cfg.TTL, Count: 1}); err == nil {
			ch.found(len(got) == 0)
			if len(got) > 0 {
				next = &got[0]
			}
		}
	case returned && herr == nil:
		err = w.c.Complete(ctx, job.ID, job.Claim)
	case returned && errors.As(herr, &snooze):
		err = w.c.Snooze(ctx, job.ID, job.Claim, snooze.d)
	case returned && errors.As(herr, &cancelled):
		err = w.c.CancelClaim(ctx, job.ID, job.Claim, cancelled.reason)
	case returned && errors.As(herr, &skip):
		err = w.c.FailNoRetry(ctx, job.ID, job.Claim, herr.Error())
	case errors.Is(cause, ErrDraining):
		err = w.c.Snooze(ctx, job.ID, job.Claim, 0)
	case cause != nil:
		err = w.c.Fail(ctx, job.ID, job.Claim, cause.Error(), w.retryDelay(job))
	case errors.As(herr, &retry):
		err = w.c.Fail(ctx, job.ID, job.Claim, herr.Error(), retry.d)
	default:
		err = w.c.Fail(ctx, job.ID, job.Claim, herr.Error(), w.retryDelay(job))
	}
	if errors.Is(err, ErrCancelled) {
		log.Info("task cancelled while held; its outcome was not recorded", "err", err)
		return nil, time.Time{}
	}
	if err != nil {
		log.Warn("could not settle the task; its lease will end it", "err", err)
	}
	return next, sent
}

// retryDelay is the delay a failure of job sends: the Worker's own
// Backoff when it has one, else 0, and the node applies the queue's
// backoff (or its own).
func (w *Worker) retryDelay(job *Job) time.Duration {
	if w.cfg.Backoff.Base == 0 {
		return 0
	}
	return w.cfg.Backoff.Delay(job.Attempts + 1)
}

// handBack snoozes t for 0: claimed while the worker drains.
func (w *Worker) handBack(t Claimed) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := w.c.Snooze(ctx, t.ID, t.Claim, 0); err != nil {
		w.log.Warn("could not hand back a task claimed during the drain", "task", t.ID, "err", err)
	}
}
