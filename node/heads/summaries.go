package heads

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/wire"
)

// Claim routing by summaries (docs/design.md, Operations: claim). Every node
// tells the others, every SummaryInterval, the best ready head of each
// queue among the partitions it leads (Summary of Index.Heads). A claim
// goes to the node whose head is best (this one when its own head is as
// good, or of the same priority and younger by at most the claim-order
// slack: ClaimHere), so one hop finds the best partition and the order
// across the cluster is priority-then-FIFO up to the slack and one
// interval of staleness, with no probing while queues are busy. A
// summary older than SummaryStale, or from a node gossip does not see
// alive, is ignored; a claim forwarded on a stale summary that finds
// nothing falls back to the local partitions and then to asking the
// other leaders in turn (node's claimElsewhere): the bounded fallback.

// Summary timing and limits.
const (
	// SummaryInterval is how often a node sends its summary when it
	// changed.
	SummaryInterval = 100 * time.Millisecond
	// SummaryHeartbeat is how often an unchanged summary is sent again.
	SummaryHeartbeat = time.Second
	// SummaryStale is the age after which a summary is ignored.
	SummaryStale = 3 * time.Second
	// maxSummaryQueues bounds the queues in one summary (the busiest
	// first would need counts; the best heads first is what routing
	// needs), and so the frame.
	maxSummaryQueues = 10000
)

// Summaries holds the other nodes' latest summaries. The zero value is
// ready to use.
type Summaries struct {
	mu    sync.Mutex
	nodes map[uint64]*nodeSummary
}

type nodeSummary struct {
	at    time.Time
	heads map[string]partition.Head
}

// Put records node's summary m, received now.
func (s *Summaries) Put(node uint64, m *wire.Summary) {
	heads := make(map[string]partition.Head, len(m.Heads))
	for _, qh := range m.Heads {
		heads[qh.Queue] = partition.Head{Priority: qh.Priority, ID: qh.ID}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[uint64]*nodeSummary{}
	}
	s.nodes[node] = &nodeSummary{at: time.Now(), heads: heads}
}

// Best returns the node with the best fresh head of queue among alive.
func (s *Summaries) Best(queue string, alive func(uint64) bool) (uint64, partition.Head, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bestNode uint64
	var bestHead partition.Head
	found := false
	for id, ns := range s.nodes {
		if time.Since(ns.at) > SummaryStale || !alive(id) {
			continue
		}
		h, ok := ns.heads[queue]
		if !ok {
			continue
		}
		if !found || h.Less(bestHead) {
			bestNode, bestHead, found = id, h, true
		}
	}
	return bestNode, bestHead, found
}

// Idle reports whether node's summary is fresh and shows no ready task in
// queue.
func (s *Summaries) Idle(node uint64, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nodes[node]
	if ns == nil || time.Since(ns.at) > SummaryStale {
		return false
	}
	_, has := ns.heads[queue]
	return !has
}

// Summary is the summary of heads (Index.Heads) a node sends: best heads
// first, then by queue name, so equal head sets give equal summaries, and
// at most maxSummaryQueues of them.
func Summary(heads map[string]partition.Head) []wire.QueueHead {
	msg := make([]wire.QueueHead, 0, len(heads))
	for q, h := range heads {
		msg = append(msg, wire.QueueHead{Queue: q, Priority: h.Priority, ID: h.ID})
	}
	slices.SortFunc(msg, func(a, b wire.QueueHead) int {
		ha, hb := partition.Head{Priority: a.Priority, ID: a.ID}, partition.Head{Priority: b.Priority, ID: b.ID}
		switch {
		case ha.Less(hb):
			return -1
		case hb.Less(ha):
			return 1
		}
		return strings.Compare(a.Queue, b.Queue)
	})
	if len(msg) > maxSummaryQueues {
		msg = msg[:maxSummaryQueues]
	}
	return msg
}

// ClaimHere reports whether a claim should take local, this node's best
// head, rather than go to the node reporting remote: local is as good, or
// of the same priority and created within slack of remote.
func ClaimHere(local, remote partition.Head, slack time.Duration) bool {
	if !remote.Less(local) {
		return true
	}
	return local.Priority == remote.Priority && local.ID.Millis()-remote.ID.Millis() <= slack.Milliseconds()
}
