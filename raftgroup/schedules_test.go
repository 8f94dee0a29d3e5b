package raftgroup

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// TestApplySchedules: a set starts a schedule at its proposer's time as
// the version of its entry; the same spec again changes nothing; another
// spec is a new version from its own start; an advance applies only to
// the version it names and only forward; a delete drops it; a refused
// command changes nothing.
func TestApplySchedules(t *testing.T) {
	m := initialised(1)
	every := ScheduleSpec{Name: "tick", Queue: "q", EveryMs: 1000}
	step := func(name string, f func() (result, bool), wantErr error, wantChanged bool) result {
		t.Helper()
		before := m.Clone()
		r, changed := f()
		m.Applied++ // the driver's part: each entry has its own index
		if !errors.Is(r.err, wantErr) || (wantErr == nil && r.err != nil) || changed != wantChanged {
			t.Fatalf("%s: err %v, changed %v; want %v, %v", name, r.err, changed, wantErr, wantChanged)
		}
		if !changed {
			before.Applied = m.Applied
			if !reflect.DeepEqual(m, before) {
				t.Fatalf("%s: unchanged, yet the state moved:\n%+v\n%+v", name, m.Schedules, before.Schedules)
			}
		}
		if err := m.check(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	m.Applied = 9
	r := step("set", func() (result, bool) { return applyScheduleSet(&m, every, 5000) }, nil, true)
	want := Schedule{ScheduleSpec: every, Version: 10, StartMs: 5000, DoneMs: 5000}
	if !reflect.DeepEqual(r.schedule, want) || !reflect.DeepEqual(m.Schedules["tick"], want) {
		t.Fatalf("set: %+v, held %+v; want %+v", r.schedule, m.Schedules["tick"], want)
	}
	step("same spec again", func() (result, bool) { return applyScheduleSet(&m, every, 9000) }, nil, false)
	step("advance", func() (result, bool) {
		return applyScheduleAdvance(&m, ScheduleAdvance{Name: "tick", Version: 10, PrevDoneMs: 5000, DoneMs: 8000, Enqueued: 2, Skipped: 1})
	}, nil, true)
	step("advance from a progress that moved", func() (result, bool) {
		return applyScheduleAdvance(&m, ScheduleAdvance{Name: "tick", Version: 10, PrevDoneMs: 5000, DoneMs: 9000, Enqueued: 3})
	}, ErrStaleSchedule, false)
	step("advance again to the same", func() (result, bool) {
		return applyScheduleAdvance(&m, ScheduleAdvance{Name: "tick", Version: 10, PrevDoneMs: 8000, DoneMs: 8000, Enqueued: 1})
	}, ErrStaleSchedule, false)
	step("advance of another version", func() (result, bool) {
		return applyScheduleAdvance(&m, ScheduleAdvance{Name: "tick", Version: 3, PrevDoneMs: 8000, DoneMs: 9000, Enqueued: 1})
	}, ErrStaleSchedule, false)
	if got := m.Schedules["tick"]; got.DoneMs != 8000 || got.Enqueued != 2 || got.Skipped != 1 {
		t.Fatalf("after the advances: %+v", got)
	}
	other := every
	other.EveryMs = 2000
	r = step("another spec", func() (result, bool) { return applyScheduleSet(&m, other, 20000) }, nil, true)
	if r.schedule.Version != m.Applied || r.schedule.StartMs != 20000 || r.schedule.DoneMs != 20000 || r.schedule.Enqueued != 0 {
		t.Fatalf("replaced: %+v (applied %d)", r.schedule, m.Applied)
	}
	step("advance of the replaced version", func() (result, bool) {
		return applyScheduleAdvance(&m, ScheduleAdvance{Name: "tick", Version: 10, PrevDoneMs: 20000, DoneMs: 30000, Enqueued: 1})
	}, ErrStaleSchedule, false)
	for _, bad := range []ScheduleSpec{
		{Name: "", Queue: "q", EveryMs: 1000},
		{Name: "a b", Queue: "q", EveryMs: 1000},
		{Name: "x", EveryMs: 1000},
		{Name: "x", Queue: "q"},
		{Name: "x", Queue: "q", EveryMs: 1000, Cron: "* * * * *"},
		{Name: "x", Queue: "q", EveryMs: 999},
		{Name: "x", Queue: "q", Cron: "61 * * * *"},
		{Name: "x", Queue: "q", EveryMs: 1000, CatchUp: 7},
		{Name: "x", Queue: "q", EveryMs: 1000, Data: make([]byte, MaxScheduleData+1)},
	} {
		step(fmt.Sprintf("bad %+v", bad.Name), func() (result, bool) { return applyScheduleSet(&m, bad, 1000) }, ErrInvalid, false)
	}
	step("no start", func() (result, bool) {
		return applyScheduleSet(&m, ScheduleSpec{Name: "y", Queue: "q", EveryMs: 1000}, 0)
	}, ErrInvalid, false)
	r = step("delete", func() (result, bool) { return applyScheduleDelete(&m, "tick") }, nil, true)
	if !r.found || len(m.Schedules) != 0 {
		t.Fatalf("delete: found %v, left %v", r.found, m.Schedules)
	}
	r = step("delete again", func() (result, bool) { return applyScheduleDelete(&m, "tick") }, nil, false)
	if r.found {
		t.Fatal("a second delete found the schedule")
	}
	m.Schedules = map[string]Schedule{}
	for i := range MaxSchedules {
		name := fmt.Sprintf("s%d", i)
		m.Schedules[name] = Schedule{ScheduleSpec: ScheduleSpec{Name: name, Queue: "q", EveryMs: 1000}, Version: 1, StartMs: 1, DoneMs: 1}
	}
	step("past the cap", func() (result, bool) { return applyScheduleSet(&m, every, 1000) }, ErrInvalid, false)
}

// TestScheduleCommandsRoundTrip: the schedule commands survive the log's
// encoding.
func TestScheduleCommandsRoundTrip(t *testing.T) {
	set := toScheduleSetRecord(ScheduleSpec{Name: "n", Queue: "q", Cron: "@daily", Data: []byte{1, 2}, Priority: 5, CatchUp: CatchUpAll}, 77)
	for _, cmd := range []*command{
		{Op: opScheduleSet, ScheduleSet: &set},
		{Op: opScheduleDelete, ScheduleDelete: "n"},
		{Op: opScheduleAdvance, ScheduleAdvance: &scheduleAdvanceRecord{Name: "n", Version: 3, PrevDoneMs: 50, DoneMs: 99, Enqueued: 2, Skipped: 1}},
	} {
		b, err := encodeCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeCommand(b)
		if err != nil || !reflect.DeepEqual(&got, cmd) {
			t.Fatalf("%v: got %+v, %v; want %+v", cmd.Op, got, err, cmd)
		}
	}
}
