package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// defaultAddr is where ctl finds a node unless told otherwise.
const defaultAddr = "127.0.0.1:13000"

// ctlTimeout bounds one ctl request (a claim's --wait is added to it).
const ctlTimeout = 30 * time.Second

// ctlDialTimeout bounds connecting to one node of --addr: a node that is
// down (or not listening there) is reported, or the next one tried, after
// this long. A QUIC handshake takes a round trip or two; the rest is
// room for a lost packet's resend.
const ctlDialTimeout = time.Second

func ctlCommand() *ucli.Command {
	idFlag := &ucli.StringFlag{Name: "id", Usage: "task id (40 hex characters); required"}
	claimFlag := &ucli.UintFlag{Name: "claim", Usage: "claim id; required"}
	return &ucli.Command{
		Name:  "ctl",
		Usage: "talk to a node over QUIC; output is JSON, one object per line (-o table for people); flags may come anywhere after ctl",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "addr", Value: defaultAddr, EnvVars: envName("addr"), Usage: "node address host:port, or several comma-separated: the first that answers is used"},
			&ucli.DurationFlag{Name: "timeout", Value: ctlTimeout, Usage: "request timeout"},
			&ucli.DurationFlag{Name: "dial-timeout", Value: ctlDialTimeout, Usage: "how long to wait for one node of --addr to answer before trying the next"},
			&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outputJSON, EnvVars: envName("output"), Usage: "json (one object per line, for scripts) or table (aligned columns, local times, for people)"},
			authFlags()[0], authFlags()[1],
		},
		Subcommands: []*ucli.Command{
			{
				Name:  "enqueue",
				Usage: "enqueue a task; prints {\"id\",\"acks\"} (and \"duplicate\":true when --key was taken: id is the task holding it)",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "queue"},
					&ucli.IntFlag{Name: "priority", Usage: "int32; higher is claimed first"},
					&ucli.StringFlag{Name: "data", Usage: "payload"},
					&ucli.StringFlag{Name: "data-file", Usage: "read the payload from a file (- for stdin)"},
					&ucli.StringSliceFlag{Name: "dep", Usage: "id of a task that must complete first (repeatable)"},
					&ucli.DurationFlag{Name: "delay", Usage: "not claimable before now + delay"},
					&ucli.StringFlag{Name: "group"},
					&ucli.StringFlag{Name: "kind", Usage: "what the task does, for workers that route by kind"},
					&ucli.StringFlag{Name: "subtopic", Usage: "a label within the queue, for list and count"},
					&ucli.StringFlag{Name: "description"},
					&ucli.UintFlag{Name: "max-attempts", Usage: "attempts before the task is dead (default: the queue's, else the node's)"},
					&ucli.DurationFlag{Name: "time-limit", Usage: "how long one claim may run, renewals included; the leader ends it there, a failed attempt (default: the queue's, else none)"},
					&ucli.StringFlag{Name: "key", Usage: "unique key: while a task of the queue with it is kept (not cancelled), enqueue yields that task instead"},
					&ucli.DurationFlag{Name: "unique-for", Usage: "with --key: the key is held this long after the enqueue at most (default: while the task is kept)"},
					&ucli.IntFlag{Name: "w", Usage: "durable replica acks to wait for (default: majority)"},
					&ucli.BoolFlag{Name: "hint", Usage: "if the task's replicas cannot be reached, keep it on the node (answered \"hinted\") and hand it over later"},
				},
				Action: ctlAction(ctlEnqueue, "queue"),
			},
			{
				Name:  "claim",
				Usage: "claim ready tasks; prints one task per line, exits 3 if none",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "queue"},
					&ucli.DurationFlag{Name: "ttl", Usage: "lease (default: the node's, 30s)"},
					&ucli.IntFlag{Name: "count", Value: 1},
					&ucli.DurationFlag{Name: "wait", Usage: "long-poll up to this long for work"},
				},
				Action: ctlAction(ctlClaim, "queue"),
			},
			{
				Name:   "renew",
				Usage:  "extend a claim",
				Flags:  []ucli.Flag{idFlag, claimFlag, &ucli.DurationFlag{Name: "ttl"}},
				Action: ctlAction(ctlRenew, "id", "claim"),
			},
			{
				Name:  "update",
				Usage: "append a progress entry to a claim's history",
				Flags: []ucli.Flag{idFlag, claimFlag,
					&ucli.Uint64Flag{Name: "seq"},
					&ucli.StringFlag{Name: "data"}},
				Action: ctlAction(ctlUpdate, "id", "claim", "seq"),
			},
			{
				Name:  "complete",
				Usage: "complete a task under its claim",
				Flags: []ucli.Flag{idFlag, claimFlag, &ucli.Uint64Flag{Name: "seq", Usage: "default: after the last update"},
					&ucli.StringFlag{Name: "next-queue", Usage: "also claim the next task of this queue (printed under \"next\")"},
					&ucli.DurationFlag{Name: "next-ttl", Usage: "lease of the next task"}},
				Action: ctlAction(ctlComplete, "id", "claim"),
			},
			{
				Name:  "fail",
				Usage: "end a claim as a failed attempt",
				Flags: []ucli.Flag{idFlag, claimFlag,
					&ucli.StringFlag{Name: "reason"},
					&ucli.DurationFlag{Name: "retry-after", Usage: "default: the queue's backoff, else the node's"},
					&ucli.BoolFlag{Name: "no-retry", Usage: "the task is dead at once, whatever its attempts left (a payload that cannot succeed)"}},
				Action: ctlAction(ctlFail, "id", "claim"),
			},
			{
				Name:   "snooze",
				Usage:  "end a claim without counting an attempt; ready again after --delay",
				Flags:  []ucli.Flag{idFlag, claimFlag, &ucli.DurationFlag{Name: "delay"}},
				Action: ctlAction(ctlSnooze, "id", "claim", "delay"),
			},
			{
				Name:   "requeue",
				Usage:  "make a dead task ready again",
				Flags:  []ucli.Flag{idFlag},
				Action: ctlAction(ctlRequeue, "id"),
			},
			{
				Name:   "cancel",
				Usage:  "end a task that is not completed as cancelled: never claimed again; its claim is superseded; its dependents stay blocked",
				Flags:  []ucli.Flag{idFlag, &ucli.StringFlag{Name: "reason"}},
				Action: ctlAction(ctlCancel, "id"),
			},
			{
				Name:   "delete",
				Usage:  "delete a task (a claimed one too); refused for an open task others depend on: cancel that instead",
				Flags:  []ucli.Flag{idFlag},
				Action: ctlAction(ctlDelete, "id"),
			},
			{
				Name:  "get",
				Usage: "show a task",
				Flags: []ucli.Flag{idFlag, &ucli.Uint64Flag{Name: "min-seq", Usage: "fail unless the history has at least this many entries"},
					&ucli.IntFlag{Name: "r", Usage: "replicas to read and merge (default: a majority; 1: this node's own replica if it holds one)"}},
				Action: ctlAction(ctlGet, "id"),
			},
			{
				Name:  "list",
				Usage: "list tasks in id order (enqueue order), one per line; page through them with --limit and --after",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "queue"},
					&ucli.StringFlag{Name: "state", Usage: "ready, claimed, delayed, snoozed, retrying, blocked, completed, dead or cancelled"},
					&ucli.StringFlag{Name: "group"},
					&ucli.StringFlag{Name: "kind"},
					&ucli.StringFlag{Name: "subtopic"},
					&ucli.IntFlag{Name: "limit"},
					&ucli.StringFlag{Name: "after", Usage: "the cursor: only the tasks after it (tasks come in id order, which is enqueue order: the last id of a page is the next page's --after)"},
					&ucli.BoolFlag{Name: "desc", Usage: "newest first"},
				},
				Action: ctlAction(ctlList),
			},
			{
				Name:   "count",
				Usage:  "count tasks; prints {\"count\":N}",
				Flags:  []ucli.Flag{&ucli.StringFlag{Name: "queue"}, &ucli.StringFlag{Name: "subtopic", Usage: "only tasks of this subtopic"}},
				Action: ctlAction(ctlCount),
			},
			{
				Name:   "queues",
				Usage:  "per-queue counts by state, one object per line",
				Flags:  []ucli.Flag{&ucli.BoolFlag{Name: "subtopics", Usage: "then per subtopic of each queue (objects with \"subtopic\")"}},
				Action: ctlAction(ctlQueues),
			},
			{
				Name:   "cluster",
				Usage:  "the cluster as this node sees it: members, the metadata group, partition placement; one JSON object",
				Action: ctlAction(ctlCluster),
			},
			{
				Name: "hints",
				Usage: "the hinted enqueues this node (--addr) holds for replicas it could not reach: " +
					"{\"node\",\"pending\",\"handed\",\"oldest_at\",\"hints\":[{\"id\",\"queue\",\"partition\",\"at\",\"w\"}]}; each node holds its own",
				Flags:  []ucli.Flag{&ucli.IntFlag{Name: "limit", Usage: "list at most this many hints (default 100)"}},
				Action: ctlAction(ctlHints),
			},
			{
				Name:   "leave",
				Usage:  "hand the node's partitions to other members and stop it; prints {\"handed_off\":N}",
				Action: ctlAction(ctlLeave),
			},
			{
				Name: "gc",
				Usage: "garbage-collect now: every leader collects the completed tasks past retention whose whole dependency component is too; " +
					"prints what it found ({\"candidates\",\"collectable\",\"collected\",\"held\",\"unreached\",\"queues\",\"sample\"}). " +
					"Scans every task: on a large cluster give a --timeout to match",
				Flags:  []ucli.Flag{&ucli.BoolFlag{Name: "dry-run", Usage: "only report what would be collected"}},
				Action: ctlAction(ctlGC),
			},
			ctlWorkCommand(),
			ctlQueueCommand(),
			ctlScheduleCommand(),
			ctlShardsCommand(),
			ctlGroupCommand(),
			ctlAuthCommand(),
			ctlUpgradeCommand(),
			ctlDecommissionCommand(),
			ctlRemoveCommand(),
			ctlTLSCACommand(),
			ctlReadyCommand(),
			{
				Name:   "token",
				Usage:  "print the cluster token (the admin's) derived from --cluster-secret-file as {\"token\"} (--raw: the bare token, for --token \"$(skuldd ctl token --raw ...)\", SKULD_TOKEN or HTTP clients); ctl auth create makes tokens with fewer rights",
				Flags:  []ucli.Flag{authFlags()[0], &ucli.BoolFlag{Name: "raw", Usage: "print the bare token"}},
				Action: ctlToken,
			},
		},
	}
}

// ctlEnv is what every ctl command gets: a client, a context with the
// request timeout, and JSON output.
type ctlEnv struct {
	c   *ucli.Context
	cl  *wire.Client
	ctx context.Context
	out printer
}

// ctlAction wraps a ctl command: it checks the required flags (a missing
// one is a usage error, exit status 2), dials the node and runs fn.
func ctlAction(fn func(e *ctlEnv) error, required ...string) ucli.ActionFunc {
	return ctlActionArgs(0, fn, required...)
}

// ctlActionArgs is ctlAction for a command that takes nargs arguments
// after its flags.
func ctlActionArgs(nargs int, fn func(e *ctlEnv) error, required ...string) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		switch args := c.Args(); {
		case args.Len() > nargs && strings.HasPrefix(args.Get(nargs), "-"):
			return usagef("%s: flags go before the arguments (%q)", c.Command.Name, args.Get(nargs))
		case args.Len() > nargs:
			return usagef("unexpected argument %q", args.Get(nargs))
		case args.Len() < nargs:
			return usagef("%s: %d argument(s) needed: %s", c.Command.Name, nargs, c.Command.ArgsUsage)
		}
		for _, f := range required {
			if !c.IsSet(f) {
				return usagef("%s: missing --%s", c.Command.Name, f)
			}
		}
		out, err := newPrinter(c, c.App.Writer)
		if err != nil {
			return err
		}
		timeout := c.Duration("timeout") + c.Duration("wait")
		ctx, cancel := context.WithTimeout(c.Context, timeout)
		defer cancel()
		tok, err := clientToken(c)
		if err != nil {
			return err
		}
		conn, err := dialAny(ctx, c.String("addr"), c.Duration("dial-timeout"), tok)
		if err != nil {
			return err
		}
		cl := wire.NewClient(conn)
		defer cl.Close()
		err = fn(&ctlEnv{c: c, cl: cl, ctx: ctx, out: out})
		if ferr := out.Flush(); err == nil {
			err = ferr
		}
		return err
	}
}

// dialAny connects to the first node of addrs (comma-separated) that
// answers within dialTimeout, trying them in order; if none does, the
// error says what each did.
func dialAny(ctx context.Context, addrs string, dialTimeout time.Duration, tok []byte) (*wire.Conn, error) {
	if dialTimeout <= 0 {
		return nil, usagef("--dial-timeout %v: want more than 0", dialTimeout)
	}
	var fails []string
	list := splitAddrs(addrs)
	if len(list) == 0 {
		return nil, usagef("--addr %q: no address", addrs)
	}
	for _, addr := range list {
		conn, err := wire.Dial(ctx, addr, wire.ClientConfig{Streams: 1, Token: tok, DialTimeout: dialTimeout})
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			fails = append(fails, fmt.Sprintf("%s: %v", addr, err))
			break
		}
		fails = append(fails, fmt.Sprintf("%s: %s", addr, dialFailure(err, dialTimeout)))
	}
	if len(list) == 1 {
		return nil, fmt.Errorf("connect to %s", fails[0])
	}
	return nil, fmt.Errorf("no node of --addr answered: %s", strings.Join(fails, "; "))
}

// dialFailure says why a dial failed in a user's terms: a node that does
// not answer in time is down or not listening there (QUIC runs over UDP,
// so a closed port looks the same as a dead machine).
func dialFailure(err error, dialTimeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Sprintf("no answer within %v (the node is down, or not listening at this address)", dialTimeout)
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// splitAddrs splits a comma-separated address list, dropping empty
// entries.
func splitAddrs(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func (e *ctlEnv) id() (task.ID, error) { return task.ParseID(e.c.String("id")) }

func (e *ctlEnv) claim() (uint32, error) {
	v := e.c.Uint("claim")
	if uint64(v) > uint64(^uint32(0)) {
		return 0, usagef("--claim %d out of range", v)
	}
	return uint32(v), nil
}

func ctlEnqueue(e *ctlEnv) error {
	c := e.c
	t := wire.EnqueueTask{
		Queue:       c.String("queue"),
		Group:       c.String("group"),
		Kind:        c.String("kind"),
		Subtopic:    c.String("subtopic"),
		Description: c.String("description"),
		DelayMs:     c.Duration("delay").Milliseconds(),
		TimeLimitMs: c.Duration("time-limit").Milliseconds(),
		Key:         c.String("key"),
		UniqueForMs: c.Duration("unique-for").Milliseconds(),
	}
	p := c.Int("priority")
	if p != int(int32(p)) {
		return usagef("--priority %d does not fit in int32", p)
	}
	t.Priority = int32(p)
	ma := c.Uint("max-attempts")
	if uint64(ma) > uint64(^uint32(0)) {
		return usagef("--max-attempts %d out of range", ma)
	}
	t.MaxAttempts = uint32(ma)
	data, err := payloadOf(c)
	if err != nil {
		return err
	}
	t.Data = data
	for _, s := range c.StringSlice("dep") {
		id, err := task.ParseID(s)
		if err != nil {
			return fmt.Errorf("--dep: %w", err)
		}
		t.Deps = append(t.Deps, id)
	}
	resp, err := e.cl.Enqueue(e.ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{t}, W: c.Int("w"), Hint: c.Bool("hint")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp.Results[0])
}

// payloadOf reads --data or --data-file (nil if neither is given).
func payloadOf(c *ucli.Context) ([]byte, error) {
	switch {
	case c.IsSet("data") && c.IsSet("data-file"):
		return nil, usagef("give --data or --data-file, not both")
	case c.IsSet("data"):
		return []byte(c.String("data")), nil
	case c.IsSet("data-file"):
		return readDataFile(c.String("data-file"))
	}
	return nil, nil
}

// maxDataFile bounds --data-file reads; the node enforces its own limit.
const maxDataFile = 64 << 20

func readDataFile(path string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--data-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxDataFile+1))
	if err != nil {
		return nil, fmt.Errorf("--data-file: %w", err)
	}
	if len(data) > maxDataFile {
		return nil, fmt.Errorf("--data-file: over %d bytes", maxDataFile)
	}
	return data, nil
}

// nothingToClaim makes ctl claim exit 3 without a message.
type nothingToClaim struct{}

func (nothingToClaim) Error() string { return "" }
func (nothingToClaim) ExitCode() int { return exitNothing }

func ctlClaim(e *ctlEnv) error {
	c := e.c
	resp, err := e.cl.Claim(e.ctx, &wire.ClaimRequest{
		Queue:  c.String("queue"),
		TTLMs:  c.Duration("ttl").Milliseconds(),
		Count:  c.Int("count"),
		WaitMs: c.Duration("wait").Milliseconds(),
	})
	if err != nil {
		return err
	}
	if len(resp.Tasks) == 0 {
		return nothingToClaim{}
	}
	for i := range resp.Tasks {
		if err := e.out.Encode(&resp.Tasks[i]); err != nil {
			return err
		}
	}
	return nil
}

func ctlRenew(e *ctlEnv) error {
	id, claim, err := e.idClaim()
	if err != nil {
		return err
	}
	resp, err := e.cl.Renew(e.ctx, &wire.RenewRequest{ID: id, Claim: claim, TTLMs: e.c.Duration("ttl").Milliseconds()})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func (e *ctlEnv) idClaim() (task.ID, uint32, error) {
	id, err := e.id()
	if err != nil {
		return id, 0, err
	}
	claim, err := e.claim()
	return id, claim, err
}

func ctlUpdate(e *ctlEnv) error {
	id, claim, err := e.idClaim()
	if err != nil {
		return err
	}
	resp, err := e.cl.Update(e.ctx, &wire.UpdateRequest{ID: id, Claim: claim, Seq: e.c.Uint64("seq"), Data: []byte(e.c.String("data"))})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlComplete(e *ctlEnv) error {
	id, claim, err := e.idClaim()
	if err != nil {
		return err
	}
	req := &wire.CompleteRequest{ID: id, Claim: claim}
	if q := e.c.String("next-queue"); q != "" {
		req.Next = &wire.ClaimRequest{Queue: q, TTLMs: e.c.Duration("next-ttl").Milliseconds()}
	}
	if e.c.IsSet("seq") {
		s := e.c.Uint64("seq")
		req.Seq = &s
	}
	resp, err := e.cl.Complete(e.ctx, req)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlFail(e *ctlEnv) error {
	id, claim, err := e.idClaim()
	if err != nil {
		return err
	}
	req := &wire.FailRequest{ID: id, Claim: claim, Reason: e.c.String("reason"), NoRetry: e.c.Bool("no-retry")}
	if e.c.IsSet("retry-after") {
		ms := e.c.Duration("retry-after").Milliseconds()
		req.RetryAfterMs = &ms
	}
	resp, err := e.cl.Fail(e.ctx, req)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlSnooze(e *ctlEnv) error {
	id, claim, err := e.idClaim()
	if err != nil {
		return err
	}
	resp, err := e.cl.Snooze(e.ctx, &wire.SnoozeRequest{ID: id, Claim: claim, DelayMs: e.c.Duration("delay").Milliseconds()})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlRequeue(e *ctlEnv) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	resp, err := e.cl.Requeue(e.ctx, &wire.RequeueRequest{ID: id})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlCancel(e *ctlEnv) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	resp, err := e.cl.Cancel(e.ctx, &wire.CancelRequest{ID: id, Reason: e.c.String("reason")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlDelete(e *ctlEnv) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	resp, err := e.cl.Delete(e.ctx, &wire.DeleteRequest{ID: id})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlGet(e *ctlEnv) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	req := &wire.GetRequest{ID: id, R: e.c.Int("r")}
	if req.R < 0 {
		return usagef("get: -r %d is negative", req.R)
	}
	if e.c.IsSet("min-seq") {
		s := e.c.Uint64("min-seq")
		req.MinSeq = &s
	}
	v, err := e.cl.Get(e.ctx, req)
	if err != nil {
		return err
	}
	return e.out.Encode(v)
}

func ctlList(e *ctlEnv) error {
	req := &wire.ListRequest{Queue: e.c.String("queue"), State: e.c.String("state"), Group: e.c.String("group"),
		Kind: e.c.String("kind"), Subtopic: e.c.String("subtopic"), Limit: e.c.Int("limit"), Desc: e.c.Bool("desc")}
	if s := e.c.String("after"); s != "" {
		id, err := task.ParseID(s)
		if err != nil {
			return usagef("--after: %v", err)
		}
		req.After = &id
	}
	return e.cl.List(e.ctx, req, func(p *wire.ListPage) error {
		for i := range p.Tasks {
			if err := e.out.Encode(&p.Tasks[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func ctlCount(e *ctlEnv) error {
	resp, err := e.cl.Count(e.ctx, &wire.CountRequest{Queue: e.c.String("queue"), Subtopic: e.c.String("subtopic")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlGC(e *ctlEnv) error {
	resp, err := e.cl.GC(e.ctx, &wire.GCRequest{DryRun: e.c.Bool("dry-run")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlCluster(e *ctlEnv) error {
	resp, err := e.cl.Cluster(e.ctx)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlHints(e *ctlEnv) error {
	resp, err := e.cl.Hints(e.ctx, &wire.HintsRequest{Limit: e.c.Int("limit")})
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

func ctlLeave(e *ctlEnv) error {
	resp, err := e.cl.Leave(e.ctx)
	if err != nil {
		return err
	}
	return e.out.Encode(resp)
}

// ctlToken prints the client token; it needs no node.
func ctlToken(c *ucli.Context) error {
	if !c.IsSet("cluster-secret-file") {
		return usagef("token: missing --cluster-secret-file")
	}
	tok, err := clientToken(c)
	if err != nil {
		return err
	}
	if c.Bool("raw") {
		_, err := fmt.Fprintln(c.App.Writer, wire.FormatToken(tok))
		return err
	}
	return json.NewEncoder(c.App.Writer).Encode(map[string]string{"token": wire.FormatToken(tok)})
}

func ctlQueues(e *ctlEnv) error {
	resp, err := e.cl.Queues(e.ctx, &wire.QueuesRequest{Subtopics: e.c.Bool("subtopics")})
	if err != nil {
		return err
	}
	for _, rows := range [][]wire.QueueStats{resp.Queues, resp.Subtopics} {
		for i := range rows {
			if err := e.out.Encode(&rows[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
