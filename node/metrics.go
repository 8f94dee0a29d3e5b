package node

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Metrics: GET /metrics in Prometheus' text format (version 0.0.4),
// written by hand: the few families below need no client library. Each
// node reports what it owns: its requests, the queue depths of the
// partitions it leads (summing over nodes gives the cluster's), its
// anti-entropy work, its clock against its peers', and its place in the
// metadata group and the partition registry.

// latencyBuckets are the upper bounds of the request-latency histogram,
// in seconds: durable writes take about a millisecond, long polls up to
// MaxWait.
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// opMetrics counts one op's requests by outcome and their latency.
type opMetrics struct {
	mu      sync.Mutex
	byCode  map[string]int64
	buckets []int64 // cumulative counts are computed at scrape time
	count   int64
	sum     float64
}

// requestMetrics holds opMetrics by op.
type requestMetrics struct {
	ops sync.Map // wire.Op -> *opMetrics
}

// observe records one request of op that took d and ended with err.
func (m *requestMetrics) observe(op wire.Op, d time.Duration, err error) {
	v, ok := m.ops.Load(op)
	if !ok {
		v, _ = m.ops.LoadOrStore(op, &opMetrics{byCode: map[string]int64{}, buckets: make([]int64, len(latencyBuckets))})
	}
	om := v.(*opMetrics)
	code := "ok"
	if err != nil {
		code = wire.CodeOf(err).Name()
	}
	s := d.Seconds()
	i, _ := slices.BinarySearch(latencyBuckets, s)
	om.mu.Lock()
	om.byCode[code]++
	if i < len(om.buckets) {
		om.buckets[i]++
	}
	om.count++
	om.sum += s
	om.mu.Unlock()
}

// serveMetrics writes the node's metrics.
func (n *Node) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	n.writeMetrics(&b)
	_, _ = io.WriteString(w, b.String())
}

func (n *Node) writeMetrics(b *strings.Builder) {
	family := func(name, typ, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

	// Requests.
	type opRow struct {
		op wire.Op
		m  *opMetrics
	}
	var rows []opRow
	n.reqs.ops.Range(func(k, v any) bool {
		rows = append(rows, opRow{k.(wire.Op), v.(*opMetrics)})
		return true
	})
	slices.SortFunc(rows, func(a, b opRow) int { return int(a.op) - int(b.op) })
	family("skuldd_requests_total", "counter", "Client requests this node coordinated, by op and outcome code.")
	for _, r := range rows {
		r.m.mu.Lock()
		codes := make([]string, 0, len(r.m.byCode))
		for c := range r.m.byCode {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			fmt.Fprintf(b, "skuldd_requests_total{op=%q,code=%q} %d\n", r.op.String(), c, r.m.byCode[c])
		}
		r.m.mu.Unlock()
	}
	family("skuldd_request_duration_seconds", "histogram", "Latency of client requests this node coordinated, by op.")
	for _, r := range rows {
		r.m.mu.Lock()
		cum := int64(0)
		for i, le := range latencyBuckets {
			cum += r.m.buckets[i]
			fmt.Fprintf(b, "skuldd_request_duration_seconds_bucket{op=%q,le=%q} %d\n", r.op.String(), num(le), cum)
		}
		fmt.Fprintf(b, "skuldd_request_duration_seconds_bucket{op=%q,le=\"+Inf\"} %d\n", r.op.String(), r.m.count)
		fmt.Fprintf(b, "skuldd_request_duration_seconds_sum{op=%q} %s\n", r.op.String(), num(r.m.sum))
		fmt.Fprintf(b, "skuldd_request_duration_seconds_count{op=%q} %d\n", r.op.String(), r.m.count)
		r.m.mu.Unlock()
	}

	// Queue depth, over the partitions this node leads.
	depth := map[string]*[task.NumStatus]int64{}
	led := 0
	if n.parts != nil {
		for _, r := range n.parts {
			if r.Epoch() == 0 {
				continue
			}
			led++
			r.Stats(func(q string, c [task.NumStatus]int64) {
				d := depth[q]
				if d == nil {
					d = new([task.NumStatus]int64)
					depth[q] = d
				}
				for s := range c {
					d[s] += c[s]
				}
			})
		}
	}
	family("skuldd_queue_tasks", "gauge", "Tasks by queue and state in the partitions this node leads (sum over nodes for the cluster).")
	queues := make([]string, 0, len(depth))
	for q := range depth {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	for _, q := range queues {
		for s := range task.NumStatus {
			fmt.Fprintf(b, "skuldd_queue_tasks{queue=%q,state=%q} %d\n", q, task.Status(s).String(), depth[q][s])
		}
	}

	// Partitions and the metadata group.
	family("skuldd_partitions_led", "gauge", "Partitions this node leads.")
	fmt.Fprintf(b, "skuldd_partitions_led %d\n", led)
	family("skuldd_partitions_fenced", "gauge", "Partitions this node leads but grants no claims in: it cannot reach a majority of their cohort.")
	fmt.Fprintf(b, "skuldd_partitions_fenced %d\n", n.heads.fencedCount())
	family("skuldd_partition_leader_epoch", "gauge", "The epoch at which this node leads a partition (0: it does not lead it).")
	for _, r := range n.parts {
		fmt.Fprintf(b, "skuldd_partition_leader_epoch{partition=\"%d\"} %d\n", r.Part(), r.Epoch())
	}
	if g := n.raftGroup(); g != nil {
		voters, learners := g.Config()
		isLeader := 0
		if g.Leader() == n.id {
			isLeader = 1
		}
		family("skuldd_raft_leader", "gauge", "1 if this node leads the metadata raft group.")
		fmt.Fprintf(b, "skuldd_raft_leader %d\n", isLeader)
		family("skuldd_raft_voters", "gauge", "Voters of the metadata raft group.")
		fmt.Fprintf(b, "skuldd_raft_voters %d\n", len(voters))
		family("skuldd_raft_learners", "gauge", "Learners of the metadata raft group.")
		fmt.Fprintf(b, "skuldd_raft_learners %d\n", len(learners))
		family("skuldd_raft_applied_index", "gauge", "The last metadata log index this node applied.")
		fmt.Fprintf(b, "skuldd_raft_applied_index %d\n", g.Meta().Applied)
		family("skuldd_raft_snapshots_installed_total", "counter", "Metadata snapshots this node received from the leader and installed, having fallen behind its compacted log.")
		fmt.Fprintf(b, "skuldd_raft_snapshots_installed_total %d\n", g.SnapshotsInstalled())
	}

	// Anti-entropy, replication and garbage collection.
	a := n.aaeView()
	var replReqs, replItems, replRecs, replFailed, served int64
	var inFlight, merging, syncing float64
	if rp := n.repl; rp != nil {
		replReqs, replItems, replRecs, replFailed = rp.requests.Load(), rp.items.Load(), rp.records.Load(), rp.failed.Load()
		inFlight = time.Duration(rp.inFlight.Load()).Seconds()
		served = rp.served.Load()
		merging, syncing = time.Duration(rp.mergeNanos.Load()).Seconds(), time.Duration(rp.syncNanos.Load()).Seconds()
	}
	syncs, held := n.store.WALSyncs()
	holding := int64(0)
	if n.pressure.on.Load() {
		holding = 1
	}
	for _, m := range []struct {
		name, typ, help string
		v               int64
	}{
		{"skuldd_aae_rounds_total", "counter", "Anti-entropy rounds this node ran as a partition leader.", a.Rounds},
		{"skuldd_aae_in_sync_total", "counter", "Anti-entropy rounds that found the replicas equal.", a.InSync},
		{"skuldd_aae_records_pulled_total", "counter", "Records anti-entropy fetched from followers and merged here.", a.Pulled},
		{"skuldd_aae_records_pushed_total", "counter", "Records anti-entropy sent to followers to merge.", a.Pushed},
		{"skuldd_aae_bytes_total", "counter", "Bytes of anti-entropy tree exchanges.", a.Bytes},
		{"skuldd_aae_tree_bytes", "gauge", "Memory of this node's anti-entropy trees (fixed by their shape).", a.TreeBytes},
		{"skuldd_replication_requests_total", "counter", "Replication requests this node sent to followers (each carries many writes).", replReqs},
		{"skuldd_replication_items_total", "counter", "Partition items those requests carried (one per write per follower).", replItems},
		{"skuldd_replication_records_total", "counter", "Task records those items carried.", replRecs},
		{"skuldd_replication_failed_total", "counter", "Replication requests that failed whole (unreachable follower, timeout, shutdown).", replFailed},
		{"skuldd_replica_requests_total", "counter", "Replication requests this node served as a follower.", served},
		{"skuldd_wal_syncs_total", "counter", "Fsyncs of this node's write-ahead log.", int64(syncs)},
		{"skuldd_wal_syncs_held_total", "counter", "Syncs after which the next was held back (--wal-min-sync-interval) so that more writes share it: the CPU was contended and the log busy.", int64(held)},
		{"skuldd_wal_sync_hold_active", "gauge", "1 while this node holds busy syncs back: its CPU is contended and it replicates its writes.", holding},
		{"skuldd_claim_cache_bytes", "gauge", "Memory the specs of fresh ready tasks, held so that claims read no store, are charged for (--claim-cache-mb bounds it).", n.fresh.Used()},
		{"skuldd_store_lookups_total", "counter", "Point reads of the store (spec, payload, state, ...): each searches the memtables and the tables whose filters admit the key.", int64(n.store.Lookups())},
		{"skuldd_gc_passes_total", "counter", "Garbage-collection passes this node ran over the partitions it leads.", n.gc.passes.Load()},
		{"skuldd_gc_collected_total", "counter", "Tasks this node garbage-collected as a partition leader.", n.gc.collected.Load()},
		{"skuldd_gc_held_total", "counter", "Candidates kept because their dependency component had an open, recent or changed task.", n.gc.held.Load()},
		{"skuldd_gc_tombstones_expired_total", "counter", "Tombstones dropped after the tombstone horizon.", n.gc.expired.Load()},
	} {
		family(m.name, m.typ, m.help)
		fmt.Fprintf(b, "%s %d\n", m.name, m.v)
	}
	// Where replication's time goes: over the request counts above, the
	// mean round trip a leader sees, and a follower's mean merge and sync
	// wait (a round trip much longer than the two is time in transit and
	// in run queues); and the CPU contention that holds syncs.
	for _, m := range []struct {
		name, typ, help string
		v               float64
	}{
		{"skuldd_replication_seconds_total", "counter", "Time replication requests this node sent spent waiting for the follower's answer.", inFlight},
		{"skuldd_replica_merge_seconds_total", "counter", "Time this node, as a follower, spent merging replication requests' records.", merging},
		{"skuldd_replica_sync_wait_seconds_total", "counter", "Time this node, as a follower, spent waiting for merged records to be durable before answering.", syncing},
		{"skuldd_sched_wait_mean_seconds", "gauge", "Mean time this node's goroutines waited for a CPU over the last tenth of a second: the measure of CPU contention (measured only while --wal-min-sync-interval is above 0).", time.Duration(n.pressure.meanWait.Load()).Seconds()},
	} {
		family(m.name, m.typ, m.help)
		fmt.Fprintf(b, "%s %s\n", m.name, num(m.v))
	}

	// Clock.
	if cv := n.clockView(); cv != nil {
		drifting := 0
		if cv.Drifting {
			drifting = 1
		}
		family("skuldd_clock_ahead_seconds", "gauge", "How far this node's clock is ahead of the cluster's median (negative: behind).")
		fmt.Fprintf(b, "skuldd_clock_ahead_seconds %s\n", num(float64(cv.AheadMs)/1000))
		family("skuldd_clock_drifting", "gauge", "1 while this node's clock is ahead by more than --max-clock-drift.")
		fmt.Fprintf(b, "skuldd_clock_drifting %d\n", drifting)
		family("skuldd_clock_peer_offset_seconds", "gauge", "Each peer's estimated clock offset (peer minus this node).")
		slices.SortFunc(cv.Peers, func(x, y wire.PeerClock) int { return cmp.Compare(x.ID, y.ID) })
		for _, p := range cv.Peers {
			fmt.Fprintf(b, "skuldd_clock_peer_offset_seconds{peer=\"%d\"} %s\n", p.ID, num(float64(p.OffsetMs)/1000))
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
	n.reqs.observe(op, time.Since(start), err)
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
