package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// active is a fault applied and not yet healed.
type active struct {
	f       Fault
	targets []int
	detail  map[string]any
	// began is when the apply started (the start event's time: the
	// window it opens covers the whole fault).
	began int64
	heal  func(ctx context.Context) error
}

// holderWait bounds the wait for a worker that holds a claim; without
// one the pause-worker nemesis pauses a worker drawn at random.
const holderWait = 3 * time.Second

// crashExitBound bounds the wait for a node asked to crash to exit.
const crashExitBound = 10 * time.Second

// running returns the indexes of the nodes whose process runs (paused
// ones included).
func (r *Run) running() []int {
	var out []int
	for i, n := range r.nodes {
		if n.State() != StateDown {
			out = append(out, i+1)
		}
	}
	return out
}

// serving returns the indexes of the nodes that run and are not paused.
func (r *Run) serving() []int {
	var out []int
	for i, n := range r.nodes {
		if n.State() == StateRunning {
			out = append(out, i+1)
		}
	}
	return out
}

// apply applies f; the returned active heals it. A fault that cannot be
// applied (no leader known, no hooks) returns an error and nothing to
// heal.
func (r *Run) apply(ctx context.Context, f Fault) (*active, error) {
	a := &active{f: f, detail: map[string]any{}, began: r.tl.Now()}
	var err error
	switch f.Kind {
	case NemKillMinority:
		err = r.applyKill(a, f.Targets)
	case NemKillAll:
		err = r.applyKill(a, allNodes(r.cfg.Topology.Nodes))
	case NemKillCohort:
		var v *View
		if v, err = AnyView(ctx, r.api, r.cfg.Topology, r.serving()); err == nil {
			cohort := v.CohortOf(f.Partition)
			a.detail["partition"] = f.Partition
			if len(cohort) == 0 {
				err = fmt.Errorf("partition %d has no known cohort", f.Partition)
			} else {
				err = r.applyKill(a, cohort)
			}
		}
	case NemWipe:
		// The cohorts before the wipe say which partitions lose a
		// replica; without them the wipe still runs, and the checkers
		// assume it took a replica of every partition.
		v, verr := AnyView(ctx, r.api, r.cfg.Topology, r.serving())
		if verr != nil {
			a.detail["cohorts_unknown"] = oneLine(verr)
		}
		err = r.applyWipe(a, f.Targets, v)
	case NemWipeMajority:
		var v *View
		if v, err = AnyView(ctx, r.api, r.cfg.Topology, r.serving()); err == nil {
			cohort := v.CohortOf(f.Partition)
			a.detail["partition"], a.detail["cohort"] = f.Partition, cohort
			if need := majority(r.cfg.Replicas); len(cohort) < need {
				err = fmt.Errorf("partition %d: cohort %v has fewer than the %d live members a majority takes", f.Partition, cohort, need)
			} else {
				var nodes []int
				for _, k := range r.rng.Perm(len(cohort))[:need] {
					nodes = append(nodes, cohort[k])
				}
				err = r.applyWipe(a, sorted(nodes), v)
			}
		}
	case NemCrashUnsynced:
		err = r.applyCrash(ctx, a, f.Targets[0])
	case NemTermRestart:
		err = r.applyTerm(a, f.Targets[0])
	case NemPauseLeader, NemPauseRaftLeader:
		err = r.applyPauseLeader(ctx, a, f)
	case NemPauseWorker:
		err = r.applyPauseWorker(ctx, a)
	case NemPartitionOne:
		err = r.applyGrudge(ctx, a, Isolate(f.Targets[0], r.cfg.Topology.Nodes), f.Targets)
	case NemPartitionMajority:
		err = r.applyGrudge(ctx, a, Split(f.Groups[0], f.Groups[1]), allNodes(r.cfg.Topology.Nodes))
	case NemPartitionBridge:
		err = r.applyGrudge(ctx, a, Bridge(f.Groups[0], f.Groups[1][0], f.Groups[2]), allNodes(r.cfg.Topology.Nodes))
	case NemPartitionAsym:
		var v *View
		if v, err = AnyView(ctx, r.api, r.cfg.Topology, r.serving()); err == nil {
			a.detail["partition"] = f.Partition
			if l := v.LeaderOf(f.Partition); l == 0 {
				err = fmt.Errorf("partition %d has no known leader", f.Partition)
			} else {
				err = r.applyGrudge(ctx, a, Asymmetric(l, r.cfg.Topology.Nodes), []int{l})
			}
		}
	case NemClockWithin, NemClockBeyond:
		err = r.applyClock(ctx, a, f)
	case NemPacketChaos:
		if err = r.relay.SetChaos(*f.Chaos); err == nil {
			a.detail["chaos"] = f.Chaos
			a.heal = func(context.Context) error { r.relay.Heal(); return nil }
		}
	default:
		err = fmt.Errorf("unknown nemesis %q", f.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Kind, err)
	}
	if len(f.Groups) > 0 {
		a.detail["groups"] = f.Groups
	}
	r.recordNemesis(a, "start", a.began)
	return a, nil
}

// applyKill kills -9 the nodes; the heal restarts them.
func (r *Run) applyKill(a *active, nodes []int) error {
	a.targets = slices.Clone(nodes)
	var errs []error
	for _, i := range nodes {
		if err := r.nodes[i-1].Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	a.heal = func(context.Context) error { return r.restart(nodes) }
	return errors.Join(errs...)
}

// majority is a majority of n replicas.
func majority(n int) int { return n/2 + 1 }

// Detail keys of a wipe's nemesis events. The checkers read
// detailCohorts and detailVoters (check.go, wipeDetail).
const (
	// detailCohorts: every partition's cohort (node indexes) just
	// before the wipe, so the checkers can tell which partitions lost
	// replicas, and how many.
	detailCohorts = "cohorts"
	// detailVoters: the metadata group's voters just before the wipe,
	// so the checkers can tell when wipes took a majority of them.
	detailVoters = "voters"
	// detailOldIDs: the wiped nodes' ids, dead for good from then on
	// (hex, as the node logs print them).
	detailOldIDs = "old_ids"
)

// applyWipe kills -9 the nodes and deletes their data dirs whole: their
// replicas are lost for good, as with a disk gone. The heal starts them
// again empty; each comes back as a new member under a new id, joining
// through every other node (whichever is up admits it: node 1, the
// founder, has no join list of its own, and the node it names may be
// wiped too), while its old id stays dead in the registry. view, if not
// nil, is the cluster just before: its cohorts go into the detail.
//
// Once a node's disk is gone the fault has happened, so applyWipe
// reports success (and the nemesis events are recorded: the checkers
// must know) whenever it wiped at least one node; what failed is in the
// detail. It fails, wiping nothing, only when no node could be wiped.
func (r *Run) applyWipe(a *active, nodes []int, view *View) error {
	if view != nil {
		a.detail[detailCohorts] = view.Cohorts()
		a.detail[detailVoters] = view.Voters()
		ids := map[int]string{}
		for id, i := range view.Index {
			if slices.Contains(nodes, i) {
				ids[i] = fmt.Sprintf("%016x", id)
			}
		}
		a.detail[detailOldIDs] = ids
	}
	var errs []error
	var wiped, killed []int
	for _, i := range nodes {
		n := r.nodes[i-1]
		if n.State() != StateDown {
			if err := n.Kill(); err != nil && n.State() != StateDown {
				// Still running: its disk is not taken from under it.
				errs = append(errs, fmt.Errorf("node %d not wiped: %w", i, err))
				continue
			}
		}
		killed = append(killed, i)
		dir := r.dataDir(i)
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("node %d: delete %s: %w", i, dir, err))
			continue
		}
		var join []int
		for j := 1; j <= r.cfg.Topology.Nodes; j++ {
			if j != i {
				join = append(join, j)
			}
		}
		r.nodes[i-1].SetArgv(r.nodeArgv(i, join))
		wiped = append(wiped, i)
	}
	a.targets = wiped
	a.heal = func(context.Context) error { return r.restart(killed) }
	if len(wiped) == 0 {
		return errors.Join(append(errs, r.restart(killed))...)
	}
	if len(errs) > 0 {
		a.detail["errors"] = oneLine(errors.Join(errs...))
	}
	return nil
}

// restart starts those of nodes that are down, with their flags and data
// dirs.
func (r *Run) restart(nodes []int) error {
	var errs []error
	for _, i := range nodes {
		if r.nodes[i-1].State() == StateDown {
			if err := r.nodes[i-1].Start(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// applyCrash asks node i to crash losing its unsynced writes (the
// skuldtest hook); without the hooks it kills -9 instead and says so.
func (r *Run) applyCrash(ctx context.Context, a *active, i int) error {
	a.targets = []int{i}
	a.heal = func(context.Context) error { return r.restart([]int{i}) }
	if !r.hooks {
		a.detail["fallback"] = "no test hooks: kill -9 instead of losing unsynced writes"
		return r.nodes[i-1].Kill()
	}
	done, err := r.nodes[i-1].ExpectExit()
	if err != nil {
		return err
	}
	res := Crash(ctx, r.api, i)
	a.detail["answer"] = strings.TrimSpace(res.Type + " " + res.Code)
	// The node exits in the middle of the request, so the connection
	// breaks (or, rarely, the answer makes it out). Any other answer
	// means the hook did not run: the node is not serving.
	if res.Type != OK && res.Code != "conn_error" {
		a.detail["fallback"] = "the crash hook did not run: killed -9"
		return r.nodes[i-1].Kill()
	}
	if err := r.nodes[i-1].WaitExit(done, crashExitBound); err != nil {
		a.detail["fallback"] = "did not exit after /debug/crash: killed -9"
		return errors.Join(err, r.nodes[i-1].Kill())
	}
	return nil
}

// applyTerm stops node i gracefully (SIGTERM: it hands its partitions
// over and leaves); the heal restarts it. The hold counts from the exit.
func (r *Run) applyTerm(a *active, i int) error {
	a.targets = []int{i}
	a.heal = func(context.Context) error { return r.restart([]int{i}) }
	start := time.Now()
	err := r.nodes[i-1].Term(r.cfg.StopGrace)
	a.detail["stop_ms"] = time.Since(start).Milliseconds()
	if err != nil {
		a.detail["killed"] = "did not stop within the grace: killed -9"
	}
	return nil
}

// applyPauseLeader stops a partition's leader or the metadata leader.
func (r *Run) applyPauseLeader(ctx context.Context, a *active, f Fault) error {
	v, err := AnyView(ctx, r.api, r.cfg.Topology, r.serving())
	if err != nil {
		return err
	}
	var l int
	if f.Kind == NemPauseRaftLeader {
		l = v.RaftLeader()
	} else {
		l = v.LeaderOf(f.Partition)
		a.detail["partition"] = f.Partition
	}
	if l == 0 || r.nodes[l-1].State() != StateRunning {
		return fmt.Errorf("no running leader known (view of node %d says %d)", v.From, l)
	}
	a.targets = []int{l}
	if err := r.nodes[l-1].Pause(); err != nil {
		return err
	}
	a.heal = func(context.Context) error { return r.nodes[l-1].Resume() }
	return nil
}

// applyPauseWorker stops a worker that holds a claim (waiting up to
// holderWait for one), or one drawn at random.
func (r *Run) applyPauseWorker(ctx context.Context, a *active) error {
	var w *WorkerProc
	deadline := time.Now().Add(holderWait)
	for w == nil && time.Now().Before(deadline) {
		if w = r.pool.Holder(); w == nil {
			if err := sleepCtx(ctx, readyPoll/5); err != nil {
				return err
			}
		}
	}
	a.detail["holding"] = w != nil
	if w == nil {
		w = r.pool.Procs[r.rng.IntN(len(r.pool.Procs))]
	}
	a.detail["worker"], a.detail["pid"] = w.Loop, w.Pid()
	if err := w.Pause(); err != nil {
		return err
	}
	a.heal = func(context.Context) error { return w.Resume() }
	return nil
}

// applyGrudge installs g; targets are the nodes the event names.
func (r *Run) applyGrudge(ctx context.Context, a *active, g Grudge, targets []int) error {
	a.targets = slices.Clone(targets)
	a.detail["grudge"] = g
	a.heal = func(ctx context.Context) error { return HealNetwork(ctx, r.cfg.Topology) }
	if err := g.Apply(ctx, r.cfg.Topology); err != nil {
		return errors.Join(err, a.heal(ctx))
	}
	return nil
}

// applyClock sets the targets' clock offsets; the heal sets them back to
// zero.
func (r *Run) applyClock(ctx context.Context, a *active, f Fault) error {
	if !r.hooks {
		return fmt.Errorf("no test hooks (%s)", r.hooksWhy)
	}
	a.targets = slices.Clone(f.Targets)
	a.detail["offsets_ms"] = f.OffsetsMs
	a.detail["skew_bound_ms"] = r.cfg.SkewBound.Milliseconds()
	a.detail["max_drift_ms"] = r.cfg.MaxDrift.Milliseconds()
	a.heal = func(ctx context.Context) error { return r.resetClocks(ctx, f.Targets) }
	offsets := make(map[int]int64)
	for k, i := range f.Targets {
		if r.nodes[i-1].State() == StateRunning {
			offsets[i] = f.OffsetsMs[k] // a node down now starts with its own clock
		}
	}
	return r.setClocks(ctx, offsets)
}

// resetClocks sets the running nodes among nodes back to offset 0.
func (r *Run) resetClocks(ctx context.Context, nodes []int) error {
	offsets := make(map[int]int64)
	for _, i := range nodes {
		if r.nodes[i-1].State() == StateRunning {
			offsets[i] = 0
		}
	}
	return r.setClocks(ctx, offsets)
}

// setClocks sets the nodes' offsets all at once, so one node that does
// not answer delays the others by nothing.
func (r *Run) setClocks(ctx context.Context, offsets map[int]int64) error {
	errs := make(chan error, len(offsets))
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Go(func() { errs <- SetClock(ctx, r.api, i, off) })
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// healActive heals a and records its stop event.
func (r *Run) healActive(ctx context.Context, a *active) error {
	var err error
	if a.heal != nil {
		err = a.heal(ctx)
	}
	if err != nil {
		a.detail["heal_error"] = err.Error()
	}
	r.recordNemesis(a, "stop", r.tl.Now())
	return err
}

func (r *Run) recordNemesis(a *active, f string, t int64) {
	var detail json.RawMessage
	if len(a.detail) > 0 {
		detail, _ = json.Marshal(a.detail)
	}
	r.rec.Record(Event{Proc: -1, Type: Nemesis, F: f, TNs: t, Nemesis: a.f.Kind, Targets: a.targets, Detail: detail})
}

// healAll undoes every fault the harness can have left, whatever the
// schedule did: it resumes paused nodes and workers, flushes the
// partitions, makes the relay transparent, sets clocks back and restarts
// the nodes that are down. Idempotent.
func (r *Run) healAll(ctx context.Context) error {
	var errs []error
	for _, n := range r.nodes {
		if n.State() == StatePaused {
			errs = append(errs, n.Resume())
		}
	}
	if r.pool != nil {
		r.pool.ResumeAll()
	}
	errs = append(errs, HealNetwork(ctx, r.cfg.Topology))
	if r.relay != nil {
		r.relay.Heal()
	}
	if r.hooks {
		// Before the restarts: a node started now has no offset, and
		// does not answer yet.
		errs = append(errs, r.resetClocks(ctx, r.running()))
	}
	errs = append(errs, r.restart(allNodes(r.cfg.Topology.Nodes)))
	return errors.Join(errs...)
}

func allNodes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
