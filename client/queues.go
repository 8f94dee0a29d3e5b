package client

import (
	"context"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// QueueSettings are a queue's settings as every node applies them; a 0
// is the node's default.
type QueueSettings = wire.QueueSettings

// QueueChange changes some of a queue's settings: each non-nil field
// replaces the queue's (a zero value resets it to the node's default).
// A task's own max attempts, a claim's own TTL and a fail's own
// retry-after override the queue's.
type QueueChange struct {
	// MaxAttempts applies to the queue's tasks enqueued without one.
	MaxAttempts *uint32
	// DefaultTTL is the lease of a claim that asks for none.
	DefaultTTL *time.Duration
	// BackoffBase and BackoffMax shape the delay after a failed attempt
	// that names none: base·2^(attempts-1), at most max.
	BackoffBase, BackoffMax *time.Duration
	// Retention is how long the queue's completed and cancelled tasks
	// are kept before garbage collection, instead of the node's.
	Retention *time.Duration
	// Paused: the queue takes enqueues and grants no claims.
	Paused *bool
	// TimeLimit applies to the queue's tasks enqueued without one.
	TimeLimit *time.Duration
	// Visibility, Batch and LongPoll are the defaults of the Workers
	// that serve the queue (WorkerConfig.VisibilityLimit, Batch,
	// PollWait), for those not given their own.
	Visibility *time.Duration
	Batch      *uint32
	LongPoll   *time.Duration
	// Hint hints every enqueue of the queue whose replicas cannot be
	// reached, as EnqueueOptions.Hint does.
	Hint *bool
}

// QueueSettings reads queue's settings from a node.
func (c *Client) QueueSettings(ctx context.Context, queue string) (*QueueSettings, error) {
	var resp *wire.QueueSettings
	err := c.do(ctx, "queue-get", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.QueueGet(ctx, &wire.QueueGetRequest{Queue: queue})
		return err
	})
	return resp, err
}

// SetQueue changes queue's settings cluster-wide and returns them.
func (c *Client) SetQueue(ctx context.Context, queue string, ch QueueChange) (*QueueSettings, error) {
	ms := func(d *time.Duration) *int64 {
		if d == nil {
			return nil
		}
		v := d.Milliseconds()
		return &v
	}
	req := &wire.QueueSetRequest{Queue: queue, MaxAttempts: ch.MaxAttempts, DefaultTTLMs: ms(ch.DefaultTTL),
		BackoffBaseMs: ms(ch.BackoffBase), BackoffMaxMs: ms(ch.BackoffMax), RetentionMs: ms(ch.Retention), Paused: ch.Paused,
		TimeLimitMs: ms(ch.TimeLimit), VisibilityMs: ms(ch.Visibility), Batch: ch.Batch, LongPollMs: ms(ch.LongPoll), Hint: ch.Hint}
	var resp *wire.QueueSettings
	err := c.do(ctx, "queue-set", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.QueueSet(ctx, req)
		return err
	})
	return resp, err
}

// PauseQueue stops queue's claims cluster-wide: it still takes enqueues.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	paused := true
	_, err := c.SetQueue(ctx, queue, QueueChange{Paused: &paused})
	return err
}

// ResumeQueue lets queue's tasks be claimed again.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	paused := false
	_, err := c.SetQueue(ctx, queue, QueueChange{Paused: &paused})
	return err
}
