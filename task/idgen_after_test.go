package task_test

import (
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/task"
)

// Reference: DESIGN.md, "Data model" (ids sort by time and are never
// reused). A generator told about an earlier id, as a restarted node is
// about the ids it issued before, issues only ids after it, even when its
// clock reads earlier than that id.
func TestIDGenAfter(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	clk := clock.NewManual(at)
	for _, tc := range []struct {
		name  string
		floor task.ID
		want  task.ID
	}{
		{"same ms", task.MakeID(at.UnixMilli(), 7, 41), task.MakeID(at.UnixMilli(), 7, 42)},
		{"later ms", task.MakeID(at.UnixMilli()+5000, 7, 0), task.MakeID(at.UnixMilli()+5000, 7, 1)},
		{"counter exhausted", task.MakeID(at.UnixMilli(), 7, ^uint32(0)), task.MakeID(at.UnixMilli()+1, 7, 0)},
		{"earlier ms", task.MakeID(at.UnixMilli()-1, 7, 9), task.MakeID(at.UnixMilli(), 7, 0)},
		{"zero id", task.ID{}, task.MakeID(at.UnixMilli(), 7, 0)},
	} {
		g := task.NewIDGen(7, clk)
		g.After(tc.floor)
		if got := g.Next(); got != tc.want {
			t.Errorf("%s: After(%s) then Next() = %s; want %s", tc.name, tc.floor, got, tc.want)
		}
	}
	// After never moves a generator back.
	g := task.NewIDGen(7, clk)
	g.After(task.MakeID(at.UnixMilli()+10, 7, 3))
	g.After(task.MakeID(at.UnixMilli(), 7, 99))
	if got, want := g.Next(), task.MakeID(at.UnixMilli()+10, 7, 4); got != want {
		t.Errorf("After with a lower id moved the generator: Next() = %s; want %s", got, want)
	}
}
