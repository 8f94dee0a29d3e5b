package task_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Data model" (ids sort by time and are never
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

// TestIDGenReserve: a generator with a reservation records, before it
// issues an id, a millisecond at or past it (once per ahead ms, retrying
// a failed record); a generator restarted past the recorded millisecond
// with its clock set back issues only ids after every earlier one.
func TestIDGenReserve(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	clk := clock.NewManual(at)
	const ahead = 2000
	var records []int64
	fail := false
	g := task.NewIDGen(7, clk)
	g.Reserve(func(ms int64) error {
		if fail {
			return errors.New("disk gone")
		}
		records = append(records, ms)
		return nil
	}, ahead)
	var last task.ID
	for step := range 50 {
		clk.Advance(100 * time.Millisecond)
		id := g.Next()
		if len(records) == 0 || id.Millis() > records[len(records)-1] {
			t.Fatalf("step %d: id at %d issued past the reservation %v", step, id.Millis(), records)
		}
		last = id
	}
	// 5s of ids with 2s reservations: three records, not one per id.
	if len(records) != 3 {
		t.Errorf("records %v; want 3 over 5s at %dms ahead", records, ahead)
	}
	// A failed record is retried by the next id that needs one.
	fail = true
	clk.Advance(3 * time.Second)
	g.Next()
	fail = false
	n := len(records)
	g.Next()
	if len(records) != n+1 {
		t.Errorf("a failed record was not retried: %v", records)
	}
	// Restart with the clock an hour back: After(the reservation) puts
	// every new id after every id issued before.
	reserved := records[len(records)-1]
	clk.Advance(-time.Hour)
	g2 := task.NewIDGen(7, clk)
	g2.After(task.MakeID(reserved, 7, ^uint32(0)))
	if id := g2.Next(); id.Compare(last) <= 0 || id.Millis() <= reserved {
		t.Errorf("after a restart with the clock set back: %s (ms %d); want after %s and past %d", id, id.Millis(), last, reserved)
	}
}
