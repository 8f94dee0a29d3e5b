package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/task"
)

// Defaults of WorkerConfig.
const (
	// DefaultConcurrency is how many handlers a Worker runs at once.
	DefaultConcurrency = 10
	// DefaultPollWait is how long a claim long-polls once every queue
	// was found empty.
	DefaultPollWait = 5 * time.Second
	// DefaultDrainTimeout is how long Run waits for running handlers
	// after its context ended before it hands their tasks back.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultBackoffMax and DefaultBackoffJitter complete a
	// WorkerConfig.Backoff given with a Base only.
	DefaultBackoffMax    = 10 * time.Minute
	DefaultBackoffJitter = 0.25
	// writeTimeout bounds the completion, failure or hand-back of one
	// task after its handler, whatever happened to Run's context.
	writeTimeout = 30 * time.Second
	// claimErrorPause is the pause after a claim failed, before the next.
	claimErrorPause = time.Second
	// timeLimitMargin is how much earlier than the task's time limit a
	// handler's context ends: its failure, written after, lands before
	// the leader ends the claim at the limit. A tenth of the limit, at
	// most this.
	timeLimitMargin = time.Second
	// unknownLease is the lease keepalive assumes for a Claimed whose
	// view names no lease (one a caller built, not a claim's).
	unknownLease = time.Second
)

// Why a handler's context ends (context.Cause).
var (
	// ErrTimeLimit: the handler reached its time limit, the task's own
	// (less timeLimitMargin, so that its failure is written before the
	// leader ends the claim) or WorkerConfig.TimeLimit; the attempt
	// fails with the reason "time limit". A renewal returns it too once
	// the claim ran for the task's time limit: the claim ended there, a
	// failed attempt, unless completed, failed or snoozed first. (Before
	// that, a renewal of a lease that reaches the limit answers the same
	// end.)
	ErrTimeLimit = task.ErrTimeLimit
	// ErrVisibilityLimit: the claim's batch ran past
	// WorkerConfig.VisibilityLimit; the attempt fails.
	ErrVisibilityLimit = errors.New("client: the batch ran past its visibility limit")
	// ErrLeaseExpired: renewals failed until the lease, as this worker
	// measures it, ran out; another worker may hold the task by now.
	ErrLeaseExpired = errors.New("client: the lease ran out before a renewal succeeded")
	// ErrDraining: Run's context ended and the handler did not finish
	// within WorkerConfig.DrainTimeout; the task is handed back.
	ErrDraining = errors.New("client: the worker is shutting down")
)

// Queue is one queue a Worker serves.
type Queue struct {
	// Name is the queue's name.
	Name string
	// Weight is the queue's tickets in the lottery that picks the next
	// queue to claim from; default 1.
	Weight int
	// Concurrency bounds the handlers of this queue's tasks at once; 0:
	// only the Worker's bound.
	Concurrency int
}

// Backoff shapes the delay before a failed task is retried: Base·2^(n-1)
// after the n-th failed attempt, at most Max, each delay drawn within
// ±Jitter of it (a fraction, so that tasks that failed together do not
// come back together).
type Backoff struct {
	Base, Max time.Duration
	Jitter    float64
}

// Delay returns the delay after the n-th failed attempt (n >= 1).
func (b Backoff) Delay(n uint32) time.Duration {
	d := b.Base
	for i := uint32(1); i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + b.Jitter*(2*rand.Float64()-1)))
	}
	return max(d, time.Millisecond)
}

// WorkerConfig configures a Worker. Queues is required; the zero value of
// every other field is its default.
type WorkerConfig struct {
	// Queues are the queues to serve.
	Queues []Queue
	// Concurrency bounds the handlers running at once; default
	// DefaultConcurrency.
	Concurrency int
	// Batch is the most tasks one claim asks for (never more than the
	// free handlers); 0: the queue's batch (ctl queue set --batch), else
	// 1.
	Batch int
	// TTL is the lease of each claim; 0: the queue's default lease
	// (ctl queue set --default-ttl), else the node's. The worker
	// renews a third of the way into each lease, for as long as the
	// lease the node granted.
	TTL time.Duration
	// TimeLimit bounds one task's handler (ErrTimeLimit), besides the
	// task's own time limit (Task.TimeLimit, which the leader enforces);
	// 0: only the task's.
	TimeLimit time.Duration
	// VisibilityLimit bounds every task of one claim's batch, from the
	// claim (ErrVisibilityLimit); 0: the queue's (ctl queue set
	// --visibility), else none.
	VisibilityLimit time.Duration
	// Backoff, when its Base is set, is the delay before a failed task is
	// retried, sent with each failure; its zero Max and Jitter take
	// DefaultBackoffMax and DefaultBackoffJitter (a negative Jitter:
	// none). Unset (the zero value), the node applies the queue's
	// backoff (ctl queue set --backoff), else its own, jittered.
	Backoff Backoff
	// PollWait is the long-poll of a claim once every queue was found
	// empty; 0: the queue's (ctl queue set --long-poll), else
	// DefaultPollWait.
	PollWait time.Duration
	// DrainTimeout is how long Run waits for running handlers once its
	// context ended; default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives the worker's logs; default slog.Default().
	Logger *slog.Logger
}

// Handler handles one task. It returns nil to complete the task, an
// error to fail the attempt (retried after the backoff, dead after the
// task's max attempts), SnoozeFor(d) to hand it back for d without
// counting an attempt, RetryAfter(d, err) to fail it with its own
// delay, SkipRetry(err) to fail it for good (dead at once), or
// Cancel(reason) to cancel the task. Its context ends when the claim is lost (context.Cause:
// ErrClaimLost, ErrLeaseExpired), at the time limits, or at the end of a
// drain: it must then return soon, and whatever it writes under the
// claim is refused.
type Handler func(ctx context.Context, job *Job) error

// Job is a task a Worker's handler holds.
type Job struct {
	Claimed
	w   *Worker
	mu  sync.Mutex
	seq uint64 // the claim's next progress sequence number
}

// Progress appends data to the claim's progress history; the sequence
// numbers are the Job's.
func (j *Job) Progress(ctx context.Context, data []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.w.c.Update(ctx, j.ID, j.Claim, j.seq, data); err != nil {
		return err
	}
	j.seq++
	return nil
}

// SnoozeFor is what a handler returns to hand its task back for d
// without counting an attempt.
func SnoozeFor(d time.Duration) error { return &snoozeError{d} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snooze for %v", e.d) }

// RetryAfter is what a handler returns to fail its attempt with err and
// have the task retried after d instead of the backoff.
func RetryAfter(d time.Duration, err error) error { return &retryError{d, err} }

type retryError struct {
	d   time.Duration
	err error
}

func (e *retryError) Error() string { return fmt.Sprintf("%v (retry after %v)", e.err, e.d) }
func (e *retryError) Unwrap() error { return e.err }

// SkipRetry is what a handler returns to fail its task for good: it is
// dead at once, with err as the reason, whatever its attempts left (a
// payload that can never succeed). `ctl requeue` (Client.Requeue) brings
// it back.
func SkipRetry(err error) error { return &skipRetryError{err} }

type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string { return fmt.Sprint(e.err) }
func (e *skipRetryError) Unwrap() error { return e.err }

// Cancel is what a handler returns to cancel its own task, with reason:
// it ends as cancelled (not completed: its dependents stay blocked) and
// is never claimed again.
func Cancel(reason string) error { return &cancelError{reason} }

type cancelError struct{ reason string }

func (e *cancelError) Error() string { return "cancel: " + e.reason }

// Worker claims tasks from its queues and runs a Handler on each,
// renewing their leases while it runs.
type Worker struct {
	c   *Client
	cfg WorkerConfig
	h   Handler
	// mw is the middleware Use added; run is h inside it, set by Run.
	mw  []Middleware
	run Handler
	log *slog.Logger
	ran atomic.Bool
	// rng draws the lottery; tests seed it.
	rng *rand.Rand
	// defaults are the queues' Worker defaults, read at Run.
	defaults queueDefaults
}

// NewWorker checks cfg and returns a Worker of c that runs h.
func (c *Client) NewWorker(cfg WorkerConfig, h Handler) (*Worker, error) {
	if len(cfg.Queues) == 0 {
		return nil, fmt.Errorf("%w: worker: no queues", ErrInvalid)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: worker: no handler", ErrInvalid)
	}
	seen := map[string]bool{}
	for i := range cfg.Queues {
		q := &cfg.Queues[i]
		if q.Name == "" || seen[q.Name] || q.Weight < 0 || q.Concurrency < 0 {
			return nil, fmt.Errorf("%w: worker: queue %q: a name of its own, weight and concurrency >= 0", ErrInvalid, q.Name)
		}
		seen[q.Name] = true
		if q.Weight == 0 {
			q.Weight = 1
		}
	}
	if cfg.Concurrency < 0 || cfg.Batch < 0 || cfg.TTL < 0 || cfg.TimeLimit < 0 || cfg.VisibilityLimit < 0 ||
		cfg.PollWait < 0 || cfg.DrainTimeout < 0 || cfg.Backoff.Base < 0 || cfg.Backoff.Max < 0 {
		return nil, fmt.Errorf("%w: worker: negative setting", ErrInvalid)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.DrainTimeout, DefaultDrainTimeout)
	if cfg.Backoff.Base == 0 && (cfg.Backoff.Max != 0 || cfg.Backoff.Jitter != 0) {
		return nil, fmt.Errorf("%w: worker: a backoff max or jitter without a base", ErrInvalid)
	}
	if cfg.Backoff.Base > 0 {
		def(&cfg.Backoff.Max, DefaultBackoffMax)
		cfg.Backoff.Max = max(cfg.Backoff.Max, cfg.Backoff.Base)
		switch {
		case cfg.Backoff.Jitter == 0:
			cfg.Backoff.Jitter = DefaultBackoffJitter
		case cfg.Backoff.Jitter < 0:
			cfg.Backoff.Jitter = 0
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Worker{c: c, cfg: cfg, h: h, log: log, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
}
