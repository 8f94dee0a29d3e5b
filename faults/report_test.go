package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/run-small from the base fixture")

// smallRun is a run directory in the harness's format, written from the
// base fixture (go test -run TestReadRun -update rewrites it): an example
// of every record the checkers read.
var smallRun = filepath.Join("testdata", "run-small")

// writeRun writes a run directory as the harness does.
func writeRun(dir string, in *Input) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	run, err := json.MarshalIndent(in.Run, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, runFile), append(run, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeJSONL(filepath.Join(dir, historyFile), in.Events); err != nil {
		return err
	}
	if err := writeJSONL(filepath.Join(dir, finalFile), in.Finals); err != nil {
		return err
	}
	return writeJSONL(filepath.Join(dir, LeadersFile), in.Leaders)
}

func writeJSONL[T any](path string, recs []T) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func TestReadRun(t *testing.T) {
	want := base().input()
	if *update {
		if err := writeRun(smallRun, want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadRun(smallRun)
	if err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Fatalf("ReadRun(%s) differs from the fixture it was written from (rerun with -update?)\ngot  %s\nwant %s", smallRun, gj, wj)
	}
	if r := Analyze(got); !r.OK() {
		t.Errorf("the small run fails:\n%s", dump(r))
	}
}

func TestReadRunErrors(t *testing.T) {
	copyRun := func(t *testing.T) string {
		dir := t.TempDir()
		for _, f := range []string{runFile, historyFile, finalFile} {
			b, err := os.ReadFile(filepath.Join(smallRun, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"no final reads", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, finalFile)) }, finalFile},
		{"no run.json", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, runFile)) }, runFile},
		{"truncated history", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, historyFile), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"idx": 52, "proc": 3, "ty`)
			f.Close()
		}, "history.jsonl: record 53"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyRun(t)
			tc.break_(t, dir)
			_, err := ReadRun(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadRun = %v; want an error naming %q", err, tc.want)
			}
		})
	}
	if _, err := ReadRun(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadRun of a missing dir = %v; want fs.ErrNotExist", err)
	}
}

func TestWindowStats(t *testing.T) {
	b := base()
	b.nemesis("partition-majority", 100, 700, 1, 2)
	b.op(FEnqueue, 150, 160, Info, Event{Task: id(0x55), Value: "v", Queue: "q"}, Event{})
	b.absent = append(b.absent, id(0x55))
	r := Analyze(b.input())
	if len(r.Windows) != 2 {
		t.Fatalf("%d windows; want 2", len(r.Windows))
	}
	w := r.Windows[0] // ordered by start
	if w.Nemesis != "partition-majority" || w.StartNs != 100*nsPerMs || w.StopNs != 700*nsPerMs {
		t.Fatalf("window 0 = %+v; want partition-majority [100 ms, 700 ms)", w)
	}
	// Invoked in [100, 700): C's claims and fails, D's claim and complete,
	// and the info enqueue.
	if w.During.Attempted != 7 || w.During.OK != 6 || w.During.Info != 1 {
		t.Errorf("during = %+v; want 7 attempted, 6 ok, 1 info", w.During)
	}
	if w.After.Attempted != 9 || w.After.OK != 9 {
		t.Errorf("after = %+v; want 9 attempted, 9 ok", w.After)
	}
	// The first claim that got a task, answered after the stop: B's at 1610.
	if w.RecoverClaimMs == nil || *w.RecoverClaimMs != 910 {
		t.Errorf("recover claim = %v; want 910 ms", fmtMsPtr(w.RecoverClaimMs))
	}
	if w.RecoverEnqueueMs != nil {
		t.Errorf("recover enqueue = %d ms; want none (no enqueue after the stop)", *w.RecoverEnqueueMs)
	}
}

func TestWriteText(t *testing.T) {
	tests := []struct {
		name   string
		inject func(b *builder)
		want   []string
	}{
		{"clean", func(*builder) {}, []string{"VERDICT PASS: scenario unit, seed 7", "Nemesis windows", "kill", "810 ms", "pass  total-queue"}},
		{"lost task", ackedReady, []string{"VERDICT FAIL: total-queue (dequeue = acknowledged complete); total-queue (dequeue = ok claim)",
			"FAIL  total-queue", "task " + taskG, "final reads: ready on [1 2 3]"}},
		{"excused overlap", func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(9000, 10500, testLeader, 5000)
		}, []string{"VERDICT PASS", "anomalies beyond the bounds, reported not failed", "[beyond bounds] task " + taskH, "clock-beyond (beyond bounds)",
			"Excused anomalies", "excused by window 2, clock-beyond on nodes [1] from 9.000s to 10.500s: node 1, its clock offset 5000 ms, granted claim 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.inject(b)
			var buf bytes.Buffer
			if err := Analyze(b.input()).WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, buf.String())
				}
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	b := base()
	ackedReady(b)
	var buf bytes.Buffer
	rep := Analyze(b.input())
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK      bool   `json:"ok"`
		Verdict string `json:"verdict"`
		Report
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.OK || !strings.HasPrefix(got.Verdict, "FAIL") {
		t.Errorf("ok %v, verdict %q; want a failure", got.OK, got.Verdict)
	}
	if len(got.Checks) != len(rep.Checks) || got.Run.Seed != 7 || len(got.Windows) != 1 {
		t.Fatalf("decoded %d checks, seed %d, %d windows; want %d, 7, 1", len(got.Checks), got.Run.Seed, len(got.Windows), len(rep.Checks))
	}
	lost := got.Checks[1].Anomalies[0]
	if lost.Kind != kindLost || lost.Count != 1 || lost.Examples[0].Task != taskG {
		t.Errorf("total-queue's first anomaly = %+v; want lost 1 of %s", lost, taskG)
	}
}

// Every excused anomaly is listed, in report.txt and report.json, with
// the fault that excuses it (its window's number in the windows table,
// its nodes and span), however many there are; the examples of the
// anomalies that fail the run stay capped, the rest counted.
func TestExcusedListed(t *testing.T) {
	const n = maxExamples + 3
	lose := func(b *builder) []string {
		var ids []string
		for i := range n {
			tid := id(0x1000 + i)
			b.enqueue(tid, 30, 40, OK)
			b.absent = append(b.absent, tid)
			ids = append(ids, tid)
		}
		return ids
	}
	t.Run("excused", func(t *testing.T) {
		b := base()
		ids := lose(b)
		b.beyondFault("power-cut", 100, 200)
		rep := Analyze(b.input())
		if !rep.OK() {
			t.Fatalf("the excused losses fail the run:\n%s", dump(rep))
		}
		const excuse = "excused by window 1, power-cut on nodes [] from 0.100s to 0.200s"
		var buf bytes.Buffer
		if err := rep.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var got Report
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Checks[1:3] { // the two total-queue checks
			a := c.Anomalies[0]
			if a.Kind != kindLost || a.BeyondBounds != n || len(a.Excused) != n || len(a.Examples) != 0 {
				t.Fatalf("%s: %s %d beyond, %d listed excused, %d examples; want %d, %d, 0", c.Name, a.Kind, a.BeyondBounds, len(a.Excused), len(a.Examples), n, n)
			}
			for i, ex := range a.Excused {
				if ex.Task != ids[i] || !ex.Beyond || "excused by "+ex.Excused != excuse {
					t.Errorf("%s: excused %d = %+v; want task %s, %s", c.Name, i, ex, ids[i], excuse)
				}
			}
		}
		buf.Reset()
		if err := rep.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		txt := buf.String()
		_, section, ok := strings.Cut(txt, "\nExcused anomalies")
		if !ok {
			t.Fatalf("no excused section:\n%s", txt)
		}
		for _, tid := range ids {
			if got := strings.Count(section, "task "+tid+" "); got != 2 {
				t.Errorf("task %s listed %d times in the excused section; want once per total-queue check:\n%s", tid, got, section)
			}
		}
		if got := strings.Count(section, excuse); got != 2*n {
			t.Errorf("%d excuses in the excused section; want %d:\n%s", got, 2*n, section)
		}
	})
	t.Run("within the bounds", func(t *testing.T) {
		b := base()
		lose(b)
		rep := Analyze(b.input())
		a := findAnomaly(t, findCheck(t, rep, "total-queue (dequeue = acknowledged complete)"), kindLost)
		if a.Count != n || len(a.Examples) != maxExamples || len(a.Excused) != 0 {
			t.Fatalf("lost %d, %d examples, %d excused; want %d, %d, 0", a.Count, len(a.Examples), len(a.Excused), n, maxExamples)
		}
		var buf bytes.Buffer
		if err := rep.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "  ... and 3 more\n") || strings.Contains(buf.String(), "\nExcused anomalies") {
			t.Errorf("want the examples capped with the rest counted, and no excused section:\n%s", buf.String())
		}
	})
}
