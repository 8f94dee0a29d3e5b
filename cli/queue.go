package cli

import (
	"context"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl queue`: a queue's settings, kept cluster-wide.

func ctlQueueCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "queue",
		Usage: "a queue's settings, applied by every node (get, set, pause, resume), and its dead tasks (requeue-dead, purge-dead)",
		Subcommands: []*ucli.Command{
			{
				Name:      "get",
				Usage:     "print the queue's settings (0: the node's default)",
				ArgsUsage: "QUEUE",
				Action:    ctlActionArgs(1, ctlQueueGet),
			},
			{
				Name: "set",
				Usage: "change the queue's settings (only the flags given; 0 resets to the node's default); " +
					"a task's own --max-attempts and --time-limit, a claim's --ttl, a fail's --retry-after and a worker's own flags override them",
				ArgsUsage: "QUEUE",
				Flags: []ucli.Flag{
					&ucli.UintFlag{Name: "max-attempts", Usage: "of tasks enqueued without one"},
					&ucli.DurationFlag{Name: "default-ttl", Usage: "lease of a claim that asks for none"},
					&ucli.StringFlag{Name: "backoff", Usage: "BASE,MAX: the delay after a failed attempt, BASE·2^(attempts-1) up to MAX (e.g. 1s,10m)"},
					&ucli.GenericFlag{Name: "retention", Value: &days{}, Usage: "keep the queue's completed and cancelled tasks this long instead of the node's --retention (d for days, as in 30d)"},
					&ucli.DurationFlag{Name: "time-limit", Usage: "of tasks enqueued without one: how long one claim may run"},
					&ucli.DurationFlag{Name: "visibility", Usage: "workers' default: how long one claim's whole batch may run"},
					&ucli.UintFlag{Name: "batch", Usage: "workers' default: the most tasks one claim asks for"},
					&ucli.DurationFlag{Name: "long-poll", Usage: "workers' default: how long a claim waits once the queue was found empty"},
					&ucli.BoolFlag{Name: "hint", Usage: "hint every enqueue of the queue whose replicas cannot be reached, as enqueue --hint does (--hint=false: only those that ask)"},
				},
				Action: ctlActionArgs(1, ctlQueueSet),
			},
			{
				Name:      "pause",
				Usage:     "stop the queue's claims cluster-wide; it still takes enqueues",
				ArgsUsage: "QUEUE",
				Action:    ctlActionArgs(1, ctlQueuePause(true)),
			},
			{
				Name:      "resume",
				Usage:     "let the queue's tasks be claimed again",
				ArgsUsage: "QUEUE",
				Action:    ctlActionArgs(1, ctlQueuePause(false)),
			},
			{
				Name:      "requeue-dead",
				Usage:     "make every dead task of the queue ready again; prints how many",
				ArgsUsage: "QUEUE",
				Action:    ctlActionArgs(1, ctlQueueDead((*wire.Client).RequeueDead)),
			},
			{
				Name:      "purge-dead",
				Usage:     "delete every dead task of the queue but those others depend on (skipped); prints how many",
				ArgsUsage: "QUEUE",
				Action:    ctlActionArgs(1, ctlQueueDead((*wire.Client).PurgeDead)),
			},
		},
	}
}

func ctlQueueGet(e *ctlEnv) error {
	resp, err := e.cl.QueueGet(e.ctx, &wire.QueueGetRequest{Queue: e.c.Args().First()})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlQueueSet(e *ctlEnv) error {
	c := e.c
	req := &wire.QueueSetRequest{Queue: c.Args().First()}
	if c.IsSet("max-attempts") {
		v := c.Uint("max-attempts")
		if uint64(v) > uint64(^uint32(0)) {
			return usagef("--max-attempts %d out of range", v)
		}
		n := uint32(v)
		req.MaxAttempts = &n
	}
	if c.IsSet("default-ttl") {
		ms := c.Duration("default-ttl").Milliseconds()
		req.DefaultTTLMs = &ms
	}
	if c.IsSet("backoff") {
		base, maxD, err := parseBackoff(c.String("backoff"))
		if err != nil {
			return err
		}
		req.BackoffBaseMs, req.BackoffMaxMs = &base, &maxD
	}
	if c.IsSet("retention") {
		ms := c.Generic("retention").(*days).d.Milliseconds()
		req.RetentionMs = &ms
	}
	for flag, dst := range map[string]**int64{"time-limit": &req.TimeLimitMs, "visibility": &req.VisibilityMs, "long-poll": &req.LongPollMs} {
		if c.IsSet(flag) {
			ms := c.Duration(flag).Milliseconds()
			*dst = &ms
		}
	}
	if c.IsSet("batch") {
		v := c.Uint("batch")
		if uint64(v) > uint64(^uint32(0)) {
			return usagef("--batch %d out of range", v)
		}
		n := uint32(v)
		req.Batch = &n
	}
	if c.IsSet("hint") {
		v := c.Bool("hint")
		req.Hint = &v
	}
	if req.MaxAttempts == nil && req.DefaultTTLMs == nil && req.BackoffBaseMs == nil && req.RetentionMs == nil &&
		req.TimeLimitMs == nil && req.VisibilityMs == nil && req.LongPollMs == nil && req.Batch == nil && req.Hint == nil {
		return usagef("queue set: give at least one of --max-attempts, --default-ttl, --backoff, --retention, --time-limit, --visibility, --batch, --long-poll, --hint")
	}
	resp, err := e.cl.QueueSet(e.ctx, req)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

// parseBackoff parses BASE,MAX into milliseconds.
func parseBackoff(s string) (base, maxD int64, err error) {
	b, m, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, usagef("--backoff %q: want BASE,MAX (e.g. 1s,10m)", s)
	}
	bd, err1 := time.ParseDuration(b)
	md, err2 := time.ParseDuration(m)
	if err1 != nil || err2 != nil || bd < 0 || md < bd {
		return 0, 0, usagef("--backoff %q: want BASE,MAX durations with 0 <= BASE <= MAX", s)
	}
	return bd.Milliseconds(), md.Milliseconds(), nil
}

func ctlQueuePause(paused bool) func(e *ctlEnv) error {
	return func(e *ctlEnv) error {
		resp, err := e.cl.QueueSet(e.ctx, &wire.QueueSetRequest{Queue: e.c.Args().First(), Paused: &paused})
		if err != nil {
			return err
		}
		return e.out.Encode(resp)
	}
}

func ctlQueueDead(op func(*wire.Client, context.Context, *wire.DeadRequest) (*wire.BulkResponse, error)) func(e *ctlEnv) error {
	return func(e *ctlEnv) error {
		resp, err := op(e.cl, e.ctx, &wire.DeadRequest{Queue: e.c.Args().First()})
		if err != nil {
			return err
		}
		return e.out.Encode(resp)
	}
}
