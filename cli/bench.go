package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// Histogram range: 1µs to 60s at 3 significant digits.
const (
	histMinMicros = 1
	histMaxMicros = 60_000_000
	histSigFigs   = 3
	// progressEvery is how often the progress line is redrawn.
	progressEvery = time.Second
	// scalingFillBatch is the enqueue batch size used to fill queues for
	// --claim-scaling; scalingFillClients the concurrency.
	scalingFillBatch   = 1000
	scalingFillClients = 8
	// emptyClaimLimit ends the claim phase when this many claims in a row
	// come back empty after every task was seen claimed.
	emptyClaimLimit = 50
	// workerErrorLimit stops a client after this many failed requests in
	// a row: the node keeps refusing, and more tries measure nothing.
	workerErrorLimit = 100
	// errorPause is how long a client waits after a failed request before
	// its next, so a refusing node is not met with a busy loop.
	errorPause = 10 * time.Millisecond
)

func benchCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "bench",
		Usage: "load-test a running node: enqueue, then claim+complete; ops/s and latency per phase",
		Flags: []ucli.Flag{
			authFlags()[0], authFlags()[1],
			&ucli.StringFlag{Name: "addr", Value: defaultAddr, EnvVars: envName("addr"), Usage: "node address; a comma-separated list spreads the connections over several nodes of a cluster"},
			&ucli.IntFlag{Name: "n", Value: 100000, Usage: "tasks"},
			&ucli.IntFlag{Name: "clients", Aliases: []string{"c"}, Value: 64, Usage: "concurrent clients"},
			&ucli.IntFlag{Name: "conns", Value: 1, Usage: "QUIC connections the clients share"},
			&ucli.IntFlag{Name: "streams", Value: wire.DefaultStreams, Usage: "QUIC streams per connection that calls spread over (streamed responses get one more)"},
			&ucli.IntFlag{Name: "size", Value: 100, Usage: "payload bytes"},
			&ucli.IntFlag{Name: "batch", Value: 1, Usage: "tasks per enqueue request"},
			&ucli.StringFlag{Name: "queue", Usage: "queue name (default: a fresh one)"},
			&ucli.StringFlag{Name: "phases", Value: "enqueue,claim", Usage: "phases to run: enqueue, claim (claim then complete: two requests per task), work (complete carrying the next claim: one request per task), worker (the Go client's Worker, a no-op handler per task; throughput only), ping (a bare round trip)"},
			&ucli.BoolFlag{Name: "json", Usage: "one JSON object per phase on stdout"},
			&ucli.BoolFlag{Name: "claim-scaling", Usage: "measure claim latency with 1e3..1e6 ready tasks"},
			&ucli.StringFlag{Name: "scaling-sizes", Value: "1000,10000,100000,1000000", Usage: "queue depths for --claim-scaling"},
			&ucli.IntFlag{Name: "scaling-claims", Value: 2000, Usage: "claims measured per depth"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write the load generator's own CPU profile to this file"},
		},
		Action: runBench,
	}
}

// phaseResult is one phase's figures; its JSON form is the --json output.
type phaseResult struct {
	Phase     string  `json:"phase"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxMs     float64 `json:"max_ms"`
	Clients   int     `json:"clients"`
	Size      int     `json:"size"`
	Depth     int     `json:"depth,omitempty"`
}

type bench struct {
	clients []*wire.Client
	c       *ucli.Context
	stderr  io.Writer
	out     *json.Encoder
	jsonOut bool
	// progress: draw a progress line on stderr while a phase runs.
	progress bool
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// permanent reports whether err is the node's answer to the request itself
// (malformed, too large, refused credentials), so that sending it again
// cannot succeed: the phase stops at the first one.
func permanent(err error) bool {
	if errors.Is(err, wire.ErrAuth) {
		return true
	}
	switch wire.CodeOf(err) {
	case wire.CodeInvalid, wire.CodeTooLarge, wire.CodeDepNotFound, wire.CodeBadFrame,
		wire.CodeFrameTooLarge, wire.CodeVersion, wire.CodeUnknownOp:
		return true
	}
	return false
}

func runBench(c *ucli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("unexpected argument %q", c.Args().First())
	}
	for _, f := range []string{"n", "clients", "conns", "streams", "batch", "scaling-claims"} {
		if c.Int(f) < 1 {
			return usagef("--%s must be at least 1", f)
		}
	}
	if c.Int("size") < 0 {
		return usagef("--size must not be negative")
	}
	if path := c.String("cpuprofile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	b := &bench{c: c, stderr: c.App.ErrWriter, out: json.NewEncoder(c.App.Writer), jsonOut: c.Bool("json")}
	// The progress line redraws itself with terminal escapes: only for a
	// person watching, never into a file, a pipe or beside --json.
	b.progress = !b.jsonOut && isTerminal(b.stderr)
	ctx := c.Context
	addrs := strings.Split(c.String("addr"), ",")
	conns := max(c.Int("conns"), len(addrs))
	tok, err := clientToken(c)
	if err != nil {
		return err
	}
	for i := range conns {
		addr := strings.TrimSpace(addrs[i%len(addrs)])
		conn, err := wire.Dial(ctx, addr, wire.ClientConfig{Streams: c.Int("streams"), Token: tok})
		if err != nil {
			return fmt.Errorf("connect to %s: %w", addr, err)
		}
		cl := wire.NewClient(conn)
		defer cl.Close()
		b.clients = append(b.clients, cl)
	}
	if c.Bool("claim-scaling") {
		return b.claimScaling(ctx)
	}
	queue := c.String("queue")
	if queue == "" {
		queue = "bench-" + randSuffix()
	}
	for _, ph := range strings.Split(c.String("phases"), ",") {
		var res phaseResult
		var err error
		switch strings.TrimSpace(ph) {
		case "enqueue":
			res, err = b.enqueuePhase(ctx, queue)
		case "claim":
			res, err = b.claimPhase(ctx, queue)
		case "ping":
			res, err = b.pingPhase(ctx)
		case "work":
			res, err = b.workPhase(ctx, queue)
		case "worker":
			res, err = b.workerPhase(ctx, queue)
		default:
			return usagef("--phases: unknown phase %q", ph)
		}
		if err != nil {
			return err
		}
		b.report(res)
	}
	return nil
}

func randSuffix() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func (b *bench) report(r phaseResult) {
	if b.jsonOut {
		_ = b.out.Encode(r)
		return
	}
	depth := ""
	if r.Depth > 0 {
		depth = fmt.Sprintf(" depth=%d", r.Depth)
	}
	if r.Phase == "worker" { // throughput only (workerPhase)
		fmt.Fprintf(b.c.App.Writer, "%-16s ops=%d %.2fs %.0f ops/s (handlers=%d size=%dB)\n", r.Phase, r.Ops, r.Seconds, r.OpsPerSec, r.Clients, r.Size)
		return
	}
	fmt.Fprintf(b.c.App.Writer, "%-16s%s ops=%d errors=%d %.2fs %.0f ops/s  p50=%.3fms p99=%.3fms p999=%.3fms max=%.3fms (clients=%d size=%dB)\n",
		r.Phase, depth, r.Ops, r.Errors, r.Seconds, r.OpsPerSec, r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs, r.Clients, r.Size)
}

// runner runs work on `clients` goroutines until it returns false, records
// each op's latency, and draws a progress line.
type runner struct {
	name  string
	total int64
	done  atomic.Int64
	errs  atomic.Int64
	mu    sync.Mutex
	hist  *hdrhistogram.Histogram
	first error
	// fatal is the first permanent error: it ended the phase.
	fatal error
}

func newRunner(name string, total int64) *runner {
	return &runner{name: name, total: total, hist: hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)}
}

// run calls op on each of n goroutines (with the goroutine index) until op
// returns more=false; op returns how many ops it did and its error. A
// client stops at ErrUnavailable, or after workerErrorLimit errors in a
// row; every client stops at the first permanent error, which run returns.
func (b *bench) run(ctx context.Context, r *runner, n int, op func(ctx context.Context, worker int) (ops int, more bool, err error)) (phaseResult, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	if b.progress {
		pwg.Go(func() { r.progress(b.stderr, start, stop) })
	}
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			h := hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)
			failed := 0 // errors in a row
			for ctx.Err() == nil {
				t0 := time.Now()
				ops, more, err := op(ctx, w)
				if err != nil {
					if ctx.Err() != nil {
						break // the phase ended under this request
					}
					r.errs.Add(1)
					failed++
					r.mu.Lock()
					if r.first == nil {
						r.first = err
					}
					if permanent(err) && r.fatal == nil {
						r.fatal = err
						cancel()
					}
					r.mu.Unlock()
					if errors.Is(err, wire.ErrUnavailable) || failed >= workerErrorLimit {
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(errorPause):
					}
				} else {
					failed = 0
					if ops > 0 {
						_ = h.RecordValue(max(time.Since(t0).Microseconds(), histMinMicros))
						r.done.Add(int64(ops))
					}
				}
				if !more {
					break
				}
			}
			r.mu.Lock()
			r.hist.Merge(h)
			r.mu.Unlock()
		})
	}
	wg.Wait()
	close(stop)
	pwg.Wait()
	secs := time.Since(start).Seconds()
	res := phaseResult{
		Phase: r.name, Ops: r.done.Load(), Errors: r.errs.Load(), Seconds: secs,
		OpsPerSec: float64(r.done.Load()) / secs,
		P50Ms:     float64(r.hist.ValueAtQuantile(50)) / 1000,
		P99Ms:     float64(r.hist.ValueAtQuantile(99)) / 1000,
		P999Ms:    float64(r.hist.ValueAtQuantile(99.9)) / 1000,
		MaxMs:     float64(r.hist.Max()) / 1000,
		Clients:   n,
	}
	if r.fatal != nil {
		return res, fmt.Errorf("%s: %w", r.name, r.fatal)
	}
	if r.errs.Load() > 0 && r.done.Load() == 0 {
		return res, fmt.Errorf("%s: every op failed: %w", r.name, r.first)
	}
	if r.first != nil {
		fmt.Fprintf(b.stderr, "%s: %d errors, first: %v\n", r.name, r.errs.Load(), r.first)
	}
	return res, nil
}

func (r *runner) progress(w io.Writer, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	last, lastT := int64(0), start
	for {
		select {
		case <-stop:
			fmt.Fprintf(w, "\r\033[K")
			return
		case now := <-t.C:
			d := r.done.Load()
			rate := float64(d-last) / now.Sub(lastT).Seconds()
			fmt.Fprintf(w, "\r\033[K%s: %d/%d (%.0f%%) %.0f ops/s errors=%d", r.name, d, r.total, 100*float64(d)/float64(max(r.total, 1)), rate, r.errs.Load())
			last, lastT = d, now
		}
	}
}

func (b *bench) client(worker int) *wire.Client { return b.clients[worker%len(b.clients)] }

func (b *bench) enqueuePhase(ctx context.Context, queue string) (phaseResult, error) {
	n, size, batch := int64(b.c.Int("n")), b.c.Int("size"), b.c.Int("batch")
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	var next atomic.Int64
	r := newRunner("enqueue", n)
	res, err := b.run(ctx, r, b.c.Int("clients"), func(ctx context.Context, w int) (int, bool, error) {
		start := next.Add(int64(batch)) - int64(batch)
		if start >= n {
			return 0, false, nil
		}
		k := int(min(int64(batch), n-start))
		req := &wire.EnqueueRequest{Tasks: make([]wire.EnqueueTask, k)}
		for i := range req.Tasks {
			req.Tasks[i] = wire.EnqueueTask{Queue: queue, Data: payload}
		}
		_, err := b.client(w).Enqueue(ctx, req)
		if err != nil {
			return 0, true, err
		}
		return k, true, nil
	})
	res.Size = size
	return res, err
}

// workPhase drains the queue the way a worker loop does with
// complete-and-claim-next: each complete carries the next claim, so a task
// costs one round trip. An op is one task completed.
func (b *bench) workPhase(ctx context.Context, queue string) (phaseResult, error) {
	n := int64(b.c.Int("n"))
	var empties atomic.Int64
	r := newRunner("work", n)
	current := make([]*wire.TaskView, b.c.Int("clients"))
	claimReq := &wire.ClaimRequest{Queue: queue, TTLMs: 60_000}
	res, err := b.run(ctx, r, b.c.Int("clients"), func(ctx context.Context, w int) (int, bool, error) {
		if r.done.Load() >= n {
			return 0, false, nil
		}
		cl := b.client(w)
		t := current[w]
		if t == nil {
			resp, err := cl.Claim(ctx, claimReq)
			if err != nil {
				return 0, true, err
			}
			if len(resp.Tasks) == 0 {
				return 0, empties.Add(1) < emptyClaimLimit, nil
			}
			current[w] = &resp.Tasks[0]
			return 0, true, nil
		}
		empties.Store(0)
		resp, err := cl.Complete(ctx, &wire.CompleteRequest{ID: t.ID, Claim: *t.Claim, Next: claimReq})
		if err != nil {
			return 0, true, err
		}
		current[w] = nil
		if len(resp.Next) > 0 {
			current[w] = &resp.Next[0]
		}
		return 1, true, nil
	})
	res.Size = b.c.Int("size")
	return res, err
}

// pingPhase sends --n pings: round trips that do no work, the transport's
// own cost.
func (b *bench) pingPhase(ctx context.Context) (phaseResult, error) {
	n := int64(b.c.Int("n"))
	var next atomic.Int64
	r := newRunner("ping", n)
	return b.run(ctx, r, b.c.Int("clients"), func(ctx context.Context, w int) (int, bool, error) {
		if next.Add(1) > n {
			return 0, false, nil
		}
		if _, err := b.client(w).Ping(ctx); err != nil {
			return 0, true, err
		}
		return 1, true, nil
	})
}

// claimPhase claims and completes tasks until the queue is drained; an op
// is one claim plus one complete.
func (b *bench) claimPhase(ctx context.Context, queue string) (phaseResult, error) {
	n := int64(b.c.Int("n"))
	var empties atomic.Int64
	r := newRunner("claim+complete", n)
	res, err := b.run(ctx, r, b.c.Int("clients"), func(ctx context.Context, w int) (int, bool, error) {
		if r.done.Load() >= n {
			return 0, false, nil
		}
		cl := b.client(w)
		resp, err := cl.Claim(ctx, &wire.ClaimRequest{Queue: queue, TTLMs: 60_000})
		if err != nil {
			return 0, true, err
		}
		if len(resp.Tasks) == 0 {
			return 0, empties.Add(1) < emptyClaimLimit, nil
		}
		empties.Store(0)
		t := &resp.Tasks[0]
		if _, err := cl.Complete(ctx, &wire.CompleteRequest{ID: t.ID, Claim: *t.Claim}); err != nil {
			return 0, true, err
		}
		return 1, true, nil
	})
	res.Size = b.c.Int("size")
	return res, err
}

// claimScaling fills a fresh queue to each depth and measures claim
// latency from one client at that depth.
func (b *bench) claimScaling(ctx context.Context) error {
	var depths []int
	for _, s := range strings.Split(b.c.String("scaling-sizes"), ",") {
		d, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || d < 1 {
			return usagef("--scaling-sizes: bad depth %q", s)
		}
		depths = append(depths, d)
	}
	claims := b.c.Int("scaling-claims")
	size := b.c.Int("size")
	payload := make([]byte, size)
	for _, depth := range depths {
		queue := fmt.Sprintf("scale-%d-%s", depth, randSuffix())
		if err := b.fill(ctx, queue, depth+claims, payload); err != nil {
			return err
		}
		r := newRunner("claim", int64(claims))
		var taken atomic.Int64
		res, err := b.run(ctx, r, 1, func(ctx context.Context, w int) (int, bool, error) {
			if taken.Add(1) > int64(claims) {
				return 0, false, nil
			}
			resp, err := b.client(w).Claim(ctx, &wire.ClaimRequest{Queue: queue, TTLMs: 600_000})
			if err != nil {
				return 0, true, err
			}
			return len(resp.Tasks), true, nil
		})
		if err != nil {
			return err
		}
		res.Depth, res.Size = depth, size
		b.report(res)
	}
	return nil
}

// fill enqueues count tasks into queue in batches.
func (b *bench) fill(ctx context.Context, queue string, count int, payload []byte) error {
	var next atomic.Int64
	r := newRunner("fill "+queue, int64(count))
	_, err := b.run(ctx, r, scalingFillClients, func(ctx context.Context, w int) (int, bool, error) {
		start := next.Add(scalingFillBatch) - scalingFillBatch
		if start >= int64(count) {
			return 0, false, nil
		}
		k := int(min(int64(scalingFillBatch), int64(count)-start))
		req := &wire.EnqueueRequest{Tasks: make([]wire.EnqueueTask, k)}
		for i := range req.Tasks {
			req.Tasks[i] = wire.EnqueueTask{Queue: queue, Data: payload}
		}
		if _, err := b.client(w).Enqueue(ctx, req); err != nil {
			return 0, true, err
		}
		return k, true, nil
	})
	return err
}
