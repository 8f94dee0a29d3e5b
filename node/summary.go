package node

import (
	"context"
	"slices"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/heads"
	"github.com/skuldd/skuldd/wire"
)

// Claim routing by summaries: the views and the rule are node/heads';
// here are the summaries sent and taken, and the claim forwarded.

// summarySendTimeout bounds the sending of one summary to one node: a few
// intervals, after which the next summary is due anyway.
const summarySendTimeout = 5 * heads.SummaryInterval

// serveSummary records a peer's summary.
func (n *Node) serveSummary(from uint64, m *wire.Summary) {
	if from == 0 || from == n.id {
		return
	}
	n.sums.Put(from, m)
}

// summaryLoop sends this node's summary to the other live nodes.
func (n *Node) summaryLoop(ctx context.Context) {
	t := time.NewTicker(heads.SummaryInterval)
	defer t.Stop()
	var last []wire.QueueHead
	var lastSent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		msg := heads.Summary(n.heads.Heads())
		if slices.Equal(msg, last) && time.Since(lastSent) < heads.SummaryHeartbeat {
			continue
		}
		last, lastSent = msg, time.Now()
		for _, p := range n.ms.Gossip().Members() {
			if p.ID == n.id || p.State != member.Alive {
				continue
			}
			go func() {
				cctx, cancel := context.WithTimeout(ctx, summarySendTimeout)
				defer cancel()
				_ = n.peers.Call(cctx, p.Addr, wire.OpSummary, &wire.Summary{Heads: msg}, nil)
			}()
		}
	}
}
