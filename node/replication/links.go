package replication

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// replItem is one partition's records for one follower, and where the
// follower's answer goes.
type replItem struct {
	item wire.ReplicateItem
	// done receives the outcome, tagged with idx: nil, or the item's (or
	// first record's) error. Buffered for every item that shares it: the
	// sender never blocks on it.
	done chan replAck
	idx  int
}

// replAck is one follower's answer to one item.
type replAck struct {
	idx int
	err error
}

// links owns the connections to followers: one queue and sender per
// follower node.
type links struct {
	p     *Plane
	ctx   context.Context
	mu    sync.Mutex
	queue map[uint64]chan *replItem
	// down holds the nodes whose last request failed as a whole (not
	// answered, or not sent), with when (Unix ms): Reachable's view,
	// cleared by an answer, forgotten after unreachableFor.
	down map[uint64]int64
	// inflight holds, per node, the requests sent and not yet answered,
	// each with when it was sent (Unix ms): a node that leaves one
	// unanswered past suspectAfter is not counted on either.
	inflight map[uint64]map[uint64]int64
	nextReq  uint64
	wg       sync.WaitGroup
}

// suspectAfter is how long a replication request may go unanswered
// before Reachable stops counting its node: replication answers in
// milliseconds (a synced write), so a quarter second without one is a
// node that died or a link that went, long before the request's own
// timeout or gossip says so; an enqueue without an id placed meanwhile
// would wait on it.
const suspectAfter = 250 * time.Millisecond

// unreachableFor is how long a failed request marks its node
// unreachable for Reachable, unless an answer clears it first. It covers
// the seconds before gossip declares a node dead (member.Config's
// suspicion), after which Alive says so; past it the node is tried again.
const unreachableFor = 10 * time.Second

// setDown records the outcome of a request to node to.
func (rp *links) setDown(to uint64, down bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.down == nil {
		rp.down = map[uint64]int64{}
	}
	if down {
		rp.down[to] = rp.p.now()
	} else {
		delete(rp.down, to)
	}
}

// Reachable reports whether the last replication request to node id,
// if any, was answered: a node whose requests fail is not counted on to
// hold an enqueue's new tasks (see node's placement of id-less tasks).
//
// It is not either when a request to the node has waited for its
// answer longer than suspectAfter.
func (p *Plane) Reachable(id uint64) bool {
	p.links.mu.Lock()
	defer p.links.mu.Unlock()
	now := p.now()
	for _, sent := range p.links.inflight[id] {
		if now-sent > suspectAfter.Milliseconds() {
			return false
		}
	}
	at, ok := p.links.down[id]
	return !ok || now-at >= unreachableFor.Milliseconds()
}

// sending records a request to node to as sent; the returned func
// records its end (answered or failed).
func (rp *links) sending(to uint64) (done func()) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.inflight == nil {
		rp.inflight = map[uint64]map[uint64]int64{}
	}
	reqs := rp.inflight[to]
	if reqs == nil {
		reqs = map[uint64]int64{}
		rp.inflight[to] = reqs
	}
	rp.nextReq++
	id := rp.nextReq
	reqs[id] = rp.p.now()
	return func() {
		rp.mu.Lock()
		defer rp.mu.Unlock()
		delete(reqs, id)
	}
}

// send queues it for follower to; false when the link's queue is full or
// the node is stopping.
func (rp *links) send(to uint64, it *replItem) bool {
	rp.mu.Lock()
	if rp.ctx.Err() != nil {
		rp.mu.Unlock()
		return false
	}
	q := rp.queue[to]
	if q == nil {
		q = make(chan *replItem, replQueueLen)
		rp.queue[to] = q
		for range replSenders {
			rp.wg.Go(func() { rp.sender(to, q) })
		}
	}
	rp.mu.Unlock()
	select {
	case q <- it:
		return true
	default:
		return false
	}
}

// sender takes batches off a follower's queue and sends them.
func (rp *links) sender(to uint64, q chan *replItem) {
	for {
		var first *replItem
		select {
		case <-rp.ctx.Done():
			// Answer what is queued, so no write waits for a sender
			// that is gone.
			for {
				select {
				case it := <-q:
					it.done <- replAck{it.idx, wire.ErrShuttingDown}
				default:
					return
				}
			}
		case first = <-q:
		}
		batch := []*replItem{first}
		size := itemBytes(first)
	drain:
		for len(batch) < replBatchMax && size < replBatchBytes {
			select {
			case it := <-q:
				batch = append(batch, it)
				size += itemBytes(it)
			default:
				break drain
			}
		}
		rp.deliver(to, batch)
	}
}

func (rp *links) deliver(to uint64, batch []*replItem) {
	fail := func(err error) {
		rp.p.stats.Failed.Add(1)
		rp.setDown(to, true)
		for _, it := range batch {
			it.done <- replAck{it.idx, err}
		}
	}
	addr := rp.p.host.AddrOf(to)
	if addr == "" {
		fail(fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, to))
		return
	}
	req := &wire.ReplicateRequest{Items: make([]wire.ReplicateItem, len(batch))}
	records := 0
	for i, it := range batch {
		req.Items[i] = it.item
		records += len(it.item.Records)
	}
	st := &rp.p.stats
	st.Requests.Add(1)
	st.Items.Add(int64(len(batch)))
	st.Records.Add(int64(records))
	ctx, cancel := context.WithTimeout(rp.ctx, replTimeout)
	defer cancel()
	var resp wire.ReplicateResponse
	sent := time.Now()
	answered := rp.sending(to)
	err := rp.p.host.Peers().Call(ctx, addr, wire.OpReplicate, req, &resp)
	answered()
	st.InFlightNanos.Add(int64(time.Since(sent)))
	if err != nil {
		fail(err)
		return
	}
	if len(resp.Results) != len(batch) {
		fail(fmt.Errorf("%w: node %d answered %d results for %d items", wire.ErrUnavailable, to, len(resp.Results), len(batch)))
		return
	}
	rp.setDown(to, false)
	for i, it := range batch {
		it.done <- replAck{it.idx, resultErr(resp.Results[i])}
	}
}

// resultErr turns an item's result into an error: the item's own, else
// the first record's.
func resultErr(r wire.ReplicateResult) error {
	if r.Code != wire.CodeOK {
		return &wire.Error{Code: r.Code, Msg: r.Err}
	}
	for _, rr := range r.Records {
		if rr.Code != wire.CodeOK {
			return &wire.Error{Code: rr.Code, Msg: rr.Err}
		}
	}
	return nil
}

// Wait waits for the senders to the followers to end, after the
// context the plane was made with was cancelled.
func (p *Plane) Wait() { p.links.wg.Wait() }
