package raftgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/skuldd/skuldd/internal/cron"
)

// Schedules: periodic tasks, kept in the metadata group so that one
// record says which occurrences of each were handled, whichever node
// enqueues them (node/schedules, run by the group's leader).
//
// A schedule's occurrences are the times of its grid after StartMs (for
// EveryMs, StartMs + k·EveryMs for k ≥ 1; for Cron, the expression's
// times). DoneMs is the last occurrence handled (enqueued or skipped):
// the enqueuer advances it, by version, after it enqueued what it
// handles, so an occurrence is enqueued again only if an enqueuer stopped
// between its enqueue and the advance (the occurrence's unique key then
// yields the task already there).

const (
	// MaxSchedules caps the schedules of a cluster.
	MaxSchedules = 1024
	// MaxScheduleNameBytes bounds a schedule's name.
	MaxScheduleNameBytes = 128
	// MaxScheduleData bounds the payload a schedule gives its tasks: the
	// schedules live in the metadata group, which every node holds and
	// snapshots whole.
	MaxScheduleData = 16 << 10
	// MinEveryMs is the shortest period of an every-schedule.
	MinEveryMs = 1000
	// MaxEveryMs is the longest (a year).
	MaxEveryMs = 366 * 24 * 3600 * 1000
)

// ErrStaleSchedule is returned by AdvanceSchedule when the schedule was
// deleted or set again since the caller read it, or is already past the
// occurrence: nothing changed.
var ErrStaleSchedule = errors.New("stale schedule advance")

// CatchUp says what happens to a schedule's missed occurrences.
type CatchUp uint8

const (
	// CatchUpSkip drops them.
	CatchUpSkip CatchUp = 0
	// CatchUpAll enqueues them late.
	CatchUpAll CatchUp = 1
)

func (c CatchUp) String() string {
	switch c {
	case CatchUpSkip:
		return "skip"
	case CatchUpAll:
		return "all"
	}
	return fmt.Sprintf("catch-up(%d)", uint8(c))
}

// ScheduleSpec is what a user sets: a name, the queue its tasks go to,
// exactly one of EveryMs and Cron, and the tasks' payload and priority.
type ScheduleSpec struct {
	Name     string
	Queue    string
	EveryMs  int64
	Cron     string
	Data     []byte
	Priority int32
	CatchUp  CatchUp
}

// Schedule is a schedule as the group holds it.
type Schedule struct {
	ScheduleSpec
	// Version is the raft index of the set that made this schedule: a
	// schedule deleted and set again is another version, and an advance
	// names the version it read.
	Version uint64
	// StartMs is when it was set (the proposer's clock, Unix ms).
	StartMs int64
	// DoneMs is the last occurrence handled; StartMs before the first.
	// INVARIANT: DoneMs >= StartMs.
	DoneMs int64
	// Enqueued and Skipped count the occurrences handled each way.
	Enqueued, Skipped uint64
}

func (s ScheduleSpec) equal(o ScheduleSpec) bool {
	return s.Name == o.Name && s.Queue == o.Queue && s.EveryMs == o.EveryMs && s.Cron == o.Cron &&
		bytes.Equal(s.Data, o.Data) && s.Priority == o.Priority && s.CatchUp == o.CatchUp
}

// ValidateScheduleName checks a schedule name: 1 to MaxScheduleNameBytes
// of [A-Za-z0-9._-] (it is part of its occurrences' keys).
func ValidateScheduleName(name string) error {
	if name == "" || len(name) > MaxScheduleNameBytes {
		return fmt.Errorf("%w: schedule name of %d bytes: want 1..%d", ErrInvalid, len(name), MaxScheduleNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: schedule name %q: byte %d is not one of [A-Za-z0-9._-]", ErrInvalid, name, i)
		}
	}
	return nil
}

// Validate checks s on its own (ErrInvalid otherwise).
func (s ScheduleSpec) Validate() error {
	if err := ValidateScheduleName(s.Name); err != nil {
		return err
	}
	switch {
	case s.Queue == "" || len(s.Queue) > maxQueueNameBytes:
		return fmt.Errorf("%w: schedule %s: queue name of %d bytes: want 1..%d", ErrInvalid, s.Name, len(s.Queue), maxQueueNameBytes)
	case (s.EveryMs == 0) == (s.Cron == ""):
		return fmt.Errorf("%w: schedule %s: give exactly one of every and cron", ErrInvalid, s.Name)
	case s.Cron == "" && (s.EveryMs < MinEveryMs || s.EveryMs > MaxEveryMs):
		return fmt.Errorf("%w: schedule %s: every %d ms: want %d ms to %d ms", ErrInvalid, s.Name, s.EveryMs, MinEveryMs, MaxEveryMs)
	case len(s.Data) > MaxScheduleData:
		return fmt.Errorf("%w: schedule %s: data of %d bytes, limit %d", ErrInvalid, s.Name, len(s.Data), MaxScheduleData)
	case s.CatchUp != CatchUpSkip && s.CatchUp != CatchUpAll:
		return fmt.Errorf("%w: schedule %s: %v", ErrInvalid, s.Name, s.CatchUp)
	}
	if s.Cron != "" {
		if _, err := cron.Parse(s.Cron); err != nil {
			return fmt.Errorf("%w: schedule %s: %v", ErrInvalid, s.Name, err)
		}
	}
	return nil
}

// ScheduleAdvance records that a schedule's occurrences after PrevDoneMs
// up to DoneMs were handled: Enqueued of them enqueued, Skipped skipped.
// It applies only if the schedule's progress is still PrevDoneMs (a
// compare-and-set), so each occurrence is counted by one advance.
type ScheduleAdvance struct {
	Name               string
	Version            uint64
	PrevDoneMs, DoneMs int64
	Enqueued, Skipped  uint64
}

// SetSchedule creates or replaces a schedule, starting at atMs (the
// caller's clock). Setting the spec a schedule has already changes
// nothing (its grid and progress stay); another spec under the name is a
// new version, starting at atMs.
func (g *Group) SetSchedule(ctx context.Context, s ScheduleSpec, atMs int64) (Schedule, error) {
	if err := s.Validate(); err != nil {
		return Schedule{}, fmt.Errorf("raftgroup: set schedule: %w", err)
	}
	rec := toScheduleSetRecord(s, atMs)
	r, err := g.propose(ctx, command{Op: opScheduleSet, ScheduleSet: &rec})
	if err != nil {
		return Schedule{}, err
	}
	if r.err != nil {
		return Schedule{}, fmt.Errorf("raftgroup: %w", r.err)
	}
	return r.schedule, nil
}

// DeleteSchedule deletes a schedule; found is false if there was none.
// The tasks it enqueued stay.
func (g *Group) DeleteSchedule(ctx context.Context, name string) (found bool, err error) {
	if err := ValidateScheduleName(name); err != nil {
		return false, fmt.Errorf("raftgroup: delete schedule: %w", err)
	}
	r, err := g.propose(ctx, command{Op: opScheduleDelete, ScheduleDelete: name})
	if err != nil {
		return false, err
	}
	return r.found, r.err
}

// AdvanceSchedule records a schedule's progress (ErrStaleSchedule if it
// no longer applies).
func (g *Group) AdvanceSchedule(ctx context.Context, a ScheduleAdvance) error {
	rec := scheduleAdvanceRecord(a)
	r, err := g.propose(ctx, command{Op: opScheduleAdvance, ScheduleAdvance: &rec})
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("raftgroup: %w", r.err)
	}
	return nil
}

func applyScheduleSet(m *Meta, s ScheduleSpec, atMs int64) (result, bool) {
	if err := s.Validate(); err != nil {
		return result{err: fmt.Errorf("set schedule: %w", err)}, false
	}
	if atMs <= 0 {
		return result{err: fmt.Errorf("set schedule %s: %w: start %d", s.Name, ErrInvalid, atMs)}, false
	}
	old, exists := m.Schedules[s.Name]
	switch {
	case exists && old.ScheduleSpec.equal(s):
		return result{schedule: old}, false
	case !exists && len(m.Schedules) >= MaxSchedules:
		return result{err: fmt.Errorf("set schedule %s: %w: %d schedules exist already", s.Name, ErrInvalid, MaxSchedules)}, false
	}
	if m.Schedules == nil {
		m.Schedules = make(map[string]Schedule)
	}
	s.Data = slices.Clone(s.Data)
	sc := Schedule{ScheduleSpec: s, Version: m.Applied + 1, StartMs: atMs, DoneMs: atMs}
	m.Schedules[s.Name] = sc
	return result{schedule: sc}, true
}

func applyScheduleDelete(m *Meta, name string) (result, bool) {
	if err := ValidateScheduleName(name); err != nil {
		return result{err: fmt.Errorf("delete schedule: %w", err)}, false
	}
	if _, ok := m.Schedules[name]; !ok {
		return result{}, false
	}
	delete(m.Schedules, name)
	return result{found: true}, true
}

func applyScheduleAdvance(m *Meta, a ScheduleAdvance) (result, bool) {
	s, ok := m.Schedules[a.Name]
	switch {
	case !ok || s.Version != a.Version:
		return result{err: fmt.Errorf("advance schedule %s: %w: version %d is gone", a.Name, ErrStaleSchedule, a.Version)}, false
	case a.PrevDoneMs != s.DoneMs || a.DoneMs <= s.DoneMs:
		return result{err: fmt.Errorf("advance schedule %s: %w: done to %d, asked from %d to %d", a.Name, ErrStaleSchedule, s.DoneMs, a.PrevDoneMs, a.DoneMs)}, false
	}
	s.DoneMs = a.DoneMs
	s.Enqueued += a.Enqueued
	s.Skipped += a.Skipped
	m.Schedules[a.Name] = s
	return result{}, true
}

// checkSchedules checks the registry's invariants.
func checkSchedules(ss map[string]Schedule) error {
	if len(ss) > MaxSchedules {
		return fmt.Errorf("%d schedules, limit %d", len(ss), MaxSchedules)
	}
	for name, s := range ss {
		if name != s.Name {
			return fmt.Errorf("schedule %s stored under %s", s.Name, name)
		}
		if err := s.Validate(); err != nil {
			return err
		}
		if s.Version == 0 || s.StartMs <= 0 || s.DoneMs < s.StartMs {
			return fmt.Errorf("schedule %s: version %d, start %d, done %d", name, s.Version, s.StartMs, s.DoneMs)
		}
	}
	return nil
}

// scheduleSetRecord is a set in the log.
type scheduleSetRecord struct {
	Name     string `cbor:"1,keyasint"`
	Queue    string `cbor:"2,keyasint"`
	EveryMs  int64  `cbor:"3,keyasint,omitempty"`
	Cron     string `cbor:"4,keyasint,omitempty"`
	Data     []byte `cbor:"5,keyasint,omitempty"`
	Priority int32  `cbor:"6,keyasint,omitempty"`
	CatchUp  uint8  `cbor:"7,keyasint,omitempty"`
	AtMs     int64  `cbor:"8,keyasint"`
}

func toScheduleSetRecord(s ScheduleSpec, atMs int64) scheduleSetRecord {
	return scheduleSetRecord{Name: s.Name, Queue: s.Queue, EveryMs: s.EveryMs, Cron: s.Cron, Data: s.Data,
		Priority: s.Priority, CatchUp: uint8(s.CatchUp), AtMs: atMs}
}

func (r *scheduleSetRecord) spec() ScheduleSpec {
	return ScheduleSpec{Name: r.Name, Queue: r.Queue, EveryMs: r.EveryMs, Cron: r.Cron, Data: r.Data,
		Priority: r.Priority, CatchUp: CatchUp(r.CatchUp)}
}

// scheduleAdvanceRecord is an advance in the log.
type scheduleAdvanceRecord struct {
	Name       string `cbor:"1,keyasint"`
	Version    uint64 `cbor:"2,keyasint"`
	PrevDoneMs int64  `cbor:"3,keyasint"`
	DoneMs     int64  `cbor:"4,keyasint"`
	Enqueued   uint64 `cbor:"5,keyasint,omitempty"`
	Skipped    uint64 `cbor:"6,keyasint,omitempty"`
}

// scheduleRecord is a schedule in a snapshot.
type scheduleRecord struct {
	Set      scheduleSetRecord `cbor:"1,keyasint"`
	Version  uint64            `cbor:"2,keyasint"`
	DoneMs   int64             `cbor:"3,keyasint"`
	Enqueued uint64            `cbor:"4,keyasint,omitempty"`
	Skipped  uint64            `cbor:"5,keyasint,omitempty"`
}

// scheduleRecords returns ss sorted by name, so equal states encode to
// equal bytes.
func scheduleRecords(ss map[string]Schedule) []scheduleRecord {
	var out []scheduleRecord
	for _, name := range slices.Sorted(maps.Keys(ss)) {
		s := ss[name]
		out = append(out, scheduleRecord{Set: toScheduleSetRecord(s.ScheduleSpec, s.StartMs), Version: s.Version,
			DoneMs: s.DoneMs, Enqueued: s.Enqueued, Skipped: s.Skipped})
	}
	return out
}

func (r *scheduleRecord) schedule() Schedule {
	return Schedule{ScheduleSpec: r.Set.spec(), Version: r.Version, StartMs: r.Set.AtMs, DoneMs: r.DoneMs,
		Enqueued: r.Enqueued, Skipped: r.Skipped}
}
