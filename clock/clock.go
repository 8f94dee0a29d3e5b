// Package clock owns all wall-clock time in skuldd.
//
// Every other package takes time from a Clock rather than calling time.Now,
// so tests can skew a node's clock (Offset) or drive it by hand (Manual).
// Claim starts and ends, not-before times and completion times are wall-clock
// Unix milliseconds; durations measured inside one process (timeouts, latency)
// use the monotonic clock and do not come from here.
//
// It also estimates peers' clock offsets from readings exchanged with
// heartbeats (Sample, Estimator) and decides whether this node's clock is
// too far ahead of the cluster's median (Detector); see drift.go.
//
// The package imports nothing internal.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock reads wall-clock time.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Offset is a clock shifted by a fixed duration from a base clock. It backs
// the hidden --clock-offset flag used by tests to run a node with a skewed
// clock without touching the system clock.
type Offset struct {
	Base Clock
	By   time.Duration
}

// Now returns Base.Now() shifted by By.
func (o Offset) Now() time.Time { return o.Base.Now().Add(o.By) }

// Manual is a clock that moves only when told to. Safe for concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a Manual clock reading t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the manual clock's reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock forward by d (or back, if d is negative).
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}

// Set sets the clock's reading.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	m.now = t
	m.mu.Unlock()
}

// UnixMilli returns c's reading in Unix milliseconds, the unit of every
// persisted timestamp in skuldd.
func UnixMilli(c Clock) int64 { return c.Now().UnixMilli() }

// Shift is a clock shifted from a base clock by an offset that may change
// while it runs: the fault suite's test build moves a running node's
// clock with it (the /debug/clock hook). Safe for concurrent use.
type Shift struct {
	base Clock
	by   atomic.Int64 // nanoseconds
}

// NewShift returns base shifted by by.
func NewShift(base Clock, by time.Duration) *Shift {
	s := &Shift{base: base}
	s.by.Store(int64(by))
	return s
}

// Now returns the base clock's reading shifted by the current offset.
func (s *Shift) Now() time.Time { return s.base.Now().Add(time.Duration(s.by.Load())) }

// Set changes the offset.
func (s *Shift) Set(by time.Duration) { s.by.Store(int64(by)) }

// By returns the current offset.
func (s *Shift) By() time.Duration { return time.Duration(s.by.Load()) }
