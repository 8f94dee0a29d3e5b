package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/node/nodetest"
)

// startWorker runs a worker of c until the returned stop is called (or
// the test ends); stop returns once Run did.
func startWorker(t *testing.T, c *client.Client, cfg client.WorkerConfig, h client.Handler) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testkit.Logger(t)
	}
	w, err := c.NewWorker(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// enqueueN enqueues n tasks of queue and returns their ids.
func enqueueN(t *testing.T, c *client.Client, queue string, n int, maxAttempts uint32) []client.ID {
	t.Helper()
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{Queue: queue, Data: fmt.Appendf(nil, "%d", i), MaxAttempts: maxAttempts}
	}
	res, err := c.EnqueueBatch(t.Context(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]client.ID, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// awaitState waits until every task of ids is in state.
func awaitState(t *testing.T, c *client.Client, ids []client.ID, state string) []*client.Info {
	t.Helper()
	infos := make([]*client.Info, len(ids))
	testkit.WaitFor(t, 30*time.Second, func() error {
		for i, id := range ids {
			info, err := c.Get(t.Context(), id)
			if err != nil {
				return err
			}
			if info.State != state {
				return fmt.Errorf("task %s is %s; want %s", id, info.State, state)
			}
			infos[i] = info
		}
		return nil
	})
	return infos
}

func oneNode(t *testing.T, opts ...nodetest.Option) (*nodetest.Cluster, *client.Client) {
	cl := nodetest.NewCluster(t, 1, opts...)
	return cl, newClient(t, client.Config{Nodes: []string{cl.Addr(0)}})
}

// TestWorkerCompletesWithProgress: a handler's nil completes its task;
// its progress lands in order with the Job's sequence numbers.
func TestWorkerCompletesWithProgress(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 20, 0)
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, Concurrency: 4, PollWait: 100 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			for i := range 3 {
				if err := j.Progress(ctx, fmt.Appendf(nil, "step %d", i)); err != nil {
					return err
				}
			}
			return nil
		})
	for _, info := range awaitState(t, c, ids, "completed") {
		if len(info.Updates) != 3 || string(info.Updates[2].Data) != "step 2" || info.Updates[2].Seq != 2 {
			t.Fatalf("task %s: updates %+v; want steps 0..2", info.ID, info.Updates)
		}
	}
}

// TestKeepaliveOutlivesTheTTL: a handler that runs for 3x the lease keeps
// its one claim and completes.
func TestKeepaliveOutlivesTheTTL(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 1, 0)
	const ttl = 300 * time.Millisecond
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, TTL: ttl, PollWait: 100 * time.Millisecond},
		func(ctx context.Context, _ *client.Job) error {
			select {
			case <-time.After(3 * ttl):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	info := awaitState(t, c, ids, "completed")[0]
	if len(info.Claims) != 1 {
		t.Fatalf("claims %+v; want the one, kept alive", info.Claims)
	}
}

// TestKilledWorkersTaskIsRetried: a worker that died holding a task (it
// renews no more) loses it when its lease ends; another worker takes and
// completes it, and the dead one's late complete is refused.
func TestKilledWorkersTaskIsRetried(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 1, 0)
	dead, err := c.Claim(t.Context(), "q", client.ClaimOptions{TTL: 200 * time.Millisecond})
	if err != nil || len(dead) != 1 {
		t.Fatalf("claim = %+v, %v", dead, err)
	}
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, PollWait: 100 * time.Millisecond},
		func(context.Context, *client.Job) error { return nil })
	info := awaitState(t, c, ids, "completed")[0]
	if len(info.Claims) != 2 || info.Claims[1].Completed == nil {
		t.Fatalf("claims %+v; want the dead worker's and the completing one", info.Claims)
	}
	err = c.Complete(t.Context(), dead[0].ID, dead[0].Claim)
	if !errors.Is(err, client.ErrClaimLost) {
		t.Fatalf("the dead worker's late complete = %v; want ErrClaimLost", err)
	}
}

// TestSupersededClaimCancelsTheHandler: when the lease ends at the node
// (its clock jumps past it) and another worker claims the task, the
// first handler's context ends with ErrClaimLost and its completion is
// never sent.
func TestSupersededClaimCancelsTheHandler(t *testing.T) {
	shift := clock.NewShift(clock.Real{}, 0)
	_, c := oneNode(t, nodetest.Clock(shift))
	ids := enqueueN(t, c, "q", 1, 0)
	started := make(chan struct{})
	cause := make(chan error, 1)
	// One handler at a time: the worker does not claim while the first
	// one runs, so the test's claim is the second (the first renewal
	// comes a third of the lease later).
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, Concurrency: 1, TTL: 6 * time.Second, PollWait: 100 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			if j.Claim != 0 {
				return errors.New("claimed again")
			}
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	<-started
	shift.Set(time.Hour) // the claim's end passes at the node
	var other []client.Claimed
	testkit.WaitFor(t, 10*time.Second, func() (err error) {
		other, err = c.Claim(t.Context(), "q", client.ClaimOptions{TTL: time.Hour})
		if err == nil && len(other) == 0 {
			err = errors.New("not claimable yet")
		}
		return err
	})
	select {
	case err := <-cause:
		if !errors.Is(err, client.ErrClaimLost) {
			t.Fatalf("handler's context ended with %v; want ErrClaimLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end after its claim was superseded")
	}
	if info, err := c.Get(t.Context(), ids[0]); err != nil || info.State != "claimed" || len(info.Claims) != 2 {
		t.Fatalf("task = %+v, %v; want claimed by the second claim, not completed", info, err)
	}
}

// TestTimeLimits: a handler past its time limit, and a batch past its
// visibility limit, fail their attempts with the reason.
func TestTimeLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    client.WorkerConfig
		reason string
	}{
		{"time limit", client.WorkerConfig{TimeLimit: 200 * time.Millisecond}, "time limit"},
		{"visibility limit", client.WorkerConfig{VisibilityLimit: 300 * time.Millisecond, Batch: 3, Concurrency: 3}, "visibility limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := oneNode(t)
			ids := enqueueN(t, c, "q", 3, 1)
			cfg := tc.cfg
			cfg.Queues = []client.Queue{{Name: "q"}}
			cfg.PollWait = 100 * time.Millisecond
			startWorker(t, c, cfg, func(ctx context.Context, _ *client.Job) error {
				<-ctx.Done()
				return ctx.Err()
			})
			for _, info := range awaitState(t, c, ids, "dead") {
				if len(info.Failures) != 1 || !strings.Contains(info.Failures[0].Reason, tc.reason) {
					t.Fatalf("task %s failures %+v; want one naming the %s", info.ID, info.Failures, tc.reason)
				}
			}
		})
	}
}

// TestRetriesUntilDead: a failing handler's task is retried after the
// backoff until its max attempts, then dead, each failure recorded.
func TestRetriesUntilDead(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 2, 3)
	var calls atomic.Int32
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, PollWait: 50 * time.Millisecond,
		Backoff: client.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}},
		func(context.Context, *client.Job) error {
			calls.Add(1)
			return errors.New("boom")
		})
	for _, info := range awaitState(t, c, ids, "dead") {
		if info.Attempts != 3 || len(info.Failures) != 3 || info.Failures[0].Reason != "boom" {
			t.Fatalf("task %s: %d attempts, failures %+v; want 3 of boom", info.ID, info.Attempts, info.Failures)
		}
	}
	if n := calls.Load(); n != 6 {
		t.Fatalf("handler ran %d times; want 6", n)
	}
}

// TestSnoozeAndRetryAfter: SnoozeFor hands a task back without counting
// an attempt; RetryAfter fails it with its own delay.
func TestSnoozeAndRetryAfter(t *testing.T) {
	_, c := oneNode(t)
	snoozed := enqueueN(t, c, "snooze", 1, 0)
	retried := enqueueN(t, c, "retry", 1, 0)
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "snooze"}, {Name: "retry"}}, PollWait: 50 * time.Millisecond},
		func(_ context.Context, j *client.Job) error {
			if j.Queue == "snooze" {
				return client.SnoozeFor(time.Hour)
			}
			return client.RetryAfter(time.Hour, errors.New("later"))
		})
	infos := append(awaitState(t, c, snoozed, "snoozed"), awaitState(t, c, retried, "retrying")...)
	for _, info := range infos {
		wantAttempts := uint32(0)
		if info.Queue == "retry" {
			wantAttempts = 1
		}
		if info.Attempts != wantAttempts || time.Until(time.UnixMilli(info.NotBefore)) < 50*time.Minute {
			t.Fatalf("%s: attempts %d, not before %v; want %d attempts, an hour", info.Queue, info.Attempts, time.UnixMilli(info.NotBefore), wantAttempts)
		}
	}
}

// TestSkipRetryAndCancel: a handler's SkipRetry makes its task dead at
// once, at its first of five attempts, with the error as the reason (a
// requeue brings it back); its Cancel cancels the task with the reason.
func TestSkipRetryAndCancel(t *testing.T) {
	_, c := oneNode(t)
	skipped := enqueueN(t, c, "skip", 1, 5)
	cancelled := enqueueN(t, c, "cancel", 1, 5)
	var calls atomic.Int32
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "skip"}, {Name: "cancel"}}, PollWait: 50 * time.Millisecond},
		func(_ context.Context, j *client.Job) error {
			calls.Add(1)
			if j.Queue == "cancel" {
				return client.Cancel("not wanted any more")
			}
			if j.Claim == 0 {
				return client.SkipRetry(errors.New("malformed payload"))
			}
			return nil
		})
	dead := awaitState(t, c, skipped, "dead")[0]
	if f := dead.Failures; dead.Attempts != 1 || len(f) != 1 || !f[0].NoRetry || f[0].Reason != "malformed payload" {
		t.Fatalf("skipped task: attempts %d, failures %+v; want 1 attempt, one no-retry failure", dead.Attempts, f)
	}
	info := awaitState(t, c, cancelled, "cancelled")[0]
	if info.Cancelled == nil || info.Cancelled.Reason != "not wanted any more" {
		t.Fatalf("cancelled task: %+v; want the handler's reason", info.Cancelled)
	}
	if err := c.Requeue(t.Context(), skipped[0]); err != nil {
		t.Fatal(err)
	}
	awaitState(t, c, skipped, "completed")
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler ran %d times; want 3", n)
	}
}

// TestCancelClaimIsFenced: a handler's cancel carries its claim: once a
// newer claim holds the task, the old holder's cancel is refused
// (ErrClaimLost) and changes nothing; the holder's own goes through.
func TestCancelClaimIsFenced(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "fenced", 1, 5)
	first, err := c.Claim(t.Context(), "fenced", client.ClaimOptions{TTL: 50 * time.Millisecond})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v, %v", first, err)
	}
	var second []client.Claimed
	testkit.WaitFor(t, 10*time.Second, func() error { // once the first lease (and the skew bound) ran out
		second, err = c.Claim(t.Context(), "fenced", client.ClaimOptions{TTL: time.Minute})
		if err == nil && len(second) == 0 {
			err = errors.New("not claimable again yet")
		}
		return err
	})
	before, err := c.Get(t.Context(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CancelClaim(t.Context(), ids[0], first[0].Claim, "stale"); !errors.Is(err, client.ErrClaimLost) {
		t.Fatalf("cancel under the superseded claim: %v; want ErrClaimLost", err)
	}
	if after, err := c.Get(t.Context(), ids[0]); err != nil || after.State != "claimed" || len(after.Claims) != len(before.Claims) {
		t.Fatalf("after the refused cancel: %+v, %v; want the second claim holding the task", after, err)
	}
	if err := c.CancelClaim(t.Context(), ids[0], second[0].Claim, "mine"); err != nil {
		t.Fatal(err)
	}
	if info := awaitState(t, c, ids, "cancelled")[0]; info.Cancelled.Reason != "mine" {
		t.Fatalf("cancel reason %q; want mine", info.Cancelled.Reason)
	}
}

// TestQueueConcurrency: a queue's own bound holds under the worker's.
func TestQueueConcurrency(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 30, 0)
	var in, peak atomic.Int32
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q", Concurrency: 2}}, Concurrency: 10, Batch: 5, PollWait: 50 * time.Millisecond},
		func(context.Context, *client.Job) error {
			n := in.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(10 * time.Millisecond)
			in.Add(-1)
			return nil
		})
	awaitState(t, c, ids, "completed")
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak of %d handlers of the queue; want its bound, 2", p)
	}
}

// TestDrainLosesNothing: a worker stopped mid-run finishes what it can
// within the drain and hands the rest back without counting attempts;
// another worker then completes every task.
func TestDrainLosesNothing(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "q", 40, 1)
	var handled atomic.Int32
	block := make(chan struct{})
	stop := startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, Concurrency: 8, Batch: 4, PollWait: 50 * time.Millisecond, DrainTimeout: 200 * time.Millisecond},
		func(ctx context.Context, _ *client.Job) error {
			if handled.Add(1) > 10 {
				select { // the rest hold until the drain ends them
				case <-block:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
	testkit.WaitFor(t, 10*time.Second, testkit.Cond("handlers holding", func() bool { return handled.Load() >= 18 }))
	stop()
	for _, id := range ids {
		info, err := c.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != "completed" && (info.State != "ready" || info.Attempts != 0) {
			t.Fatalf("task %s after the drain: %s, %d attempts; want completed, or ready without an attempt", id, info.State, info.Attempts)
		}
	}
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, Concurrency: 8, PollWait: 50 * time.Millisecond},
		func(context.Context, *client.Job) error { return nil })
	awaitState(t, c, ids, "completed")
}

// TestWorkerUsesQueueSettings: a Worker told no TTL and no backoff gets
// the queue's (ctl queue set --default-ttl, --backoff): its claims are
// leased for the queue's default and renewed for as long again, its
// failed tasks wait the queue's backoff. Told its own, its own win.
// (It once sent its own 30 s lease and 1 s backoff always, and the
// queue's settings never applied to Worker or ctl work users.)
func TestWorkerUsesQueueSettings(t *testing.T) {
	_, c := oneNode(t)
	ctx := t.Context()
	for _, q := range []string{"qs", "own"} {
		if _, err := c.SetQueue(ctx, q, client.QueueChange{DefaultTTL: ptr(7 * time.Minute),
			BackoffBase: ptr(time.Hour), BackoffMax: ptr(2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	held := enqueueN(t, c, "qs", 1, 0)
	failed := enqueueN(t, c, "qs", 1, 5)
	ownFailed := enqueueN(t, c, "own", 1, 5)
	leases := make(chan time.Duration, 2)
	release := make(chan struct{})
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "qs"}}, Concurrency: 2, PollWait: 50 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			leases <- j.Lease
			if j.ID == failed[0] {
				return errors.New("boom")
			}
			select { // held: keeps its claim until the test ends
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	defer close(release)
	for range 2 {
		if l := <-leases; l != 7*time.Minute {
			t.Fatalf("a claim's lease %v; want the queue's 7m0s", l)
		}
	}
	info := awaitState(t, c, failed, "retrying")[0]
	if wait := time.Duration(info.NotBefore-info.Failures[0].At) * time.Millisecond; wait < 45*time.Minute || wait > 75*time.Minute {
		t.Fatalf("failed task waits %v; want the queue's backoff, 1h ±25%%", wait)
	}
	h := awaitState(t, c, held, "claimed")[0]
	if l := time.Duration(h.Claims[0].End-h.Claims[0].Start) * time.Millisecond; l != 7*time.Minute {
		t.Fatalf("held claim's lease %v; want 7m0s", l)
	}

	// The Worker's own TTL and backoff win over the queue's.
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "own"}}, PollWait: 50 * time.Millisecond,
		TTL: 40 * time.Second, Backoff: client.Backoff{Base: 3 * time.Minute, Jitter: -1}},
		func(_ context.Context, j *client.Job) error {
			if j.Lease != 40*time.Second {
				t.Errorf("own TTL: lease %v; want 40s", j.Lease)
			}
			return errors.New("boom")
		})
	info = awaitState(t, c, ownFailed, "retrying")[0]
	if wait := time.Duration(info.NotBefore-info.Failures[0].At) * time.Millisecond; wait != 3*time.Minute {
		t.Fatalf("own backoff: the task waits %v; want 3m0s", wait)
	}
}

// TestRenewTakesTheQueueLease: a renewal that names no TTL extends the
// claim by the queue's default lease, as a claim that names none gets
// (it once took the node's default, shortening a longer queue lease).
func TestRenewTakesTheQueueLease(t *testing.T) {
	_, c := oneNode(t)
	ctx := t.Context()
	if _, err := c.SetQueue(ctx, "long", client.QueueChange{DefaultTTL: ptr(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, c, "long", 1, 0)
	got, err := c.Claim(ctx, "long", client.ClaimOptions{})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if got[0].Lease != 5*time.Minute {
		t.Fatalf("claim's lease %v; want the queue's 5m0s", got[0].Lease)
	}
	before := time.Now()
	end, err := c.Renew(ctx, got[0].ID, got[0].Claim, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := end.Sub(before); d < 4*time.Minute {
		t.Fatalf("renewed for %v; want the queue's 5m0s", d)
	}
}

// TestWorkerTaskTimeLimit: a task's own time limit reaches the Worker
// with its claim: the handler's context ends a little before the limit
// (context.Cause ErrTimeLimit), and the attempt fails with the reason
// "time limit", written before the leader's end of the claim.
func TestWorkerTaskTimeLimit(t *testing.T) {
	_, c := oneNode(t)
	res, err := c.Enqueue(t.Context(), client.Task{Queue: "tl", MaxAttempts: 1, TimeLimit: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	causes := make(chan error, 1)
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "tl"}}, PollWait: 50 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			if j.TimeLimitMs != 1000 {
				t.Errorf("job's time limit %d ms; want 1000", j.TimeLimitMs)
			}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		})
	if cause := <-causes; !errors.Is(cause, client.ErrTimeLimit) {
		t.Fatalf("handler's context ended with %v; want %v", cause, client.ErrTimeLimit)
	}
	info := awaitState(t, c, []client.ID{res.ID}, "dead")[0]
	cl := info.Claims[0]
	if len(info.Failures) != 1 || info.Failures[0].Reason != "time limit" || info.Failures[0].At >= cl.Start+1000 {
		t.Fatalf("failures %+v, claim %+v; want the worker's own \"time limit\" failure before the limit", info.Failures, cl)
	}
}

// TestWorkerRunsToTheTimeLimit: a handler that finishes within its
// task's time limit completes, when the lease the node granted already
// reaches the limit (the queue's default lease is longer than it) and
// when renewals grow it there. A renewal of such a lease answers the same
// end, and the claim is alive until the limit (the Worker once took the
// node's refusal of that renewal for the limit passed, and failed the
// attempt a third of the way in).
func TestWorkerRunsToTheTimeLimit(t *testing.T) {
	const limit, runs = 4 * time.Second, 2500 * time.Millisecond
	_, c := oneNode(t)
	for _, tc := range []struct {
		name string
		ttl  time.Duration // the Worker's; 0: the queue's default lease, longer than the limit
	}{
		{"the granted lease reaches the limit", 0},
		{"a renewal reaches the limit", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := fmt.Sprintf("tl%d", tc.ttl.Milliseconds())
			res, err := c.Enqueue(t.Context(), client.Task{Queue: queue, MaxAttempts: 1, TimeLimit: limit})
			if err != nil {
				t.Fatal(err)
			}
			ended := make(chan error, 1)
			stop := startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: queue}}, TTL: tc.ttl, PollWait: 50 * time.Millisecond},
				func(ctx context.Context, j *client.Job) error {
					select {
					case <-ctx.Done():
						ended <- context.Cause(ctx)
						return context.Cause(ctx)
					case <-time.After(runs):
						ended <- nil
						return nil
					}
				})
			defer stop()
			if cause := <-ended; cause != nil {
				t.Fatalf("the handler's context ended with %v within the time limit", cause)
			}
			info := awaitState(t, c, []client.ID{res.ID}, "completed")[0]
			if len(info.Failures) != 0 {
				t.Fatalf("failures %+v; want none", info.Failures)
			}
		})
	}
}

// TestWorkerQueueDefaults: a Worker given no visibility limit takes the
// queue's (ctl queue set --visibility), read as Run starts.
func TestWorkerQueueDefaults(t *testing.T) {
	_, c := oneNode(t)
	if _, err := c.SetQueue(t.Context(), "vis", client.QueueChange{Visibility: ptr(300 * time.Millisecond),
		LongPoll: ptr(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	ids := enqueueN(t, c, "vis", 2, 1)
	causes := make(chan error, 2)
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "vis"}}, Concurrency: 2},
		func(ctx context.Context, j *client.Job) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		})
	for range 2 {
		if cause := <-causes; !errors.Is(cause, client.ErrVisibilityLimit) {
			t.Fatalf("handler's context ended with %v; want the queue's visibility limit", cause)
		}
	}
	awaitState(t, c, ids, "dead")
}
