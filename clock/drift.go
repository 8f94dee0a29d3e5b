package clock

// Clock-offset estimation and drift detection (docs/design.md, "Clock").
//
// Nodes exchange wall-clock readings with their heartbeats. From each
// exchange a node gets one Sample; an Estimator keeps a small window of
// samples per peer and estimates each peer's offset by the sample with the
// smallest round trip; a Detector compares this node's clock with the
// cluster's median and says, with hysteresis, whether it is too far ahead.
//
// # Sign conventions
//
//   - A peer's offset is peer clock minus this node's clock: positive means
//     the peer is ahead of us, negative that it is behind.
//   - Drift.Ahead is this node's clock minus the cluster's median clock:
//     positive means this node is ahead. It is the negated median of
//     {0 (this node)} ∪ {peer offsets}.
//
// Example: a node whose clock is 30s ahead of its two peers sees each peer at
// offset -30s; the median of {0, -30s, -30s} is -30s, so Drift.Ahead is +30s.
// Each peer sees the node at +30s and the other peer at 0; the median of
// {0, 0, +30s} is 0, so the peers are not ahead.
//
// # Why only ahead counts
//
// A leader expires a claim at end + skew bound by its own clock. A leader
// whose clock runs ahead expires claims early, while their workers may still
// run; one behind holds claims longer, which only costs latency. So only
// Ahead can make a node drift; a node behind reports it for display.
//
// # Pure and deterministic
//
// Nothing here reads a clock: every reading, including "now", is passed in,
// so the same calls give the same answers. Wall times are compared with
// their monotonic readings stripped (Time.Round(0)), so a Sample built from
// Real or Offset clocks measures the wall clock, which is what drifts.

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Sample is one NTP-style exchange with a peer, as this node saw it.
//
// This node read its wall clock (Sent), asked the peer for its wall clock
// (Peer: one reading stands for the peer's receive and send, as if it
// answered instantly), and read its wall clock again when the answer came
// (Recv). RTT is the same round trip measured on the monotonic clock (from
// just before sending to just after receiving), which does not jump when the
// wall clock is stepped.
//
// The peer read its clock at some instant inside the round trip, so its
// offset θ = Peer - (our clock at that instant) lies in
// [Peer-Sent-RTT, Peer-Sent]. Offset returns the middle of that interval;
// the error is at most RTT/2 (plus the readings' precision), and zero when
// the two legs of the trip take equally long.
type Sample struct {
	Sent time.Time     // this node's wall clock just before sending (t0)
	Peer time.Time     // the peer's wall clock in its answer (t1)
	Recv time.Time     // this node's wall clock just after receiving (t2)
	RTT  time.Duration // monotonic round trip from Sent to Recv
}

// Offset estimates the peer's clock minus this node's clock:
// Peer - (Sent + RTT/2). It saturates instead of overflowing, so a wild
// reading from a peer gives a huge offset, not a wrapped one.
func (s Sample) Offset() time.Duration {
	return satSub(s.Peer.Round(0).Sub(s.Sent.Round(0)), s.RTT/2)
}

// Uncertainty is the most Offset can be off by: half the round trip plus
// precision, the coarsest unit of the readings (Config.Precision).
func (s Sample) Uncertainty(precision time.Duration) time.Duration {
	return satAdd(s.RTT/2, precision)
}

// check reports why s is not a measurement, or nil. It does not look at the
// peer's reading beyond zero: any value the peer sends is a valid (if
// alarming) offset.
func (s Sample) check(cfg *Config) error {
	switch {
	case s.Sent.IsZero() || s.Peer.IsZero() || s.Recv.IsZero():
		return fmt.Errorf("%w: zero time (sent %v, peer %v, recv %v)", ErrBadSample, s.Sent, s.Peer, s.Recv)
	case s.RTT < 0:
		return fmt.Errorf("%w: negative round trip %v", ErrBadSample, s.RTT)
	case s.RTT > cfg.MaxRTT:
		return fmt.Errorf("%w: round trip %v over max %v", ErrBadSample, s.RTT, cfg.MaxRTT)
	}
	// The wall clock's elapsed time must match the monotonic round trip;
	// if not, the wall clock was stepped mid-exchange and Sent and Recv
	// belong to different clocks.
	wall := s.Recv.Round(0).Sub(s.Sent.Round(0))
	if d := satSub(wall, s.RTT); d > cfg.StepTolerance || d < -cfg.StepTolerance {
		return fmt.Errorf("%w: wall clock moved %v during a %v round trip (stepped?)", ErrBadSample, wall, s.RTT)
	}
	return nil
}

// Config configures offset estimation and drift detection. DefaultConfig
// gives every default; Validate checks the fields against each other.
// Durations are wall time unless a field says otherwise.
type Config struct {
	// MaxDrift is how far this node's clock may run ahead of the cluster's
	// median before the node drifts (--max-clock-drift). It must stay well
	// under the cluster's clock skew bound (--clock-skew-bound), which is
	// what claim safety relies on. INVARIANT: > 0.
	MaxDrift time.Duration
	// ResumeFraction sets the hysteresis: a drifting node is back in bounds
	// only once its estimated lead falls below MaxDrift*ResumeFraction, so
	// a clock hovering near MaxDrift does not flap in and out of service.
	// INVARIANT: 0 < ResumeFraction < 1.
	ResumeFraction float64
	// MinPeers is how many peers with a current estimate a node needs
	// before it may declare drift. With fewer it never drifts: a lone node
	// has no cluster to be ahead of, and must keep serving. INVARIANT: >= 1.
	MinPeers int
	// Window is how many recent samples per peer the min-round-trip filter
	// chooses from. INVARIANT: 1 <= Window <= MaxWindow.
	Window int
	// StaleAfter is how long a sample stays usable, by this node's wall
	// clock; a peer with no sample younger than this is forgotten. It
	// should be several heartbeat intervals. INVARIANT: > 0.
	StaleAfter time.Duration
	// MaxRTT is the longest round trip accepted; longer ones are dropped as
	// bogus (no heartbeat waits that long). INVARIANT: > 0.
	MaxRTT time.Duration
	// Precision is the coarsest unit of the clock readings in a sample;
	// it widens every sample's uncertainty. Peers send Unix milliseconds,
	// so 1ms. INVARIANT: >= 0.
	Precision time.Duration
	// StepTolerance is how far the wall clock's elapsed time over one
	// exchange (Recv - Sent) may differ from the monotonic RTT before the
	// sample is dropped as spanning a clock step. INVARIANT: > 0.
	StepTolerance time.Duration
	// MaxPeers bounds how many peers the estimator tracks (memory is
	// MaxPeers * Window samples). INVARIANT: >= 1.
	MaxPeers int
}

// MaxWindow bounds Config.Window: the filter scans the window on every
// estimate, and more than a few dozen heartbeats adds nothing but old
// samples.
const MaxWindow = 64

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		// A fifth of the default --clock-skew-bound (10s): NTP keeps
		// healthy hosts within milliseconds, so 2s means a broken clock,
		// and it trips long before skew threatens claim safety.
		MaxDrift: 2 * time.Second,
		// Back in service at 1s: a 1s gap no slewing clock crosses back
		// and forth between two heartbeats.
		ResumeFraction: 0.5,
		// One other node is enough to compare with; in a two-node cluster
		// the median is the slower clock, so the node ahead drifts.
		MinPeers: 1,
		// Eight heartbeats: enough that one of them likely had an
		// uncongested round trip, few enough to follow a stepped clock.
		Window: 8,
		// Thirty heartbeats at a 1s interval: a peer silent that long is
		// gone or cut off and should not vote on this node's clock.
		StaleAfter: 30 * time.Second,
		// Far above any heartbeat's timeout; past this the sample is noise.
		MaxRTT: 10 * time.Second,
		// Wire carries Unix milliseconds (wire.PingResponse.Time).
		Precision: time.Millisecond,
		// Slewing moves the wall clock at most 500ppm (5ms over MaxRTT);
		// a step worth noticing is far larger. Also covers millisecond
		// truncation of Sent and Recv.
		StepTolerance: 50 * time.Millisecond,
		// Far above any skuldd cluster; bounds memory if ids go wrong.
		MaxPeers: 1024,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.MaxDrift > 0, "max drift %v must be positive", c.MaxDrift)
	check(c.ResumeFraction > 0 && c.ResumeFraction < 1, "resume fraction %v: want (0, 1)", c.ResumeFraction)
	check(c.MinPeers >= 1, "min peers %d must be at least 1", c.MinPeers)
	check(c.Window >= 1 && c.Window <= MaxWindow, "window %d: want 1..%d samples", c.Window, MaxWindow)
	check(c.StaleAfter > 0, "stale after %v must be positive", c.StaleAfter)
	check(c.MaxRTT > 0, "max rtt %v must be positive", c.MaxRTT)
	check(c.Precision >= 0, "precision %v is negative", c.Precision)
	check(c.StepTolerance > 0, "step tolerance %v must be positive", c.StepTolerance)
	check(c.MaxPeers >= 1, "max peers %d must be at least 1", c.MaxPeers)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clock config: %w", err)
	}
	return nil
}

// resumeBelow is the lead under which a drifting node is back in bounds.
func (c *Config) resumeBelow() time.Duration {
	return time.Duration(float64(c.MaxDrift) * c.ResumeFraction)
}

// satAdd returns a+b, clamped to the Duration range instead of wrapping.
func satAdd(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// satSub returns a-b, clamped to the Duration range instead of wrapping.
func satSub(a, b time.Duration) time.Duration {
	if b == math.MinInt64 {
		// -b does not exist; a - MinInt64 is at least a + MaxInt64.
		return satAdd(satAdd(a, math.MaxInt64), 1)
	}
	return satAdd(a, -b)
}

// satNeg returns -a, clamped (the negation of MinInt64 is MaxInt64).
func satNeg(a time.Duration) time.Duration { return satSub(0, a) }
