package client

import (
	"testing"
	"time"
)

// TestQueueDefaultsResolve: a Worker's own batch, poll wait and
// visibility limit win; left 0, the queue's apply; without either, the
// package defaults (1, DefaultPollWait, none). Before the settings are
// read, the package defaults apply.
func TestQueueDefaultsResolve(t *testing.T) {
	qs := []Queue{{Name: "set"}, {Name: "unset"}}
	for _, tc := range []struct {
		name       string
		cfg        WorkerConfig
		read       bool
		queue      int
		batch      int
		poll, visi time.Duration
	}{
		{name: "the queue's", read: true, queue: 0, batch: 7, poll: 3 * time.Second, visi: time.Minute},
		{name: "a queue without settings", read: true, queue: 1, batch: 1, poll: DefaultPollWait},
		{name: "not read yet", queue: 0, batch: 1, poll: DefaultPollWait},
		{name: "the worker's own", read: true, queue: 0,
			cfg:   WorkerConfig{Batch: 2, PollWait: time.Second, VisibilityLimit: time.Hour},
			batch: 2, poll: time.Second, visi: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{cfg: tc.cfg}
			w.cfg.Queues = qs
			if tc.read {
				w.defaults.cur.Store(&[]QueueSettings{{Queue: "set", Batch: 7, LongPollMs: 3000, VisibilityMs: 60_000}, {Queue: "unset"}})
			}
			if got := w.batch(tc.queue); got != tc.batch {
				t.Errorf("batch %d; want %d", got, tc.batch)
			}
			if got := w.pollWait(tc.queue); got != tc.poll {
				t.Errorf("poll wait %v; want %v", got, tc.poll)
			}
			if got := w.visibility(tc.queue); got != tc.visi {
				t.Errorf("visibility %v; want %v", got, tc.visi)
			}
		})
	}
}
