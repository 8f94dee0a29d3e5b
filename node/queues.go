package node

import (
	"context"

	"github.com/skuldd/skuldd/wire"
)

// QueueGet reads a queue's settings as this node applies them
// (node/queues).
func (n *Node) QueueGet(_ context.Context, req *wire.QueueGetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	return n.queues.Get(req)
}

// QueueSet changes a queue's settings cluster-wide, through the metadata
// group, and returns them as committed.
func (n *Node) QueueSet(ctx context.Context, req *wire.QueueSetRequest) (*wire.QueueSettings, error) {
	if err := n.checkServing(); err != nil {
		return nil, err
	}
	s, err := n.queues.Set(ctx, req)
	if err == nil {
		n.log.Info("queue settings changed", "queue", req.Queue, "settings", s)
	}
	return s, err
}
