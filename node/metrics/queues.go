package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Per-queue throughput and lag. The counters count what this node did:
// the enqueues it acknowledged as the coordinator, and the moves of tasks
// in the partitions it leads (claims granted, completions, failed
// attempts, deaths, cancellations, leases that ran out), so their sum
// over nodes is the cluster's. A move is counted by the leader that made
// it, once; a node that stops leading a partition keeps what it counted.

// Event is one kind of task move a queue's counters count.
type Event uint8

// The events, each a family skuldd_queue_<name>_total{queue}.
const (
	Enqueued  Event = iota // an enqueue acknowledged (not a duplicate of a key)
	Claimed                // a claim granted
	Completed              // a task completed
	Failed                 // a claim ended by a fail (retried later, or dead)
	Dead                   // a task went dead: out of attempts, or failed for good
	Cancelled              // a task cancelled
	Expired                // a claim's lease ran out before it ended
	numEvents
)

var eventNames = [numEvents]string{"enqueued", "claimed", "completed", "failed", "dead", "cancelled", "expired"}

var eventHelp = [numEvents]string{
	"Enqueues of the queue this node acknowledged as the coordinator (duplicates of a unique key not counted).",
	"Claims of the queue's tasks granted by this node as their partition's leader.",
	"The queue's tasks completed, as their partition's leader saw it.",
	"Claims of the queue's tasks ended by a fail (retried later, or dead), as their partition's leader saw it.",
	"The queue's tasks that went dead (out of attempts, or failed for good), as their partition's leader saw it.",
	"The queue's tasks cancelled, as their partition's leader saw it.",
	"Claims of the queue's tasks whose lease ran out before they ended (the leader's timer), as their partition's leader saw it.",
}

var eventDescs = func() (d [numEvents]*prometheus.Desc) {
	for e := range numEvents {
		d[e] = prometheus.NewDesc("skuldd_queue_"+eventNames[e]+"_total", eventHelp[e], []string{"queue"}, nil)
	}
	return d
}()

// queueCounters are one queue's event counts.
type queueCounters [numEvents]atomic.Uint64

// queueEvents holds every queue's counters; a queue's are made at its
// first event and kept (a counter must not go back).
type queueEvents struct{ m sync.Map } // queue -> *queueCounters

func (q *queueEvents) of(queue string) *queueCounters {
	if c, ok := q.m.Load(queue); ok {
		return c.(*queueCounters)
	}
	c, _ := q.m.LoadOrStore(queue, new(queueCounters))
	return c.(*queueCounters)
}

func (q *queueEvents) collect(ch chan<- prometheus.Metric) {
	q.m.Range(func(k, v any) bool {
		c := v.(*queueCounters)
		for e := range numEvents {
			ch <- prometheus.MustNewConstMetric(eventDescs[e], promCounter, float64(c[e].Load()), k.(string))
		}
		return true
	})
}

// Count counts one event of queue. It is cheap (a map read and an atomic
// add) and never blocks: partitions call it under their lock.
func (m *Metrics) Count(queue string, ev Event) {
	m.events.of(queue)[ev].Add(1)
}

// lagBuckets are the upper bounds, in seconds, of the enqueue-to-first-
// claim histogram: from a task claimed at once to one that waited hours.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600}

// oldestReadyDesc is the age of each queue's oldest ready task.
var oldestReadyDesc = prometheus.NewDesc("skuldd_queue_oldest_ready_seconds",
	"Age (since its enqueue) of the queue's oldest ready task in the partitions this node leads; the queue's is the max over nodes.",
	[]string{"queue"}, nil)

// collectOldest sends each queue's oldest ready age over the partitions
// this node leads.
func (c collector) collectOldest(ch chan<- prometheus.Metric) {
	oldest := map[string]int64{}
	c.src.Partitions(func(p Partition) {
		if p.Epoch() == 0 {
			return
		}
		p.OldestReady(func(q string, at int64) {
			if o, ok := oldest[q]; !ok || at < o {
				oldest[q] = at
			}
		})
	})
	now := time.Now().UnixMilli()
	for q, at := range oldest {
		ch <- prometheus.MustNewConstMetric(oldestReadyDesc, promGauge, msSeconds(max(now-at, 0)), q)
	}
}

// observeClaimed records the tasks a claim (or a completion's next claim)
// granted: for each first claim of a task, the time since its enqueue.
func (m *Metrics) observeClaimed(tasks []wire.TaskView) {
	now := time.Now().UnixMilli()
	for i := range tasks {
		t := &tasks[i]
		if t.Claim == nil || *t.Claim != 0 || t.EnqueuedAt == 0 {
			continue
		}
		m.firstClaimOf(t.Queue).Observe(msSeconds(max(now-t.EnqueuedAt, 0)))
	}
}

// firstClaimOf returns queue's series of the first-claim histogram, kept
// at hand after its first use (as cached does for the request series: a
// label lookup on every claimed task would hash under the vector's lock).
func (m *Metrics) firstClaimOf(queue string) prometheus.Observer {
	if o, ok := m.firstClaims.Load(queue); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.firstClaims.LoadOrStore(queue, m.firstClaim.WithLabelValues(queue))
	return o.(prometheus.Observer)
}

// observeEnqueued counts the enqueues a request's answer acknowledged.
func (m *Metrics) observeEnqueued(req *wire.EnqueueRequest, resp *wire.EnqueueResponse) {
	for i := range resp.Results {
		if i < len(req.Tasks) && !resp.Results[i].Duplicate {
			m.Count(req.Tasks[i].Queue, Enqueued)
		}
	}
}

// statusEvent is the event of a task's move to status at its leader, if
// that move is one the counters count.
func statusEvent(s task.Status) (Event, bool) {
	switch s {
	case task.Claimed:
		return Claimed, true
	case task.Completed:
		return Completed, true
	case task.Dead:
		return Dead, true
	case task.Cancelled:
		return Cancelled, true
	}
	return 0, false
}

// CountMove counts a task of queue moving to status at its partition's
// leader (a claim, a completion, a death, a cancellation; other moves
// are not counted).
func (m *Metrics) CountMove(queue string, to task.Status) {
	if ev, ok := statusEvent(to); ok {
		m.Count(queue, ev)
	}
}
