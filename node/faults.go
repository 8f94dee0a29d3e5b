package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Faults injects network faults at a node's peer layer, for tests: the
// in-process harness partitions nodes from each other and slows links
// with it (STYLE.md: the transport is a seam tests can drop, delay and
// partition). Every peer exchange of the node goes through it: raft,
// gossip, replication, handoffs and forwarded requests, in both
// directions. A nil *Faults injects nothing. Safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	blocked map[string]bool
	delay   map[string]time.Duration
	// noRepl drops only replication to an address: the follower misses
	// writes while gossip, raft and handoffs still reach it.
	noRepl map[string]bool
	// cutAfter > 0 breaks each partition transfer this node pulls once,
	// after it merged that many pages; transfers tracks each transfer
	// (by source address and partition) since.
	cutAfter  int
	transfers map[string]*TransferFault
	// frozen, while not nil, holds client requests (Freeze); Thaw closes
	// it. held counts the requests waiting on it.
	frozen chan struct{}
	held   int
}

// TransferFault is what a partition transfer did under CutTransfers.
type TransferFault struct {
	// Pages and Records count what the puller merged, over all attempts.
	Pages, Records int
	// Cut is whether the fault broke it.
	Cut bool
}

// NewFaults returns a Faults that injects nothing yet.
func NewFaults() *Faults {
	return &Faults{blocked: make(map[string]bool), delay: make(map[string]time.Duration), noRepl: make(map[string]bool)}
}

// Block drops all traffic to and from the node at addr.
func (f *Faults) Block(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked[addr] = true
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

// CutTransfers breaks every partition transfer this node pulls, once,
// after it has merged pages pages: the transfer must resume where it
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

// transferPage records a page of records that a transfer of part from
// addr merged, and breaks the transfer if CutTransfers says so.
func (f *Faults) transferPage(addr string, part uint16, records int) error {
	if f == nil {
		return nil
	}
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

// Freeze holds every HTTP client request that reaches this node until
// Thaw, as a process stopped with SIGSTOP holds the requests queued in its
// sockets: on Thaw they are served with whatever the node believes then.
// With Isolate it freezes a node whole, as far as the others can tell.
// Heal does not thaw.
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

// gate waits while the node is frozen (or until ctx ends).
func (f *Faults) gate(ctx context.Context) error {
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

// Heal removes every fault.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.blocked)
	clear(f.delay)
	clear(f.noRepl)
	f.cutAfter = 0
}

// checkRepl is check for a replication request.
func (f *Faults) checkRepl(addr string) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	drop := f.noRepl[addr]
	f.mu.Unlock()
	if drop {
		return fmt.Errorf("%w: fault injected: replication to %s is dropped", wire.ErrUnavailable, addr)
	}
	return f.check(addr)
}

// check returns an error if traffic with addr is blocked, after sleeping
// the delay set for it.
func (f *Faults) check(addr string) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	blocked, d := f.blocked[addr], f.delay[addr]
	f.mu.Unlock()
	if blocked {
		return fmt.Errorf("%w: fault injected: traffic with %s is blocked", wire.ErrUnavailable, addr)
	}
	if d > 0 {
		time.Sleep(d)
	}
	return nil
}
