package faults

import (
	"slices"
	"testing"
	"time"
)

// The floors count from the least time the faults phase lasts (warmup,
// holds and gaps; a long run's Duration caps it) at the enqueue rate aimed
// at, times okFloorFraction; the drain's is one ok per node.
func TestOKFloors(t *testing.T) {
	quick := QuickConfig()
	qs := quick.Schedule()
	var least time.Duration
	for _, st := range qs.Steps {
		least += st.Hold() + st.Gap
	}
	least += quick.Warmup
	long := DefaultConfig()
	long.Duration = 2 * time.Minute
	cases := []struct {
		name        string
		c           Config
		s           Schedule
		faults      int64
		drain       int64
		faultsRange [2]int64
	}{
		// The quick run: 15 steps, about 100 s, 120 enqueue/s.
		{"quick", quick, qs, int64(okFloorFraction * 120 * least.Seconds()), 5, [2]int64{1000, 1500}},
		// A long run is cut at its Duration: 2 min + 5 s warmup, though
		// its 20 steps of 10 s would take 200 s.
		{"long, capped", long, Schedule{Steps: slices.Repeat([]Step{{Faults: []Fault{{Hold: 4 * time.Second}}, Gap: 6 * time.Second}}, 20)},
			int64(okFloorFraction * 120 * 125), 5, [2]int64{1500, 1500}},
		{"long, few steps", long, Schedule{Steps: []Step{{Faults: []Fault{{Hold: 4 * time.Second}}, Gap: 6 * time.Second}}},
			int64(okFloorFraction * 120 * 15), 5, [2]int64{180, 180}},
	}
	for _, c := range cases {
		f := OKFloors(&c.c, c.s)
		if f[PhaseFaults] != c.faults || f[PhaseDrain] != c.drain {
			t.Errorf("%s: floors %v; want faults %d, drain %d", c.name, f, c.faults, c.drain)
		}
		if f[PhaseFaults] < c.faultsRange[0] || f[PhaseFaults] > c.faultsRange[1] {
			t.Errorf("%s: faults floor %d outside %v", c.name, f[PhaseFaults], c.faultsRange)
		}
		if len(f) != 2 {
			t.Errorf("%s: floors for %v; want the faults phase and the drain only", c.name, f)
		}
	}
}

// The wall clock read with the timeline is the wall clock at TNs 0.
func TestStartTimeline(t *testing.T) {
	before := time.Now().UnixNano()
	tl, unix := startTimeline()
	after := time.Now().UnixNano()
	if unix < before || unix > after {
		t.Errorf("start %d outside [%d, %d]", unix, before, after)
	}
	// Now read both again: the wall clock less the start is the
	// timeline's now, within scheduling noise.
	d := (time.Now().UnixNano() - unix) - tl.Now()
	if d < -int64(time.Millisecond) || d > int64(time.Millisecond) {
		t.Errorf("wall and timeline differ by %v", time.Duration(d))
	}
}
