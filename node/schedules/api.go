package schedules

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The client operations on schedules: set and delete go through the
// metadata group; list reads this node's copy of it.

// Set creates or replaces a schedule and returns it as committed.
func (p *Plane) Set(ctx context.Context, req *wire.ScheduleSetRequest) (*wire.ScheduleView, error) {
	spec, err := specOf(req)
	if err != nil {
		return nil, err
	}
	s, err := p.host.Set(ctx, spec, clock.UnixMilli(p.cfg.Clock))
	if err != nil {
		return nil, groupErr("set schedule "+req.Name, err)
	}
	p.cfg.Log.Info("schedule set", "schedule", s.Name, "version", s.Version, "queue", s.Queue, "every_ms", s.EveryMs, "cron", s.Cron)
	return view(s), nil
}

// Delete deletes a schedule.
func (p *Plane) Delete(ctx context.Context, req *wire.ScheduleDeleteRequest) (*wire.ScheduleDeleteResponse, error) {
	if err := raftgroup.ValidateScheduleName(req.Name); err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "%v", err)
	}
	found, err := p.host.Delete(ctx, req.Name)
	if err != nil {
		return nil, groupErr("delete schedule "+req.Name, err)
	}
	if found {
		p.cfg.Log.Info("schedule deleted", "schedule", req.Name)
	}
	return &wire.ScheduleDeleteResponse{Deleted: found}, nil
}

// List lists the schedules by name (only the one named, if any: not
// found if there is none).
func (p *Plane) List(_ context.Context, req *wire.ScheduleListRequest) (*wire.ScheduleListResponse, error) {
	ss, _ := p.host.Schedules()
	out := &wire.ScheduleListResponse{Schedules: []wire.ScheduleView{}}
	if req.Name != "" {
		s, ok := ss[req.Name]
		if !ok {
			return nil, wire.Errorf(wire.CodeNotFound, "schedule %s not found", req.Name)
		}
		out.Schedules = append(out.Schedules, *view(s))
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(ss)) {
		out.Schedules = append(out.Schedules, *view(ss[name]))
	}
	return out, nil
}

func specOf(req *wire.ScheduleSetRequest) (raftgroup.ScheduleSpec, error) {
	if err := task.ValidateQueue(req.Queue); err != nil {
		return raftgroup.ScheduleSpec{}, fmt.Errorf("schedule %s: %w", req.Name, err)
	}
	spec := raftgroup.ScheduleSpec{Name: req.Name, Queue: req.Queue, EveryMs: req.EveryMs, Cron: req.Cron,
		Data: req.Data, Priority: req.Priority}
	switch req.CatchUp {
	case "", "skip":
		spec.CatchUp = raftgroup.CatchUpSkip
	case "all":
		spec.CatchUp = raftgroup.CatchUpAll
	default:
		return raftgroup.ScheduleSpec{}, fmt.Errorf("%w: schedule %s: catch_up %q: want skip or all", task.ErrInvalid, req.Name, req.CatchUp)
	}
	if err := spec.Validate(); err != nil {
		return raftgroup.ScheduleSpec{}, wire.Errorf(wire.CodeInvalid, "%v", err) // raftgroup's says "invalid argument"
	}
	return spec, nil
}

// groupErr maps a metadata-group error to the API's: a refused command
// is invalid; anything else may or may not have committed, and is safe
// to send again.
func groupErr(what string, err error) error {
	if errors.Is(err, raftgroup.ErrInvalid) {
		return wire.Errorf(wire.CodeInvalid, "%s: %v", what, err)
	}
	return fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, what, err)
}

func view(s raftgroup.Schedule) *wire.ScheduleView {
	v := &wire.ScheduleView{Name: s.Name, Queue: s.Queue, EveryMs: s.EveryMs, Cron: s.Cron, Data: s.Data,
		Priority: s.Priority, CatchUp: s.CatchUp.String(), Version: s.Version, Start: s.StartMs, Done: s.DoneMs,
		Enqueued: s.Enqueued, Skipped: s.Skipped}
	if g, err := GridOf(s); err == nil {
		v.Next, _ = g.Next(s.DoneMs)
	}
	return v
}
