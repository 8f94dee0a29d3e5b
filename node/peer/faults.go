package peer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/skuldd/skuldd/wire"
)

// Faults injects network faults into one node's peer traffic, for tests:
// the in-process harness and the simulation partition nodes (Block, both
// ways; Cut, one way), drop some messages (DropReplication, DropOp,
// LoseReplies, CutTransfers), delay (Delay), reorder (Reorder) and
// duplicate (Duplicate) them, and freeze a node (Freeze) with it. It wraps the node's Transport (what the node sends: Wrap) and
// its Handlers (what it receives: WrapHandlers), so every peer exchange of
// the node goes through it, raft, gossip, replication, handoffs and
// forwarded requests, and no code path checks for faults itself. Faults
// are keyed by the peer's address. A nil *Faults injects nothing. Safe for
// concurrent use.
type Faults struct {
	mu      sync.Mutex
	blocked map[string]bool
	// cut drops what this node sends to an address, one way (Cut).
	cut   map[string]bool
	delay map[string]time.Duration
	// jitter delays each request to an address by its own draw from rng
	// (Reorder); dup sends each request to an address twice (Duplicate).
	jitter map[string]time.Duration
	dup    map[string]bool
	rng    *rand.Rand
	// noRepl drops only replication to an address (OpReplicate and the
	// anti-entropy rounds): the follower misses writes while gossip, raft
	// and handoffs still reach it.
	noRepl map[string]bool
	// dropOps drops the requests of some ops to an address (DropOp).
	dropOps map[string]map[wire.Op]bool
	// lostReplies: client requests forwarded to an address arrive and are
	// served, and their answers are lost (LoseReplies).
	lostReplies map[string]bool
	// cutAfter > 0 breaks each partition transfer this node pulls once,
	// after it took that many pages; transfers tracks each transfer (by
	// source address and partition) since.
	cutAfter  int
	transfers map[string]*TransferFault
	// frozen, while not nil, holds client requests (Freeze); Thaw closes
	// it. held counts the requests waiting on it.
	frozen chan struct{}
	held   int
	// holdOps holds the requests of some ops to an address until
	// ReleaseOps closes release (HoldOp); holding counts them.
	holdOps map[string]map[wire.Op]bool
	release chan struct{}
	holding int
}

// TransferFault is what a partition transfer did under CutTransfers.
type TransferFault struct {
	// Pages and Records count what the puller took, over all attempts.
	Pages, Records int
	// Cut is whether the fault broke it.
	Cut bool
}

// NewFaults returns a Faults that injects nothing yet.
func NewFaults() *Faults {
	return &Faults{
		blocked:     make(map[string]bool),
		cut:         make(map[string]bool),
		delay:       make(map[string]time.Duration),
		jitter:      make(map[string]time.Duration),
		dup:         make(map[string]bool),
		rng:         rand.New(rand.NewPCG(0, 0)),
		noRepl:      make(map[string]bool),
		dropOps:     make(map[string]map[wire.Op]bool),
		lostReplies: make(map[string]bool),
		holdOps:     make(map[string]map[wire.Op]bool),
		release:     make(chan struct{}),
	}
}

// Block drops all traffic to and from the node at addr.
func (f *Faults) Block(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked[addr] = true
}

// Cut drops everything this node sends to the node at addr, one way: what
// addr sends this node still arrives and is answered (the answers are
// replies, not sends). Each side of a link may then believe the other
// alive or dead, as behind an asymmetric firewall rule.
func (f *Faults) Cut(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[addr] = true
}

// Reorder delays each request this node sends to the node at addr by its
// own random share of max, so requests sent one after another arrive in
// another order (each connection still answers each request once).
func (f *Faults) Reorder(addr string, max time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jitter[addr] = max
}

// Duplicate sends every request this node sends to the node at addr
// twice: the copy arrives after the original was answered, as a
// retransmission that crossed the answer would, and its own answer is
// dropped. Streams and raw connections are not duplicated.
func (f *Faults) Duplicate(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dup[addr] = true
}

// Seed seeds the draws of Reorder, so that a seeded run draws the same
// delays in the same order of requests.
func (f *Faults) Seed(seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng = rand.New(rand.NewPCG(seed, 0))
}

// Delay delays every request to the node at addr by d.
func (f *Faults) Delay(addr string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[addr] = d
}

// DropReplication drops every replication request to the node at addr.
func (f *Faults) DropReplication(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noRepl[addr] = true
}

// DropOp drops every request of op this node sends to the node at addr,
// and nothing else: a one-way cut of one kind of message.
func (f *Faults) DropOp(addr string, op wire.Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropOps[addr] == nil {
		f.dropOps[addr] = make(map[wire.Op]bool)
	}
	f.dropOps[addr][op] = true
}

// HoldOp holds every request of op this node sends to the node at addr,
// after it left the caller and before it reaches the connection, until
// ReleaseOps or the caller's context ends: a link that took a request
// and has not delivered it. Closing the node's connections does not end
// the wait; only the caller can. Heal does not release.
func (f *Faults) HoldOp(addr string, op wire.Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holdOps[addr] == nil {
		f.holdOps[addr] = make(map[wire.Op]bool)
	}
	f.holdOps[addr][op] = true
}

// ReleaseOps lets the requests HoldOp holds go on, and holds no more.
func (f *Faults) ReleaseOps() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.release)
	f.release = make(chan struct{})
	clear(f.holdOps)
}

// HeldOps returns how many requests HoldOp holds now.
func (f *Faults) HeldOps() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// LoseReplies makes the client requests this node forwards to the node at
// addr arrive and be served there, while their answers are lost: the
// forwarding node sees them fail in doubt, as behind a one-way cut.
func (f *Faults) LoseReplies(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostReplies[addr] = true
}

// CutTransfers breaks every partition transfer this node pulls, once,
// after it has taken pages pages: the transfer must resume where it
// stopped. Transfers reports what each did.
func (f *Faults) CutTransfers(pages int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAfter = pages
	f.transfers = make(map[string]*TransferFault)
}

// Transfers returns what each partition transfer pulled since
// CutTransfers, by "source address/partition".
func (f *Faults) Transfers() map[string]TransferFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]TransferFault, len(f.transfers))
	for k, t := range f.transfers {
		out[k] = *t
	}
	return out
}

// Freeze holds every client request that reaches this node (Gate) until
// Thaw, as a process stopped with SIGSTOP holds the requests queued in its
// sockets: on Thaw they are served with whatever the node believes then.
// With Block towards every peer it freezes a node whole, as far as the
// others can tell. Heal does not thaw.
func (f *Faults) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = make(chan struct{})
	}
}

// Thaw serves the requests Freeze held, all at once.
func (f *Faults) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen != nil {
		close(f.frozen)
		f.frozen = nil
	}
}

// Held returns how many client requests Freeze holds now.
func (f *Faults) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// Gate waits while the node is frozen (or until ctx ends): the node's
// client front door calls it for every request.
func (f *Faults) Gate(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	c := f.frozen
	if c == nil {
		f.mu.Unlock()
		return nil
	}
	f.held++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.held--
		f.mu.Unlock()
	}()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HealAddr removes every fault this node applies to its traffic with the
// node at addr (a block, a cut, delays, drops, duplicates, lost answers),
// and leaves the others: the simulation heals one fault while another
// lasts.
func (f *Faults) HealAddr(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocked, addr)
	delete(f.cut, addr)
	delete(f.delay, addr)
	delete(f.jitter, addr)
	delete(f.dup, addr)
	delete(f.noRepl, addr)
	delete(f.dropOps, addr)
	delete(f.lostReplies, addr)
}

// Heal removes every fault but a freeze.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.blocked)
	clear(f.cut)
	clear(f.delay)
	clear(f.jitter)
	clear(f.dup)
	clear(f.noRepl)
	clear(f.dropOps)
	clear(f.lostReplies)
	f.cutAfter = 0
}

// replicationOps are the ops DropReplication drops: shipping writes, and
// the anti-entropy rounds (a round starts with its tree exchange, so it
// fails before it fetches or pushes anything).
var replicationOps = map[wire.Op]bool{wire.OpReplicate: true, wire.OpAAENodes: true, wire.OpAAEBuckets: true}

// direction says which way a message goes, as faults tell them apart.
type direction bool

const (
	sending   direction = true
	receiving direction = false
)

// check returns an error if traffic with addr is blocked (for op, when
// op is not 0) in direction dir, after sleeping the delay set for it. A
// delay ends early, with ctx's error, when ctx does: a caller waiting on
// a slow link gives up at its deadline, as it would on a real one.
func (f *Faults) check(ctx context.Context, addr string, op wire.Op, dir direction) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	blocked, d, noRepl, dropped := f.blocked[addr], f.delay[addr], f.noRepl[addr], f.dropOps[addr][op]
	var release chan struct{}
	if f.holdOps[addr][op] && dir == sending {
		release = f.release
		f.holding++
	}
	cut := f.cut[addr] && dir == sending
	if max := f.jitter[addr]; max > 0 && dir == sending {
		d += time.Duration(f.rng.Int64N(int64(max)))
	}
	f.mu.Unlock()
	if release != nil {
		err := f.hold(ctx, release)
		if err != nil {
			return err
		}
	}
	if blocked {
		return fmt.Errorf("%w: fault injected: traffic with %s is blocked", wire.ErrUnavailable, addr)
	}
	if cut {
		return fmt.Errorf("%w: fault injected: what this node sends %s is cut", wire.ErrUnavailable, addr)
	}
	if noRepl && replicationOps[op] {
		return fmt.Errorf("%w: fault injected: replication to %s is dropped", wire.ErrUnavailable, addr)
	}
	if dropped {
		return fmt.Errorf("%w: fault injected: %v to %s is dropped", wire.ErrUnavailable, op, addr)
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// hold waits for release or ctx (HoldOp), counted in holding.
func (f *Faults) hold(ctx context.Context, release chan struct{}) error {
	defer func() {
		f.mu.Lock()
		f.holding--
		f.mu.Unlock()
	}()
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// duplicates reports whether requests to addr are sent twice.
func (f *Faults) duplicates(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dup[addr]
}

// replyLost returns an error if the answer of a client request forwarded
// to addr is to be lost. Ping is a client op too, but between nodes it is
// the drift check's clock probe, not a forwarded request.
func (f *Faults) replyLost(addr string, op wire.Op) error {
	if f == nil || op >= wire.OpRaft || op == wire.OpPing {
		return nil
	}
	f.mu.Lock()
	lost := f.lostReplies[addr]
	f.mu.Unlock()
	if lost {
		return fmt.Errorf("%w: fault injected: the answer from %s was lost", wire.ErrUnavailable, addr)
	}
	return nil
}

// transferPage records a page of a transfer of part from addr that the
// puller took, and breaks the transfer if CutTransfers says so.
func (f *Faults) transferPage(addr string, part uint16, records int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cutAfter == 0 {
		return nil
	}
	key := fmt.Sprintf("%s/%d", addr, part)
	t := f.transfers[key]
	if t == nil {
		t = &TransferFault{}
		f.transfers[key] = t
	}
	t.Pages++
	t.Records += records
	if !t.Cut && t.Pages == f.cutAfter {
		t.Cut = true
		return fmt.Errorf("%w: fault injected: transfer of partition %d from %s cut after %d pages", wire.ErrUnavailable, part, addr, t.Pages)
	}
	return nil
}

// Wrap returns tr with the faults applied to what the node sends; a nil
// f returns tr.
func (f *Faults) Wrap(tr Transport) Transport {
	if f == nil {
		return tr
	}
	return faultyTransport{tr: tr, f: f}
}

// WrapHandlers returns h with the faults applied to what the node
// receives: requests and raw streams from a blocked address are refused.
func (f *Faults) WrapHandlers(h Handlers) Handlers {
	if f == nil {
		return h
	}
	out := h
	if h.Peer != nil {
		out.Peer = wire.HandlerFunc(func(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
			if err := f.check(ctx, req.Remote.String(), 0, receiving); err != nil {
				_ = w.Error(err)
				return
			}
			h.Peer.Serve(ctx, req, w)
		})
	}
	if h.Raw != nil {
		out.Raw = func(ctx context.Context, rs wire.RawStream) {
			if f.check(ctx, rs.RemoteAddr().String(), 0, receiving) != nil {
				_ = rs.Close()
				return
			}
			h.Raw(ctx, rs)
		}
	}
	return out
}

type faultyTransport struct {
	tr Transport
	f  *Faults
}

func (t faultyTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	if err := t.f.check(ctx, addr, 0, sending); err != nil {
		return nil, err
	}
	c, err := t.tr.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return faultyConn{Conn: c, addr: addr, f: t.f}, nil
}

// faultyConn checks the faults on every use, not only at the dial: a
// link is cut while pooled connections over it live on.
type faultyConn struct {
	Conn
	addr string
	f    *Faults
}

func (c faultyConn) Call(ctx context.Context, op wire.Op, req, resp any) error {
	if err := c.f.check(ctx, c.addr, op, sending); err != nil {
		return err
	}
	if err := c.Conn.Call(ctx, op, req, resp); err != nil {
		return err
	}
	if c.f.duplicates(c.addr) {
		// The copy's answer goes nowhere: into a fresh value of the
		// answer's type, or none.
		var sink any
		if resp != nil {
			sink = reflect.New(reflect.TypeOf(resp).Elem()).Interface()
		}
		_ = c.Conn.Call(ctx, op, req, sink)
	}
	return c.f.replyLost(c.addr, op)
}

func (c faultyConn) Stream(ctx context.Context, op wire.Op, req any, each func(body cbor.RawMessage) error) error {
	if err := c.f.check(ctx, c.addr, op, sending); err != nil {
		return err
	}
	if op != wire.OpExport {
		return c.Conn.Stream(ctx, op, req, each)
	}
	var part uint16
	if r, ok := req.(*wire.ExportRequest); ok {
		part = r.Part
	}
	return c.Conn.Stream(ctx, op, req, func(body cbor.RawMessage) error {
		var pg wire.ExportPage
		if err := wire.Unmarshal(body, &pg); err != nil || len(pg.Records) == 0 {
			return each(body)
		}
		if err := each(body); err != nil {
			return err
		}
		return c.f.transferPage(c.addr, part, len(pg.Records))
	})
}

func (c faultyConn) OpenRaw(ctx context.Context, kind byte) (net.Conn, error) {
	if err := c.f.check(ctx, c.addr, 0, sending); err != nil {
		return nil, err
	}
	return c.Conn.OpenRaw(ctx, kind)
}
