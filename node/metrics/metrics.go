package metrics

import (
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skuldd/skuldd/internal/buildinfo"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Source is the node as its families see it, read at each scrape. The
// registry may collect for several scrapes at once, so every method must
// be safe to call concurrently with the node's work and with itself (a
// read of atomics, or under its owner's lock), and must not block on
// I/O.
type Source interface {
	// Partitions calls f with each partition this node holds, led or
	// not; none before the partitions are loaded.
	Partitions(f func(Partition))
	// Fenced returns how many partitions this node leads but grants no
	// claims in: it cannot reach a majority of their cohort.
	Fenced() int
	// Replication returns the replication plane's running totals; nil
	// before the plane exists.
	Replication() *replication.Stats
	// AAETreeBytes returns the memory of this node's anti-entropy trees;
	// 0 before the replication plane exists.
	AAETreeBytes() int64
	// Store returns the store's counters.
	Store() Store
	// SyncHold reports whether the store holds busy syncs back now, and
	// the goroutines' mean wait for a CPU over the last window.
	SyncHold() (on bool, meanWait time.Duration)
	// ClaimCacheBytes returns the memory charged for the specs of fresh
	// ready tasks cached for claims.
	ClaimCacheBytes() int64
	// Raft returns the metadata group's state; false before the group
	// has started.
	Raft() (Raft, bool)
	// Clock returns this node's clock against its peers'; nil while the
	// node does not watch it.
	Clock() *wire.ClockView
	// Hints returns the hinted enqueues this node holds for cohorts it
	// could not reach, those it handed over since start, and the age of
	// the oldest it holds (0: none).
	Hints() (pending, handed int64, oldest time.Duration)
}

// Partition is one partition replica as the families read it
// (*partition.Replica).
type Partition interface {
	Part() uint16
	// Epoch is the epoch at which this node leads the partition; 0: it
	// does not lead it.
	Epoch() uint64
	// Stats calls fn with each queue's task counts by state.
	Stats(fn func(queue string, counts [task.NumStatus]int64))
	// OldestReady calls fn with each queue that has ready tasks and the
	// enqueue time (Unix ms) of its oldest.
	OldestReady(fn func(queue string, at int64))
}

// Store is the store's counters (*store.Store).
type Store interface {
	// WALSyncs returns the fsyncs of the write-ahead log, and those after
	// which the next was held back.
	WALSyncs() (syncs, held uint64)
	// Lookups returns the point reads of the store.
	Lookups() uint64
	// Scanned returns the tasks partition scans read.
	Scanned() uint64
}

// Raft is the metadata group's state as this node knows it.
type Raft struct {
	// Leader: this node leads the group.
	Leader bool
	// Voters and Learners count the group's members of each kind.
	Voters, Learners int
	// Applied is the last log index this node applied.
	Applied uint64
	// SnapshotsInstalled counts the snapshots this node installed from
	// the leader, having fallen behind its compacted log.
	SnapshotsInstalled uint64
}

// Metrics is one node's registry and its exposition. It is an
// http.Handler: it serves the registry in the format the scrape asks for
// (Prometheus' text format when it asks for none).
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// okCounts and latencies cache each client op's series (cached).
	okCounts  [opCacheSize]atomic.Pointer[prometheus.Counter]
	latencies [opCacheSize]atomic.Pointer[prometheus.Observer]
	// firstClaim is the time from enqueue to first claim, by queue;
	// claimWait the long-poll wait of claims, kept out of latency.
	firstClaim  *prometheus.HistogramVec
	firstClaims sync.Map // queue -> prometheus.Observer of firstClaim
	claimWait   prometheus.Histogram
	events      queueEvents
	handler     http.Handler
}

// New returns the registry of a node read through src; log receives the
// errors of scrapes. src is read only at scrapes.
func New(src Source, log *slog.Logger) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skuldd_requests_total",
			Help: "Client requests this node coordinated, by op and outcome code.",
		}, []string{"op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "skuldd_request_duration_seconds",
			Help:    "Latency of client requests this node coordinated, by op.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
	}
	m.firstClaim = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "skuldd_queue_first_claim_seconds",
		Help:    "Time from a task's enqueue to its first claim, for the claims this node coordinated, by queue.",
		Buckets: lagBuckets,
	}, []string{"queue"})
	m.claimWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "skuldd_claim_wait_seconds",
		Help:    "How long the claims this node coordinated long-polled for work (kept out of skuldd_request_duration_seconds{op=\"claim\"}).",
		Buckets: latencyBuckets,
	})
	reg := prometheus.NewRegistry()
	// MustRegister fails only on inconsistent or duplicate descriptors,
	// all fixed in this package: a programmer's error, so it panics.
	reg.MustRegister(
		m.requests, m.latency, m.firstClaim, m.claimWait, collector{src, &m.events},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.With("component", "metrics").Handler(), slog.LevelError),
		// A collector that fails (the process collector without /proc,
		// say) costs its own families, not the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		// Counts those failures as promhttp_metric_handler_errors_total.
		Registry: reg,
	})
	return m
}

// ServeHTTP serves one scrape.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.handler.ServeHTTP(w, r)
}

// buildInfo is skuldd_build_info: 1, labelled with the binary's module
// version, its VCS revision and the Go release that built it
// (internal/buildinfo). The one collector serves every node's registry.
var buildInfo = sync.OnceValue(func() prometheus.Collector {
	bi := buildinfo.Read()
	version, revision := bi.Version, bi.Revision
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "skuldd_build_info",
		Help: "1, labelled with the version, VCS revision and Go release of this skuldd binary.",
		ConstLabels: prometheus.Labels{
			"version":   version,
			"revision":  revision,
			"goversion": bi.GoVersion,
		},
	}, func() float64 { return 1 })
})
