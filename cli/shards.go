package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl shards`: worker shards.

// shardStopGrace is how long a command whose shard ended has after
// SIGTERM before SIGKILL: inside the 5 s the cluster waits past a
// member's lease before it gives the member's index to another
// (node/shards.ExpiryMargin), with a second to spare for ctl to see it
// gone (client.ShardConfig.StopTimeout).
const shardStopGrace = 3 * time.Second

func ctlShardsCommand() *ucli.Command {
	return &ucli.Command{
		Name: "shards",
		Usage: "worker shards: the members of a named set split work by index (id % count == index), " +
			"no index ever held by two members at once (join, members)",
		Subcommands: []*ucli.Command{
			{
				Name:      "join",
				ArgsUsage: "NAME -- COMMAND [ARG...]",
				Usage: "join the set NAME and run COMMAND while this member holds an index, with SKULD_SHARD_INDEX, SKULD_SHARD_COUNT, " +
					"SKULD_SHARD_GENERATION, SKULD_SHARD_SET and SKULD_SHARD_MEMBER in its environment",
				Description: "When the set's members change, the command gets SIGTERM (SIGKILL 3 s later), and once every member stopped,\n" +
					"it is started again with its new index and count. It also stops when this member's lease runs out (the\n" +
					"cluster out of reach for --ttl). It runs in a process group of its own. A command that exits 0 leaves the\n" +
					"member idle until its shard changes; one that fails ends ctl (status 1), which leaves the set.\n" +
					"SIGINT, SIGTERM or SIGHUP stop the command and leave the set.",
				Flags: []ucli.Flag{
					&ucli.DurationFlag{Name: "ttl", Value: client.DefaultShardTTL, Usage: "this member's lease: cut off from the cluster this long, it stops its command; 5 s later the others take its index"},
				},
				Action: ctlShardsJoin,
			},
			{
				Name:      "members",
				ArgsUsage: "NAME",
				Usage:     "print the set's active generation, its members with their indexes, and the generation waiting for members to stop",
				Action:    ctlActionArgs(1, ctlShardsMembers),
			},
		},
	}
}

func ctlShardsMembers(e *ctlEnv) error {
	v, err := e.cl.ShardMembers(e.ctx, &wire.ShardMembersRequest{Set: e.c.Args().First()})
	if err != nil {
		return err
	}
	return e.out.Encode(v)
}

func ctlShardsJoin(c *ucli.Context) error {
	args := c.Args().Slice()
	if len(args) > 1 && args[1] == "--" {
		args = append(args[:1], args[2:]...)
	}
	if len(args) < 2 {
		return usagef("shards join: want NAME -- COMMAND [ARG...]")
	}
	name, command := args[0], args[1:]
	if strings.HasPrefix(name, "-") {
		return usagef("shards join: flags go before the name (%q)", name)
	}
	cl, err := goClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(c.Context, workSignals()...)
	defer stop()
	sm := &shardMember{command: command, set: name, stdout: c.App.Writer, stderr: c.App.ErrWriter}
	m, err := cl.JoinShards(ctx, name, client.ShardConfig{TTL: c.Duration("ttl"), StopTimeout: shardStopGrace + time.Second})
	if err != nil {
		return err
	}
	sm.member = m.ID()
	sm.note("joined shard set %s as member %s", name, m.ID())
	err = m.Run(ctx, sm.run)
	if err != nil {
		return err
	}
	sm.note("left shard set %s", name)
	return nil
}

// shardMember runs the command of one member.
type shardMember struct {
	command        []string
	set, member    string
	stdout, stderr io.Writer
	mu             sync.Mutex // orders the notes
}

func (sm *shardMember) note(format string, args ...any) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	fmt.Fprintf(sm.stderr, "skuldd: "+format+"\n", args...)
}

// run runs the command for shard s until it exits or ctx ends (the shard
// ended: SIGTERM, then SIGKILL shardStopGrace later).
func (sm *shardMember) run(ctx context.Context, s client.Shard) error {
	cmd := exec.Command(sm.command[0], sm.command[1:]...)
	// A process group of its own (a terminal's Ctrl-C reaches ctl only,
	// which stops the command and leaves); and killed with ctl, should
	// ctl die without stopping it (SIGKILL, an OOM kill): the cluster
	// gives its index to another member once ctl's lease runs out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = sm.stdout, sm.stderr
	cmd.Env = append(os.Environ(),
		"SKULD_SHARD_SET="+s.Set,
		"SKULD_SHARD_MEMBER="+sm.member,
		"SKULD_SHARD_INDEX="+strconv.Itoa(s.Index),
		"SKULD_SHARD_COUNT="+strconv.Itoa(s.Count),
		"SKULD_SHARD_GENERATION="+strconv.FormatUint(s.Generation, 10),
	)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", sm.command[0], err)
	}
	p := &workProc{killDelay: shardStopGrace}
	p.setGroup(cmd.Process.Pid)
	sm.note("index %d of %d (generation %d): started %s (pid %d)", s.Index, s.Count, s.Generation, sm.command[0], cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		p.exited()
		if err != nil {
			return fmt.Errorf("%s: %w", sm.command[0], err)
		}
		sm.note("index %d of %d (generation %d): %s exited 0; idle until the shard changes", s.Index, s.Count, s.Generation, sm.command[0])
		return nil
	case <-ctx.Done():
		sm.note("index %d of %d (generation %d): the shard ends; SIGTERM to %s (SIGKILL in %v)", s.Index, s.Count, s.Generation, sm.command[0], shardStopGrace)
		p.stop(false, false)
		err := <-done
		p.exited()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return fmt.Errorf("%s: %w", sm.command[0], err)
		}
		return nil
	}
}
