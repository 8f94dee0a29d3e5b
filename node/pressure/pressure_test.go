package pressure

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

// TestUnderPressure: holds turn on at pressureOn, stay on down to
// pressureOff, and a window with too few events says "no pressure".
func TestUnderPressure(t *testing.T) {
	for _, tc := range []struct {
		on     bool
		mean   time.Duration
		events uint64
		want   bool
	}{
		{false, pressureOn - 1, pressureMinEvents, false},
		{false, pressureOn, pressureMinEvents, true},
		{true, pressureOn - 1, pressureMinEvents, true},
		{true, pressureOff, pressureMinEvents, true},
		{true, pressureOff - 1, pressureMinEvents, false},
		{false, time.Second, pressureMinEvents - 1, false},
		{true, time.Second, pressureMinEvents - 1, false},
	} {
		if got := underPressure(tc.on, tc.mean, tc.events); got != tc.want {
			t.Errorf("underPressure(on %v, mean %v, %d events) = %v, want %v", tc.on, tc.mean, tc.events, got, tc.want)
		}
	}
}

// TestMeanSince: the mean counts only what was recorded between the two
// reads, each value at its bucket's midpoint (an open bucket at its
// finite edge).
func TestMeanSince(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 10e-6, 30e-6, 1e-3, math.Inf(1)}
	prev := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 5, 7, 0, 0}}
	cur := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 5 + 2, 7, 1, 1}}
	// New: 2 in [0,10µs) at 5 µs, 1 in [30µs,1ms) at 515 µs, 1 in
	// [1ms,+Inf) at 1 ms.
	mean, events := meanSince(prev, cur)
	want := time.Duration((2*5e-6 + 515e-6 + 1e-3) / 4 * float64(time.Second))
	if events != 4 || (mean-want).Abs() > time.Nanosecond {
		t.Errorf("meanSince = %v over %d events, want %v over 4", mean, events, want)
	}
	if mean, events := meanSince(cur, cur); mean != 0 || events != 0 {
		t.Errorf("meanSince of one read = %v over %d events, want 0 over 0", mean, events)
	}
	// No earlier read: everything counts.
	if _, events := meanSince(nil, cur); events != 16 {
		t.Errorf("meanSince(nil) counted %d events, want 16", events)
	}
}

// TestSchedLatencyMetric: the runtime still reports the metric the
// pressure is read from, as a histogram.
func TestSchedLatencyMetric(t *testing.T) {
	s := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(s)
	if k := s[0].Value.Kind(); k != metrics.KindFloat64Histogram {
		t.Fatalf("%s is of kind %v, want a float64 histogram", schedLatencyMetric, k)
	}
}
