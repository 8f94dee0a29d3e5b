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
}

// NewFaults returns a Faults that injects nothing yet.
func NewFaults() *Faults {
	return &Faults{blocked: make(map[string]bool), delay: make(map[string]time.Duration)}
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

// Heal removes every fault.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.blocked)
	clear(f.delay)
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
