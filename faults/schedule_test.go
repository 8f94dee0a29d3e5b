package faults

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func testScheduleConfig() ScheduleConfig {
	c := QuickConfig()
	return c.ScheduleConfig()
}

// The same seed draws the same schedule; another seed another one.
func TestScheduleDeterministic(t *testing.T) {
	sc := testScheduleConfig()
	for _, seed := range []int64{1, 2, 42} {
		a, b := QuickSchedule(seed, sc), QuickSchedule(seed, sc)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: two quick schedules differ:\n%v\n%v", seed, a.Lines(), b.Lines())
		}
		la, lb := LongSchedule(seed, 10*time.Minute, sc), LongSchedule(seed, 10*time.Minute, sc)
		if !reflect.DeepEqual(la, lb) {
			t.Errorf("seed %d: two long schedules differ", seed)
		}
	}
	if reflect.DeepEqual(QuickSchedule(1, sc).Lines(), QuickSchedule(2, sc).Lines()) {
		t.Errorf("seeds 1 and 2 drew the same quick schedule")
	}
}

// A quick run applies every nemesis exactly once and fits its budget.
func TestQuickScheduleCoversEveryNemesis(t *testing.T) {
	cfg := QuickConfig()
	for seed := int64(1); seed <= 20; seed++ {
		s := QuickSchedule(seed, cfg.ScheduleConfig())
		if got, want := s.Kinds(), slices.Sorted(slices.Values(AllNemeses)); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: kinds %v; want %v", seed, got, want)
		}
		if len(s.Steps) != len(AllNemeses) {
			t.Fatalf("seed %d: %d steps; want %d", seed, len(s.Steps), len(AllNemeses))
		}
		if d := s.Estimate(); d > cfg.FaultsBudget {
			t.Errorf("seed %d: estimate %v over the faults budget %v", seed, d, cfg.FaultsBudget)
		}
	}
}

// Drawn parameters respect the bounds the nemeses are named for.
func TestScheduleParameters(t *testing.T) {
	sc := testScheduleConfig()
	for seed := int64(1); seed <= 50; seed++ {
		for _, st := range LongSchedule(seed, 20*time.Minute, sc).Steps {
			classes := map[string]bool{}
			for _, f := range st.Faults {
				if cl := nemesisClass(f.Kind); classes[cl] {
					t.Fatalf("seed %d: step combines two %s nemeses: %v", seed, cl, st)
				} else {
					classes[cl] = true
				}
				checkFault(t, seed, f, sc)
			}
			if len(st.Faults) > 1 && classes["all"] {
				t.Fatalf("seed %d: kill-all combined: %v", seed, st)
			}
		}
	}
}

func checkFault(t *testing.T, seed int64, f Fault, sc ScheduleConfig) {
	t.Helper()
	for _, n := range f.Targets {
		if n < 1 || n > sc.Nodes {
			t.Fatalf("seed %d: %s targets node %d", seed, f.Kind, n)
		}
	}
	switch f.Kind {
	case NemKillMinority:
		if len(f.Targets) < 1 || len(f.Targets) > (sc.Nodes-1)/2 {
			t.Errorf("seed %d: kill-minority of %v is not a minority", seed, f.Targets)
		}
	case NemPauseLeader, NemPauseRaftLeader, NemPauseWorker:
		if f.Hold <= sc.TTL+sc.SkewBound {
			t.Errorf("seed %d: %s holds %v; want more than ttl + skew bound %v", seed, f.Kind, f.Hold, sc.TTL+sc.SkewBound)
		}
	case NemClockWithin:
		for _, o := range f.OffsetsMs {
			if abs(o) > sc.MaxDrift.Milliseconds() {
				t.Errorf("seed %d: within offset %d ms over max drift %v", seed, o, sc.MaxDrift)
			}
		}
	case NemClockBeyond:
		for _, o := range f.OffsetsMs {
			if abs(o) <= sc.SkewBound.Milliseconds() {
				t.Errorf("seed %d: beyond offset %d ms within the skew bound %v", seed, o, sc.SkewBound)
			}
		}
	case NemPartitionMajority:
		if len(f.Groups) != 2 || len(f.Groups[0])+len(f.Groups[1]) != sc.Nodes || len(f.Groups[0]) <= len(f.Groups[1]) {
			t.Errorf("seed %d: majority sides %v", seed, f.Groups)
		}
	case NemPartitionBridge:
		if len(f.Groups) != 3 || len(f.Groups[1]) != 1 {
			t.Errorf("seed %d: bridge sides %v", seed, f.Groups)
		}
	case NemPacketChaos:
		if f.Chaos == nil || f.Chaos.Drop < chaosDropMin || f.Chaos.Drop > chaosDropMax || f.Chaos.Validate() != nil {
			t.Errorf("seed %d: chaos %+v", seed, f.Chaos)
		}
	}
	if f.Kind == NemKillCohort || f.Kind == NemPauseLeader || f.Kind == NemPartitionAsym {
		if f.Partition < 0 || f.Partition >= sc.Partitions {
			t.Errorf("seed %d: %s partition %d", seed, f.Kind, f.Partition)
		}
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// A long schedule covers its duration, and only beyond-bound nemeses are
// named so.
func TestLongScheduleDuration(t *testing.T) {
	sc := testScheduleConfig()
	d := 30 * time.Minute
	s := LongSchedule(7, d, sc)
	if s.Estimate() < d {
		t.Errorf("estimate %v under %v", s.Estimate(), d)
	}
	combos := 0
	for _, st := range s.Steps {
		if len(st.Faults) > 1 {
			combos++
		}
	}
	if combos == 0 {
		t.Errorf("no step combines two nemeses in %d steps", len(s.Steps))
	}
	for _, k := range AllNemeses {
		if BeyondBounds(k) != (k == NemClockBeyond) {
			t.Errorf("BeyondBounds(%s) = %v", k, BeyondBounds(k))
		}
	}
}

// Excluded nemeses are left out of both kinds of schedule.
func TestScheduleExclude(t *testing.T) {
	c := QuickConfig()
	c.Exclude = []string{NemKillAll, NemPacketChaos}
	sc := c.ScheduleConfig()
	for _, s := range []Schedule{QuickSchedule(3, sc), LongSchedule(3, 10*time.Minute, sc)} {
		for _, k := range s.Kinds() {
			if slices.Contains(c.Exclude, k) {
				t.Errorf("excluded %s scheduled", k)
			}
		}
	}
	if n := len(QuickSchedule(3, sc).Steps); n != len(AllNemeses)-2 {
		t.Errorf("quick schedule of %d steps; want %d", n, len(AllNemeses)-2)
	}
}

func TestQuickScheduleKillAllLast(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		s := QuickSchedule(seed, testScheduleConfig())
		if k := s.Steps[len(s.Steps)-1].Faults[0].Kind; k != NemKillAll {
			t.Errorf("seed %d: last step %s; want kill-all", seed, k)
		}
	}
}
