package faults

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// application is what a fault did to each node it names: the bookkeeping
// behind NotePartial. The history must never say a fault hit nodes it did
// not, so each node is either hit (the fault holds on it, and its start
// event names it) or missed with the reason; a node the schedule itself
// accounts for (another fault of the same step holds it down or paused)
// is left out, which is what the schedule allows and not a partial
// application.
//
// Invariant: every node of intended is in exactly one of applied, missed
// and leftOut once the fault's apply has finished.
type application struct {
	intended []int
	applied  []int
	// missed: node -> why the fault could not be applied to it.
	missed map[int]string
	// leftOut: node -> the fault of the same step that accounts for it.
	leftOut map[int]string
}

func newApplication(intended []int) *application {
	return &application{intended: slices.Clone(intended), missed: map[int]string{}, leftOut: map[int]string{}}
}

// hit records that the fault holds on node i.
func (ap *application) hit(i int) { ap.applied = append(ap.applied, i) }

// miss records that the fault could not be applied to node i, and why.
func (ap *application) miss(i int, why string) { ap.missed[i] = why }

// leave records that node i is left out as the schedule allows.
func (ap *application) leave(i int, why string) { ap.leftOut[i] = why }

// partial reports whether the fault holds on some of its nodes and
// missed others.
func (ap *application) partial() bool { return len(ap.applied) > 0 && len(ap.missed) > 0 }

// none reports whether the fault holds on no node.
func (ap *application) none() bool { return len(ap.applied) == 0 }

// targets are the nodes the fault holds on, sorted: its start and stop
// events' Targets.
func (ap *application) targets() []int { return sorted(ap.applied) }

// notApplied lists the missed nodes, sorted.
func (ap *application) notApplied() []int { return slices.Sorted(maps.Keys(ap.missed)) }

// err says why the fault holds on no node (for a fault that is skipped).
func (ap *application) err() error {
	var errs []error
	for _, i := range ap.notApplied() {
		errs = append(errs, fmt.Errorf("node %d: %s", i, ap.missed[i]))
	}
	for _, i := range slices.Sorted(maps.Keys(ap.leftOut)) {
		errs = append(errs, fmt.Errorf("node %d left out: %s", i, ap.leftOut[i]))
	}
	if len(errs) == 0 {
		return errors.New("no node to apply it to")
	}
	return errors.Join(errs...)
}

// detail is a NotePartial's Detail: what the fault names, what it did,
// what it did not and why, and what became of the part applied (healed).
func (ap *application) detail(kind, healed string) map[string]any {
	d := map[string]any{
		"nemesis":     kind,
		"intended":    sorted(ap.intended),
		"applied":     ap.targets(),
		"not_applied": ap.notApplied(),
		"why":         ap.missed,
		"healed":      healed,
	}
	if len(ap.leftOut) > 0 {
		d["left_out"] = ap.leftOut
	}
	return d
}

// How the part of a fault that was applied is healed (NotePartial's
// "healed").
const (
	// healedWithFault: the part applied is a fault of the same kind on
	// fewer nodes, which the start event names exactly (kills, wipes,
	// clock offsets), so it holds for the fault's hold and is healed
	// with it; the stop event pairs with the start.
	healedWithFault = "with the fault, at its hold: the start and stop events name the nodes applied"
	// healedAtOnce: the part applied is another fault than the one
	// named (half a partition is a different partition), so it was
	// undone at once and the fault skipped.
	healedAtOnce = "at once, and the fault skipped: the part applied is another fault than the one named"
)

// pendingNote is a note an apply records after the fault's start event,
// so the history reads start, then what went wrong with it.
type pendingNote struct {
	what    string
	targets []int
	detail  map[string]any
}
