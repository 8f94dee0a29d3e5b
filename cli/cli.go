// Package cli owns the skuldd command line: flags (each also read from a
// SKULD_<NAME> environment variable) mapped onto node.Config, the node's
// process lifetime (signals, logging), and the client commands `skuldd ctl`
// and `skuldd bench`.
//
// cli is the only importer of urfave/cli. It imports node and wire (and the
// value packages task and clock); nothing imports cli but main.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/buildinfo"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/wire"
)

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitNothing = 3 // ctl claim found nothing to claim
)

// usageError marks a command-line mistake (exit status 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Run runs the command line args (args[0] is the program name) and returns
// the process exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, ctlArgs(app, args))
	if err == nil {
		return exitOK
	}
	var nothing nothingToClaim
	if errors.As(err, &nothing) {
		return nothing.ExitCode()
	}
	fmt.Fprintln(stderr, "skuldd:", err)
	var ue usageError
	var libExit ucli.ExitCoder
	if errors.As(err, &ue) || errors.As(err, &libExit) {
		// The cli library exits with its own codes only for usage
		// mistakes (an unknown command or help topic).
		return exitUsage
	}
	return exitError
}

// envName returns the environment variable for a flag: SKULD_DATA_DIR for
// data-dir.
func envName(flag string) []string {
	return []string{"SKULD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func newApp(stdout, stderr io.Writer) *ucli.App {
	d := node.DefaultConfig()
	app := &ucli.App{
		Name:      "skuldd",
		Version:   buildinfo.Read().String(),
		Usage:     "a distributed task queue: run a node, or talk to one",
		UsageText: "skuldd [flags]            run a node\nskuldd ctl [--addr A] CMD  talk to a node\nskuldd bench [flags]      load-test a node",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by Run.
		ExitErrHandler: func(*ucli.Context, error) {},
		OnUsageError: func(_ *ucli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "bind", Value: d.Bind, EnvVars: envName("bind"), Usage: "address for QUIC (UDP) and HTTP (TCP), one port"},
			&ucli.StringFlag{Name: "data-dir", Value: d.DataDir, EnvVars: envName("data-dir"), Usage: "directory for the node's data"},
			&ucli.IntFlag{Name: "partitions", Value: d.Partitions, EnvVars: envName("partitions"), Usage: "partitions of the id space, fixed when the cluster is created"},
			&ucli.IntFlag{Name: "replicas", Value: d.Replicas, EnvVars: envName("replicas"), Usage: "replicas of each partition (capped by the number of nodes)"},
			&ucli.DurationFlag{Name: "clock-skew-bound", Value: d.SkewBound, EnvVars: envName("clock-skew-bound"), Usage: "clock skew tolerated between nodes; claims expire for the leader at end + this"},
			&ucli.DurationFlag{Name: "aae-interval", Value: d.AAEInterval, EnvVars: envName("aae-interval"), Usage: "how often each partition's leader compares its replica with each follower's (anti-entropy) and repairs what differs"},
			&ucli.DurationFlag{Name: "hint-wait", Value: d.HintWait, EnvVars: envName("hint-wait"), Usage: "how long an enqueue asking for a hint waits for its replicas before this node keeps it as a hint"},
			&ucli.DurationFlag{Name: "hint-interval", Value: d.HintInterval, EnvVars: envName("hint-interval"), Usage: "how often this node tries to hand the hints it holds to their replicas"},
			&ucli.GenericFlag{Name: "retention", Value: &days{d.Retention}, EnvVars: envName("retention"), Usage: "keep a completed task this long; then it and the tasks connected to it by dependencies, all completed, are garbage-collected (a duration; d for days, as in 7d; 0 keeps everything)"},
			&ucli.DurationFlag{Name: "gc-interval", Value: d.GCInterval, EnvVars: envName("gc-interval"), Usage: "how often each partition's leader looks for tasks to garbage-collect"},
			&ucli.GenericFlag{Name: "tombstone-horizon", Value: &days{d.TombstoneHorizon}, EnvVars: envName("tombstone-horizon"), Usage: "how long a collected task's tombstone is kept; must exceed the longest time a node can be away and come back with its data (d for days)"},
			&ucli.DurationFlag{Name: "max-clock-drift", Value: d.Drift.MaxDrift, EnvVars: envName("max-clock-drift"), Usage: "a node whose clock is ahead of the cluster's median by more than this leads nothing and grants no claims until it is back in bounds (default: 2s, or a fifth of --clock-skew-bound if smaller)"},
			&ucli.BoolFlag{Name: "exit-on-drift", EnvVars: envName("exit-on-drift"), Usage: "exit (status 1) when this node's clock drifts, instead of standing by"},
			&ucli.BoolFlag{Name: "upgrade-hold", EnvVars: envName("upgrade-hold"), Usage: "keep the cluster version where it is while this node is a member, until ctl upgrade finalize (a rolling upgrade you may roll back)"},
			&ucli.DurationFlag{Name: "claim-order-slack", Value: d.ClaimOrderSlack, EnvVars: envName("claim-order-slack"), Usage: "a claim takes its node's own oldest task of the best priority when it is at most this much younger than the cluster's oldest (0: strict order, one more hop)"},
			&ucli.IntFlag{Name: "max-payload", Value: d.MaxPayload, EnvVars: envName("max-payload"), Usage: "largest task payload, bytes"},
			&ucli.IntFlag{Name: "claim-cache-mb", Value: int(d.FreshSpecBytes >> 20), EnvVars: envName("claim-cache-mb"), Usage: "memory (MiB) for the payloads of fresh ready tasks, so that claiming them reads nothing from disk (0: none)"},
			&ucli.DurationFlag{Name: "wal-min-sync-interval", Value: d.WALMinSyncInterval, EnvVars: envName("wal-min-sync-interval"), Usage: "while the CPU is contended and writes are replicated, hold each busy sync of the write-ahead log back this long after the previous one, so that more writes share it (0: always sync at once)"},
			&ucli.BoolFlag{Name: "wal-zero-ahead", Value: !d.NoWALZeroAhead, EnvVars: envName("wal-zero-ahead"), Usage: "write zeros ahead of the write-ahead log's end, so that its fsyncs flush data alone (ext4, xfs); set to false on copy-on-write filesystems (btrfs, zfs), where it only adds writes"},
			&ucli.StringSliceFlag{Name: "join", EnvVars: envName("join"), Usage: "host:port of a cluster member to join through (repeatable; any live member will do)"},
			&ucli.StringFlag{Name: "advertise", EnvVars: envName("advertise"), Usage: "host:port other nodes reach this one at (default: --bind; required when --bind is a wildcard)"},
			&ucli.StringFlag{Name: "cluster-secret-file", EnvVars: envName("cluster-secret-file"), Usage: "file holding the cluster secret (at least 16 bytes): peers and clients must prove it"},
			&ucli.BoolFlag{Name: "insecure", EnvVars: envName("insecure"), Usage: "allow binding a non-loopback address without a cluster secret (plain HTTP, no authentication)"},
			&ucli.StringFlag{Name: "tls-cert", EnvVars: envName("tls-cert"), Usage: "PEM certificate (with its chain) the HTTP port serves HTTPS with, read again when it changes (default with a cluster secret: one the node makes, signed by the authority the secret derives: skuldd ctl tls-ca prints it)"},
			&ucli.StringFlag{Name: "tls-key", EnvVars: envName("tls-key"), Usage: "PEM private key of --tls-cert"},
			&ucli.StringFlag{Name: "log-level", Value: "info", EnvVars: envName("log-level"), Usage: "debug, info, warn or error"},
			&ucli.StringFlag{Name: "log-format", Value: "text", EnvVars: envName("log-format"), Usage: "text or json"},
			&ucli.BoolFlag{Name: "pprof", EnvVars: envName("pprof"), Usage: "serve Go's profiler at /debug/pprof/ on the HTTP port"},
			&ucli.DurationFlag{Name: "clock-offset", Hidden: true, EnvVars: envName("clock-offset"), Usage: "shift this node's clock (tests only)"},
		},
		Action:   runNode,
		Commands: []*ucli.Command{ctlCommand(), benchCommand()},
	}
	markUsageErrors(app.Commands)
	return app
}

// markUsageErrors makes flag-parsing errors of every command usage errors
// (exit status 2).
func markUsageErrors(cmds []*ucli.Command) {
	for _, c := range cmds {
		c.OnUsageError = func(_ *ucli.Context, err error, _ bool) error { return usageError{err} }
		markUsageErrors(c.Subcommands)
	}
}

// newLogger builds the process logger from --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

func runNode(c *ucli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("unexpected argument %q (commands: ctl, bench)", c.Args().First())
	}
	logger, err := newLogger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	cfg := node.DefaultConfig()
	cfg.Bind = c.String("bind")
	cfg.DataDir = c.String("data-dir")
	cfg.Partitions = c.Int("partitions")
	cfg.Replicas = c.Int("replicas")
	cfg.SkewBound = c.Duration("clock-skew-bound")
	cfg.ClaimOrderSlack = c.Duration("claim-order-slack")
	cfg.Drift.MaxDrift = c.Duration("max-clock-drift")
	if !c.IsSet("max-clock-drift") && cfg.SkewBound > 0 {
		// Unset: catch drift at a fifth of a smaller skew bound too.
		cfg.Drift.MaxDrift = min(cfg.Drift.MaxDrift, cfg.SkewBound/defaultDriftFraction)
	}
	cfg.ExitOnDrift = c.Bool("exit-on-drift")
	cfg.UpgradeHold = c.Bool("upgrade-hold")
	cfg.AAEInterval = c.Duration("aae-interval")
	cfg.HintWait = c.Duration("hint-wait")
	cfg.HintInterval = c.Duration("hint-interval")
	cfg.Retention = c.Generic("retention").(*days).d
	cfg.GCInterval = c.Duration("gc-interval")
	cfg.TombstoneHorizon = c.Generic("tombstone-horizon").(*days).d
	cfg.MaxPayload = c.Int("max-payload")
	cacheMB := c.Int("claim-cache-mb")
	if cacheMB < 0 {
		return usagef("--claim-cache-mb %d: want 0 (no cache) or more", cacheMB)
	}
	cfg.FreshSpecBytes = int64(cacheMB) << 20
	cfg.WALMinSyncInterval = c.Duration("wal-min-sync-interval")
	cfg.NoWALZeroAhead = !c.Bool("wal-zero-ahead")
	if cfg.WALMinSyncInterval < 0 {
		return usagef("--wal-min-sync-interval %v: want 0 (sync at once) or more", cfg.WALMinSyncInterval)
	}
	cfg.Insecure = c.Bool("insecure")
	cfg.Join = c.StringSlice("join")
	cfg.Advertise = c.String("advertise")
	if f := c.String("cluster-secret-file"); f != "" {
		secret, err := readSecret(f)
		if err != nil {
			return usageError{err}
		}
		cfg.ClusterSecret = secret
	}
	cfg.TLSCert, cfg.TLSKey = c.String("tls-cert"), c.String("tls-key")
	cfg.Pprof = c.Bool("pprof")
	cfg.Logger = logger
	if off := c.Duration("clock-offset"); off != 0 {
		cfg.Clock = clock.Offset{Base: clock.Real{}, By: off}
		logger.Warn("clock offset in effect (a test flag)", "offset", off)
	}
	var bindHooks func(*node.Node)
	if testHooks != nil {
		bindHooks = testHooks(&cfg, logger)
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if cfg.Insecure {
		logger.Warn("--insecure: this node may bind any address without a cluster secret; whoever reaches its port can use the whole API, join the cluster and read every task", "bind", cfg.Bind)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	if bindHooks != nil {
		bindHooks(n)
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	notifyCtx, notifyDone := context.WithCancel(ctx)
	defer notifyDone()
	go notifyReady(notifyCtx, n.Readiness, logger)
	// stopping tells systemd the node is on its way down, before the
	// shutdown's handoffs (which take seconds).
	stopping := func() {
		notifyDone()
		if err := sdNotify("STOPPING=1"); err != nil {
			logger.Warn("cannot tell systemd the node is stopping", "err", err)
		}
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx))
	case <-n.Leaving():
		logger.Info("shutting down: asked to leave the cluster")
	case err := <-n.Exit():
		logger.Error("exiting", "reason", err)
		stopping()
		_ = n.Close()
		return err
	}
	stopping()
	return n.Close()
}

// defaultDriftFraction: without --max-clock-drift, drift is caught at a
// fifth of the clock skew bound at most (2s of the default 10s).
const defaultDriftFraction = 5

// secretModeMask are the permission bits a cluster secret file must not
// have: a file its group or others may read (or write) is refused, as ssh
// refuses such a private key.
const secretModeMask = 0o077

// readSecret reads a cluster secret file: its bytes, surrounding
// whitespace trimmed (so `openssl rand -hex 32 > F` works). A file other
// users may read is refused.
func readSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&secretModeMask != 0 {
		return nil, fmt.Errorf("cluster secret %s: mode %04o lets other users read it, and whoever reads it is the cluster's admin: chmod 600 %s (or 400)", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < wire.MinSecretLen {
		return nil, fmt.Errorf("cluster secret %s: %d bytes; at least %d are needed (try: umask 077; openssl rand -hex 32 > %s)", path, len(b), wire.MinSecretLen, path)
	}
	return b, nil
}

// clientToken returns the token a client proves: from --token (or
// SKULD_TOKEN), or derived from --cluster-secret-file; nil without either.
func clientToken(c *ucli.Context) ([]byte, error) {
	if t := c.String("token"); t != "" {
		tok, err := wire.ParseToken(t)
		if err != nil {
			return nil, usageError{err}
		}
		return tok, nil
	}
	if f := c.String("cluster-secret-file"); f != "" {
		secret, err := readSecret(f)
		if err != nil {
			return nil, usageError{err}
		}
		keys, err := wire.DeriveKeys(secret)
		if err != nil {
			return nil, usageError{err}
		}
		return keys.ClientToken, nil
	}
	return nil, nil
}

// authFlags are the client flags that authenticate to a cluster with a
// secret.
func authFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "cluster-secret-file", EnvVars: envName("cluster-secret-file"), Usage: "the cluster secret file (the client token is derived from it)"},
		&ucli.StringFlag{Name: "token", EnvVars: []string{"SKULD_TOKEN"}, Usage: "client token: the cluster's (skuldd ctl token prints it) or a credential's (skuldd ctl auth create makes one)"},
	}
}

// days is a duration flag that also takes days ("7d", "1d12h"), for the
// long periods of retention: Go durations stop at hours.
type days struct{ d time.Duration }

// Set parses a Go duration, with a leading whole number of days allowed.
func (v *days) Set(s string) error {
	var total time.Duration
	rest := s
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		n, err := strconv.ParseUint(rest[:i], 10, 32)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		total = time.Duration(n) * 24 * time.Hour
		rest = rest[i+1:]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		total += d
	}
	if total < 0 || total/(24*time.Hour) > maxFlagDays {
		return fmt.Errorf("duration %q out of range", s)
	}
	v.d = total
	return nil
}

// maxFlagDays keeps a days flag far from overflowing a time.Duration.
const maxFlagDays = 100 * 365

// String prints whole days as Nd, others as a Go duration.
func (v *days) String() string {
	if v.d > 0 && v.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v.d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}
