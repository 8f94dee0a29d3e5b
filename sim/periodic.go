package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/wire"
)

// Periodic tasks in the simulation, as in the fault suite
// (faults/periodic.go): two schedules set before the faults, into a
// queue no client claims; after the final reads, the schedules and that
// queue are read back, and faults.Analyze's periodic check judges them:
// every occurrence handled enqueued once, none twice, none lost.

// periodicQueue is the schedules' queue: the clients claim from
// Config.Queue only.
const periodicQueue = "periodic"

// periodicSpecs are the run's schedules: one catches up on everything,
// one skips what was missed (a failover is never missed).
var periodicSpecs = []wire.ScheduleSetRequest{
	{Name: "sim-tick", Queue: periodicQueue, EveryMs: 1000, CatchUp: "all", Data: []byte("tick")},
	{Name: "sim-tock", Queue: periodicQueue, EveryMs: 2000, CatchUp: "skip", Data: []byte("tock")},
}

// periodicTries bounds the attempts of a set or a final read, each
// through the next node up; periodicPause is the pause between them.
const (
	periodicTries = 20
	periodicPause = 500 * time.Millisecond
)

// setSchedules sets the run's schedules, each through the first node
// that acknowledges it.
func (r *run) setSchedules(ctx context.Context) {
	r.periodic = &faults.PeriodicRecord{Queue: periodicQueue}
	for _, req := range periodicSpecs {
		set := faults.ScheduleSet{Request: req}
		for try := range periodicTries {
			i := try % r.cfg.Nodes
			var v *wire.ScheduleView
			err := r.c.call(ctx, i, func(s wire.Service) (err error) {
				v, err = s.ScheduleSet(ctx, &req)
				return err
			})
			if err == nil {
				set.Answer, set.Node, set.TNs = v, i+1, r.rec.now()
				break
			}
			set.Errors = append(set.Errors, fmt.Sprintf("node %d: %s %v", i+1, wire.CodeOf(err).Name(), err))
			sleep(ctx, periodicPause)
		}
		r.periodic.Sets = append(r.periodic.Sets, set)
	}
}

// readPeriodic reads the schedules back, then lists their queue: every
// occurrence the schedules count as handled was enqueued before the
// listing was sent.
func (r *run) readPeriodic(ctx context.Context) {
	p := r.periodic
	for try := range periodicTries {
		i := try % r.cfg.Nodes
		p.Schedules.Attempts++
		var l *wire.ScheduleListResponse
		err := r.c.call(ctx, i, func(s wire.Service) (err error) {
			l, err = s.ScheduleList(ctx, &wire.ScheduleListRequest{})
			return err
		})
		if err == nil {
			p.Schedules.OK, p.Schedules.Node, p.Schedules.TNs, p.Schedules.Views = true, i+1, r.rec.now(), l.Schedules
			break
		}
		p.Schedules.Errors = append(p.Schedules.Errors, fmt.Sprintf("node %d: %v", i+1, err))
		sleep(ctx, periodicPause)
	}
	for try := range periodicTries {
		i := try % r.cfg.Nodes
		p.Tasks.Attempts++
		sent := r.rec.now()
		var tasks []faults.PeriodicTask
		err := r.c.call(ctx, i, func(s wire.Service) error {
			return s.List(ctx, &wire.ListRequest{Queue: periodicQueue}, func(pg *wire.ListPage) error {
				for _, v := range pg.Tasks {
					t := faults.PeriodicTask{ID: v.ID.String(), Queue: v.Queue, Key: v.Key, State: v.State, EnqueuedAt: v.EnqueuedAt}
					if v.Cancelled != nil {
						t.Cancelled, t.CancelReason = true, v.Cancelled.Reason
					}
					tasks = append(tasks, t)
				}
				return nil
			})
		})
		if err == nil {
			p.Tasks.OK, p.Tasks.Node, p.Tasks.TNs, p.Tasks.Tasks = true, i+1, sent, tasks
			break
		}
		p.Tasks.Errors = append(p.Tasks.Errors, fmt.Sprintf("node %d: %v", i+1, err))
		sleep(ctx, periodicPause)
	}
}
