package faults

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Outcomes are counted per operation and per nemesis window by their
// times, and outside every window as healthy.
func TestSummaryCount(t *testing.T) {
	s := func(x float64) int64 { return int64(x * 1e9) }
	yes := true
	events := []Event{
		{Proc: -1, Type: Phase, F: PhaseFaults, TNs: s(1)},
		{Proc: 0, Type: Invoke, F: FEnqueue, TNs: s(2)},
		{Proc: 0, Type: OK, F: FEnqueue, TNs: s(2.1)},
		{Proc: -1, Type: Nemesis, F: "start", Nemesis: NemKillMinority, Targets: []int{2}, TNs: s(3)},
		{Proc: 0, Type: Invoke, F: FClaim, TNs: s(3.5)},
		{Proc: 0, Type: Info, F: FClaim, Code: "timeout", TNs: s(4)},
		{Proc: -1, Type: Nemesis, F: "start", Nemesis: NemPacketChaos, TNs: s(4.5)},
		{Proc: 11, Type: Invoke, F: FClaim, TNs: s(4.6)},
		{Proc: 11, Type: Fail, F: FClaim, Code: "invalid", TNs: s(4.7)},
		{Proc: -1, Type: Nemesis, F: "note", Nemesis: NemKillMinority, TNs: s(4.8)}, // closes nothing
		{Proc: -1, Type: Nemesis, F: "stop", Nemesis: NemKillMinority, TNs: s(5)},
		{Proc: 11, Type: Effect, F: Effect, Accepted: &yes, TNs: s(5.5)},
		{Proc: -1, Type: Nemesis, F: "stop", Nemesis: NemPacketChaos, TNs: s(6)},
		{Proc: 11, Type: Invoke, F: FComplete, TNs: s(7)},
		{Proc: 11, Type: OK, F: FComplete, TNs: s(7.1)},
		{Proc: -1, Type: Phase, F: PhaseHeal, TNs: s(8)},
		{Proc: 11, Type: Invoke, F: FClaim, TNs: s(9)},
		{Proc: 11, Type: OK, F: FClaim, TNs: s(9.1)},
	}
	var sum RunSummary
	sum.Count(events)
	if got := sum.Ops[FClaim]; got[Invoke] != 3 || got[OK] != 1 || got[Fail] != 1 || got[Info] != 1 {
		t.Errorf("claim counts %v", got)
	}
	if sum.Codes[FClaim]["info:timeout"] != 1 || sum.Codes[FClaim]["fail:invalid"] != 1 {
		t.Errorf("claim codes %v", sum.Codes[FClaim])
	}
	if sum.Effects["accepted"] != 1 {
		t.Errorf("effects %v", sum.Effects)
	}
	if len(sum.Windows) != 2 {
		t.Fatalf("windows %+v", sum.Windows)
	}
	kill, chaos := sum.Windows[0], sum.Windows[1]
	if kill.Nemesis != NemKillMinority || kill.StartS != 3 || kill.StopS != 5 || kill.Ops[FClaim][Info] != 1 || kill.Ops[FClaim][Fail] != 1 {
		t.Errorf("kill window %+v", kill)
	}
	// The fail at 4.7 s is in both windows.
	if chaos.Ops[FClaim][Fail] != 1 || chaos.Ops[FClaim][Info] != 0 {
		t.Errorf("chaos window %+v", chaos)
	}
	// Healthy: the enqueue at 2.1 s and the complete at 7.1 s; the claim
	// after the heal belongs to no window of the faults phase.
	if sum.Healthy.Ops[FEnqueue][OK] != 1 || sum.Healthy.Ops[FComplete][OK] != 1 || sum.Healthy.Ops[FClaim][OK] != 0 {
		t.Errorf("healthy %+v", sum.Healthy)
	}
	var out bytes.Buffer
	sum.Print(&out)
	if !strings.Contains(out.String(), "kill-minority") {
		t.Errorf("printout lacks the windows:\n%s", out.String())
	}
}

func TestScanLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n1.log")
	log := `=== faults: start 1 of node 1 at t=0.1s ===
time=x level=INFO msg=started
time=x level=WARN msg="join attempt failed" err=x
time=x level=ERROR msg="replication failed" err=y
time=x level=ERROR msg="replication failed" err=z
time=x level=ERROR msg=boom
=== faults: start 2 of node 1 at t=9.0s ===
panic: runtime error
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := ScanLog(path)
	if ls.Starts != 2 || ls.Warn != 1 || ls.Error != 3 || ls.Panic != 1 || ls.Lines != 8 {
		t.Errorf("scan %+v", ls)
	}
	if len(ls.TopErrors) == 0 || ls.TopErrors[0] != "2x replication failed" {
		t.Errorf("top errors %v", ls.TopErrors)
	}
}

func TestDelayStats(t *testing.T) {
	var d []time.Duration
	for i := range 100 {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	st := delayStats(d)
	if st.Samples != 100 || st.P50Ms != 50 || st.P99Ms != 99 || st.MaxMs != 99 {
		t.Errorf("stats %+v", st)
	}
}
