package queues

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Group is what Settings needs of the metadata group.
type Group interface {
	// Meta returns a copy of the applied state.
	Meta() raftgroup.Meta
	// Changed returns a channel closed at the next applied change.
	Changed() <-chan struct{}
	// ChangeQueue commits a change of a queue's settings.
	ChangeQueue(ctx context.Context, c raftgroup.QueueChange) (raftgroup.QueueSettings, error)
}

// Bounds are the node's limits on what a queue's settings may ask.
type Bounds struct {
	// MaxTTL bounds a default lease; MaxDelay a backoff's base and max,
	// a time limit and a visibility limit; MaxWait a long-poll; MaxBatch
	// a Worker's batch (the tasks one claim may take).
	MaxTTL, MaxDelay, MaxWait time.Duration
	MaxBatch                  int
}

// Settings are the queues' settings as this node applies them. Safe for
// concurrent use.
type Settings struct {
	g      Group
	bounds Bounds
	cur    atomic.Pointer[map[string]raftgroup.QueueSettings]
}

// New returns the settings of g's queues, empty until Refresh.
func New(g Group, b Bounds) *Settings { return &Settings{g: g, bounds: b} }

// Refresh takes the settings of the metadata group's applied state m (the
// node calls it after every change; m is not modified afterwards).
func (s *Settings) Refresh(m map[string]raftgroup.QueueSettings) { s.cur.Store(&m) }

// Of returns queue's settings (zero: the node's defaults).
func (s *Settings) Of(queue string) raftgroup.QueueSettings {
	if qs := s.cur.Load(); qs != nil {
		return (*qs)[queue]
	}
	return raftgroup.QueueSettings{}
}

// Backoff is partition.Retry's Backoff: the queue's, or none.
func (s *Settings) Backoff(queue string) (base, maxD time.Duration) {
	q := s.Of(queue)
	return time.Duration(q.BackoffBaseMs) * time.Millisecond, time.Duration(q.BackoffMaxMs) * time.Millisecond
}

// Paused reports whether queue grants no claims.
func (s *Settings) Paused(queue string) bool { return s.Of(queue).Paused }

// Retentions returns the queues that have a retention of their own
// (replication.Host).
func (s *Settings) Retentions() map[string]time.Duration {
	out := map[string]time.Duration{}
	if qs := s.cur.Load(); qs != nil {
		for q, st := range *qs {
			if st.RetentionMs > 0 {
				out[q] = time.Duration(st.RetentionMs) * time.Millisecond
			}
		}
	}
	return out
}

// WaitResumed waits until queue is not paused (true), or until deadline,
// ctx or stop (false). It reads the group's state, not the refreshed
// copy, which may not be updated yet when the group's change channel
// fires.
func (s *Settings) WaitResumed(ctx context.Context, queue string, deadline <-chan time.Time, stop <-chan struct{}) bool {
	for {
		ch := s.g.Changed()
		if !s.g.Meta().Queues[queue].Paused {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
}

// Get reads a queue's settings as this node applies them.
func (s *Settings) Get(req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return nil, err
	}
	return view(req.Queue, s.Of(req.Queue)), nil
}

// Set changes a queue's settings cluster-wide, through the metadata
// group, and returns them as committed.
func (s *Settings) Set(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if err := s.check(req); err != nil {
		return nil, err
	}
	q, err := s.g.ChangeQueue(ctx, raftgroup.QueueChange{
		Queue: req.Queue, MaxAttempts: req.MaxAttempts, DefaultTTLMs: req.DefaultTTLMs,
		BackoffBaseMs: req.BackoffBaseMs, BackoffMaxMs: req.BackoffMaxMs, RetentionMs: req.RetentionMs, Paused: req.Paused,
		TimeLimitMs: req.TimeLimitMs, VisibilityMs: req.VisibilityMs, Batch: req.Batch, LongPollMs: req.LongPollMs,
		Hint: req.Hint,
	})
	switch {
	case err == nil:
	case errors.Is(err, raftgroup.ErrInvalid):
		return nil, fmt.Errorf("%w: queue %s: %v", task.ErrInvalid, req.Queue, err)
	default: // the change may or may not have committed: it is safe to send again
		return nil, fmt.Errorf("%w: queue %s: %v", wire.ErrUnavailable, req.Queue, err)
	}
	return view(req.Queue, q), nil
}

// check checks a change against the node's bounds.
func (s *Settings) check(req *wire.QueueSetRequest) error {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return err
	}
	if req.MaxAttempts == nil && req.DefaultTTLMs == nil && req.BackoffBaseMs == nil && req.BackoffMaxMs == nil &&
		req.RetentionMs == nil && req.Paused == nil && req.TimeLimitMs == nil && req.VisibilityMs == nil &&
		req.Batch == nil && req.LongPollMs == nil && req.Hint == nil {
		return fmt.Errorf("%w: queue %s: no setting to change", task.ErrInvalid, req.Queue)
	}
	if v := req.RetentionMs; v != nil && *v < 0 {
		return fmt.Errorf("%w: queue %s: retention %dms is negative", task.ErrInvalid, req.Queue, *v)
	}
	if v := req.DefaultTTLMs; v != nil {
		if err := task.ValidateMs("default ttl", *v, s.bounds.MaxTTL); err != nil {
			return err
		}
	}
	for what, v := range map[string]*int64{"backoff base": req.BackoffBaseMs, "backoff max": req.BackoffMaxMs,
		"time limit": req.TimeLimitMs, "visibility": req.VisibilityMs} {
		if v != nil {
			if err := task.ValidateMs(what, *v, s.bounds.MaxDelay); err != nil {
				return err
			}
		}
	}
	if v := req.LongPollMs; v != nil {
		if err := task.ValidateMs("long poll", *v, s.bounds.MaxWait); err != nil {
			return err
		}
	}
	if v := req.Batch; v != nil && int64(*v) > int64(s.bounds.MaxBatch) {
		return fmt.Errorf("%w: queue %s: batch %d: want 0..%d", task.ErrInvalid, req.Queue, *v, s.bounds.MaxBatch)
	}
	return nil
}

// view is queue's settings s as the client API shows them.
func view(queue string, s raftgroup.QueueSettings) *wire.QueueSettings {
	return &wire.QueueSettings{Queue: queue, MaxAttempts: s.MaxAttempts, DefaultTTLMs: s.DefaultTTLMs,
		BackoffBaseMs: s.BackoffBaseMs, BackoffMaxMs: s.BackoffMaxMs, RetentionMs: s.RetentionMs, Paused: s.Paused,
		TimeLimitMs: s.TimeLimitMs, VisibilityMs: s.VisibilityMs, Batch: s.Batch, LongPollMs: s.LongPollMs, Hint: s.Hint}
}
