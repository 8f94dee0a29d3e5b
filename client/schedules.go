package client

import (
	"context"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Schedule is a periodic task as the cluster holds it: its spec, its
// version (a new one each time it is set to another spec), and its
// progress (Done, the last occurrence handled; Next, the one after).
type Schedule = wire.ScheduleView

// ScheduleSpec is a periodic task: every Every, or at the times of the
// five-field cron expression Cron (UTC; exactly one of the two), a task
// with Data and Priority is enqueued in Queue, once per occurrence, with
// the key "schedule:NAME:VERSION:TIME" (Unix ms).
type ScheduleSpec struct {
	Queue    string
	Every    time.Duration
	Cron     string
	Data     []byte
	Priority int32
	// CatchUpAll enqueues, late, the occurrences missed while the
	// cluster could not enqueue them (those of the last day); without it
	// they are skipped. An occurrence a minute late or less (a failover)
	// is never missed.
	CatchUpAll bool
}

// SetSchedule creates or replaces the schedule name. Setting the spec it
// has already changes nothing; another spec replaces it from now on.
func (c *Client) SetSchedule(ctx context.Context, name string, s ScheduleSpec) (*Schedule, error) {
	req := &wire.ScheduleSetRequest{Name: name, Queue: s.Queue, EveryMs: s.Every.Milliseconds(), Cron: s.Cron,
		Data: s.Data, Priority: s.Priority}
	if s.CatchUpAll {
		req.CatchUp = "all"
	}
	var resp *wire.ScheduleView
	err := c.do(ctx, "schedule-set", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.ScheduleSet(ctx, req)
		return err
	})
	return resp, err
}

// Schedules lists the schedules by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var resp *wire.ScheduleListResponse
	err := c.do(ctx, "schedule-list", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.ScheduleList(ctx, &wire.ScheduleListRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Schedules, nil
}

// DeleteSchedule deletes the schedule name; deleted is false if there
// was none. The tasks it enqueued stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) (deleted bool, err error) {
	var resp *wire.ScheduleDeleteResponse
	err = c.do(ctx, "schedule-delete", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.ScheduleDelete(ctx, &wire.ScheduleDeleteRequest{Name: name})
		return err
	})
	if err != nil {
		return false, err
	}
	return resp.Deleted, nil
}
