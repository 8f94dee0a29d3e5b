package cli

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl group`: a task group (the --group label of enqueue), read
// and cancelled as one.

func ctlGroupCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "group",
		Usage: "a task group, the --group label of enqueue: its counts and progress (show), or cancel it",
		Subcommands: []*ucli.Command{
			{
				Name: "show",
				Usage: "print the group's counts by state, cluster-wide, its progress as completed of total " +
					"(tasks garbage collection took count in neither) and its first dead tasks with their last failure",
				ArgsUsage: "GROUP",
				Flags: []ucli.Flag{
					&ucli.IntFlag{Name: "dead", Usage: "list up to this many dead tasks (0: 10; at most 1000)"},
				},
				Action: ctlActionArgs(1, ctlGroupShow),
			},
			{
				Name: "cancel",
				Usage: "cancel every task of the group that is not ended, as ctl cancel does one; prints how many " +
					"({\"done\",\"skipped\"}: skipped ended meanwhile). Safe to repeat",
				ArgsUsage: "GROUP",
				Flags:     []ucli.Flag{&ucli.StringFlag{Name: "reason", Usage: "recorded on each task"}},
				Action:    ctlActionArgs(1, ctlGroupCancel),
			},
		},
	}
}

func ctlGroupShow(e *ctlEnv) error {
	resp, err := e.cl.Group(e.ctx, &wire.GroupRequest{Group: e.c.Args().First(), Dead: e.c.Int("dead")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlGroupCancel(e *ctlEnv) error {
	resp, err := e.cl.GroupCancel(e.ctx, &wire.GroupCancelRequest{Group: e.c.Args().First(), Reason: e.c.String("reason")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}
