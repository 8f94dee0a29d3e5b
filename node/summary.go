package node

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/wire"
)

// Claim routing by summaries (DESIGN.md, Operations: claim). Every node
// tells the others, every summaryInterval, the best ready head of each
// queue among the partitions it leads. A claim goes to the node whose head
// is best (this one when its own head is as good, or of the same priority
// and younger by at most ClaimOrderSlack: a hop saved for an order that is
// FIFO to within the slack), so one hop finds the best partition and the
// order across the cluster is priority-then-FIFO up to the slack and one
// interval of staleness, with no probing while queues are busy. A
// summary older than summaryStale, or from a node gossip does not see
// alive, is ignored; a claim forwarded on a stale summary that finds
// nothing falls back to this node's partitions and then to asking the
// other leaders in turn (claimElsewhere): the bounded fallback.

// Summary timing and limits.
const (
	// summaryInterval is how often a node sends its summary when it
	// changed.
	summaryInterval = 100 * time.Millisecond
	// summaryHeartbeat is how often an unchanged summary is sent again.
	summaryHeartbeat = time.Second
	// summaryStale is the age after which a summary is ignored.
	summaryStale = 3 * time.Second
	// maxSummaryQueues bounds the queues in one summary (the busiest
	// first would need counts; the best heads first is what routing
	// needs), and so the frame.
	maxSummaryQueues = 10000
)

// summaries holds the other nodes' latest summaries.
type summaries struct {
	mu    sync.Mutex
	nodes map[uint64]*nodeSummary
}

type nodeSummary struct {
	at    time.Time
	heads map[string]partition.Head
}

func (s *summaries) put(node uint64, heads map[string]partition.Head) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[uint64]*nodeSummary{}
	}
	s.nodes[node] = &nodeSummary{at: time.Now(), heads: heads}
}

// best returns the node with the best fresh head of queue among alive.
func (s *summaries) best(queue string, alive func(uint64) bool) (uint64, partition.Head, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bestNode uint64
	var bestHead partition.Head
	found := false
	for id, ns := range s.nodes {
		if time.Since(ns.at) > summaryStale || !alive(id) {
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

// idle reports whether node's summary is fresh and shows no ready task in
// queue.
func (s *summaries) idle(node uint64, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nodes[node]
	if ns == nil || time.Since(ns.at) > summaryStale {
		return false
	}
	_, has := ns.heads[queue]
	return !has
}

// serveSummary records a peer's summary.
func (n *Node) serveSummary(from uint64, m *wire.Summary) {
	if from == 0 || from == n.id {
		return
	}
	heads := make(map[string]partition.Head, len(m.Heads))
	for _, qh := range m.Heads {
		heads[qh.Queue] = partition.Head{Priority: qh.Priority, ID: qh.ID}
	}
	n.sums.put(from, heads)
}

// summaryLoop sends this node's summary to the other live nodes.
func (n *Node) summaryLoop(ctx context.Context) {
	t := time.NewTicker(summaryInterval)
	defer t.Stop()
	var last []wire.QueueHead
	var lastSent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		heads := n.heads.heads()
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
		if slices.Equal(msg, last) && time.Since(lastSent) < summaryHeartbeat {
			continue
		}
		last, lastSent = msg, time.Now()
		for _, p := range n.member.Members() {
			if p.ID == n.id || p.State != member.Alive {
				continue
			}
			go func() {
				cctx, cancel := context.WithTimeout(ctx, summaryInterval*5)
				defer cancel()
				_ = n.peers.Call(cctx, p.Addr, wire.OpSummary, &wire.Summary{Heads: msg}, nil)
			}()
		}
	}
}

// claimHere reports whether a claim should take local, this node's best
// head, rather than go to the node reporting remote: local is as good, or
// of the same priority and created within ClaimOrderSlack of remote.
func (n *Node) claimHere(local, remote partition.Head) bool {
	if !remote.Less(local) {
		return true
	}
	return local.Priority == remote.Priority &&
		local.ID.Millis()-remote.ID.Millis() <= n.cfg.ClaimOrderSlack.Milliseconds()
}

// claimRouted forwards a claim to the node whose summary shows a better
// head than this node's own; handled is false when this node's head is
// the best known (or nothing better is known).
func (n *Node) claimRouted(ctx context.Context, req *wire.ClaimRequest, count int) (tasks []wire.TaskView, handled bool) {
	if isForwarded(ctx) {
		return nil, false
	}
	node, rh, ok := n.sums.best(req.Queue, n.gossipAlive)
	if !ok {
		return nil, false
	}
	if _, lh, lok := n.heads.best(req.Queue); lok && n.claimHere(lh, rh) {
		return nil, false
	}
	addr := n.addrOf(node)
	if addr == "" {
		return nil, false
	}
	sub := *req
	sub.WaitMs = 0
	sub.Count = count
	var r wire.ClaimResponse
	if err := n.forwardCall(ctx, addr, wire.OpClaim, &sub, &r); err != nil || len(r.Tasks) == 0 {
		return nil, false // stale: fall back
	}
	return r.Tasks, true
}
