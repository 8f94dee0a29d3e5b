package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	handlers, stopHandlers := context.WithCancelCause(context.Background())
	defer stopHandlers(nil)
	var (
		mu      sync.Mutex
		running = make([]int, len(w.cfg.Queues))
		total   int
		freed   = make(chan struct{}, 1)
		wg      sync.WaitGroup
	)
	room := func(i int) bool {
		q := w.cfg.Queues[i]
		return total < w.cfg.Concurrency && (q.Concurrency == 0 || running[i] < q.Concurrency)
	}
	lot := newLottery(w.cfg.Queues, w.rng)
	for ctx.Err() == nil {
		mu.Lock()
		i, poll, ok := lot.draw(room)
		n := 0
		if ok {
			q := w.cfg.Queues[i]
			n = min(w.cfg.Batch, w.cfg.Concurrency-total)
			if q.Concurrency > 0 {
				n = min(n, q.Concurrency-running[i])
			}
			// Reserve the slots now: no other claim can take them.
			running[i] += n
			total += n
		}
		mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
			case <-freed:
			}
			continue
		}
		tasks, sent, err := w.claim(ctx, w.cfg.Queues[i].Name, n, poll)
		mu.Lock()
		running[i] -= n - len(tasks)
		total -= n - len(tasks)
		if err == nil {
			lot.found(i, len(tasks) == 0)
		}
		mu.Unlock()
		if err != nil {
			w.log.Warn("claim failed", "queue", w.cfg.Queues[i].Name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(claimErrorPause):
			}
			continue
		}
		var batchEnd time.Time
		if w.cfg.VisibilityLimit > 0 {
			batchEnd = sent.Add(w.cfg.VisibilityLimit)
		}
		// A slot whose task completed claims its next task with the
		// completion (one request for both) when the lottery, drawn as
		// if the slot were free, picks its queue again.
		ch := &chain{
			want: func() bool {
				mu.Lock()
				defer mu.Unlock()
				if ctx.Err() != nil {
					return false
				}
				j, poll, ok := lot.draw(func(j int) bool { return j == i || room(j) })
				return ok && !poll && j == i
			},
			found: func(empty bool) {
				mu.Lock()
				lot.found(i, empty)
				mu.Unlock()
			},
		}
		for _, t := range tasks {
			wg.Go(func() {
				defer func() {
					mu.Lock()
					running[i]--
					total--
					mu.Unlock()
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				for t, sent, batchEnd := &t, sent, batchEnd; t != nil; {
					if ctx.Err() != nil {
						w.handBack(*t) // claimed as the drain began
						return
					}
					t, sent = w.runJob(handlers, *t, sent, batchEnd, ch)
					if w.cfg.VisibilityLimit > 0 {
						batchEnd = sent.Add(w.cfg.VisibilityLimit)
					}
				}
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

// claim claims up to n tasks of queue, long-polling when poll. The claim
// does not end with ctx: what it brings is handed back if ctx ended
// meanwhile, rather than left to expire (an expiry counts an attempt).
// sent is when the claim was sent: the leases are measured from it.
func (w *Worker) claim(ctx context.Context, queue string, n int, poll bool) (tasks []Claimed, sent time.Time, err error) {
	opts := ClaimOptions{TTL: w.cfg.TTL, Count: n}
	if poll {
		opts.Wait = w.cfg.PollWait
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

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return w.h(ctx, job)
}

// keepalive renews t's lease a third of the way into it until ctx ends,
// measuring the lease on this worker's own clock from when the claim (or
// the last renewal) was sent: a node's clock never enters into it. It
// ends the handler's context (cancel) when the claim is lost or the lease
// ran out before a renewal succeeded.
func (w *Worker) keepalive(ctx context.Context, cancel context.CancelCauseFunc, t Claimed, sent time.Time) {
	ttl := w.cfg.TTL
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
		_, err := w.c.Renew(rctx, t.ID, t.Claim, ttl)
		rcancel()
		switch {
		case err == nil:
			leaseEnd = at.Add(ttl)
			timer.Reset(time.Until(at.Add(every)))
		case errors.Is(err, ErrClaimLost):
			cancel(fmt.Errorf("%w: %w", ErrClaimLost, err))
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
	if errors.Is(cause, ErrClaimLost) || errors.Is(cause, ErrLeaseExpired) {
		log.Warn("claim lost; the task is another claim's now", "cause", cause)
		return nil, time.Time{}
	}
	var snooze *snoozeError
	var retry *retryError
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
	case errors.Is(cause, ErrDraining):
		err = w.c.Snooze(ctx, job.ID, job.Claim, 0)
	case cause != nil:
		err = w.c.Fail(ctx, job.ID, job.Claim, cause.Error(), w.cfg.Backoff.Delay(job.Attempts+1))
	case errors.As(herr, &retry):
		err = w.c.Fail(ctx, job.ID, job.Claim, herr.Error(), retry.d)
	default:
		err = w.c.Fail(ctx, job.ID, job.Claim, herr.Error(), w.cfg.Backoff.Delay(job.Attempts+1))
	}
	if err != nil {
		log.Warn("could not settle the task; its lease will end it", "err", err)
	}
	return next, sent
}

// handBack snoozes t for 0: claimed while the worker drains.
func (w *Worker) handBack(t Claimed) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := w.c.Snooze(ctx, t.ID, t.Claim, 0); err != nil {
		w.log.Warn("could not hand back a task claimed during the drain", "task", t.ID, "err", err)
	}
}
