package clock

import (
	"errors"
	"testing"
	"time"
)

func mustEstimator(t *testing.T, edit func(*Config)) *Estimator {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	e, err := NewEstimator(cfg)
	if err != nil {
		t.Fatalf("new estimator: %v", err)
	}
	return e
}

func mustObserve(t *testing.T, o interface{ Observe(uint64, Sample) error }, peer uint64, s Sample) {
	t.Helper()
	if err := o.Observe(peer, s); err != nil {
		t.Fatalf("observe peer %d: %v", peer, err)
	}
}

// leg is one exchange's request and answer delays.
type leg struct{ out, back time.Duration }

// Queueing delays are noisy and asymmetric; the filter must pick the
// exchange with the smallest round trip, whose error is the smallest.
// Reference: docs/design.md, "Clock" (NTP-style, using the round trip).
func TestMinRTTFilterPicksTightestSample(t *testing.T) {
	const offset = 30 * time.Second
	ms := time.Millisecond
	tests := []struct {
		name string
		legs []leg
		best int // index into legs of the sample the filter must pick
	}{
		{"one sample", []leg{{ms, 3 * ms}}, 0},
		{"tightest first", []leg{{ms, ms}, {20 * ms, ms}, {ms, 15 * ms}}, 0},
		{"tightest last", []leg{{20 * ms, ms}, {ms, 15 * ms}, {2 * ms, 1 * ms}}, 2},
		{"tightest in the middle, asymmetric", []leg{{40 * ms, 2 * ms}, {ms, 3 * ms}, {2 * ms, 30 * ms}, {9 * ms, 9 * ms}}, 1},
		{"tie goes to the newest", []leg{{ms, 3 * ms}, {3 * ms, ms}, {10 * ms, 10 * ms}}, 1},
	}
	for _, tt := range tests {
		e := mustEstimator(t, nil)
		at := base
		var samples []Sample
		for _, l := range tt.legs {
			s := exchange(at, offset, l.out, l.back)
			samples = append(samples, s)
			mustObserve(t, e, 7, s)
			at = at.Add(time.Second)
		}
		got, ok := e.Offsets(at)[7]
		if !ok {
			t.Fatalf("%s: peer 7 has no estimate", tt.name)
		}
		want := samples[tt.best]
		if got.Offset != want.Offset() || got.RTT != want.RTT || !got.At.Equal(want.Recv) {
			t.Errorf("%s: got %+v; want sample %d (offset %v, rtt %v)", tt.name, got, tt.best, want.Offset(), want.RTT)
		}
		if got.Samples != len(tt.legs) {
			t.Errorf("%s: samples %d; want %d", tt.name, got.Samples, len(tt.legs))
		}
		if err := got.Offset - offset; err > got.Uncertainty || err < -got.Uncertainty {
			t.Errorf("%s: error %v over uncertainty %v", tt.name, err, got.Uncertainty)
		}
	}
}

func TestWindowKeepsLastSamples(t *testing.T) {
	e := mustEstimator(t, func(c *Config) { c.Window = 3 })
	ms := time.Millisecond
	// The first sample is the tightest; three later ones push it out.
	legs := []leg{{ms, ms}, {5 * ms, 5 * ms}, {4 * ms, 4 * ms}, {6 * ms, 6 * ms}}
	at := base
	for _, l := range legs {
		mustObserve(t, e, 1, exchange(at, 0, l.out, l.back))
		at = at.Add(time.Second)
	}
	got := e.Offsets(at)[1]
	if got.RTT != 8*ms || got.Samples != 3 {
		t.Fatalf("got rtt %v over %d samples; want 8ms over 3", got.RTT, got.Samples)
	}
}

// When a clock is stepped, samples from before the step describe a clock
// that no longer exists; the newest must win even with a longer round trip.
func TestClockStepEvictsInconsistentSamples(t *testing.T) {
	e := mustEstimator(t, nil)
	ms := time.Millisecond
	mustObserve(t, e, 1, exchange(base, 0, ms, ms))
	mustObserve(t, e, 1, exchange(base.Add(time.Second), 0, 3*ms, 3*ms))
	// The peer's clock steps 10s ahead; this exchange is slower than both.
	mustObserve(t, e, 1, exchange(base.Add(2*time.Second), 10*time.Second, 5*ms, 5*ms))
	got := e.Offsets(base.Add(2 * time.Second))[1]
	if got.Offset != 10*time.Second || got.Samples != 1 {
		t.Fatalf("got offset %v over %d samples; want 10s over 1", got.Offset, got.Samples)
	}
	// A consistent, tighter sample joins the window and wins.
	mustObserve(t, e, 1, exchange(base.Add(3*time.Second), 10*time.Second, 2*ms, 6*ms))
	got = e.Offsets(base.Add(3 * time.Second))[1]
	if got.Samples != 2 || got.RTT != 8*ms || got.Offset != 10*time.Second-2*ms {
		t.Fatalf("got %+v; want the 8ms sample of two", got)
	}
}

func TestStalePeersForgotten(t *testing.T) {
	e := mustEstimator(t, nil)
	stale := DefaultConfig().StaleAfter
	mustObserve(t, e, 1, exchange(base, time.Second, time.Millisecond, time.Millisecond))
	mustObserve(t, e, 2, exchange(base.Add(10*time.Second), -time.Second, time.Millisecond, time.Millisecond))
	recv1 := base.Add(2 * time.Millisecond)
	tests := []struct {
		name string
		now  time.Time
		want []uint64
	}{
		// Checked in this order: forgetting is permanent.
		{"both fresh", recv1, []uint64{1, 2}},
		{"peer 1 at the limit", recv1.Add(stale), []uint64{1, 2}},
		{"peer 1 just stale", recv1.Add(stale + 1), []uint64{2}},
		{"peer 1 stays forgotten", recv1, []uint64{2}},
		// This node's clock stepped back: the sample is from the future.
		{"from the future", recv1.Add(10*time.Second - stale - 1), []uint64{}},
	}
	for _, tt := range tests {
		got := e.Offsets(tt.now)
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %v; want peers %v", tt.name, got, tt.want)
			continue
		}
		for _, p := range tt.want {
			if _, ok := got[p]; !ok {
				t.Errorf("%s: peer %d missing from %v", tt.name, p, got)
			}
		}
	}
}

func TestForget(t *testing.T) {
	e := mustEstimator(t, nil)
	mustObserve(t, e, 1, exchange(base, 0, 0, 0))
	mustObserve(t, e, 2, exchange(base, 0, 0, 0))
	e.Forget(1)
	e.Forget(99) // unknown: nothing happens
	got := e.Offsets(base)
	if _, ok := got[1]; ok || len(got) != 1 {
		t.Fatalf("after forget: got %v; want only peer 2", got)
	}
}

func TestTooManyPeers(t *testing.T) {
	e := mustEstimator(t, func(c *Config) { c.MaxPeers = 2 })
	t1, t2 := base.Add(10*time.Second), base.Add(40*time.Second)
	mustObserve(t, e, 1, exchange(base, 0, 0, 0))
	mustObserve(t, e, 2, exchange(t1, 0, 0, 0))
	err := e.Observe(3, exchange(t1, 0, 0, 0))
	if !errors.Is(err, ErrTooManyPeers) {
		t.Fatalf("third peer: got %v; want ErrTooManyPeers", err)
	}
	// Known peers still get through.
	mustObserve(t, e, 2, exchange(t2, 0, 0, 0))
	// Peer 1 is stale by t2, which makes room.
	mustObserve(t, e, 3, exchange(t2, 0, 0, 0))
	got := e.Offsets(t2)
	if _, ok := got[1]; ok || len(got) != 2 {
		t.Fatalf("got %v; want peers 2 and 3", got)
	}
}

func TestObserveRejectsWithoutChange(t *testing.T) {
	e := mustEstimator(t, nil)
	good := exchange(base, time.Second, time.Millisecond, time.Millisecond)
	mustObserve(t, e, 1, good)
	before := e.Offsets(base)[1]
	bad := good
	bad.RTT = -1
	tests := []struct {
		name string
		peer uint64
		s    Sample
	}{
		{"peer 0", 0, good},
		{"bad sample", 1, bad},
	}
	for _, tt := range tests {
		if err := e.Observe(tt.peer, tt.s); !errors.Is(err, ErrBadSample) {
			t.Errorf("%s: got %v; want ErrBadSample", tt.name, err)
		}
	}
	if got := e.Offsets(base); len(got) != 1 || got[1] != before {
		t.Fatalf("after rejects: got %v; want only %+v", got, before)
	}
}
