package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl upgrade` (docs/design.md, Versions), `ctl decommission`
// and `ctl remove` (docs/design.md, Retiring nodes): a cluster's life.

// Defaults of the commands that wait for partitions to move.
const (
	// decommissionWait bounds a decommission: every partition of the
	// node copied to another member and handed over.
	decommissionWait = 30 * time.Minute
	// removeWait bounds a removal's wait for placement to refill the
	// cohorts that named the node.
	removeWait = 5 * time.Minute
	// retirePoll is how often ctl decommission asks how far it got.
	retirePoll = time.Second
)

func ctlUpgradeCommand() *ucli.Command {
	return &ucli.Command{
		Name: "upgrade",
		Usage: "the cluster version: what the cluster runs and what each member's build supports (status); " +
			"finalize raises it to the highest all support (done by itself unless a node runs with --upgrade-hold); no rollback past it",
		Subcommands: []*ucli.Command{
			{Name: "status", Usage: "the cluster version, and each member's build and highest supported version", Action: ctlAction(ctlUpgrade(false))},
			{Name: "finalize", Usage: "raise the cluster version to the highest every member supports; refused while a member does not answer", Action: ctlAction(ctlUpgrade(true))},
		},
		Action: ctlAction(ctlUpgrade(false)),
	}
}

// ctlUpgrade is ctl upgrade status (finalize false) and finalize.
func ctlUpgrade(finalize bool) func(e *ctlEnv) error {
	return func(e *ctlEnv) error {
		st, err := e.cl.Upgrade(e.ctx, &wire.UpgradeRequest{Finalize: finalize})
		if err != nil {
			return err
		}
		return e.out.Encode(st)
	}
}

func ctlRemoveCommand() *ucli.Command {
	return &ucli.Command{
		Name: "remove",
		Usage: "forget a node gone for good (it must be down): waits until its partitions' cohorts are refilled, then removes it; " +
			"its id never joins again (wipe its data dir to bring the machine back as a new node)",
		ArgsUsage: "NODE",
		Flags:     []ucli.Flag{&ucli.DurationFlag{Name: "wait", Value: removeWait, Usage: "how long to wait for the cohorts to be refilled"}},
		Action:    ctlActionArgs(1, ctlRemove),
	}
}

func ctlDecommissionCommand() *ucli.Command {
	return &ucli.Command{
		Name: "decommission",
		Usage: "retire a live node: move its partitions to the other members (progress on a terminal), then make it leave and remove it; " +
			"refused when fewer members than the replication factor would be left",
		ArgsUsage: "NODE",
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "wait", Value: decommissionWait, Usage: "how long to wait for the partitions to move"},
			&ucli.BoolFlag{Name: "cancel", Usage: "stop moving the node's partitions away (what moved stays moved)"},
		},
		Action: ctlActionArgs(1, ctlDecommission),
	}
}

// nodeArg parses the command's NODE argument: a node id as ctl cluster
// prints it.
func nodeArg(e *ctlEnv) (uint64, error) {
	s := e.c.Args().First()
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("%s: %q is not a node id (ctl cluster lists them)", e.c.Command.Name, s)
	}
	return id, nil
}

func ctlRemove(e *ctlEnv) error {
	id, err := nodeArg(e)
	if err != nil {
		return err
	}
	resp, err := e.cl.RemoveNode(e.ctx, &wire.RemoveNodeRequest{Node: id})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlDecommission(e *ctlEnv) error {
	id, err := nodeArg(e)
	if err != nil {
		return err
	}
	if e.c.Bool("cancel") {
		st, err := e.cl.Decommission(e.ctx, &wire.DecommissionRequest{Node: id, Cancel: true})
		if err != nil {
			return err
		}
		return e.out.Encode(st)
	}
	progress := newProgress(e.c.App.ErrWriter)
	var st *wire.DecommissionStatus
	for {
		st, err = e.cl.Decommission(e.ctx, &wire.DecommissionRequest{Node: id})
		if err != nil {
			progress.done()
			return err
		}
		if st.Done() {
			break
		}
		if len(st.Remaining) > 0 {
			progress.show(fmt.Sprintf("decommission node %d: %d partitions to move", id, len(st.Remaining)))
		} else {
			progress.show(fmt.Sprintf("decommission node %d: its partitions moved; waiting for the metadata group to replace it as a voter", id))
		}
		select {
		case <-e.ctx.Done():
			progress.done()
			return fmt.Errorf("decommission node %d: partitions %v still on it (voter: %v) after --wait (it keeps retiring: run the command again to follow it, or --cancel)", id, st.Remaining, st.Voter)
		case <-time.After(retirePoll):
		}
	}
	progress.show(fmt.Sprintf("decommission node %d: its partitions moved; asking it to leave", id))
	if _, err := e.cl.Decommission(e.ctx, &wire.DecommissionRequest{Node: id, Leave: true}); err != nil {
		progress.done()
		return fmt.Errorf("decommission node %d: its partitions moved, but it did not leave: %w (stop it, then ctl remove %d)", id, err, id)
	}
	var resp *wire.RemoveNodeResponse
	for {
		// The node leaves gossip as it stops; until then a removal is
		// refused as alive.
		resp, err = e.cl.RemoveNode(e.ctx, &wire.RemoveNodeRequest{Node: id})
		var we *wire.Error
		if err == nil || !errors.As(err, &we) || we.Code != wire.CodeConflict || e.ctx.Err() != nil {
			break
		}
		select {
		case <-e.ctx.Done():
		case <-time.After(retirePoll):
		}
	}
	progress.done()
	if err != nil {
		return fmt.Errorf("decommission node %d: it left, but was not removed: %w (ctl remove %d)", id, err, id)
	}
	return e.out.Encode(resp)
}

// progressLine shows how far a long command got on w: one line redrawn
// in place on a terminal; elsewhere (a log, a pipe) a line each time it
// changes.
type progressLine struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgress(w io.Writer) *progressLine { return &progressLine{w: w, tty: isTerminal(w)} }

func (p *progressLine) show(msg string) {
	if msg == p.last {
		return
	}
	p.last = msg
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", msg)
		return
	}
	fmt.Fprintln(p.w, msg)
}

// done ends the line on a terminal.
func (p *progressLine) done() {
	if p.tty && p.last != "" {
		fmt.Fprintf(p.w, "\r\033[K")
	}
	p.last = ""
}
