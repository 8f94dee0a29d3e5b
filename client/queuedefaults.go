package client

import (
	"context"
	"sync/atomic"
	"time"
)

const (
	// queueDefaultsRefresh is how often a running Worker reads its
	// queues' settings again, so that `ctl queue set` reaches running
	// workers.
	queueDefaultsRefresh = 30 * time.Second
	// queueDefaultsWait bounds the first read, as Run starts: a Worker
	// whose nodes do not answer starts with the package defaults (and
	// its claims find out why) rather than waiting for the settings.
	queueDefaultsWait = 5 * time.Second
)

// queueDefaults are the Worker defaults of a Worker's queues (batch,
// long-poll, visibility limit), as the nodes last said: what the Worker
// uses for a setting its WorkerConfig leaves 0. Safe for concurrent use.
type queueDefaults struct {
	cur atomic.Pointer[[]QueueSettings] // by queue index; nil until read
}

// of returns queue i's settings (the zero value until read).
func (d *queueDefaults) of(i int) QueueSettings {
	if p := d.cur.Load(); p != nil {
		return (*p)[i]
	}
	return QueueSettings{}
}

// read reads every queue's settings; on an error it keeps what it had
// (the defaults are a convenience: a node that cannot answer must not
// stop the Worker).
func (d *queueDefaults) read(ctx context.Context, w *Worker) {
	out := make([]QueueSettings, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		s, err := w.c.QueueSettings(ctx, q.Name)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("could not read the queue's settings; keeping the last known", "queue", q.Name, "err", err)
			}
			return
		}
		out[i] = *s
	}
	d.cur.Store(&out)
}

// refresh reads the settings every queueDefaultsRefresh until ctx ends.
func (d *queueDefaults) refresh(ctx context.Context, w *Worker) {
	t := time.NewTicker(queueDefaultsRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.read(ctx, w)
		}
	}
}

// batch is the most tasks a claim of queue i asks for: the Worker's
// Batch, else the queue's, else 1.
func (w *Worker) batch(i int) int {
	if w.cfg.Batch > 0 {
		return w.cfg.Batch
	}
	if b := w.defaults.of(i).Batch; b > 0 {
		return int(b)
	}
	return 1
}

// pollWait is the long-poll of a claim of queue i: the Worker's
// PollWait, else the queue's long-poll, else DefaultPollWait.
func (w *Worker) pollWait(i int) time.Duration {
	if w.cfg.PollWait > 0 {
		return w.cfg.PollWait
	}
	if ms := w.defaults.of(i).LongPollMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultPollWait
}

// visibility is the limit on a whole batch of queue i: the Worker's
// VisibilityLimit, else the queue's visibility, else none (0).
func (w *Worker) visibility(i int) time.Duration {
	if w.cfg.VisibilityLimit > 0 {
		return w.cfg.VisibilityLimit
	}
	return time.Duration(w.defaults.of(i).VisibilityMs) * time.Millisecond
}
