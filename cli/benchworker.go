package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/wire"
)

// workerPollWait is the worker phase's long-poll: short, so that the
// phase's end is not held by a poll on the drained queue.
const workerPollWait = 200 * time.Millisecond

// workerPhase handles --n tasks of queue with client.Worker and a no-op
// handler: one Worker per address of --addr, each on its own client,
// --clients handlers in all. It reports throughput only, from the start
// until every Worker drained (each task's completion acknowledged); a
// Worker's per-task latency is not observable from its handler.
func (b *bench) workerPhase(ctx context.Context, queue string) (phaseResult, error) {
	n := int64(b.c.Int("n"))
	addrs := strings.Split(b.c.String("addr"), ",")
	var token string
	if tok, err := clientToken(b.c); err != nil {
		return phaseResult{}, err
	} else if tok != nil {
		token = wire.FormatToken(tok)
	}
	conc := max(b.c.Int("clients")/len(addrs), 1)
	r := newRunner("worker", n)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := time.Now()
	for _, addr := range addrs {
		cl, err := client.New(client.Config{Nodes: []string{strings.TrimSpace(addr)}, Token: token, Streams: b.c.Int("streams")})
		if err != nil {
			return phaseResult{}, err
		}
		defer cl.Close()
		w, err := cl.NewWorker(client.WorkerConfig{
			Queues:      []client.Queue{{Name: queue}},
			Concurrency: conc,
			TTL:         time.Minute,
			PollWait:    workerPollWait,
			Logger:      slog.New(slog.DiscardHandler),
		}, func(context.Context, *client.Job) error {
			if r.done.Add(1) >= n {
				stop()
			}
			return nil
		})
		if err != nil {
			return phaseResult{}, err
		}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	var pwg sync.WaitGroup
	done := make(chan struct{})
	if b.progress {
		pwg.Go(func() { r.progress(b.stderr, start, done) })
	}
	wg.Wait()
	close(done)
	pwg.Wait()
	if p := firstErr.Load(); p != nil {
		return phaseResult{}, fmt.Errorf("worker: %w", *p)
	}
	secs := time.Since(start).Seconds()
	return phaseResult{Phase: "worker", Ops: r.done.Load(), Seconds: secs, OpsPerSec: float64(r.done.Load()) / secs,
		Clients: conc * len(addrs), Size: b.c.Int("size")}, nil
}
