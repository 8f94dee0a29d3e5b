package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/sim"
)

// The seeds a run takes: -seed and -seeds, whose defaults come from the
// environment when it sets them (envSeed, envSeeds), else defaultSeed
// and defaultSeeds. CI exports envSeed drawn from the commit (.ci/run),
// so each commit tries other seeds and its log names them; a plain
// `go test ./...` elsewhere runs the fixed default range, the same on
// every machine. Any uint64 start works: a seed only seeds PCG streams,
// and a range past the top wraps around to 0.
const (
	envSeed  = "SKULDD_SIM_SEED"
	envSeeds = "SKULDD_SIM_SEEDS"
	// defaultSeed is the first seed when the environment names none.
	defaultSeed = 1
	// defaultSeeds is how many seeds CI and a plain go test run.
	// Measured on the 2-core CI machine, shared: see TestSim.
	defaultSeeds = 200
)

var (
	seedFlag  = flag.Uint64("seed", envUint(envSeed, defaultSeed), "the first seed to run (default $"+envSeed+" if set; a failing seed prints the command that replays it)")
	seedsFlag = flag.Int("seeds", int(envUint(envSeeds, defaultSeeds)), "how many seeds to run, from -seed on (default $"+envSeeds+" if set)")
	logFlag   = flag.Bool("simlog", false, "log the nodes to the test log (verbose: for replaying one seed)")
	// envErr is a malformed envSeed or envSeeds: TestSim fails with it
	// rather than run seeds other than the ones CI printed.
	envErr error
)

// envUint returns the environment variable name as a uint64, def when
// it is unset or empty; a malformed value sets envErr.
func envUint(name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		envErr = errors.Join(envErr, fmt.Errorf("$%s=%q: want a decimal uint64: %w", name, s, err))
		return def
	}
	return v
}

// TestSim runs -seeds seeds from -seed, each in its own synctest bubble.
// Cost, on the 2-core CI machine: shared with the other packages' tests,
// 150 seeds took 118 s (about 0.8 s a seed, 25 s of virtual time each),
// so 200 take about 160 s, inside the three-minute budget. Dependencies,
// the fenced sink, w=1 enqueues and wider clock shifts cost 5-12%
// more CPU: `go test ./sim -run TestSim` alone, 200 seeds, took 96 s
// (105 s of CPU) with them and 90-100 s (94 s of CPU) without.
func TestSim(t *testing.T) {
	if testing.Short() {
		t.Skip("the simulation is not short")
	}
	if envErr != nil {
		t.Fatal(envErr)
	}
	for k := range *seedsFlag {
		seed := *seedFlag + uint64(k)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runSeed(t, seed) })
		})
	}
}

func runSeed(t *testing.T, seed uint64) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *logFlag {
		log = testkit.LoggerAt(t, slog.LevelDebug)
	}
	res, err := sim.Run(context.Background(), sim.DefaultConfig(), seed, log)
	if err != nil {
		t.Fatalf("seed %d: %v\nreplay: %s", seed, err, sim.ReplayCommand(seed))
	}
	if testing.Verbose() {
		t.Logf("%s; %d faults; %s; %s", res.Report.Verdict(), len(res.Schedule), opsLine(res), mixLine(res))
	}
	if res.OK() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d FAILED; replay: %s\n", seed, sim.ReplayCommand(seed))
	for _, f := range res.Schedule {
		fmt.Fprintf(&b, "  fault %v\n", f)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "  problem: %s\n", p)
	}
	if res.Report != nil {
		_ = res.Report.WriteText(&b)
		writeExampleHistories(&b, res)
	}
	t.Error(b.String())
}

// opsLine summarises the run's operations: attempted/ok per op.
func opsLine(res *sim.Result) string {
	var parts []string
	for _, o := range res.Report.Ops {
		parts = append(parts, fmt.Sprintf("%s %d/%d ok", o.F, o.OK, o.Attempted))
	}
	return strings.Join(parts, ", ")
}

// mixLine summarises what the history shows of the workload's harder
// parts: dependency edges, enqueues acknowledged by one replica alone,
// placed (sent without id) and hinted, the fenced sink's answers, the
// schedules' occurrences.
func mixLine(res *sim.Result) string {
	var edges, oneAck, placed, hinted, effects, refused int
	for _, e := range res.History.Events {
		switch {
		case e.Type == faults.Invoke && e.F == faults.FEnqueue:
			edges += len(e.Deps)
			if e.Placed {
				placed++
			}
		case e.Type == faults.OK && e.F == faults.FEnqueue && e.Hinted:
			hinted++
		case e.Type == faults.OK && e.F == faults.FEnqueue && e.Acks == 1:
			oneAck++
		case e.Type == faults.Effect:
			effects++
			if e.Accepted != nil && !*e.Accepted {
				refused++
			}
		}
	}
	var occurrences, skipped uint64
	if p := res.History.Periodic; p != nil {
		for _, v := range p.Schedules.Views {
			occurrences += v.Enqueued
			skipped += v.Skipped
		}
	}
	return fmt.Sprintf("%d dependency edges, %d enqueues acknowledged by 1 replica, %d placed, %d hinted, %d effects (%d fenced off), %d occurrences of schedules enqueued (%d skipped)",
		edges, oneAck, placed, hinted, effects, refused, occurrences, skipped)
}

// maxExampleTasks bounds the tasks whose history a failure prints.
const maxExampleTasks = 3

// writeExampleHistories prints, for the first tasks the anomalies name,
// every event of theirs with the nemesis events interleaved: what a
// diagnosis starts from.
func writeExampleHistories(b *strings.Builder, res *sim.Result) {
	tasks := map[string]bool{}
	var order []string
	for _, c := range res.Report.Checks {
		for _, a := range c.Anomalies {
			if a.Count == 0 {
				continue
			}
			for _, ex := range a.Examples {
				if ex.Task != "" && !tasks[ex.Task] && len(order) < maxExampleTasks {
					tasks[ex.Task] = true
					order = append(order, ex.Task)
				}
			}
		}
	}
	for _, id := range order {
		fmt.Fprintf(b, "history of task %s:\n", id)
		for _, e := range res.History.Events {
			if e.Task == id || e.Type == faults.Nemesis {
				line, _ := json.Marshal(e)
				fmt.Fprintf(b, "  %s\n", line)
			}
		}
		for _, f := range res.History.Finals {
			if f.Task == id {
				line, _ := json.Marshal(f)
				fmt.Fprintf(b, "  final %s\n", line)
			}
		}
	}
}
