package clock

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// base is an arbitrary wall-clock reading every test counts from.
var base = time.UnixMilli(1_700_000_000_000)

// exchange is the Sample a node sees when it sends at sent (its clock), the
// peer's clock is offset ahead of its own, the request takes out and the
// answer takes back.
func exchange(sent time.Time, offset, out, back time.Duration) Sample {
	return Sample{
		Sent: sent,
		Peer: sent.Add(out).Add(offset),
		Recv: sent.Add(out + back),
		RTT:  out + back,
	}
}

func TestSampleOffsetSymmetricIsExact(t *testing.T) {
	for _, offset := range []time.Duration{0, time.Millisecond, -time.Millisecond, 30 * time.Second, -30 * time.Second, 1234567 * time.Microsecond} {
		for _, leg := range []time.Duration{0, 50 * time.Microsecond, 3 * time.Millisecond, 2 * time.Second} {
			s := exchange(base, offset, leg, leg)
			if got := s.Offset(); got != offset {
				t.Errorf("offset %v, legs %v: got %v; want %v", offset, leg, got, offset)
			}
		}
	}
}

func TestSampleOffsetAsymmetricWithinUncertainty(t *testing.T) {
	tests := []struct {
		out, back time.Duration
	}{
		{time.Millisecond, 9 * time.Millisecond},
		{9 * time.Millisecond, time.Millisecond},
		{0, 40 * time.Millisecond},
		{40 * time.Millisecond, 0},
	}
	const offset = -7 * time.Second
	for _, tt := range tests {
		s := exchange(base, offset, tt.out, tt.back)
		// The estimate is off by exactly half the legs' difference.
		if got, want := s.Offset()-offset, (tt.out-tt.back)/2; got != want {
			t.Errorf("out %v back %v: error %v; want %v", tt.out, tt.back, got, want)
		}
		if err, u := s.Offset()-offset, s.Uncertainty(0); err > u || err < -u {
			t.Errorf("out %v back %v: error %v over uncertainty %v", tt.out, tt.back, err, u)
		}
	}
}

func TestSampleCheck(t *testing.T) {
	cfg := DefaultConfig()
	good := exchange(base, time.Second, time.Millisecond, time.Millisecond)
	tests := []struct {
		name string
		edit func(*Sample)
		bad  bool
	}{
		{"good", func(*Sample) {}, false},
		{"zero rtt", func(s *Sample) { s.RTT, s.Recv = 0, s.Sent }, false},
		{"zero sent", func(s *Sample) { s.Sent = time.Time{} }, true},
		{"zero peer", func(s *Sample) { s.Peer = time.Time{} }, true},
		{"zero recv", func(s *Sample) { s.Recv = time.Time{} }, true},
		{"negative rtt", func(s *Sample) { s.RTT = -time.Nanosecond }, true},
		{"rtt at max", func(s *Sample) { s.RTT, s.Recv = cfg.MaxRTT, s.Sent.Add(cfg.MaxRTT) }, false},
		{"rtt over max", func(s *Sample) { s.RTT, s.Recv = cfg.MaxRTT+1, s.Sent.Add(cfg.MaxRTT+1) }, true},
		{"wall within tolerance", func(s *Sample) { s.Recv = s.Recv.Add(cfg.StepTolerance) }, false},
		{"wall stepped forward", func(s *Sample) { s.Recv = s.Recv.Add(cfg.StepTolerance + 1) }, true},
		{"wall stepped back", func(s *Sample) { s.Recv = s.Recv.Add(-time.Hour) }, true},
		{"peer reading far off", func(s *Sample) { s.Peer = time.Unix(0, 1) }, false},
	}
	for _, tt := range tests {
		s := good
		tt.edit(&s)
		err := s.check(&cfg)
		if tt.bad != (err != nil) {
			t.Errorf("%s: got %v; want bad=%v", tt.name, err, tt.bad)
		}
		if err != nil && !errors.Is(err, ErrBadSample) {
			t.Errorf("%s: got %v; want ErrBadSample", tt.name, err)
		}
	}
}

// A reading carrying a monotonic clock (from Real or Offset) must be
// compared by its wall clock, which is what drifts.
func TestSampleStripsMonotonic(t *testing.T) {
	c := Offset{Base: Real{}, By: -30 * time.Second}
	sent := c.Now() // carries a monotonic reading
	s := Sample{Sent: sent, Peer: sent.Round(0).Add(30 * time.Second), Recv: sent, RTT: 0}
	if got, want := s.Offset(), 30*time.Second; got != want {
		t.Fatalf("got %v; want %v", got, want)
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	const maxD, minD = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	tests := []struct {
		name      string
		got, want time.Duration
	}{
		{"add", satAdd(1, 2), 3},
		{"add overflow", satAdd(maxD, 1), maxD},
		{"add underflow", satAdd(minD, -1), minD},
		{"sub", satSub(1, 3), -2},
		{"sub overflow", satSub(maxD, -1), maxD},
		{"sub min", satSub(0, minD), maxD},
		{"sub min from -1", satSub(-1, minD), maxD},
		{"sub min from -2", satSub(-2, minD), maxD - 1},
		{"neg", satNeg(5), -5},
		{"neg min", satNeg(minD), maxD},
		{"neg max", satNeg(maxD), minD + 1},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %d; want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"max drift zero", func(c *Config) { c.MaxDrift = 0 }},
		{"resume fraction zero", func(c *Config) { c.ResumeFraction = 0 }},
		{"resume fraction one", func(c *Config) { c.ResumeFraction = 1 }},
		{"resume fraction NaN", func(c *Config) { c.ResumeFraction = math.NaN() }},
		{"min peers zero", func(c *Config) { c.MinPeers = 0 }},
		{"window zero", func(c *Config) { c.Window = 0 }},
		{"window over max", func(c *Config) { c.Window = MaxWindow + 1 }},
		{"stale after zero", func(c *Config) { c.StaleAfter = 0 }},
		{"max rtt zero", func(c *Config) { c.MaxRTT = 0 }},
		{"precision negative", func(c *Config) { c.Precision = -1 }},
		{"step tolerance zero", func(c *Config) { c.StepTolerance = 0 }},
		{"max peers zero", func(c *Config) { c.MaxPeers = 0 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.edit(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: validated", tt.name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "clock config: ") {
			t.Errorf("%s: error %q lacks context", tt.name, err)
		}
		if _, err := NewDetector(c); err == nil {
			t.Errorf("%s: NewDetector accepted it", tt.name)
		}
	}
}
