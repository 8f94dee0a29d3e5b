package node

import (
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

// Heal removes every fault.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.blocked)
	clear(f.delay)
	clear(f.noRepl)
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
