package sim_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/sim"
)

var (
	seedFlag  = flag.Uint64("seed", 1, "the first seed to run (a failing seed prints the command that replays it)")
	seedsFlag = flag.Int("seeds", defaultSeeds, "how many seeds to run, from -seed on")
	logFlag   = flag.Bool("simlog", false, "log the nodes to the test log (verbose: for replaying one seed)")
)

// defaultSeeds is what CI runs. Measured on the 2-core CI machine,
// shared: 150 seeds in 118 s (about 0.8 s a seed, 25 s of virtual time
// each), so 200 seeds take about 160 s, inside the three-minute budget.
const defaultSeeds = 200

// TestSim runs -seeds seeds from -seed, each in its own synctest bubble.
func TestSim(t *testing.T) {
	if testing.Short() {
		t.Skip("the simulation is not short")
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
		t.Logf("%s; %d faults; %s", res.Report.Verdict(), len(res.Schedule), opsLine(res))
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
