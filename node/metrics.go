package node

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Metrics: GET /metrics through prometheus/client_golang, from a registry
// of the node's own (never the global one: a test process runs several
// nodes, and each reports only itself). Each node reports what it owns:
// its requests, the queue depths of the partitions it leads (summing over
// nodes gives the cluster's), its anti-entropy, replication, log and
// garbage-collection work, its clock against its peers', and its place in
// the metadata group and the partition registry; plus the Go runtime's
// and the process's families and skuldd_build_info.
//
// Only the request families are kept by the registry. Everything else
// the node already counts or knows, so nodeCollector reads it at scrape
// time: no goroutine copies values into gauges, and a scrape sees the
// state of that moment.

// latencyBuckets are the upper bounds of the request-latency histogram,
// in seconds: durable writes take about a millisecond, long polls up to
// MaxWait.
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// codeOK is the code label of a request that succeeded.
const codeOK = "ok"

// requestMetrics is the node's metrics registry (Node.reqs) with the
// request families it keeps. The zero value is ready: the first request
// or scrape builds the registry, since its collector reads the node, and
// the node's fields are set before its servers take requests.
type requestMetrics struct {
	once     sync.Once
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	handler  http.Handler
}

// of returns m built for node n.
func (m *requestMetrics) of(n *Node) *requestMetrics {
	m.once.Do(func() { m.build(n) })
	return m
}

func (m *requestMetrics) build(n *Node) {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "skuldd_requests_total",
		Help: "Client requests this node coordinated, by op and outcome code.",
	}, []string{"op", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "skuldd_request_duration_seconds",
		Help:    "Latency of client requests this node coordinated, by op.",
		Buckets: latencyBuckets,
	}, []string{"op"})
	reg := prometheus.NewRegistry()
	// MustRegister fails only on inconsistent or duplicate descriptors,
	// all fixed in this file: a programmer's error, so it panics.
	reg.MustRegister(
		m.requests, m.latency, nodeCollector{n},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(n.log.With("component", "metrics").Handler(), slog.LevelError),
		// A collector that fails (the process collector without /proc,
		// say) costs its own families, not the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		// Counts those failures as promhttp_metric_handler_errors_total.
		Registry: reg,
	})
}

// observe records one request of op that took d and ended with err.
func (m *requestMetrics) observe(op wire.Op, d time.Duration, err error) {
	code := codeOK
	if err != nil {
		code = wire.CodeOf(err).Name()
	}
	name := op.String()
	m.requests.WithLabelValues(name, code).Inc()
	m.latency.WithLabelValues(name).Observe(d.Seconds())
}

// serveMetrics serves the node's metrics.
func (n *Node) serveMetrics(w http.ResponseWriter, r *http.Request) {
	n.reqs.of(n).handler.ServeHTTP(w, r)
}

// buildUnknown labels what a build does not record: a test binary, or
// one built with -buildvcs=false or in a git worktree, has no VCS
// revision.
const buildUnknown = "unknown"

// buildInfo is skuldd_build_info: 1, labelled with the binary's module
// version (Go stamps it from the VCS since 1.24), its VCS revision and
// the Go release that built it. It is read once, as it cannot change,
// and the one collector serves every node's registry.
var buildInfo = sync.OnceValue(func() prometheus.Collector {
	version, revision := buildUnknown, buildUnknown
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "skuldd_build_info",
		Help: "1, labelled with the version, VCS revision and Go release of this skuldd binary.",
		ConstLabels: prometheus.Labels{
			"version":   version,
			"revision":  revision,
			"goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
})

// scalar is an unlabelled family whose value is read from S at scrape
// time.
type scalar[S any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	read func(S) float64
}

func newScalar[S any](name string, typ prometheus.ValueType, help string, read func(S) float64) scalar[S] {
	return scalar[S]{prometheus.NewDesc(name, help, nil, nil), typ, read}
}

func describeScalars[S any](ch chan<- *prometheus.Desc, ss []scalar[S]) {
	for _, s := range ss {
		ch <- s.desc
	}
}

func collectScalars[S any](ch chan<- prometheus.Metric, src S, ss []scalar[S]) {
	for _, s := range ss {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.read(src))
	}
}

// Shorter names for the two value types of the node's own families.
const (
	promGauge   = prometheus.GaugeValue
	promCounter = prometheus.CounterValue
)

// The labelled families nodeCollector reads.
var (
	queueTasksDesc = prometheus.NewDesc("skuldd_queue_tasks",
		"Tasks by queue and state in the partitions this node leads (sum over nodes for the cluster).",
		[]string{"queue", "state"}, nil)
	leaderEpochDesc = prometheus.NewDesc("skuldd_partition_leader_epoch",
		"The epoch at which this node leads a partition (0: it does not lead it).",
		[]string{"partition"}, nil)
	peerOffsetDesc = prometheus.NewDesc("skuldd_clock_peer_offset_seconds",
		"Each peer's estimated clock offset (peer minus this node).",
		[]string{"peer"}, nil)
)

// nodeScalars are the node's unlabelled families, always present.
var nodeScalars = []scalar[*Node]{
	newScalar("skuldd_partitions_led", promGauge, "Partitions this node leads.",
		func(n *Node) float64 { return float64(n.ledCount()) }),
	newScalar("skuldd_partitions_fenced", promGauge, "Partitions this node leads but grants no claims in: it cannot reach a majority of their cohort.",
		func(n *Node) float64 { return float64(n.heads.FencedCount()) }),

	// Anti-entropy.
	newScalar("skuldd_aae_rounds_total", promCounter, "Anti-entropy rounds this node ran as a partition leader.",
		replRead(func(st *replication.Stats) int64 { return st.AAERounds.Load() })),
	newScalar("skuldd_aae_in_sync_total", promCounter, "Anti-entropy rounds that found the replicas equal.",
		replRead(func(st *replication.Stats) int64 { return st.AAEInSync.Load() })),
	newScalar("skuldd_aae_records_pulled_total", promCounter, "Records anti-entropy fetched from followers and merged here.",
		replRead(func(st *replication.Stats) int64 { return st.AAEPulled.Load() })),
	newScalar("skuldd_aae_records_pushed_total", promCounter, "Records anti-entropy sent to followers to merge.",
		replRead(func(st *replication.Stats) int64 { return st.AAEPushed.Load() })),
	newScalar("skuldd_aae_bytes_total", promCounter, "Bytes of anti-entropy tree exchanges.",
		replRead(func(st *replication.Stats) int64 { return st.AAEBytes.Load() })),
	newScalar("skuldd_aae_tree_bytes", promGauge, "Memory of this node's anti-entropy trees (fixed by their shape).",
		func(n *Node) float64 {
			if n.repl == nil {
				return 0
			}
			return float64(n.repl.AAEView().TreeBytes)
		}),

	// Replication, as a leader and as a follower. Over the request
	// counts, the seconds give the mean round trip a leader sees and a
	// follower's mean merge and sync wait: a round trip much longer than
	// the two is time in transit and in run queues.
	newScalar("skuldd_replication_requests_total", promCounter, "Replication requests this node sent to followers (each carries many writes).",
		replRead(func(st *replication.Stats) int64 { return st.Requests.Load() })),
	newScalar("skuldd_replication_items_total", promCounter, "Partition items those requests carried (one per write per follower).",
		replRead(func(st *replication.Stats) int64 { return st.Items.Load() })),
	newScalar("skuldd_replication_records_total", promCounter, "Task records those items carried.",
		replRead(func(st *replication.Stats) int64 { return st.Records.Load() })),
	newScalar("skuldd_replication_failed_total", promCounter, "Replication requests that failed whole (unreachable follower, timeout, shutdown).",
		replRead(func(st *replication.Stats) int64 { return st.Failed.Load() })),
	newScalar("skuldd_replica_requests_total", promCounter, "Replication requests this node served as a follower.",
		replRead(func(st *replication.Stats) int64 { return st.Served.Load() })),
	newScalar("skuldd_replication_seconds_total", promCounter, "Time replication requests this node sent spent waiting for the follower's answer.",
		replSeconds(func(st *replication.Stats) int64 { return st.InFlightNanos.Load() })),
	newScalar("skuldd_replica_merge_seconds_total", promCounter, "Time this node, as a follower, spent merging replication requests' records.",
		replSeconds(func(st *replication.Stats) int64 { return st.MergeNanos.Load() })),
	newScalar("skuldd_replica_sync_wait_seconds_total", promCounter, "Time this node, as a follower, spent waiting for merged records to be durable before answering.",
		replSeconds(func(st *replication.Stats) int64 { return st.SyncNanos.Load() })),

	// The log's syncs, and the CPU contention that holds them.
	newScalar("skuldd_wal_syncs_total", promCounter, "Fsyncs of this node's write-ahead log.",
		func(n *Node) float64 { syncs, _ := n.store.WALSyncs(); return float64(syncs) }),
	newScalar("skuldd_wal_syncs_held_total", promCounter, "Syncs after which the next was held back (--wal-min-sync-interval) so that more writes share it: the CPU was contended and the log busy.",
		func(n *Node) float64 { _, held := n.store.WALSyncs(); return float64(held) }),
	newScalar("skuldd_wal_sync_hold_active", promGauge, "1 while this node holds busy syncs back: its CPU is contended and it replicates its writes.",
		func(n *Node) float64 { return boolValue(n.pressure.on.Load()) }),
	newScalar("skuldd_sched_wait_mean_seconds", promGauge, "Mean time this node's goroutines waited for a CPU over the last tenth of a second: the measure of CPU contention (measured only while --wal-min-sync-interval is above 0).",
		func(n *Node) float64 { return time.Duration(n.pressure.meanWait.Load()).Seconds() }),

	// Reads.
	newScalar("skuldd_claim_cache_bytes", promGauge, "Memory the specs of fresh ready tasks, held so that claims read no store, are charged for (--claim-cache-mb bounds it).",
		func(n *Node) float64 { return float64(n.fresh.Used()) }),
	newScalar("skuldd_store_lookups_total", promCounter, "Point reads of the store (spec, payload, state, ...): each searches the memtables and the tables whose filters admit the key.",
		func(n *Node) float64 { return float64(n.store.Lookups()) }),

	// Garbage collection.
	newScalar("skuldd_gc_passes_total", promCounter, "Garbage-collection passes this node ran over the partitions it leads.",
		replRead(func(st *replication.Stats) int64 { return st.GCPasses.Load() })),
	newScalar("skuldd_gc_collected_total", promCounter, "Tasks this node garbage-collected as a partition leader.",
		replRead(func(st *replication.Stats) int64 { return st.GCCollected.Load() })),
	newScalar("skuldd_gc_held_total", promCounter, "Candidates kept because their dependency component had an open, recent or changed task.",
		replRead(func(st *replication.Stats) int64 { return st.GCHeld.Load() })),
	newScalar("skuldd_gc_tombstones_expired_total", promCounter, "Tombstones dropped after the tombstone horizon.",
		replRead(func(st *replication.Stats) int64 { return st.GCExpired.Load() })),
}

// raftView is what the raft families read: the metadata group, once it
// has started, and this node's id.
type raftView struct {
	g    *raftgroup.Group
	self uint64
}

// raftScalars are the metadata group's families, present once the group
// has started.
var raftScalars = []scalar[raftView]{
	newScalar("skuldd_raft_leader", promGauge, "1 if this node leads the metadata raft group.",
		func(v raftView) float64 { return boolValue(v.g.Leader() == v.self) }),
	newScalar("skuldd_raft_voters", promGauge, "Voters of the metadata raft group.",
		func(v raftView) float64 { voters, _ := v.g.Config(); return float64(len(voters)) }),
	newScalar("skuldd_raft_learners", promGauge, "Learners of the metadata raft group.",
		func(v raftView) float64 { _, learners := v.g.Config(); return float64(len(learners)) }),
	newScalar("skuldd_raft_applied_index", promGauge, "The last metadata log index this node applied.",
		func(v raftView) float64 { return float64(v.g.Meta().Applied) }),
	newScalar("skuldd_raft_snapshots_installed_total", promCounter, "Metadata snapshots this node received from the leader and installed, having fallen behind its compacted log.",
		func(v raftView) float64 { return float64(v.g.SnapshotsInstalled()) }),
}

// clockScalars are the clock families, present while the node watches
// its clock against its peers'.
var clockScalars = []scalar[*wire.ClockView]{
	newScalar("skuldd_clock_ahead_seconds", promGauge, "How far this node's clock is ahead of the cluster's median (negative: behind).",
		func(cv *wire.ClockView) float64 { return msSeconds(cv.AheadMs) }),
	newScalar("skuldd_clock_drifting", promGauge, "1 while this node's clock is ahead by more than --max-clock-drift.",
		func(cv *wire.ClockView) float64 { return boolValue(cv.Drifting) }),
}

// replRead reads a replication plane counter; 0 before the plane exists.
func replRead(f func(*replication.Stats) int64) func(*Node) float64 {
	return func(n *Node) float64 {
		if n.repl == nil {
			return 0
		}
		return float64(f(n.repl.Stats()))
	}
}

// replSeconds reads a replication plane counter of nanoseconds, in
// seconds.
func replSeconds(f func(*replication.Stats) int64) func(*Node) float64 {
	nanos := replRead(f)
	return func(n *Node) float64 { return time.Duration(nanos(n)).Seconds() }
}

// boolValue writes a flag as Prometheus does: 1 for true, 0 for false.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// msSeconds converts the views' milliseconds to Prometheus' seconds.
func msSeconds(ms int64) float64 { return (time.Duration(ms) * time.Millisecond).Seconds() }

// ledCount returns how many partitions this node leads.
func (n *Node) ledCount() int {
	led := 0
	for _, r := range n.parts {
		if r.Epoch() != 0 {
			led++
		}
	}
	return led
}

// nodeCollector reads a node's families from its state at each scrape.
// The registry may call Collect from several scrapes at once; every read
// below is of atomics or takes its owner's lock.
type nodeCollector struct{ n *Node }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	describeScalars(ch, nodeScalars)
	describeScalars(ch, raftScalars)
	describeScalars(ch, clockScalars)
	ch <- queueTasksDesc
	ch <- leaderEpochDesc
	ch <- peerOffsetDesc
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	collectScalars(ch, n, nodeScalars)
	c.collectQueues(ch)
	for _, r := range n.parts {
		ch <- prometheus.MustNewConstMetric(leaderEpochDesc, promGauge, float64(r.Epoch()), strconv.FormatUint(uint64(r.Part()), 10))
	}
	if g := n.raftGroup(); g != nil {
		collectScalars(ch, raftView{g, n.id}, raftScalars)
	}
	if cv := n.clockView(); cv != nil {
		collectScalars(ch, cv, clockScalars)
		for _, p := range cv.Peers {
			ch <- prometheus.MustNewConstMetric(peerOffsetDesc, promGauge, msSeconds(p.OffsetMs), strconv.FormatUint(p.ID, 10))
		}
	}
}

// collectQueues sends the queue depths over the partitions this node
// leads, every state of every queue that has tasks.
func (c nodeCollector) collectQueues(ch chan<- prometheus.Metric) {
	depth := map[string]*[task.NumStatus]int64{}
	for _, r := range c.n.parts {
		if r.Epoch() == 0 {
			continue
		}
		r.Stats(func(q string, counts [task.NumStatus]int64) {
			d := depth[q]
			if d == nil {
				d = new([task.NumStatus]int64)
				depth[q] = d
			}
			for s := range counts {
				d[s] += counts[s]
			}
		})
	}
	for q, d := range depth {
		for s := range task.NumStatus {
			ch <- prometheus.MustNewConstMetric(queueTasksDesc, promGauge, float64(d[s]), q, task.Status(s).String())
		}
	}
}

// metered is the client API with every request counted and timed.
type metered struct {
	s wire.Service
	n *Node
}

func meter[T any](n *Node, op wire.Op, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	n.reqs.of(n).observe(op, time.Since(start), err)
	return v, err
}

func (m metered) Ping(ctx context.Context) (*wire.PingResponse, error) {
	return meter(m.n, wire.OpPing, func() (*wire.PingResponse, error) { return m.s.Ping(ctx) })
}

func (m metered) Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	return meter(m.n, wire.OpEnqueue, func() (*wire.EnqueueResponse, error) { return m.s.Enqueue(ctx, req) })
}

func (m metered) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return meter(m.n, wire.OpClaim, func() (*wire.ClaimResponse, error) { return m.s.Claim(ctx, req) })
}

func (m metered) Renew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	return meter(m.n, wire.OpRenew, func() (*wire.RenewResponse, error) { return m.s.Renew(ctx, req) })
}

func (m metered) Update(ctx context.Context, req *wire.UpdateRequest) (*wire.Ack, error) {
	return meter(m.n, wire.OpUpdate, func() (*wire.Ack, error) { return m.s.Update(ctx, req) })
}

func (m metered) Complete(ctx context.Context, req *wire.CompleteRequest) (*wire.CompleteResponse, error) {
	return meter(m.n, wire.OpComplete, func() (*wire.CompleteResponse, error) { return m.s.Complete(ctx, req) })
}

func (m metered) Fail(ctx context.Context, req *wire.FailRequest) (*wire.Ack, error) {
	return meter(m.n, wire.OpFail, func() (*wire.Ack, error) { return m.s.Fail(ctx, req) })
}

func (m metered) Snooze(ctx context.Context, req *wire.SnoozeRequest) (*wire.Ack, error) {
	return meter(m.n, wire.OpSnooze, func() (*wire.Ack, error) { return m.s.Snooze(ctx, req) })
}

func (m metered) Requeue(ctx context.Context, req *wire.RequeueRequest) (*wire.Ack, error) {
	return meter(m.n, wire.OpRequeue, func() (*wire.Ack, error) { return m.s.Requeue(ctx, req) })
}

func (m metered) Get(ctx context.Context, req *wire.GetRequest) (*wire.TaskView, error) {
	return meter(m.n, wire.OpGet, func() (*wire.TaskView, error) { return m.s.Get(ctx, req) })
}

func (m metered) List(ctx context.Context, req *wire.ListRequest, emit func(*wire.ListPage) error) error {
	_, err := meter(m.n, wire.OpList, func() (struct{}, error) { return struct{}{}, m.s.List(ctx, req, emit) })
	return err
}

func (m metered) Count(ctx context.Context, req *wire.CountRequest) (*wire.CountResponse, error) {
	return meter(m.n, wire.OpCount, func() (*wire.CountResponse, error) { return m.s.Count(ctx, req) })
}

func (m metered) Queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	return meter(m.n, wire.OpQueues, func() (*wire.QueuesResponse, error) { return m.s.Queues(ctx, req) })
}

func (m metered) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return meter(m.n, wire.OpLeave, func() (*wire.LeaveResponse, error) { return m.s.Leave(ctx) })
}

func (m metered) Cluster(ctx context.Context) (*wire.ClusterResponse, error) {
	return meter(m.n, wire.OpCluster, func() (*wire.ClusterResponse, error) { return m.s.Cluster(ctx) })
}

func (m metered) GC(ctx context.Context, req *wire.GCRequest) (*wire.GCResponse, error) {
	return meter(m.n, wire.OpGC, func() (*wire.GCResponse, error) { return m.s.GC(ctx, req) })
}

var _ wire.Service = metered{}
