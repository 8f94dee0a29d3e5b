package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/cron"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

const (
	// MissedAfter is how late an occurrence may be handled and still
	// count as on time: a leader failover or a restart of the metadata
	// group's leader delays occurrences by seconds, and they are enqueued
	// whatever the catch-up policy. An occurrence handled later than this
	// was missed (the cluster was down, or the group had no quorum).
	MissedAfter = time.Minute
	// CatchUpHorizon bounds catch-up all: a missed occurrence older than
	// this is skipped even so, so that a cluster down for a month does not
	// flood its queues when it returns.
	CatchUpHorizon = 24 * time.Hour
	// ScanPerPass bounds the occurrences one pass looks at for a
	// schedule; a longer backlog takes several passes.
	ScanPerPass = 100_000
	// EnqueuePerPass bounds the occurrences one pass enqueues for a
	// schedule before it records its progress.
	EnqueuePerPass = 64
)

// Grid is a schedule's occurrence times.
type Grid struct {
	startMs, everyMs int64
	cron             *cron.Expr
}

// GridOf returns s's grid (an error only for a spec the group would
// have refused).
func GridOf(s raftgroup.Schedule) (Grid, error) {
	g := Grid{startMs: s.StartMs, everyMs: s.EveryMs}
	if s.Cron != "" {
		e, err := cron.Parse(s.Cron)
		if err != nil {
			return Grid{}, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		g.cron = e
	}
	return g, nil
}

// Next returns the first occurrence after afterMs; ok is false if there
// is none (a cron expression with no time left within its search).
func (g Grid) Next(afterMs int64) (int64, bool) {
	if g.cron != nil {
		return g.cron.Next(max(afterMs, g.startMs))
	}
	if afterMs < g.startMs {
		return g.startMs + g.everyMs, true
	}
	return g.startMs + ((afterMs-g.startMs)/g.everyMs+1)*g.everyMs, true
}

// On reports whether atMs is an occurrence of the grid.
func (g Grid) On(atMs int64) bool {
	if atMs <= g.startMs {
		return false
	}
	next, ok := g.Next(atMs - 1)
	return ok && next == atMs
}

// Step is what one pass does for a schedule: enqueue Enqueue (oldest
// first), skip Skipped occurrences, then advance the schedule's progress
// to DoneMs (unchanged if the pass handles nothing). SkippedBefore[i]
// counts the skipped occurrences before Enqueue[i]. NextMs is the first
// occurrence after DoneMs (0: none): due already if the pass stopped at a
// bound, else when to look again.
type Step struct {
	Enqueue       []int64
	SkippedBefore []uint64
	Skipped       uint64
	DoneMs        int64
	NextMs        int64
}

// Plan decides a pass for s at nowMs: the occurrences after s.DoneMs up
// to nowMs, each enqueued unless it was missed (later than MissedAfter)
// and the policy skips it, or it is older than CatchUpHorizon.
func Plan(s raftgroup.Schedule, g Grid, nowMs int64) Step {
	st := Step{DoneMs: s.DoneMs}
	for scanned := 0; scanned < ScanPerPass && len(st.Enqueue) < EnqueuePerPass; scanned++ {
		at, ok := g.Next(st.DoneMs)
		if !ok || at > nowMs {
			break
		}
		late := time.Duration(nowMs-at) * time.Millisecond
		if late > CatchUpHorizon || late > MissedAfter && s.CatchUp == raftgroup.CatchUpSkip {
			st.Skipped++
		} else {
			st.Enqueue = append(st.Enqueue, at)
			st.SkippedBefore = append(st.SkippedBefore, st.Skipped)
		}
		st.DoneMs = at
	}
	st.NextMs, _ = g.Next(st.DoneMs)
	return st
}

// Config is what the plane needs of the node's configuration.
type Config struct {
	Self uint64
	// Interval is the longest the plane sleeps between passes while it
	// leads: it also wakes at each schedule's next occurrence and on
	// every change of the metadata group.
	Interval time.Duration
	// EnqueueTimeout bounds one occurrence's enqueue.
	EnqueueTimeout time.Duration
	Clock          clock.Clock
	Log            *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0 || c.EnqueueTimeout <= 0:
		return fmt.Errorf("schedules: interval %v and enqueue timeout %v must be positive", c.Interval, c.EnqueueTimeout)
	case c.Clock == nil || c.Log == nil:
		return errors.New("schedules: clock and logger are required")
	}
	return nil
}

// Host is what the plane sees of the node that runs it.
type Host interface {
	// Leads reports whether this node leads the metadata group (and its
	// clock is fit to say what is due).
	Leads() bool
	// Schedules returns the schedules as the group holds them, and a
	// channel closed at the group's next change.
	Schedules() (map[string]raftgroup.Schedule, <-chan struct{})
	// Enqueue enqueues through the node's client path (routed to the
	// key's partition leader).
	Enqueue(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error)
	// Advance records a schedule's progress in the group.
	Advance(ctx context.Context, a raftgroup.ScheduleAdvance) error
	// Set and Delete change the group's schedules (raftgroup.Group's
	// SetSchedule and DeleteSchedule).
	Set(ctx context.Context, s raftgroup.ScheduleSpec, atMs int64) (raftgroup.Schedule, error)
	Delete(ctx context.Context, name string) (bool, error)
}

// Plane enqueues the occurrences of the cluster's schedules.
type Plane struct {
	cfg  Config
	host Host
}

// New returns the plane.
func New(cfg Config, host Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plane{cfg: cfg, host: host}, nil
}

// Loop runs passes while this node leads, until ctx ends.
func (p *Plane) Loop(ctx context.Context) {
	for {
		wait := p.cfg.Interval
		ss, changed := p.host.Schedules()
		if p.host.Leads() && len(ss) > 0 {
			if next := p.Pass(ctx, ss); next > 0 {
				wait = min(wait, time.Duration(next-clock.UnixMilli(p.cfg.Clock))*time.Millisecond)
			}
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// Pass handles what is due of every schedule and returns the earliest
// next occurrence (0: none).
func (p *Plane) Pass(ctx context.Context, ss map[string]raftgroup.Schedule) int64 {
	var next int64
	for _, name := range slices.Sorted(maps.Keys(ss)) {
		if ctx.Err() != nil {
			return 0
		}
		n := p.one(ctx, ss[name])
		if n > 0 && (next == 0 || n < next) {
			next = n
		}
	}
	return next
}

// one runs a pass for s and returns its next occurrence (0: none).
func (p *Plane) one(ctx context.Context, s raftgroup.Schedule) int64 {
	log := p.cfg.Log.With("schedule", s.Name, "version", s.Version)
	g, err := GridOf(s)
	if err != nil {
		log.Error("schedule without a grid", "err", err)
		return 0
	}
	st := Plan(s, g, clock.UnixMilli(p.cfg.Clock))
	if st.DoneMs == s.DoneMs {
		return st.NextMs
	}
	// Enqueue in order; on a failure, record the occurrences before it
	// (and the skips before it) and try the rest on the next pass.
	adv := raftgroup.ScheduleAdvance{Name: s.Name, Version: s.Version, PrevDoneMs: s.DoneMs, DoneMs: st.DoneMs, Skipped: st.Skipped}
	failed := false
	for i, at := range st.Enqueue {
		if err := p.enqueue(ctx, s, at); err != nil {
			log.Warn("occurrence not enqueued; retried", "at", time.UnixMilli(at).UTC(), "err", err)
			adv.Enqueued, adv.DoneMs = uint64(i), at-1
			adv.Skipped = st.SkippedBefore[i]
			failed = true
			break
		}
		adv.Enqueued = uint64(i + 1)
	}
	if adv.DoneMs <= s.DoneMs {
		return 0 // the first occurrence failed: after the Interval
	}
	if err := p.host.Advance(ctx, adv); err != nil {
		// Another enqueuer advanced it, or the group is out of reach: the
		// next pass reads the progress again; what was enqueued here is
		// found by its key if enqueued again.
		log.Info("schedule progress not recorded", "err", err)
		return 0
	}
	if adv.Skipped > 0 {
		log.Warn("missed occurrences skipped", "skipped", adv.Skipped, "catch_up", s.CatchUp, "through", time.UnixMilli(adv.DoneMs).UTC())
	}
	if failed {
		return 0 // the recorded progress wakes the loop; a second failure waits
	}
	return st.NextMs
}

// enqueue enqueues s's occurrence at.
func (p *Plane) enqueue(ctx context.Context, s raftgroup.Schedule, at int64) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.EnqueueTimeout)
	defer cancel()
	req := &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{
		Queue: s.Queue, Priority: s.Priority, Data: s.Data,
		Key:         wire.OccurrenceKey(s.Name, s.Version, at),
		Description: "schedule " + s.Name + " at " + time.UnixMilli(at).UTC().Format(time.RFC3339),
	}}}
	_, err := p.host.Enqueue(ctx, req)
	return err
}
