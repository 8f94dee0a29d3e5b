package faults

import (
	"fmt"
	"slices"
	"strings"
)

// The harness's own faults, and answers a client cannot use. A run is
// evidence only if it ran as its record says: every fault applied as
// drawn, every node up or down because the schedule said so, enough
// acknowledged to have tested something. The harness records what went
// otherwise as notes (HarnessFaultNotes); each fails the run, so that a
// schedule that silently did less than it claims can never pass.

// harnessKinds names the anomaly kind of each note that fails a run.
var harnessKinds = map[string]string{
	NoteExit:              "node exited on its own",
	NotePanic:             "node panicked",
	NoteSkipped:           "nemesis skipped",
	NotePartial:           "nemesis applied in part",
	NoteCrashFallback:     "crash fell back to kill -9",
	NotePartitionMismatch: "partition not as named (connect check)",
	NoteHealFailed:        "heal failed",
	NoteWorkerExit:        "worker exited or was killed",
}

// kindFewOK: a phase acknowledged fewer ops than its floor.
const kindFewOK = "fewer ok ops than the phase's floor"

func checkHarness(h *history) *Check {
	kinds := make([]string, 0, len(HarnessFaultNotes)+1)
	for _, n := range HarnessFaultNotes {
		kinds = append(kinds, harnessKinds[n])
	}
	c := newCheck("harness",
		"the run did what its record says: no node exited or panicked on its own, every nemesis was applied whole, every crash lost the unsynced writes, every partition cut what it names; each phase acknowledged at least its floor of ops",
		append(kinds, kindFewOK)...)
	for i := range h.in.Events {
		e := &h.in.Events[i]
		if e.Type != Nemesis || e.F == "start" || e.F == "stop" {
			continue
		}
		kind, ok := harnessKinds[e.Nemesis]
		if !ok {
			continue
		}
		detail := strings.TrimSpace(strings.Join([]string{string(e.Detail), e.Err}, " "))
		c.flag(kind, "", e.TNs, Example{Nodes: e.Targets, TNs: []int64{e.TNs}, Events: []int64{e.Index}, Detail: detail})
	}
	h.okFloors(c)
	return c
}

// okFloors counts the ok ops invoked in each phase and holds them to the
// run's floors (RunInfo.OKFloor).
func (h *history) okFloors(c *Check) {
	type span struct {
		name     string
		from, to int64
		at       int64 // the phase event's idx
	}
	var spans []span
	for i, p := range h.phases {
		to := tNever
		if i+1 < len(h.phases) {
			to = h.phases[i+1].TNs
		}
		spans = append(spans, span{p.F, p.TNs, to, p.Index})
	}
	ok := map[string]int64{}
	for _, o := range h.ops {
		if !o.ok() {
			continue
		}
		if i := slices.IndexFunc(spans, func(s span) bool { return s.from <= o.ti && o.ti < s.to }); i >= 0 {
			ok[spans[i].name]++
		}
	}
	names := make([]string, 0, len(h.in.Run.OKFloor))
	for name := range h.in.Run.OKFloor {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		floor := h.in.Run.OKFloor[name]
		c.count(fmt.Sprintf("ok ops in phase %s (floor %d)", name, floor), ok[name])
		if ok[name] >= floor {
			continue
		}
		ex := Example{Detail: fmt.Sprintf("phase %s: %d ok ops invoked, floor %d", name, ok[name], floor)}
		at := h.tEnd
		if i := slices.IndexFunc(spans, func(s span) bool { return s.name == name }); i >= 0 {
			at, ex.Events, ex.TNs = spans[i].from, []int64{spans[i].at}, []int64{spans[i].from}
		} else {
			ex.Detail = fmt.Sprintf("phase %s never ran; floor %d", name, floor)
		}
		c.flag(kindFewOK, "", at, ex)
	}
}

// Anomaly kinds of the answers check.
const (
	kindBadAnswer    = "2xx answer undecodable"
	kindTooManyTasks = "claim answer with more tasks than asked"
)

func checkAnswers(h *history) *Check {
	c := newCheck("answers",
		"every 2xx answer decodes; no claim answer holds more tasks than it asked for",
		kindBadAnswer, kindTooManyTasks)
	for _, o := range h.ops {
		if !o.ok() {
			continue
		}
		ex := Example{Task: o.task, TNs: []int64{o.ti, o.tc}, Events: o.events(), Nodes: []int{o.inv.Node}}
		if o.out.Code == CodeBadResponse {
			ex.Detail = fmt.Sprintf("%s: %s", o.f, o.out.Err)
			c.flag(kindBadAnswer, "", o.tc, ex)
		}
		if o.f == FClaim && o.inv.Tasks > 0 && o.out.Tasks > o.inv.Tasks {
			ex.Detail = fmt.Sprintf("asked for %d, got %d", o.inv.Tasks, o.out.Tasks)
			c.flag(kindTooManyTasks, "", o.tc, ex)
		}
	}
	return c
}
