package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
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
	// notes are recorded right after the start event: what went wrong
	// with a fault that still holds (NotePartial, NoteCrashFallback).
	notes []pendingNote
	// verify, if set, runs after the start event, and verifyHeal after
	// the stop event: the partitions' connect check.
	verify, verifyHeal func(ctx context.Context)
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
	case NemDecommission:
		err = r.applyDecommission(ctx, a, f.Targets[0])
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
			// The drawn partition's leader, or if it is not up (held
			// by another fault of the step, or none known) the next
			// partition's whose leader is.
			p, l := pickPartition(f.Partition, r.cfg.Partitions, v.LeaderOf, r.live)
			a.detail["partition"] = p
			if p != f.Partition {
				a.detail["drawn_partition"] = f.Partition
				if d := v.LeaderOf(f.Partition); d == 0 {
					a.detail["moved"] = "no leader of the drawn partition known"
				} else {
					a.detail["moved"] = fmt.Sprintf("the drawn partition's leader, node %d, %s", d, r.notLive(d))
				}
			}
			if l == 0 {
				err = fmt.Errorf("no partition has a known leader that is up (drawn: partition %d)", f.Partition)
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
	for _, n := range a.notes {
		r.note(n.what, n.targets, n.detail)
	}
	if holdsNodes(f.Kind) {
		for _, i := range a.targets {
			r.held[i] = f.Kind
		}
	}
	if a.verify != nil {
		a.verify(ctx)
	}
	return a, nil
}

// holdsNodes reports whether a nemesis holds its targets down or paused
// until its heal: a node it holds is the schedule's doing, so another
// fault of the same step that cannot reach that node leaves it out
// without being partial (Run.held).
func holdsNodes(kind string) bool {
	switch nemesisClass(kind) {
	case "process", "all":
		return kind != NemPauseWorker
	}
	return false
}

// partialNote queues a NotePartial for a fault whose applied part holds.
func (a *active) partialNote(ap *application) {
	a.notes = append(a.notes, pendingNote{NotePartial, sorted(ap.intended), ap.detail(a.f.Kind, healedWithFault)})
}

// applyKill kills -9 the nodes; the heal restarts them. A node that is
// down already (it exited on its own, or a restart failed: the schedule
// is drawn without knowing) or that outlives its kill is not killed: the
// fault holds on the others (NotePartial), or is skipped if none.
func (r *Run) applyKill(a *active, nodes []int) error {
	ap := newApplication(nodes)
	for _, i := range nodes {
		switch err := r.nodes[i-1].Kill(); {
		case err == nil:
			ap.hit(i)
		case errors.Is(err, ErrNotRunning):
			ap.miss(i, "down already")
		default:
			ap.miss(i, oneLine(err))
		}
	}
	a.targets = ap.targets()
	if ap.none() {
		return ap.err()
	}
	// Every node named is started again, a node that was down before
	// the fault too: the steps after this one act on a whole cluster.
	a.heal = func(context.Context) error { return r.restart(nodes) }
	if ap.partial() {
		a.partialNote(ap)
	}
	return nil
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
	ap := newApplication(nodes)
	for _, i := range nodes {
		n := r.nodes[i-1]
		if n.State() != StateDown {
			if err := n.Kill(); err != nil && n.State() != StateDown {
				// Still running: its disk is not taken from under it.
				errs = append(errs, fmt.Errorf("node %d not wiped: %w", i, err))
				ap.miss(i, "not killed: "+oneLine(err))
				continue
			}
		}
		killed = append(killed, i)
		dir := r.dataDir(i)
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("node %d: delete %s: %w", i, dir, err))
			ap.miss(i, "killed, but its data dir not deleted: "+oneLine(err))
			continue
		}
		ap.hit(i)
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
	if ap.partial() {
		a.partialNote(ap)
	}
	return nil
}

// restart starts those of nodes that are down, with their flags and data
// dirs, and watches each started one until it has started
// (watchServing): the heal does not wait for it, so the faults of the
// step after it heal on schedule.
func (r *Run) restart(nodes []int) error {
	var errs []error
	for _, i := range nodes {
		if r.nodes[i-1].State() == StateDown {
			if err := r.nodes[i-1].Start(); err != nil {
				errs = append(errs, err)
				continue
			}
			if r.api != nil { // nil for a unit test's processes
				r.watching.Go(func() { r.watchServing(i) })
			}
		}
	}
	return errors.Join(errs...)
}

// Watching a restarted node until it serves: servingWatchBound bounds
// the watch (a node that starts slower goes unrecorded: its requests
// then count against the faults after its restart), servingPoll is how
// often it asks, servingAskTimeout bounds one ask (a paused node does
// not answer).
const (
	servingWatchBound = 30 * time.Second
	servingPoll       = 20 * time.Millisecond
	servingAskTimeout = time.Second
)

// watchServing records NoteServing once node i, just started, answers
// GET /readyz as a started node (startedAnswer); it gives up when the
// process is down again or after servingWatchBound.
func (r *Run) watchServing(i int) {
	deadline := time.Now().Add(servingWatchBound)
	for time.Now().Before(deadline) {
		if r.nodes[i-1].State() == StateDown {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), servingAskTimeout)
		res := r.api.Do(ctx, i, http.MethodGet, "/readyz", nil, nil)
		cancel()
		if startedAnswer(res) {
			r.note(NoteServing, []int{i}, nil)
			return
		}
		time.Sleep(servingPoll)
	}
}

// startedAnswer reports whether res, a node's answer to GET /readyz,
// says it has started: ready, or not ready for other reasons than
// starting or stopping (a node past its start may be unready for a
// fault's reasons: that is the fault's to show). A body that is not the
// probe's JSON counts as not started.
func startedAnswer(res Result) bool {
	switch {
	case res.Type == OK:
		return true
	case res.Status == 0:
		return false // no answer: not bound yet, or paused
	}
	var body struct {
		Reasons []string `json:"reasons"`
	}
	if err := json.Unmarshal(res.Body, &body); err != nil || len(body.Reasons) == 0 {
		return false
	}
	return !slices.Contains(body.Reasons, "starting") && !slices.Contains(body.Reasons, "shutting down")
}

// applyCrash asks node i to crash losing its unsynced writes (the
// skuldtest hook) and checks that it exited with the hook's status. When
// it cannot be crashed so (no hooks, a hook that did not run, a node that
// did not exit) it is killed -9 instead: a crash that lost nothing
// unsynced, so NoteCrashFallback says the fault tested less than it
// names. A node that exited with another status exited on its own (the
// reaper records NoteExit), and the crash is not what happened either.
func (r *Run) applyCrash(ctx context.Context, a *active, i int) error {
	a.targets = []int{i}
	a.heal = func(context.Context) error { return r.restart([]int{i}) }
	n := r.nodes[i-1]
	var why string
	if !r.hooks {
		if n.State() == StateDown {
			return fmt.Errorf("node %d: %w", i, ErrNotRunning)
		}
		why = "no test hooks (" + r.hooksWhy + ")"
	} else {
		done, err := n.ExpectCrash()
		if err != nil {
			return err // down: nothing to crash
		}
		res := Crash(ctx, r.api, i)
		a.detail["answer"] = strings.TrimSpace(res.Type + " " + res.Code)
		// The node exits in the middle of the request, so the
		// connection breaks or the request times out (or, rarely, the
		// answer makes it out). Any other answer (refused, an error
		// status) means the hook did not run.
		if ran := res.Type == OK || res.Code == "conn_error" || res.Code == "timeout"; !ran {
			why = fmt.Sprintf("the crash hook did not run (answer %s %s)", res.Code, res.Err)
		} else if err := n.WaitExit(done, crashExitBound); err != nil {
			why = fmt.Sprintf("the crash hook answered, but the node did not exit within %v", crashExitBound)
		} else {
			ex := n.LastExit()
			a.detail["exit"] = ex.Text
			if ex.Code != CrashExitStatus {
				a.notes = append(a.notes, pendingNote{NoteCrashFallback, []int{i}, map[string]any{
					"why": fmt.Sprintf("the node exited with %s, not the crash hook's exit status %d", ex.Text, CrashExitStatus),
				}})
			}
			return nil
		}
	}
	err := n.Kill()
	a.detail["exit"] = n.LastExit().Text
	switch {
	case errors.Is(err, ErrNotRunning) && n.LastExit().Code == CrashExitStatus:
		// It exited by the hook after all, just past the bound.
		a.detail["late"] = why
		return nil
	case err != nil && !errors.Is(err, ErrNotRunning):
		return fmt.Errorf("%s, and kill -9 failed: %w", why, err)
	}
	a.detail["fallback"] = why + ": killed -9"
	a.notes = append(a.notes, pendingNote{NoteCrashFallback, []int{i}, map[string]any{
		"why": why, "instead": "kill -9: the unsynced writes were not dropped", "answer": a.detail["answer"],
	}})
	return nil
}

// applyTerm stops node i gracefully (SIGTERM: it hands its partitions
// over and leaves); the heal restarts it. The hold counts from the exit.
func (r *Run) applyTerm(a *active, i int) error {
	a.targets = []int{i}
	a.heal = func(context.Context) error { return r.restart([]int{i}) }
	start := time.Now()
	err := r.nodes[i-1].Term(r.cfg.StopGrace)
	if errors.Is(err, ErrNotRunning) {
		return err // down: nothing to stop
	}
	a.detail["stop_ms"] = time.Since(start).Milliseconds()
	a.detail["exit"] = r.nodes[i-1].LastExit().Text
	if err != nil {
		// The stop began (SIGTERM: the node hands over and leaves)
		// and took longer than the grace; a graceful stop may take up
		// to 27 s, so this is the harness's bound, not a node fault.
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

// applyGrudge installs g; targets are the nodes the event names. Once
// installed, and once healed, the connect check verifies that the rules
// cut what g names and nothing else (checkPartition). A grudge installed
// in some namespaces and not others is another partition than g (half a
// symmetric cut is a one-way cut), which no event could name: it is
// flushed at once, NotePartial says what held meanwhile, and the fault is
// skipped.
func (r *Run) applyGrudge(ctx context.Context, a *active, g Grudge, targets []int) error {
	t := r.cfg.Topology
	a.targets = slices.Clone(targets)
	a.detail["grudge"] = g
	a.heal = func(ctx context.Context) error { return HealNetwork(ctx, t) }
	a.verify = func(ctx context.Context) { r.checkPartition(ctx, g, "installed "+a.f.Kind) }
	a.verifyHeal = func(ctx context.Context) { r.checkPartition(ctx, nil, "healed "+a.f.Kind) }
	installed, err := g.Apply(ctx, t)
	if err == nil {
		return nil
	}
	herr := a.heal(ctx)
	if len(installed) > 0 {
		ap := newApplication(g.Nodes())
		for _, n := range g.Nodes() {
			if slices.Contains(installed, n) {
				ap.hit(n)
			} else {
				ap.miss(n, oneLine(err))
			}
		}
		d := ap.detail(a.f.Kind, healedAtOnce)
		if herr != nil {
			d["heal_error"] = oneLine(herr)
		}
		r.note(NotePartial, sorted(targets), d)
	}
	r.checkPartition(ctx, nil, "rolled back "+a.f.Kind)
	return errors.Join(err, herr)
}

// live reports whether node i is up for a fault that needs a live node:
// running, not paused, and not held by another fault of the step.
func (r *Run) live(i int) bool {
	return i >= 1 && i <= len(r.nodes) && r.held[i] == "" && r.nodes[i-1].State() == StateRunning
}

// notLive says why node i is not live.
func (r *Run) notLive(i int) string {
	st := r.nodes[i-1].State()
	if k := r.held[i]; k != "" {
		return fmt.Sprintf("%s by %s of this step", st, k)
	}
	return st
}

// livePick is one node a fault that needs live nodes acts on: drawn is
// the target it was drawn as (node itself, unless the target was not up
// and node, a spare, took its place), k that target's index (its offset).
type livePick struct {
	node, drawn, k int
}

// livePicks resolves a fault's drawn targets against the nodes up when
// it is applied: a target that is up keeps its place; one that is not
// gives it to the first of spares that is up and not picked already.
// picks are sorted by node; stranded are the targets not up that no spare
// could replace. Deterministic: the spares' order is drawn from the seed.
func livePicks(targets, spares []int, up func(int) bool) (picks []livePick, stranded []int) {
	taken := map[int]bool{}
	for k, i := range targets {
		if up(i) {
			picks = append(picks, livePick{node: i, drawn: i, k: k})
			taken[i] = true
		}
	}
	for k, i := range targets {
		if up(i) {
			continue
		}
		j := slices.IndexFunc(spares, func(s int) bool { return !taken[s] && !slices.Contains(targets, s) && up(s) })
		if j < 0 {
			stranded = append(stranded, i)
			continue
		}
		taken[spares[j]] = true
		picks = append(picks, livePick{node: spares[j], drawn: i, k: k})
	}
	slices.SortFunc(picks, func(a, b livePick) int { return cmp.Compare(a.node, b.node) })
	return picks, stranded
}

// pickPartition picks the partition whose leader a fault acts on: the
// drawn one if its leader is known and up, else the first after it (in
// a cycle) whose is; leader 0 if none.
func pickPartition(drawn, partitions int, leaderOf func(int) int, up func(int) bool) (p, leader int) {
	for k := range max(partitions, 1) {
		q := (drawn + k) % max(partitions, 1)
		if l := leaderOf(q); l != 0 && up(l) {
			return q, l
		}
	}
	return drawn, 0
}

// applyClock sets the targets' clock offsets; the heal sets them back to
// zero. The event's Targets and offsets_ms (one per target, in order)
// name the nodes whose offset was set. The fault acts on live nodes
// (livePicks): a target held down or paused by another fault of the step
// (Run.held; those are applied first, Step), or down by itself, gives its
// place and offset to a spare drawn with it (detail "moved"). A target
// no spare can replace (clock-within names every node) is left without:
// as the schedule allows when another fault of the step holds it, else as
// a partial application (NotePartial); so is one whose request failed.
// The fault is skipped only if no node was set.
func (r *Run) applyClock(ctx context.Context, a *active, f Fault) error {
	if !r.hooks {
		return fmt.Errorf("no test hooks (%s)", r.hooksWhy)
	}
	picks, stranded := livePicks(f.Targets, f.Spares, r.live)
	var nodes []int
	for _, p := range picks {
		nodes = append(nodes, p.node)
	}
	ap := newApplication(append(slices.Clone(nodes), stranded...))
	for _, i := range stranded {
		if r.held[i] != "" {
			// A node down now starts with its own clock.
			ap.leave(i, r.notLive(i))
		} else {
			ap.miss(i, r.notLive(i)+": its clock cannot be set")
		}
	}
	want := make(map[int]int64)
	moved := make(map[int]string)
	for _, p := range picks {
		want[p.node] = f.OffsetsMs[p.k]
		if p.node != p.drawn {
			moved[p.drawn] = fmt.Sprintf("node %d in its place: %s", p.node, r.notLive(p.drawn))
		}
	}
	errs := r.setClocks(ctx, want)
	var offsets []int64
	for _, p := range picks { // sorted by node, as the targets are
		if err := errs[p.node]; err != nil {
			ap.miss(p.node, oneLine(err))
			continue
		}
		ap.hit(p.node)
		offsets = append(offsets, f.OffsetsMs[p.k])
	}
	a.targets = ap.targets()
	a.detail["offsets_ms"] = offsets
	a.detail["skew_bound_ms"] = r.cfg.SkewBound.Milliseconds()
	a.detail["max_drift_ms"] = r.cfg.MaxDrift.Milliseconds()
	if len(ap.leftOut) > 0 {
		a.detail["left_out"] = ap.leftOut
	}
	if len(moved) > 0 {
		a.detail["moved"] = moved
	}
	// The heal resets every node tried, a failed one too: a request
	// that timed out may have set its offset all the same.
	a.heal = func(ctx context.Context) error { return r.resetClocks(ctx, nodes) }
	if ap.none() {
		return errors.Join(ap.err(), a.heal(ctx))
	}
	if ap.partial() {
		a.partialNote(ap)
	}
	return nil
}

// clockResetTries bounds the tries of setting a node's offset back to 0:
// a node left with its offset after its window would make the checkers
// judge its claims as if its clock were right, so a timeout (a node busy
// restarting its partitions) is tried again; each try is bounded by
// hookTimeout.
const clockResetTries = 3

// resetClocks sets the running nodes among nodes back to offset 0.
func (r *Run) resetClocks(ctx context.Context, nodes []int) error {
	offsets := make(map[int]int64)
	for _, i := range nodes {
		if r.nodes[i-1].State() == StateRunning {
			offsets[i] = 0
		}
	}
	var errs map[int]error
	for range clockResetTries {
		errs = r.setClocks(ctx, offsets)
		if len(errs) == 0 || ctx.Err() != nil {
			break
		}
		clear(offsets)
		for i := range errs {
			offsets[i] = 0
		}
	}
	var all []error
	for _, i := range slices.Sorted(maps.Keys(errs)) {
		all = append(all, errs[i])
	}
	return errors.Join(all...)
}

// setClocks sets the nodes' offsets all at once, so one node that does
// not answer delays the others by nothing, and returns the errors by
// node (none: every offset was set).
func (r *Run) setClocks(ctx context.Context, offsets map[int]int64) map[int]error {
	var mu sync.Mutex
	errs := make(map[int]error)
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Go(func() {
			if err := SetClock(ctx, r.api, i, off); err != nil {
				mu.Lock()
				errs[i] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// healActive heals a and records its stop event; a heal that failed is
// a NoteHealFailed (the fault may still hold after its window).
func (r *Run) healActive(ctx context.Context, a *active) error {
	var err error
	if a.heal != nil {
		err = a.heal(ctx)
	}
	if err != nil {
		a.detail["heal_error"] = err.Error()
	}
	for i, k := range r.held {
		if k == a.f.Kind && slices.Contains(a.targets, i) {
			delete(r.held, i)
		}
	}
	r.recordNemesis(a, "stop", r.tl.Now())
	if err != nil {
		r.note(NoteHealFailed, a.targets, map[string]any{"nemesis": a.f.Kind, "error": oneLine(err)})
	}
	if a.verifyHeal != nil {
		a.verifyHeal(ctx)
	}
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
	if err := HealNetwork(ctx, r.cfg.Topology); err != nil {
		errs = append(errs, err)
	} else {
		r.checkPartition(ctx, nil, "heal phase")
	}
	if r.relay != nil {
		r.relay.Heal()
	}
	if r.hooks {
		// Before the restarts: a node started now has no offset, and
		// does not answer yet.
		errs = append(errs, r.resetClocks(ctx, r.running()))
	}
	errs = append(errs, r.restart(allNodes(r.cfg.Topology.Nodes)))
	clear(r.held)
	return errors.Join(errs...)
}

func allNodes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
