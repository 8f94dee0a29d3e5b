package node

import (
	"time"

	"github.com/skuldd/skuldd/node/metrics"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/wire"
)

// metricsSource is the node as its GET /metrics exposition (node/metrics)
// reads it at each scrape. Each method reads one owner's state, of
// atomics or under that owner's lock, as metrics.Source requires: when a
// file moves out of node, only its line here changes.
type metricsSource struct{ n *Node }

var _ metrics.Source = metricsSource{}

func (s metricsSource) Partitions(f func(metrics.Partition)) {
	for _, r := range s.n.parts {
		f(r)
	}
}

func (s metricsSource) Fenced() int { return s.n.heads.FencedCount() }

func (s metricsSource) Replication() *replication.Stats {
	if s.n.repl == nil {
		return nil
	}
	return s.n.repl.Stats()
}

func (s metricsSource) AAETreeBytes() int64 {
	if s.n.repl == nil {
		return 0
	}
	return s.n.repl.AAEView().TreeBytes
}

func (s metricsSource) Store() metrics.Store { return s.n.store }

func (s metricsSource) SyncHold() (bool, time.Duration) {
	if s.n.pressure == nil {
		return false, 0
	}
	return s.n.pressure.State()
}

func (s metricsSource) ClaimCacheBytes() int64 { return s.n.fresh.Used() }

func (s metricsSource) Raft() (metrics.Raft, bool) {
	g := s.n.raftGroup()
	if g == nil {
		return metrics.Raft{}, false
	}
	voters, learners := g.Config()
	return metrics.Raft{
		Leader: g.Leader() == s.n.id, Voters: len(voters), Learners: len(learners),
		Applied: g.Meta().Applied, SnapshotsInstalled: g.SnapshotsInstalled(),
	}, true
}

func (s metricsSource) Clock() *wire.ClockView { return s.n.clockView() }

func (s metricsSource) Hints() (pending, handed int64, oldest time.Duration) {
	st := s.n.HintStats()
	if st.OldestAt > 0 {
		oldest = time.Duration(max(s.n.now()-st.OldestAt, 0)) * time.Millisecond
	}
	return st.Pending, st.Handed, oldest
}

// countClaimEnd counts a claim of a task of queue that a fail ended, or
// whose lease ran out, in a partition this node leads.
func (n *Node) countClaimEnd(queue string, expired bool) {
	if expired {
		n.metrics.Count(queue, metrics.Expired)
		return
	}
	n.metrics.Count(queue, metrics.Failed)
}
