package raftgroup

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Queue settings: per-queue overrides of the nodes' defaults, kept in the
// metadata group so that every node applies the same ones and they
// survive restarts.

const (
	// MaxQueueSettings caps the queues with settings.
	MaxQueueSettings = 4096
	// maxQueueNameBytes bounds a queue name here (task.MaxQueueLen; the
	// node checks the characters).
	maxQueueNameBytes = 128
)

// QueueSettings are one queue's settings. A zero number means the node's
// default; a task's own field overrides the queue's.
type QueueSettings struct {
	// MaxAttempts is the max attempts of the queue's tasks enqueued
	// without one.
	MaxAttempts uint32
	// DefaultTTLMs is the lease of a claim that asks for none.
	DefaultTTLMs int64
	// BackoffBaseMs and BackoffMaxMs shape the delay after a failed
	// attempt that names none: base·2^(attempts-1), at most max.
	BackoffBaseMs, BackoffMaxMs int64
	// RetentionMs is how long the queue's completed tasks are kept.
	RetentionMs int64
	// Paused: the queue takes enqueues and grants no claims.
	Paused bool
	// TimeLimitMs is the time limit of the queue's tasks enqueued without
	// one: how long one claim may run.
	TimeLimitMs int64
	// VisibilityMs, Batch and LongPollMs are the defaults of the Workers
	// that serve the queue: the limit on a claim's whole batch, the most
	// tasks one claim asks for, and a claim's long-poll once the queue
	// was found empty. The nodes keep them for the Workers.
	VisibilityMs int64
	Batch        uint32
	LongPollMs   int64
	// Hint: the queue's enqueues are hinted when their cohort cannot be
	// reached, as if each asked for it (wire.EnqueueRequest.Hint).
	Hint bool
}

// IsZero reports whether s holds no setting (the queue has none).
func (s QueueSettings) IsZero() bool { return s == QueueSettings{} }

func (s QueueSettings) validate() error {
	switch {
	case s.DefaultTTLMs < 0, s.BackoffBaseMs < 0, s.BackoffMaxMs < 0, s.RetentionMs < 0, s.TimeLimitMs < 0,
		s.VisibilityMs < 0, s.LongPollMs < 0:
		return fmt.Errorf("%w: negative duration in %+v", ErrInvalid, s)
	case s.BackoffBaseMs > 0 && s.BackoffMaxMs > 0 && s.BackoffMaxMs < s.BackoffBaseMs:
		return fmt.Errorf("%w: backoff max %d ms below its base %d ms", ErrInvalid, s.BackoffMaxMs, s.BackoffBaseMs)
	}
	return nil
}

// QueueChange changes some of a queue's settings: each non-nil field
// replaces the queue's (a zero value resets it to the node's default).
// It is applied to the settings current when it commits, so changes of
// different fields by concurrent callers all take effect.
type QueueChange struct {
	Queue                       string
	MaxAttempts                 *uint32
	DefaultTTLMs                *int64
	BackoffBaseMs, BackoffMaxMs *int64
	RetentionMs                 *int64
	Paused                      *bool
	TimeLimitMs                 *int64
	VisibilityMs                *int64
	Batch                       *uint32
	LongPollMs                  *int64
	Hint                        *bool
}

func (c QueueChange) validate() error {
	if c.Queue == "" || len(c.Queue) > maxQueueNameBytes {
		return fmt.Errorf("%w: queue name of %d bytes: want 1..%d", ErrInvalid, len(c.Queue), maxQueueNameBytes)
	}
	return nil
}

// apply returns s with c's fields set.
func (c QueueChange) apply(s QueueSettings) QueueSettings {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	if c.MaxAttempts != nil {
		s.MaxAttempts = *c.MaxAttempts
	}
	set(&s.DefaultTTLMs, c.DefaultTTLMs)
	set(&s.BackoffBaseMs, c.BackoffBaseMs)
	set(&s.BackoffMaxMs, c.BackoffMaxMs)
	set(&s.RetentionMs, c.RetentionMs)
	if c.Paused != nil {
		s.Paused = *c.Paused
	}
	set(&s.TimeLimitMs, c.TimeLimitMs)
	set(&s.VisibilityMs, c.VisibilityMs)
	if c.Batch != nil {
		s.Batch = *c.Batch
	}
	set(&s.LongPollMs, c.LongPollMs)
	if c.Hint != nil {
		s.Hint = *c.Hint
	}
	return s
}

// ChangeQueue applies c to the queue's settings cluster-wide and returns
// the settings it left. A queue whose settings all return to the
// defaults is dropped from the registry.
func (g *Group) ChangeQueue(ctx context.Context, c QueueChange) (QueueSettings, error) {
	if err := c.validate(); err != nil {
		return QueueSettings{}, fmt.Errorf("raftgroup: change queue: %w", err)
	}
	r, err := g.propose(ctx, command{Op: opQueue, Queue: toQueueRecord(c)})
	if err != nil {
		return QueueSettings{}, err
	}
	if r.err != nil {
		return QueueSettings{}, fmt.Errorf("raftgroup: %w", r.err)
	}
	return r.queue, nil
}

func applyQueue(m *Meta, c QueueChange) (result, bool) {
	if err := c.validate(); err != nil {
		return result{err: fmt.Errorf("change queue: %w", err)}, false
	}
	old, exists := m.Queues[c.Queue]
	s := c.apply(old)
	if err := s.validate(); err != nil {
		return result{queue: old, err: fmt.Errorf("change queue %s: %w", c.Queue, err)}, false
	}
	switch {
	case s == old:
		return result{queue: s}, false
	case s.IsZero():
		delete(m.Queues, c.Queue)
		return result{queue: s}, true
	case !exists && len(m.Queues) >= MaxQueueSettings:
		return result{queue: old, err: fmt.Errorf("change queue %s: %w: %d queues have settings already", c.Queue, ErrInvalid, MaxQueueSettings)}, false
	}
	if m.Queues == nil {
		m.Queues = make(map[string]QueueSettings)
	}
	m.Queues[c.Queue] = s
	return result{queue: s}, true
}

// checkQueues checks the registry's invariants.
func checkQueues(qs map[string]QueueSettings) error {
	if len(qs) > MaxQueueSettings {
		return fmt.Errorf("%d queues with settings, limit %d", len(qs), MaxQueueSettings)
	}
	for name, s := range qs {
		if err := (QueueChange{Queue: name}).validate(); err != nil {
			return err
		}
		if s.IsZero() {
			return fmt.Errorf("queue %s kept without settings", name)
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
	}
	return nil
}

// queueChangeRecord is QueueChange in the log.
type queueChangeRecord struct {
	Queue         string  `cbor:"1,keyasint"`
	MaxAttempts   *uint32 `cbor:"2,keyasint,omitempty"`
	DefaultTTLMs  *int64  `cbor:"3,keyasint,omitempty"`
	BackoffBaseMs *int64  `cbor:"4,keyasint,omitempty"`
	BackoffMaxMs  *int64  `cbor:"5,keyasint,omitempty"`
	RetentionMs   *int64  `cbor:"6,keyasint,omitempty"`
	Paused        *bool   `cbor:"7,keyasint,omitempty"`
	TimeLimitMs   *int64  `cbor:"8,keyasint,omitempty"`
	VisibilityMs  *int64  `cbor:"9,keyasint,omitempty"`
	Batch         *uint32 `cbor:"10,keyasint,omitempty"`
	LongPollMs    *int64  `cbor:"11,keyasint,omitempty"`
	Hint          *bool   `cbor:"12,keyasint,omitempty"`
}

func toQueueRecord(c QueueChange) *queueChangeRecord {
	r := queueChangeRecord(c)
	return &r
}

// queueRecord is one queue's settings in a snapshot.
type queueRecord struct {
	Queue         string `cbor:"1,keyasint"`
	MaxAttempts   uint32 `cbor:"2,keyasint,omitempty"`
	DefaultTTLMs  int64  `cbor:"3,keyasint,omitempty"`
	BackoffBaseMs int64  `cbor:"4,keyasint,omitempty"`
	BackoffMaxMs  int64  `cbor:"5,keyasint,omitempty"`
	RetentionMs   int64  `cbor:"6,keyasint,omitempty"`
	Paused        bool   `cbor:"7,keyasint,omitempty"`
	TimeLimitMs   int64  `cbor:"8,keyasint,omitempty"`
	VisibilityMs  int64  `cbor:"9,keyasint,omitempty"`
	Batch         uint32 `cbor:"10,keyasint,omitempty"`
	LongPollMs    int64  `cbor:"11,keyasint,omitempty"`
	Hint          bool   `cbor:"12,keyasint,omitempty"`
}

// queueRecords returns qs sorted by name, so equal states encode to
// equal bytes.
func queueRecords(qs map[string]QueueSettings) []queueRecord {
	var out []queueRecord
	for _, name := range slices.Sorted(maps.Keys(qs)) {
		s := qs[name]
		out = append(out, queueRecord{Queue: name, MaxAttempts: s.MaxAttempts, DefaultTTLMs: s.DefaultTTLMs,
			BackoffBaseMs: s.BackoffBaseMs, BackoffMaxMs: s.BackoffMaxMs, RetentionMs: s.RetentionMs, Paused: s.Paused,
			TimeLimitMs: s.TimeLimitMs, VisibilityMs: s.VisibilityMs, Batch: s.Batch, LongPollMs: s.LongPollMs, Hint: s.Hint})
	}
	return out
}

func (r queueRecord) settings() QueueSettings {
	return QueueSettings{MaxAttempts: r.MaxAttempts, DefaultTTLMs: r.DefaultTTLMs, BackoffBaseMs: r.BackoffBaseMs,
		BackoffMaxMs: r.BackoffMaxMs, RetentionMs: r.RetentionMs, Paused: r.Paused,
		TimeLimitMs: r.TimeLimitMs, VisibilityMs: r.VisibilityMs, Batch: r.Batch, LongPollMs: r.LongPollMs, Hint: r.Hint}
}
