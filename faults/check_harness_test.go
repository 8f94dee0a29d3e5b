package faults

import "testing"

// note adds a harness note at atMs.
func (b *builder) note(name string, atMs int64, targets ...int) {
	b.events = append(b.events, Event{Proc: -1, Type: Nemesis, F: "note", Nemesis: name, Targets: targets, TNs: atMs * nsPerMs})
}

func TestHarness(t *testing.T) {
	const check = "harness"
	cases := []flagCase{
		{name: "a restart note is no fault", check: check, kind: harnessKinds[NoteExit], inject: func(b *builder) {
			b.note(NoteRestart, 3200, 2)
		}},
		{name: "ok ops at the faults phase's floor", check: check, kind: kindFewOK, inject: func(b *builder) {
			b.run.OKFloor = map[string]int64{PhaseFaults: 19}
		}},
		{name: "ok ops below the faults phase's floor", check: check, kind: kindFewOK, want: 1, inject: func(b *builder) {
			b.run.OKFloor = map[string]int64{PhaseFaults: 20}
		}},
		{name: "a floor for a phase that never ran", check: check, kind: kindFewOK, want: 1, inject: func(b *builder) {
			b.run.OKFloor = map[string]int64{PhaseDrain: 1}
		}},
	}
	for _, n := range HarnessFaultNotes {
		cases = append(cases, flagCase{name: n + " fails the run", check: check, kind: harnessKinds[n], want: 1, inject: func(b *builder) {
			b.note(n, 3200, 2)
		}})
	}
	runFlagCases(t, cases)
}

func TestAnswers(t *testing.T) {
	const check = "answers"
	runFlagCases(t, []flagCase{
		{name: "a 2xx answer that did not decode", check: check, kind: kindBadAnswer, want: 1, inject: func(b *builder) {
			b.op(FClaim, 5300, 5310, OK, Event{Queue: "q", TTLMs: 2000, Tasks: 1}, Event{Code: CodeBadResponse, Err: "unexpected EOF"})
		}},
		{name: "a claim answer with two tasks for one asked", check: check, kind: kindTooManyTasks, want: 1, inject: func(b *builder) {
			b.op(FClaim, 5300, 5310, OK, Event{Queue: "q", TTLMs: 2000, Tasks: 1}, Event{Tasks: 2})
		}},
		{name: "a claim answer with the one task asked", check: check, kind: kindTooManyTasks, inject: func(b *builder) {
			b.op(FClaim, 5300, 5310, OK, Event{Queue: "q", TTLMs: 2000, Tasks: 1}, Event{Tasks: 1})
		}},
	})
}
