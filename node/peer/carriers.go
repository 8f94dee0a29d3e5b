package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Raft carrier limits.
const (
	// raftQueueLen is the per-destination queue of outgoing raft
	// messages; raft retransmits what is dropped when it is full.
	raftQueueLen = 4096
	// raftBatchMax bounds the messages sent in one OpRaft request.
	raftBatchMax = 256
	// raftRetryPause is how long a raft sender waits after a failed send
	// before trying the destination again (messages meanwhile are dropped
	// by raft's own flow control, not queued without bound).
	raftRetryPause = 100 * time.Millisecond
)

// RaftCarrier carries the metadata group's messages to peers by node id,
// as OpRaft batches: a queue and a sender goroutine per destination, so
// one slow or dead node never delays the others, and Send never blocks.
type RaftCarrier struct {
	ctx     context.Context // ends the senders
	pool    *Pool
	resolve func(id uint64) string // a node's address, "" if unknown
	log     *slog.Logger
	mu      sync.Mutex
	queues  map[uint64]chan []byte
	wg      sync.WaitGroup
}

// NewRaftCarrier returns a carrier over pool, finding each destination's
// address with resolve, until ctx ends.
func NewRaftCarrier(ctx context.Context, pool *Pool, resolve func(id uint64) string, log *slog.Logger) *RaftCarrier {
	return &RaftCarrier{ctx: ctx, pool: pool, resolve: resolve, log: log, queues: make(map[uint64]chan []byte)}
}

// Send queues one marshaled raft message for node to; a full queue drops
// it (raft resends what it needs). It reports false once the carrier has
// stopped.
func (c *RaftCarrier) Send(to uint64, data []byte) bool {
	q := c.queue(to)
	if q == nil {
		return false
	}
	select {
	case q <- data:
	default:
	}
	return true
}

func (c *RaftCarrier) queue(to uint64) chan []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil
	}
	q := c.queues[to]
	if q == nil {
		q = make(chan []byte, raftQueueLen)
		c.queues[to] = q
		c.wg.Go(func() { c.sender(to, q) })
	}
	return q
}

// sender delivers the queue of one destination, many messages per
// request.
func (c *RaftCarrier) sender(to uint64, q chan []byte) {
	log := c.log.With("peer", to)
	var lastErr string
	for {
		var first []byte
		select {
		case <-c.ctx.Done():
			return
		case first = <-q:
		}
		batch := [][]byte{first}
	drain:
		for len(batch) < raftBatchMax {
			select {
			case m := <-q:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		addr := c.resolve(to)
		var err error
		if addr == "" {
			err = errors.New("address unknown")
		} else {
			err = c.pool.Call(c.ctx, addr, wire.OpRaft, &wire.RaftBatch{Msgs: batch}, nil)
		}
		if err == nil {
			lastErr = ""
			continue
		}
		if c.ctx.Err() != nil {
			return
		}
		if e := err.Error(); e != lastErr {
			log.Debug("raft send failed", "addr", addr, "messages", len(batch), "err", err)
			lastErr = e
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(raftRetryPause):
		}
	}
}

// Wait waits for the senders, after the carrier's context ended.
func (c *RaftCarrier) Wait() { c.wg.Wait() }

// GossipNet carries gossip (memberlist's packets as OpGossip requests,
// its streams as raw streams): it is member.Net over a pool.
type GossipNet struct{ Pool *Pool }

// SendPacket sends one gossip packet to the node at addr.
func (g GossipNet) SendPacket(ctx context.Context, addr string, b []byte) error {
	return g.Pool.Call(ctx, addr, wire.OpGossip, &wire.GossipPacket{Data: b}, nil)
}

// OpenStream opens a gossip stream to the node at addr.
func (g GossipNet) OpenStream(ctx context.Context, addr string) (net.Conn, error) {
	c, err := g.Pool.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c.OpenRaw(ctx, wire.RawGossip)
}
