package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

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

// The labelled families collector reads.
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
var nodeScalars = []scalar[Source]{
	newScalar("skuldd_partitions_led", promGauge, "Partitions this node leads.",
		func(s Source) float64 { return float64(ledCount(s)) }),
	newScalar("skuldd_partitions_fenced", promGauge, "Partitions this node leads but grants no claims in: it cannot reach a majority of their cohort.",
		func(s Source) float64 { return float64(s.Fenced()) }),

	// Hints (node/hints).
	newScalar("skuldd_hints_pending", promGauge, "Hinted enqueues this node holds for cohorts it could not reach, not yet handed over.",
		func(s Source) float64 { p, _, _ := s.Hints(); return float64(p) }),
	newScalar("skuldd_hints_handed_total", promCounter, "Hinted enqueues this node handed to their cohort since it started.",
		func(s Source) float64 { _, h, _ := s.Hints(); return float64(h) }),
	newScalar("skuldd_hints_oldest_seconds", promGauge, "Age of the oldest hinted enqueue this node holds (0: none).",
		func(s Source) float64 { _, _, o := s.Hints(); return o.Seconds() }),

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
		func(s Source) float64 { return float64(s.AAETreeBytes()) }),

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
		func(s Source) float64 { syncs, _ := s.Store().WALSyncs(); return float64(syncs) }),
	newScalar("skuldd_wal_syncs_held_total", promCounter, "Syncs after which the next was held back (--wal-min-sync-interval) so that more writes share it: the CPU was contended and the log busy.",
		func(s Source) float64 { _, held := s.Store().WALSyncs(); return float64(held) }),
	newScalar("skuldd_wal_sync_hold_active", promGauge, "1 while this node holds busy syncs back: its CPU is contended and it replicates its writes.",
		func(s Source) float64 { on, _ := s.SyncHold(); return boolValue(on) }),
	newScalar("skuldd_sched_wait_mean_seconds", promGauge, "Mean time this node's goroutines waited for a CPU over the last tenth of a second: the measure of CPU contention (measured only while --wal-min-sync-interval is above 0).",
		func(s Source) float64 { _, wait := s.SyncHold(); return wait.Seconds() }),

	// Reads.
	newScalar("skuldd_claim_cache_bytes", promGauge, "Memory the specs of fresh ready tasks, held so that claims read no store, are charged for (--claim-cache-mb bounds it).",
		func(s Source) float64 { return float64(s.ClaimCacheBytes()) }),
	newScalar("skuldd_store_lookups_total", promCounter, "Point reads of the store (spec, payload, state, ...): each searches the memtables and the tables whose filters admit the key.",
		func(s Source) float64 { return float64(s.Store().Lookups()) }),
	newScalar("skuldd_store_scanned_total", promCounter, "Tasks that partition scans read (listings that filter by no index, garbage collection): a listing by state reads only that state's tasks, by memory.",
		func(s Source) float64 { return float64(s.Store().Scanned()) }),

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

// raftScalars are the metadata group's families, present once the group
// has started.
var raftScalars = []scalar[Raft]{
	newScalar("skuldd_raft_leader", promGauge, "1 if this node leads the metadata raft group.",
		func(r Raft) float64 { return boolValue(r.Leader) }),
	newScalar("skuldd_raft_voters", promGauge, "Voters of the metadata raft group.",
		func(r Raft) float64 { return float64(r.Voters) }),
	newScalar("skuldd_raft_learners", promGauge, "Learners of the metadata raft group.",
		func(r Raft) float64 { return float64(r.Learners) }),
	newScalar("skuldd_raft_applied_index", promGauge, "The last metadata log index this node applied.",
		func(r Raft) float64 { return float64(r.Applied) }),
	newScalar("skuldd_raft_snapshots_installed_total", promCounter, "Metadata snapshots this node received from the leader and installed, having fallen behind its compacted log.",
		func(r Raft) float64 { return float64(r.SnapshotsInstalled) }),
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
func replRead(f func(*replication.Stats) int64) func(Source) float64 {
	return func(s Source) float64 {
		st := s.Replication()
		if st == nil {
			return 0
		}
		return float64(f(st))
	}
}

// replSeconds reads a replication plane counter of nanoseconds, in
// seconds.
func replSeconds(f func(*replication.Stats) int64) func(Source) float64 {
	nanos := replRead(f)
	return func(s Source) float64 { return time.Duration(nanos(s)).Seconds() }
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

// ledCount returns how many partitions the node leads.
func ledCount(s Source) int {
	led := 0
	s.Partitions(func(p Partition) {
		if p.Epoch() != 0 {
			led++
		}
	})
	return led
}

// collector reads the node's own families from its Source at each
// scrape. The registry may call Collect from several scrapes at once,
// which Source allows.
type collector struct {
	src    Source
	events *queueEvents
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	describeScalars(ch, nodeScalars)
	describeScalars(ch, raftScalars)
	describeScalars(ch, clockScalars)
	ch <- queueTasksDesc
	ch <- leaderEpochDesc
	ch <- peerOffsetDesc
	ch <- oldestReadyDesc
	for _, d := range eventDescs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	collectScalars(ch, c.src, nodeScalars)
	c.collectQueues(ch)
	c.collectOldest(ch)
	c.events.collect(ch)
	c.src.Partitions(func(p Partition) {
		ch <- prometheus.MustNewConstMetric(leaderEpochDesc, promGauge, float64(p.Epoch()), strconv.FormatUint(uint64(p.Part()), 10))
	})
	if r, ok := c.src.Raft(); ok {
		collectScalars(ch, r, raftScalars)
	}
	if cv := c.src.Clock(); cv != nil {
		collectScalars(ch, cv, clockScalars)
		for _, p := range cv.Peers {
			ch <- prometheus.MustNewConstMetric(peerOffsetDesc, promGauge, msSeconds(p.OffsetMs), strconv.FormatUint(p.ID, 10))
		}
	}
}

// collectQueues sends the queue depths over the partitions the node
// leads, every state of every queue that has tasks.
func (c collector) collectQueues(ch chan<- prometheus.Metric) {
	depth := map[string]*[task.NumStatus]int64{}
	c.src.Partitions(func(p Partition) {
		if p.Epoch() == 0 {
			return
		}
		p.Stats(func(q string, counts [task.NumStatus]int64) {
			d := depth[q]
			if d == nil {
				d = new([task.NumStatus]int64)
				depth[q] = d
			}
			for s := range counts {
				d[s] += counts[s]
			}
		})
	})
	for q, d := range depth {
		for s := range task.NumStatus {
			ch <- prometheus.MustNewConstMetric(queueTasksDesc, promGauge, float64(d[s]), q, task.Status(s).String())
		}
	}
}
