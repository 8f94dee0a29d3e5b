// Command faults runs skuldd's fault-injection suite: five real skuldd
// nodes in network namespaces, a workload of worker processes, a nemesis
// schedule drawn from a seed, and a history for the checkers. It must run
// as root (namespaces, iptables); scripts/faults.sh builds and runs it.
//
//	faults [--quick | --time D] [--seed N] [--out DIR] [--skuldd BIN] ...
//	faults --time 2m --nemeses wipe --w 1  (a scenario beyond the bounds: W=1 with its replica lost)
//	faults --time 2m --nemeses wipe-majority (a majority of one partition's replicas lost for good)
//	faults worker            (run by faults itself: one client loop)
//	faults teardown          (remove what a run left: namespaces, bridge, processes in them)
//	faults check DIR         (run the checkers again over the run in DIR)
//
// After a run it runs the checkers: report.txt, report.json and
// throughput.png in the output directory; exit status 3 when they found
// an anomaly within the design's bounds.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/skuldd/skuldd/faults"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			if err := faults.RunWorker(ctx, os.Stdin, os.Stdout); err != nil {
				fmt.Fprintln(os.Stderr, "faults worker:", err)
				return 1
			}
			return 0
		case "teardown":
			return teardown(ctx, args[1:])
		case "check":
			if len(args) != 2 {
				fmt.Fprintln(os.Stderr, "usage: faults check DIR")
				return 2
			}
			return check(args[1])
		}
	}
	return runSuite(ctx, args)
}

func teardown(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("faults teardown", flag.ContinueOnError)
	nodes := fs.Int("nodes", 5, "nodes of the run to tear down")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	t := faults.Topology{Nodes: *nodes, Bridge: faults.DefaultBridge, Port: faults.DefaultPort}
	if err := t.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "faults teardown:", err)
		return 2
	}
	faults.Teardown(ctx, t, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	return 0
}

func runSuite(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "every nemesis once, the whole run within 4 minutes")
	dur := fs.Duration("time", 0, "length of the faults phase of a long run (default 30m)")
	seed := fs.Int64("seed", 1, "seed of the schedule and the workload")
	out := fs.String("out", "", "output directory (default faults-out/seed-N)")
	bin := fs.String("skuldd", "", "skuldd binary built with -tags skuldtest (default: skuldd beside this tool)")
	old := fs.String("upgrade-from", "", "upgrade mode: an older skuldd (built with -tags skuldtest) the cluster starts on; the faults phase replaces it with --skuldd one node at a time, then finalizes (scripts/faults.sh --upgrade builds the commit faults/upgrade-from names)")
	workers := fs.Int("workers", 0, "client loops (default 10)")
	rate := fs.Float64("rate", 0, "total enqueue rate, tasks/s (default 120)")
	w := fs.Int("w", 0, "enqueue ack count (0: a majority)")
	nemeses := fs.String("nemeses", "", "only these nemeses, comma-separated, in the long schedule's random order; the only way to run "+
		strings.Join(faults.OnDemandNemeses, " and ")+" (beyond the design's bounds). Known: "+strings.Join(faults.KnownNemeses(), ", "))
	exclude := fs.String("exclude", "", "nemeses to leave out, comma-separated (e.g. kill-all)")
	logLevel := fs.String("log-level", "info", "harness log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "faults: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *quick && *dur != 0 {
		fmt.Fprintln(os.Stderr, "faults: --quick and --time exclude each other")
		return 2
	}
	cfg := faults.DefaultConfig()
	if *quick {
		cfg = faults.QuickConfig()
	}
	if *dur != 0 {
		cfg.Duration = *dur
	}
	cfg.Seed, cfg.W = *seed, *w
	if *nemeses != "" {
		cfg.Nemeses = strings.Split(*nemeses, ",")
	}
	if *exclude != "" {
		cfg.Exclude = strings.Split(*exclude, ",")
	}
	if *workers > 0 {
		cfg.Workers = *workers
	}
	if *rate > 0 {
		cfg.EnqueuePerSec = *rate
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	cfg.Self = self
	cfg.Binary = *bin
	if cfg.Binary == "" {
		cfg.Binary = filepath.Join(filepath.Dir(self), "skuldd")
	}
	cfg.OldBinary = *old
	cfg.Out = *out
	if cfg.Out == "" {
		cfg.Out = filepath.Join("faults-out", fmt.Sprintf("seed-%d", cfg.Seed))
	}
	cfg.Command = "faults " + strings.Join(args, " ")
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(cfg.Out, "faults.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer logFile.Close()
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "faults: --log-level:", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, logFile), &slog.HandlerOptions{Level: lv}))

	start := time.Now()
	r, err := faults.NewRun(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 2
	}
	sum, err := r.Execute(ctx)
	if sum != nil {
		// The summary is printed by the run; say where it is and what
		// of the harness itself went wrong, whatever the outcome.
		fmt.Printf("faults: summary in %s\n", filepath.Join(cfg.Out, faults.SummaryFile))
		printHarnessFaults(sum)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: run failed after %v: %v\n", time.Since(start).Round(time.Second), err)
		return 1
	}
	fmt.Printf("faults: run done in %v; output in %s\n", time.Since(start).Round(time.Second), cfg.Out)
	return check(cfg.Out)
}

// printHarnessFaults says how many harness faults the history records, by
// note (the checkers fail the run on each).
func printHarnessFaults(sum *faults.RunSummary) {
	if len(sum.HarnessFaults) == 0 {
		fmt.Println("faults: no harness faults recorded")
		return
	}
	counts := map[string]int{}
	for _, h := range sum.HarnessFaults {
		counts[h.Note]++
	}
	var parts []string
	for _, n := range faults.HarnessFaultNotes {
		if counts[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", n, counts[n]))
		}
	}
	fmt.Printf("faults: %d harness fault(s) recorded in the history (each fails the run): %s\n", len(sum.HarnessFaults), strings.Join(parts, " "))
}

// check runs the checkers over the run in dir, writes report.txt,
// report.json and throughput.png there, prints the text report, and
// returns the exit status: 0 when every anomaly is beyond the design's
// bounds or none occurred, 3 otherwise.
func check(dir string) int {
	in, err := faults.ReadRun(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: read the run:", err)
		return 1
	}
	rep := faults.Analyze(in)
	for _, w := range []struct {
		name  string
		write func(io.Writer) error
	}{{"report.txt", rep.WriteText}, {"report.json", rep.WriteJSON}} {
		f, err := os.Create(filepath.Join(dir, w.name))
		if err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			return 1
		}
		err = w.write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "faults: write %s: %v\n", w.name, err)
			return 1
		}
	}
	if err := faults.WritePlot(in, filepath.Join(dir, "throughput.png")); err != nil {
		fmt.Fprintln(os.Stderr, "faults: plot:", err)
		return 1
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		return 1
	}
	fmt.Printf("faults: report in %s (report.txt, report.json, throughput.png)\n", dir)
	if !rep.OK() {
		return exitAnomalies
	}
	return 0
}

// exitAnomalies is the exit status of a run whose checkers found an
// anomaly within the design's bounds.
const exitAnomalies = 3
