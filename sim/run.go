package sim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/skuldd/skuldd/faults"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Result is a finished run: its schedule, the checkers' report, and what
// went wrong outside the history (a node that would not restart, a run
// that could not converge or drain).
type Result struct {
	Seed     uint64
	Schedule []fault
	Report   *faults.Report
	Problems []string
	// History is what the checkers judged (for a failing seed's report).
	History *faults.Input
}

// OK reports whether the run passed every check.
func (r *Result) OK() bool { return len(r.Problems) == 0 && r.Report != nil && r.Report.OK() }

// Streams of the seed: the schedule, the nodes' fault injectors and each
// client (the drain last) draw from their own PCG stream of the seed, so
// adding a client leaves the schedule as it was. The run's seed only ever
// seeds these streams, never offset by a node or client number, so two
// seeds of a range share no draws.
const (
	streamSchedule = iota
	streamNodes
	streamClients // streamClients+k is client k's; the drain's is k = Clients
)

// Run runs one seed: the cluster, the workload under the seed's fault
// schedule, heal, convergence, drain and the final reads, then the
// checkers. It must run inside a testing/synctest bubble (virtual time);
// outside one it works on real time, slowly. The error is the
// simulation's own failure: the cluster never formed.
func Run(ctx context.Context, cfg Config, seed uint64, log *slog.Logger) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: config: %w", err)
	}
	res := &Result{Seed: seed, Schedule: schedule(&cfg, rand.New(rand.NewPCG(seed, streamSchedule)))}
	rec := newRecorder()
	rec.phase(faults.PhaseSetup, nil)
	c, err := newCluster(ctx, &cfg, seed, log, rec.leading)
	if err != nil {
		return nil, err
	}
	defer c.close()
	r := &run{cfg: &cfg, c: c, rec: rec, res: res, sink: faults.NewSink()}

	r.setSchedules(ctx)
	rec.phase(faults.PhaseFaults, res.Schedule)
	until := time.Now().Add(cfg.FaultTime)
	var wg sync.WaitGroup
	stride := cfg.Clients + 1 // the drain is process Clients
	for k := range cfg.Clients {
		cl := &client{cfg: &cfg, c: c, rec: rec, sink: r.sink, rng: rand.New(rand.NewPCG(seed, streamClients+uint64(k))),
			proc: k, stride: stride, tag: fmt.Sprintf("c%d", k)}
		wg.Go(func() { cl.run(ctx, until) })
	}
	r.nemesis(ctx)
	wg.Wait()

	healAt := time.Now()
	c.healLinks()
	rec.phase(faults.PhaseHeal, nil)
	if r.converge(ctx) {
		rec.phase(faults.PhaseConverged, nil)
	} else {
		rec.phase(faults.PhaseNotConverged, "replicas still differ")
	}
	sleep(ctx, cfg.Quiet-time.Since(healAt))
	rec.phase(faults.PhaseDrain, nil)
	r.drain(ctx, stride)
	// The drain's completions reach every replica by replication or
	// anti-entropy; the final reads judge what they agree on then.
	if !r.converge(ctx) {
		r.problem("replicas still differed %v after the drain", cfg.ConvergeTimeout)
	}
	rec.phase(faults.PhaseFinal, nil)
	r.finalReads(ctx)
	r.readPeriodic(ctx)
	rec.phase(faults.PhaseDone, nil)
	c.close()
	// memberlist's probe goroutines outlive its Shutdown, each until its
	// probe timer fires; time stops once a bubble's main goroutine
	// returns, so the run waits them out here rather than leave them
	// blocked for good.
	sleep(ctx, shutdownLinger)

	// W stays 0, a majority, though some enqueues ask w=1: the checkers
	// read it only to excuse losses of replicas lost for good, and no
	// fault here loses one (a crash keeps what was synced), so a w=1
	// acknowledgement must survive as a majority's must. Each enqueue's
	// ok carries its acks.
	res.History = rec.input(faults.RunInfo{
		Seed: int64(seed), Scenario: "sim", Nodes: cfg.Nodes, Addrs: addrs(cfg.Nodes),
		Partitions: cfg.Partitions, Replicas: cfg.Replicas,
		SkewBoundMs: cfg.SkewBound.Milliseconds(), MaxDriftMs: cfg.maxDrift().Milliseconds(),
		AAEIntervalMs: cfg.AAEInterval.Milliseconds(), TTLMs: cfg.TTL.Milliseconds(), MaxAttempts: cfg.MaxAttempts,
		Command: ReplayCommand(seed), StartUnixNs: rec.start.UnixNano(),
	})
	res.History.Periodic = r.periodic
	res.Report = faults.Analyze(res.History)
	return res, nil
}

// shutdownLinger is how long goroutines of closed nodes may still wait on
// their timers (memberlist's probe timeout is well below it).
const shutdownLinger = 10 * time.Second

// ReplayCommand is the command that runs seed again, and only it.
func ReplayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./sim -run TestSim -seed %d -seeds 1", seed)
}

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = addrOf(i)
	}
	return out
}

// run is the state of one Run past setup.
type run struct {
	cfg *Config
	c   *cluster
	rec *recorder
	res *Result
	// sink is the fenced sink every client offers its effects to.
	sink *faults.Sink
	// periodic is the record of the run's schedules (periodic.go).
	periodic *faults.PeriodicRecord
	mu       sync.Mutex // guards res.Problems
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Problems = append(r.res.Problems, fmt.Sprintf(format, args...))
}

// nemesis applies the schedule: each track's faults in turn, each at its
// time and healed after its length (a node that went down restarted
// then); the tracks run at once.
func (r *run) nemesis(ctx context.Context) {
	start := time.Now()
	tracks := map[int][]fault{}
	for _, f := range r.res.Schedule {
		tracks[f.Track] = append(tracks[f.Track], f)
	}
	var wg sync.WaitGroup
	for _, fs := range tracks {
		wg.Go(func() {
			for _, f := range fs {
				sleep(ctx, f.At-time.Since(start))
				if ctx.Err() != nil {
					return
				}
				r.apply(f)
				r.rec.nemesis("start", f)
				sleep(ctx, f.For)
				r.heal(ctx, f)
				r.rec.nemesis("stop", f)
			}
		})
	}
	wg.Wait()
}

func (r *run) apply(f fault) {
	c := r.c
	addr, peer := addrOf(f.Node), addrOf(f.Peer)
	switch f.Kind {
	case faultIsolate:
		c.isolate(f.Node)
	case faultDropReplication:
		c.faults(f.Node).DropReplication(peer)
	case faultDelay:
		c.faults(f.Node).Delay(peer, f.Delay)
		c.faults(f.Peer).Delay(addr, f.Delay)
	case faultLoseReplies:
		c.faults(f.Node).LoseReplies(peer)
	case faultCut:
		c.faults(f.Node).Cut(peer)
	case faultDuplicate:
		c.faults(f.Node).Duplicate(peer)
	case faultReorder:
		c.faults(f.Node).Reorder(peer, f.Delay)
		c.faults(f.Peer).Reorder(addr, f.Delay)
	case faultKill:
		c.kill(f.Node)
	case faultCrash:
		c.crash(f.Node, f.Unsynced, f.Seed)
	case faultMajorityDown:
		c.crash(f.Node, f.Unsynced, f.Seed)
		c.crash(f.Peer, f.Unsynced, f.Seed+1)
	case faultClock:
		for k, i := range f.Shifted {
			c.shiftClock(i, time.Duration(f.OffsetsMs[k])*time.Millisecond)
		}
	case faultFreeze:
		c.faults(f.Node).Freeze()
		c.isolate(f.Node)
	}
}

// heal undoes f alone (the other track's fault lasts): its links heal, a
// clock goes back, a frozen node thaws, a node that went down restarts.
func (r *run) heal(ctx context.Context, f fault) {
	c := r.c
	switch f.Kind {
	case faultKill, faultCrash:
		r.restart(ctx, f, f.Node)
	case faultMajorityDown:
		// Both at once, as an operator (or systemd) would: each one's
		// start waits for a majority, which needs the other.
		var wg sync.WaitGroup
		wg.Go(func() { r.restart(ctx, f, f.Node) })
		wg.Go(func() { r.restart(ctx, f, f.Peer) })
		wg.Wait()
	case faultClock:
		for _, i := range f.Shifted {
			c.shiftClock(i, 0)
		}
	case faultIsolate:
		c.rejoin(f.Node)
	case faultFreeze:
		c.rejoin(f.Node)
		c.faults(f.Node).Thaw()
	default:
		c.faults(f.Node).HealAddr(addrOf(f.Peer))
		c.faults(f.Peer).HealAddr(addrOf(f.Node))
	}
}

// restart starts node i again after f, a problem of the run if it cannot.
func (r *run) restart(ctx context.Context, f fault, i int) {
	if err := r.c.start(ctx, i); err != nil {
		r.problem("after %s: %v", f, err)
	}
}

// ids returns every task id the history knows (faults.NamesTask), in
// order of first mention.
func (r *run) ids() []task.ID {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	var out []task.ID
	seen := map[string]bool{}
	for _, e := range r.rec.events {
		if !faults.NamesTask(e) || seen[e.Task] {
			continue
		}
		if id, err := task.ParseID(e.Task); err == nil {
			seen[e.Task] = true
			out = append(out, id)
		}
	}
	return out
}

// read returns task id as node i's own replica holds it (r=1), as JSON;
// nil and found false when the replica lacks it.
func (r *run) read(ctx context.Context, i int, id task.ID) (view json.RawMessage, found bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	var v *wire.TaskView
	err = r.c.call(rctx, i, func(s wire.Service) (err error) {
		v, err = s.Get(rctx, &wire.GetRequest{ID: id, R: 1})
		return err
	})
	switch {
	case errors.Is(err, task.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	b, err := json.Marshal(v)
	return b, err == nil, err
}

// converge polls every node's replica of every task until they all agree
// for convergedPolls polls in a row, within ConvergeTimeout.
func (r *run) converge(ctx context.Context) bool {
	deadline := time.Now().Add(r.cfg.ConvergeTimeout)
	ids := r.ids()
	agreed := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if r.agree(ctx, ids) {
			agreed++
			if agreed == convergedPolls {
				return true
			}
		} else {
			agreed = 0
		}
		sleep(ctx, r.cfg.PollInterval)
	}
	return false
}

// agree reports whether every node answers the same for every task.
func (r *run) agree(ctx context.Context, ids []task.ID) bool {
	for _, id := range ids {
		var first json.RawMessage
		for i := range r.cfg.Nodes {
			v, _, err := r.read(ctx, i, id)
			if err != nil || (i > 0 && !bytes.Equal(v, first)) {
				return false
			}
			first = v
		}
	}
	return true
}

// drain claims and completes through every node in turn until no claim
// has found anything for the settle window: long enough for every lease
// to end, every delay to pass, and every blocked task whose dependencies
// completed to be made ready (a reconcile interval, should the notice of
// the completion have been lost; the drain's own completions reset the
// window, so a chain unblocks link by link). A task blocked behind a dead
// dependency stays blocked for good: no claim finds it, so it holds the
// drain up no longer than any empty queue, and the checkers count it as
// handled. proc is the drain's history process.
func (r *run) drain(ctx context.Context, stride int) {
	cfg := r.cfg
	cl := &client{cfg: cfg, c: r.c, rec: r.rec, sink: r.sink, rng: rand.New(rand.NewPCG(r.res.Seed, streamClients+uint64(cfg.Clients))),
		proc: cfg.Clients, stride: stride, tag: "drain"}
	settle := cfg.TTL + cfg.SkewBound + max(cfg.RetryAfter, cfg.SnoozeDelay) + cfg.ReconcileInterval + cfg.PollInterval
	deadline := time.Now().Add(cfg.DrainTimeout)
	lastFound := time.Now()
	unled := "" // why the last poll found the partitions not all served
	for time.Since(lastFound) < settle {
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.problem("the drain still found tasks, or a partition without a serving leader, after %v (last poll: %s)", cfg.DrainTimeout, cmp.Or(unled, "every partition served"))
			return
		}
		if cl.claimAndWork(ctx, false) {
			lastFound = time.Now()
			continue
		}
		// The settle window counts only while every partition has a
		// leader the running nodes agree on, and that leader's replica
		// leads: a partition still taking over (after a majority was
		// down, say), or one whose named leader stepped down, holds tasks
		// no claim can reach yet, and a drain that ended then would call
		// them lost.
		if unled = r.unled(ctx); unled != "" {
			lastFound = time.Now()
		}
		sleep(ctx, cfg.PollInterval)
	}
}

// unled returns "" when the running nodes agree on every partition's
// leader and epoch, every leader is running, and every leader's replica
// leads at the registry's epoch; else why not.
func (r *run) unled(ctx context.Context) string {
	var want []wire.PartitionView
	running := map[uint64]int{} // node id -> index
	views := 0
	for _, i := range r.c.up() {
		var v *wire.ClusterResponse
		if err := r.c.call(ctx, i, func(s wire.Service) (err error) { v, err = s.Cluster(ctx); return err }); err != nil {
			return fmt.Sprintf("node %d: %v", i+1, err)
		}
		running[v.Self] = i
		if views++; views == 1 {
			want = v.Partitions
			continue
		}
		if len(v.Partitions) != len(want) {
			return fmt.Sprintf("node %d sees %d partitions, not %d", i+1, len(v.Partitions), len(want))
		}
		for p, pv := range v.Partitions {
			if pv.Leader != want[p].Leader || pv.Epoch != want[p].Epoch {
				return fmt.Sprintf("partition %d: the nodes disagree on its leader", p)
			}
		}
	}
	if views == 0 {
		return "no node running"
	}
	for p, pv := range want {
		i, ok := running[pv.Leader]
		if pv.Leader == 0 || !ok {
			return fmt.Sprintf("partition %d: leader node id %d not running", p, pv.Leader)
		}
		// A registry-named leader whose replica does not lead serves no
		// claim: the drain must not settle on it.
		reps, err := r.c.replicas(i)
		if err != nil {
			return fmt.Sprintf("partition %d: leader node %d: %v", p, i+1, err)
		}
		if p >= len(reps) || reps[p].LeadingEpoch != pv.Epoch {
			var rs node.ReplicaState
			if p < len(reps) {
				rs = reps[p]
			}
			return fmt.Sprintf("partition %d: registry leader node %d (id %d) at epoch %d, its replica leads at %d (0: not), promised %d",
				p, i+1, pv.Leader, pv.Epoch, rs.LeadingEpoch, rs.Promised)
		}
	}
	return ""
}

// finalReads reads every task from every node's replica.
func (r *run) finalReads(ctx context.Context) {
	for _, id := range r.ids() {
		for i := range r.cfg.Nodes {
			v, found, err := r.read(ctx, i, id)
			fr := faults.FinalRead{Task: id.String(), Node: i + 1, Found: found, View: v}
			if err != nil {
				fr.Err = err.Error()
			}
			r.rec.final(fr)
		}
	}
}
