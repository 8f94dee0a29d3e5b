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
		{Proc: 12, Type: Invoke, F: FCancel, TNs: s(9.2)},
		{Proc: 12, Type: Fail, F: FCancel, Code: "completed", TNs: s(9.3)},
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
	// Every operation the workload sends is printed, cancels included.
	for _, w := range []string{"cancel           1        0        1        0", "cancel    fail:completed=1"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("printout lacks %q:\n%s", w, out.String())
		}
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

// Only the notes of HarnessFaultNotes are the summary's harness faults,
// in history order, and the printout names them.
func TestSummaryHarnessFaults(t *testing.T) {
	events := []Event{
		{Proc: -1, Type: Phase, F: PhaseFaults, TNs: 1e9},
		{Proc: -1, Type: Nemesis, F: "note", Nemesis: NoteRepaired, TNs: 2e9},
		{Proc: -1, Type: Nemesis, F: "note", Nemesis: NoteExit, Targets: []int{3}, TNs: 3e9, Detail: []byte(`{"status":"exit status 2"}`)},
		{Proc: -1, Type: Nemesis, F: "note", Nemesis: NoteRestart, Targets: []int{3}, TNs: 4e9},
		{Proc: -1, Type: Nemesis, F: "note", Nemesis: NotePartitionMismatch, Targets: []int{1, 2}, TNs: 5e9},
		{Proc: -1, Type: Nemesis, F: "start", Nemesis: NoteSkipped, TNs: 6e9}, // a start, not a note
	}
	var sum RunSummary
	sum.Count(events)
	if len(sum.HarnessFaults) != 2 || sum.HarnessFaults[0].Note != NoteExit || sum.HarnessFaults[1].Note != NotePartitionMismatch {
		t.Fatalf("harness faults %+v", sum.HarnessFaults)
	}
	if h := sum.HarnessFaults[0]; h.TS != 3 || h.Targets[0] != 3 || string(h.Detail) != `{"status":"exit status 2"}` {
		t.Errorf("node exit %+v", h)
	}
	var out bytes.Buffer
	sum.Print(&out)
	for _, want := range []string{"Harness faults (each fails the run): 2", NoteExit, "exit status 2", NotePartitionMismatch} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printout lacks %q:\n%s", want, out.String())
		}
	}
	sum.Count(events[:2])
	out.Reset()
	sum.Print(&out)
	if !strings.Contains(out.String(), "Harness faults: none recorded") {
		t.Errorf("printout of a clean run:\n%s", out.String())
	}
}

// A panic is the runtime's, net/http's, or one skuldd's wire server
// recovered and logged; another line the node logs at level=ERROR is not
// one, whatever it says.
func TestPanicLine(t *testing.T) {
	cases := []struct {
		line string
		want bool
	}{
		{"panic: runtime error: index out of range [3] with length 3", true},
		{"panic: boom [recovered]", true},
		{"fatal error: concurrent map writes", true},
		{"2026/05/09 07:30:00 http: panic serving 10.77.0.254:40000: runtime error", true},
		{`time=2026-05-09T07:30:00Z level=ERROR msg="wire: handler panicked" panic="boom"`, true},
		{`time=2026-05-09T07:30:00Z level=ERROR msg="wire: stream reader panicked" panic="boom"`, true},
		{`time=2026-05-09T07:30:00Z level=ERROR msg="claim failed" err="handler panicked"`, false},
		{`time=2026-05-09T07:30:00Z level=ERROR msg="http: panic serving x"`, false},
		{"time=2026-05-09T07:30:00Z level=INFO msg=leading partition=1 epoch=2", false},
		{"goroutine 1 [running]:", false},
		{"=== faults: start 2 of node 1 at t=9.000s ===", false},
	}
	for _, c := range cases {
		if got := panicLine(c.line); got != c.want {
			t.Errorf("%q: %v; want %v", c.line, got, c.want)
		}
	}
}

// ScanLog keeps the first panic line, for the NotePanic's detail.
func TestScanLogFirstPanic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n2.log")
	log := "time=x level=ERROR msg=\"claim failed\" err=boom\n" +
		"fatal error: concurrent map writes\n" +
		"goroutine 7 [running]:\n" +
		"panic: later\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := ScanLog(path)
	if ls.Panic != 2 || ls.Error != 1 || ls.FirstPanic != "fatal error: concurrent map writes" {
		t.Errorf("scan %+v", ls)
	}
}

// A run that failed before it had a history still writes summary.json,
// with why.
func TestSummarizeWithoutHistory(t *testing.T) {
	out := t.TempDir()
	var printed bytes.Buffer
	r := &Run{cfg: Config{Out: out, Print: &printed}}
	r.sum.Error = "setup: the cluster never formed"
	s, err := r.summarize()
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := os.ReadFile(filepath.Join(out, SummaryFile))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !strings.Contains(string(b), "the cluster never formed") || len(s.Notes) == 0 || !strings.Contains(s.Notes[0], HistoryFile) {
		t.Errorf("summary %s; notes %v", b, s.Notes)
	}
	if !strings.Contains(printed.String(), "RUN FAILED: setup: the cluster never formed") {
		t.Errorf("printout:\n%s", printed.String())
	}
}
