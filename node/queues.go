package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Queue settings: kept in the metadata group (raftgroup.ChangeQueue), read
// here from the copy refreshMeta keeps, applied where a request takes a
// default: an enqueue's max attempts, a claim's lease, a fail's backoff;
// and a paused queue grants no claims.

// queueSettings returns queue's settings (zero: the node's defaults).
func (n *Node) queueSettings(queue string) raftgroup.QueueSettings {
	if qs := n.queues.Load(); qs != nil {
		return (*qs)[queue]
	}
	return raftgroup.QueueSettings{}
}

// queueBackoff is partition.Retry's Backoff: the queue's, or none.
func (n *Node) queueBackoff(queue string) (base, maxD time.Duration) {
	s := n.queueSettings(queue)
	return time.Duration(s.BackoffBaseMs) * time.Millisecond, time.Duration(s.BackoffMaxMs) * time.Millisecond
}

// paused reports whether queue grants no claims.
func (n *Node) paused(queue string) bool { return n.queueSettings(queue).Paused }

// waitResumed waits until queue is not paused (true), or until deadline,
// ctx or the node's shutdown (false). It reads the group's state, not the
// cached copy, which refreshMeta may not have updated yet when the
// group's change channel fires.
func (n *Node) waitResumed(ctx context.Context, queue string, deadline <-chan time.Time) bool {
	for {
		ch := n.raft.Changed()
		if !n.raft.Meta().Queues[queue].Paused {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		case <-n.stopc:
			return false
		}
	}
}

// QueueGet reads a queue's settings as this node applies them.
func (n *Node) QueueGet(_ context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := task.ValidateQueue(req.Queue); err != nil {
		return nil, err
	}
	return queueView(req.Queue, n.queueSettings(req.Queue)), nil
}

// QueueSet changes a queue's settings cluster-wide, through the metadata
// group, and returns them as committed.
func (n *Node) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	if err := n.checkQueueSet(req); err != nil {
		return nil, err
	}
	s, err := n.raft.ChangeQueue(ctx, raftgroup.QueueChange{
		Queue: req.Queue, MaxAttempts: req.MaxAttempts, DefaultTTLMs: req.DefaultTTLMs,
		BackoffBaseMs: req.BackoffBaseMs, BackoffMaxMs: req.BackoffMaxMs, RetentionMs: req.RetentionMs, Paused: req.Paused,
	})
	switch {
	case err == nil:
	case errors.Is(err, raftgroup.ErrInvalid):
		return nil, fmt.Errorf("%w: queue %s: %v", task.ErrInvalid, req.Queue, err)
	default: // the change may or may not have committed: it is safe to send again
		return nil, fmt.Errorf("%w: queue %s: %v", wire.ErrUnavailable, req.Queue, err)
	}
	n.log.Info("queue settings changed", "queue", req.Queue, "settings", s)
	return queueView(req.Queue, s), nil
}

// checkQueueSet checks a change against the node's bounds.
func (n *Node) checkQueueSet(req *wire.QueueSetRequest) error {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return err
	}
	if req.MaxAttempts == nil && req.DefaultTTLMs == nil && req.BackoffBaseMs == nil && req.BackoffMaxMs == nil &&
		req.RetentionMs == nil && req.Paused == nil {
		return fmt.Errorf("%w: queue %s: no setting to change", task.ErrInvalid, req.Queue)
	}
	if v := req.RetentionMs; v != nil && *v < 0 {
		return fmt.Errorf("%w: queue %s: retention %dms is negative", task.ErrInvalid, req.Queue, *v)
	}
	if v := req.DefaultTTLMs; v != nil {
		if err := checkMs("default ttl", *v, n.cfg.MaxTTL); err != nil {
			return err
		}
	}
	for what, v := range map[string]*int64{"backoff base": req.BackoffBaseMs, "backoff max": req.BackoffMaxMs} {
		if v != nil {
			if err := checkMs(what, *v, n.cfg.MaxDelay); err != nil {
				return err
			}
		}
	}
	return nil
}

func queueView(queue string, s raftgroup.QueueSettings) *wire.QueueSettings {
	return &wire.QueueSettings{Queue: queue, MaxAttempts: s.MaxAttempts, DefaultTTLMs: s.DefaultTTLMs,
		BackoffBaseMs: s.BackoffBaseMs, BackoffMaxMs: s.BackoffMaxMs, RetentionMs: s.RetentionMs, Paused: s.Paused}
}

// queueRetentions returns the queues that have a retention of their own
// (replication.Host).
func (n *Node) queueRetentions() map[string]time.Duration {
	out := map[string]time.Duration{}
	if qs := n.queues.Load(); qs != nil {
		for q, s := range *qs {
			if s.RetentionMs > 0 {
				out[q] = time.Duration(s.RetentionMs) * time.Millisecond
			}
		}
	}
	return out
}
