package pressure

import (
	"context"
	"log/slog"
	"math"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"time"
)

// CPU pressure: whether this node's goroutines wait long for a CPU, the
// sign that CPU, not the disk or the network, bounds its requests. While
// they do, and the node replicates its writes, the store holds a busy
// write-ahead log's next sync back by up to Config.WALMinSyncInterval
// (store.SetWALHold), so that more writes share each fsync and the node
// spends less CPU on syncs, where a virtual disk's fsync costs tens of
// microseconds of CPU plus interrupts and context switches.
//
// Why only then: a hold is latency for the writes it holds. A replicated
// write waits for a follower's ack as well as its leader's sync, and
// under load the round trip to the follower (2.4 ms with three nodes on
// two cores and 64 clients) outlasts the leader's sync and hold together,
// so the hold costs the write little and the CPU it saves goes to the
// requests: there a 1 ms hold raised enqueue/s by 5-15%. A node whose
// writes wait on its own sync alone (a single node, or --replicas 1)
// pays the whole hold on each write: on one node with 64 clients a 1 ms
// hold cut enqueue/s from 43k to 33k. And without contention the CPU
// saved buys nothing.
//
// The measure is the Go scheduler's own: the mean time goroutines spent
// runnable before running (runtime/metrics /sched/latencies:seconds) over
// the last pressureSample. It counts waits for the node's own Ps and,
// since it is wall time, waits for the machine's cores. Measured on two
// cores (mean wait per window): one node with 1 client about 5 µs, 4
// clients 12 µs, 16 clients 50 µs (still scaling), 64 clients 180 µs
// (both cores busy); three nodes with 64 clients 115-175 µs.

const (
	// pressureSample is the window over which the wait is measured.
	pressureSample = 100 * time.Millisecond
	// pressureOn is the mean wait at or above which holds turn on;
	// pressureOff the one below which they turn off again. The gap is
	// wide because the holds themselves relieve the CPU: three nodes
	// with 64 clients waited 115-175 µs without holds and 50-60 µs with
	// them, and an off line at 60 µs flipped the holds every few windows.
	pressureOn  = 100 * time.Microsecond
	pressureOff = 30 * time.Microsecond
	// pressureMinEvents is the fewest scheduling events a window needs to
	// say anything: an idle node's few waits are noise.
	pressureMinEvents = 100
)

// schedLatencyMetric is the runtime metric the pressure is read from.
const schedLatencyMetric = "/sched/latencies:seconds"

// Host is what the watch sees of the node.
type Host interface {
	// SetWALHold holds a busy log's next sync back by up to d (0: none).
	SetWALHold(d time.Duration)
	// ReplicatesWrites reports whether the node leads a partition with
	// followers: then its writes wait for a follower's ack as well as its
	// own sync.
	ReplicatesWrites() bool
}

// Watch measures the pressure and turns the holds on and off.
type Watch struct {
	// hold is the hold while under pressure (Config.WALMinSyncInterval;
	// 0: never hold).
	hold time.Duration
	host Host
	log  *slog.Logger
	// meanWait is the last window's mean wait, in nanoseconds.
	meanWait atomic.Int64
	// on is whether syncs are held now.
	on atomic.Bool
}

// New returns the watch of a node that holds busy syncs by up to hold
// while under pressure (0: never).
func New(hold time.Duration, host Host, log *slog.Logger) *Watch {
	return &Watch{hold: hold, host: host, log: log}
}

// State returns whether syncs are held now and the last window's mean
// scheduling wait, for /metrics.
func (w *Watch) State() (on bool, meanWait time.Duration) {
	return w.on.Load(), time.Duration(w.meanWait.Load())
}

// Run measures the wait every pressureSample and turns the store's sync
// holds on while the CPU is contended and the node replicates its writes,
// off otherwise, until ctx ends. With a zero hold there is nothing to
// turn on, and it returns at once.
func (w *Watch) Run(ctx context.Context) {
	if w.hold == 0 {
		return
	}
	sample := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		w.log.Warn("the Go runtime does not report scheduling latency; write-ahead log syncs are never held", "metric", schedLatencyMetric)
		return
	}
	// Read reuses the histogram's memory: keep copies.
	prev := copyHistogram(sample[0].Value.Float64Histogram())
	t := time.NewTicker(pressureSample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		cur := copyHistogram(sample[0].Value.Float64Histogram())
		mean, events := meanSince(prev, cur)
		prev = cur
		was := w.on.Load()
		on := underPressure(was, mean, events) && w.host.ReplicatesWrites()
		w.meanWait.Store(int64(mean))
		if on == was {
			continue
		}
		w.on.Store(on)
		if on {
			w.host.SetWALHold(w.hold)
			w.log.Info("CPU contended and writes replicated: holding busy write-ahead log syncs", "mean_wait", mean, "hold", w.hold)
		} else {
			w.host.SetWALHold(0)
			w.log.Info("write-ahead log syncs start at once again", "mean_wait", mean)
		}
	}
}

func copyHistogram(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}
}

// underPressure decides the next state from the current one and a
// window's mean wait over events scheduling events.
func underPressure(on bool, mean time.Duration, events uint64) bool {
	switch {
	case events < pressureMinEvents:
		return false
	case on:
		return mean >= pressureOff
	default:
		return mean >= pressureOn
	}
}

// meanSince returns the mean of the values cur recorded since prev (two
// reads of one cumulative histogram), and their count. Each value counts
// at its bucket's midpoint, or at its finite edge for an open bucket.
func meanSince(prev, cur *metrics.Float64Histogram) (time.Duration, uint64) {
	if prev == nil || len(prev.Counts) != len(cur.Counts) {
		prev = &metrics.Float64Histogram{Counts: make([]uint64, len(cur.Counts))}
	}
	var events uint64
	var sum float64
	for i, c := range cur.Counts {
		d := c - prev.Counts[i]
		if d == 0 {
			continue
		}
		lo, hi := cur.Buckets[i], cur.Buckets[i+1]
		var v float64
		switch {
		case math.IsInf(lo, -1) && math.IsInf(hi, 1):
			continue
		case math.IsInf(lo, -1):
			v = hi
		case math.IsInf(hi, 1):
			v = lo
		default:
			v = (lo + hi) / 2
		}
		events += d
		sum += float64(d) * v
	}
	if events == 0 {
		return 0, 0
	}
	return time.Duration(sum / float64(events) * float64(time.Second)), events
}
