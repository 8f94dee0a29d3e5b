package cli

import (
	"math"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl schedule`: periodic tasks, kept cluster-wide.

func ctlScheduleCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "schedule",
		Usage: "periodic tasks: each occurrence enqueued once, by whichever node leads the metadata group (set, list, delete)",
		Subcommands: []*ucli.Command{
			{
				Name: "set",
				Usage: "create or replace the schedule NAME: a task in --queue every --every, or at the times of --cron (UTC); " +
					"setting the spec it has changes nothing, another spec replaces it from now on",
				ArgsUsage: "NAME",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "queue", Usage: "the queue its tasks go to (required)"},
					&ucli.DurationFlag{Name: "every", Usage: "the period, 1s or more (from when it is set)"},
					&ucli.StringFlag{Name: "cron", Usage: `a five-field cron expression, in UTC ("*/15 * * * *", "0 3 * * mon-fri", "@daily")`},
					&ucli.StringFlag{Name: "data", Usage: "the tasks' payload"},
					&ucli.StringFlag{Name: "data-file", Usage: "read the payload from a file (- for stdin)"},
					&ucli.IntFlag{Name: "priority", Usage: "the tasks' priority (higher first)"},
					&ucli.StringFlag{Name: "catch-up", Value: "skip", Usage: "occurrences missed while the cluster could not enqueue them (more than a minute late): " +
						"skip them, or enqueue all of those of the last day, late"},
				},
				Action: ctlActionArgs(1, ctlScheduleSet, "queue"),
			},
			{
				Name:   "list",
				Usage:  "print the schedules with their progress: done is the last occurrence handled, next the one after (times in Unix ms)",
				Flags:  []ucli.Flag{&ucli.StringFlag{Name: "name", Usage: "only this schedule"}},
				Action: ctlAction(ctlScheduleList),
			},
			{
				Name:      "delete",
				Usage:     "delete the schedule NAME; the tasks it enqueued stay",
				ArgsUsage: "NAME",
				Action:    ctlActionArgs(1, ctlScheduleDelete),
			},
		},
	}
}

func ctlScheduleSet(e *ctlEnv) error {
	c := e.c
	if c.IsSet("every") == c.IsSet("cron") {
		return usagef("give one of --every and --cron")
	}
	p := c.Int("priority")
	if p < math.MinInt32 || p > math.MaxInt32 {
		return usagef("--priority %d does not fit in int32", p)
	}
	data, err := payloadOf(c)
	if err != nil {
		return err
	}
	req := &wire.ScheduleSetRequest{Name: c.Args().First(), Queue: c.String("queue"), EveryMs: c.Duration("every").Milliseconds(),
		Cron: c.String("cron"), Data: data, Priority: int32(p), CatchUp: c.String("catch-up")}
	if c.IsSet("every") && req.EveryMs <= 0 {
		return usagef("--every %v must be positive", c.Duration("every"))
	}
	resp, err := e.cl.ScheduleSet(e.ctx, req)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlScheduleList(e *ctlEnv) error {
	resp, err := e.cl.ScheduleList(e.ctx, &wire.ScheduleListRequest{Name: e.c.String("name")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlScheduleDelete(e *ctlEnv) error {
	resp, err := e.cl.ScheduleDelete(e.ctx, &wire.ScheduleDeleteRequest{Name: e.c.Args().First()})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}
