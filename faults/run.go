package faults

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Run is one run of the suite: it builds the network, starts the cluster
// and the workers, applies the schedule, heals, waits for convergence,
// drains, reads every task back, and tears everything down.
type Run struct {
	cfg Config
	log *slog.Logger
	tl  Timeline
	// startUnixNs is the wall clock when tl began (RunInfo.StartUnixNs).
	startUnixNs int64
	sched       Schedule
	// rng resolves what the schedule leaves to run time (a worker to
	// pause when none holds a claim).
	rng *mrand.Rand

	secretPath string
	token      string
	// caPEM is the cluster's HTTPS authority (makeSecret).
	caPEM []byte
	// producerToken and workerToken are the workload's credentials
	// (makeCredentials).
	producerToken, workerToken string
	nodes                      []*NodeProc
	api                        *API
	relay                      *Relay
	rec                        *Recorder
	sink                       *Sink
	pool                       *WorkerPool
	delays                     *delayMonitor
	hooks                      bool
	hooksWhy                   string
	// held maps each node a fault of the current step holds down or
	// paused to that fault's kind (set at apply, cleared at heal): the
	// schedule's own doing, which a fault that cannot reach the node
	// leaves out without being partial. Used by Execute's goroutine
	// only.
	held map[int]string
	// periodic is periodic.json: the schedules set after setup, and
	// the final reads of them and of their queue.
	periodic PeriodicRecord
	// shards runs the worker-shard members (shards.go) from after setup;
	// shardsDone receives the end of their final read and stop, started
	// at the heal. Both nil until then.
	shards     *shardHarness
	shardsDone <-chan error
	// upgraded marks the nodes upgrade mode replaced with this build;
	// upgrade is upgrade.json (upgrade.go).
	upgraded map[int]bool
	upgrade  UpgradeRecord
	// watching holds the watchServing goroutines: finish waits for them
	// (the teardown's kills end them) before it closes the history.
	watching sync.WaitGroup

	mu struct {
		sync.Mutex
		// tasks are the ids of every enqueue invoked, in order.
		tasks []string
		seen  map[string]bool
	}
	sum RunSummary
}

// Phases of a run (Phase events' F).
const (
	PhaseSetup        = "setup"
	PhaseFaults       = "faults"
	PhaseHeal         = "heal"
	PhaseConverged    = "converged"
	PhaseNotConverged = "not-converged"
	PhaseDrain        = "drain"
	PhaseFinal        = "final"
	PhaseDone         = "done"
)

// Bounds of the harness's own steps.
const (
	// nodeStartBound: node 1 answers within seconds of its start.
	nodeStartBound = 30 * time.Second
	// teardownBound bounds the whole teardown.
	teardownBound = 60 * time.Second
	// tokenBound bounds `skuldd ctl token`.
	tokenBound = 10 * time.Second
	// credentialBound bounds one `skuldd ctl auth create`: a metadata
	// write of a cluster that just became ready (the node bounds its
	// write at 5 s).
	credentialBound = 15 * time.Second
	// secretBytes: the cluster secret's random bytes (hex in the file).
	secretBytes = 32
	runStream   = 0x7275
)

// NewRun checks cfg and prepares a run.
func NewRun(cfg Config) (*Run, error) {
	var err error
	if cfg.Out, err = filepath.Abs(cfg.Out); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	if cfg.Binary, err = filepath.Abs(cfg.Binary); err != nil {
		return nil, fmt.Errorf("skuldd binary: %w", err)
	}
	if cfg.OldBinary != "" {
		if cfg.OldBinary, err = filepath.Abs(cfg.OldBinary); err != nil {
			return nil, fmt.Errorf("older skuldd binary: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r := &Run{cfg: cfg, log: cfg.Logger, sched: cfg.Schedule(), sink: NewSink()}
	r.rng = mrand.New(mrand.NewPCG(uint64(cfg.Seed), runStream))
	r.mu.seen = make(map[string]bool)
	r.held = make(map[int]string)
	r.upgraded = make(map[int]bool)
	return r, nil
}

// Schedule returns the run's schedule.
func (r *Run) Schedule() Schedule { return r.sched }

func (r *Run) printf(format string, args ...any) { fmt.Fprintf(r.cfg.Print, format, args...) }

// Execute runs everything. The error is the harness's own failure (the
// cluster never formed, a file could not be written); what skuldd does
// under the faults is the history's, for the checkers. Once the output
// directory exists, every outcome ends in finish, so the summary is
// written and returned with the error too.
func (r *Run) Execute(ctx context.Context) (sum *RunSummary, err error) {
	started := time.Now()
	r.tl, r.startUnixNs = startTimeline()
	r.sum.Seed, r.sum.Started = r.cfg.Seed, started.UTC().Format(time.RFC3339)
	// A run starts from empty data dirs: a node started on the data dir
	// of an earlier run (another cluster, another secret) would not be
	// the node this run means. Only the run's own subdirectories go.
	for _, d := range []string{r.dir("nodes"), r.dir("workers")} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("output dir: %w", err)
		}
	}
	for _, d := range []string{r.cfg.Out, r.dir("nodes"), r.dir("workers")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("output dir: %w", err)
		}
	}
	r.printOptions()
	if err := WriteJSONFile(filepath.Join(r.cfg.Out, "schedule.json"), r.sched); err != nil {
		return nil, err
	}
	defer func() { sum, err = r.finish(ctx, started, err) }()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if err := r.setSchedules(ctx); err != nil {
		return nil, err
	}
	if err := r.startShards(ctx); err != nil {
		return nil, err
	}
	r.delays = startDelayMonitor()
	if err := r.faults(ctx); err != nil {
		return nil, err
	}
	heal := r.healPhase(ctx)
	r.shardsFinal(heal)
	r.convergence(ctx, heal)
	if err := sleepCtx(ctx, r.cfg.Quiet-time.Duration(r.tl.Now()-heal)); err != nil {
		return nil, err
	}
	r.drain(ctx)
	if err := r.finalReads(ctx); err != nil {
		return nil, err
	}
	if err := r.queueListing(ctx); err != nil {
		return nil, err
	}
	if err := r.periodicReads(ctx); err != nil {
		return nil, err
	}
	if err := r.writeUpgrade(ctx); err != nil {
		return nil, err
	}
	if err := <-r.shardsDone; err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	r.phase(PhaseDone, nil)
	r.stopNodes()
	return nil, nil
}

// finish ends a run whatever its outcome (runErr): it tears down what is
// left, records a NotePanic per node whose log holds a panic (every node
// has exited by then, so the logs are whole), closes the history, and
// writes leaders.jsonl and summary.json (summarize). It returns the
// summary, and runErr joined with its own errors.
func (r *Run) finish(ctx context.Context, started time.Time, runErr error) (*RunSummary, error) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownBound)
	defer cancel()
	if runErr != nil {
		r.sum.Error = oneLine(runErr)
		r.log.Error("run failed", "err", runErr)
	}
	r.sum.Delays = r.delays.stop()
	r.delays = nil
	if err := r.closeShards(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if r.relay != nil {
		r.sum.Relay = r.relay.Stats()
	}
	if r.rec != nil {
		// Setup began: there is something to tear down.
		r.teardown(tctx)
	}
	r.watching.Wait() // the nodes are down: each watch ends at its next ask
	r.scanNodeLogs()
	errs := []error{runErr}
	if r.rec != nil {
		errs = append(errs, r.rec.Close())
	}
	r.sum.ElapsedS = time.Since(started).Seconds()
	sum, err := r.summarize()
	return sum, errors.Join(append(errs, err)...)
}

// startTimeline starts the run's timeline and reads the wall clock at the
// same instant (RunInfo.StartUnixNs): the midpoint of two wall readings
// taken around the monotonic one, so it is off by at most half their
// gap, microseconds.
func startTimeline() (Timeline, int64) {
	w0 := time.Now().UnixNano()
	tl := NewTimeline()
	w1 := time.Now().UnixNano()
	return tl, w0 + (w1-w0)/2
}

func (r *Run) dir(name string) string { return filepath.Join(r.cfg.Out, name) }

// printOptions prints the seed and every option derived from it.
func (r *Run) printOptions() {
	c := &r.cfg
	r.printf("faults: seed %d (%s)\n", c.Seed, map[bool]string{true: "quick", false: "long run of " + c.Duration.String()}[c.Quick])
	r.printf("  command: %s\n  out: %s\n  skuldd: %s\n", c.Command, c.Out, c.Binary)
	if c.OldBinary != "" {
		r.printf("  upgrade mode: the cluster starts on %s, rolled to skuldd node by node, then finalized\n", c.OldBinary)
	}
	r.printf("  cluster: %d nodes, %d partitions, %d replicas, w=%d; skew bound %v, max drift %v, aae interval %v; node flags %v\n",
		c.Topology.Nodes, c.Partitions, c.Replicas, c.W, c.SkewBound, c.MaxDrift, c.AAEInterval, c.NodeFlags)
	r.printf("  workload: %d workers, %.0f enqueue/s in all, ttl %v, max attempts %d, queue %q, request timeout %v\n",
		c.Workers, c.EnqueuePerSec, c.TTL, c.MaxAttempts, c.Queue, c.ReqTimeout)
	mix, _ := json.Marshal(c.Mix)
	r.printf("  mix: %s\n", mix)
	r.printf("  nemesis: hold %v, kill hold %v, pause hold %v, gap %v, combo %.2f, warmup %v\n",
		c.Hold, c.KillHold, c.ScheduleConfig().PauseHold(), c.Gap, c.ComboProb, c.Warmup)
	r.printf("  bounds: setup %v, faults budget %v, recover %v, converge %v, quiet %v, drain %v, final reads %v, stop grace %v\n",
		c.SetupTimeout, c.FaultsBudget, c.RecoverTimeout, c.ConvergeTimeout, c.Quiet, c.DrainTimeout, c.FinalTimeout, c.StopGrace)
	if len(c.Nemeses) > 0 {
		r.printf("  only nemeses: %v\n", c.Nemeses)
	}
	if len(c.Exclude) > 0 {
		r.printf("  excluded nemeses: %v\n", c.Exclude)
	}
	if bb := r.runInfo().BeyondBounds; len(bb) > 0 {
		r.printf("  beyond the design's bounds: %v (their anomalies are reported as the guarantee's boundary)\n", bb)
	}
	r.printf("  schedule (%d steps, about %v):\n", len(r.sched.Steps), r.sched.Estimate().Round(time.Second))
	for _, l := range r.sched.Lines() {
		r.printf("    %s\n", l)
	}
}

// setup builds the network, the relay and the cluster, and starts the
// history.
func (r *Run) setup(ctx context.Context) error {
	t := r.cfg.Topology
	var err error
	if r.rec, err = CreateRecorder(filepath.Join(r.cfg.Out, HistoryFile)); err != nil {
		return err
	}
	r.rec.Observe(r.observe)
	if err := WriteJSONFile(filepath.Join(r.cfg.Out, RunInfoFile), r.runInfo()); err != nil {
		return err
	}
	r.phase(PhaseSetup, nil)
	if err := r.makeSecret(ctx); err != nil {
		return err
	}
	if r.cfg.OldBinary != "" {
		r.upgrade.From = buildVersion(ctx, r.cfg.OldBinary) + ", " + filepath.Base(r.cfg.OldBinary)
		r.log.Info("upgrade mode: the cluster starts on an older build", "build", r.upgrade.From)
	}
	r.log.Info("building the network", "bridge", t.Bridge, "nodes", t.Nodes)
	if err := t.SetupNetwork(ctx); err != nil {
		return err
	}
	rc := RelayConfig{Seed: r.cfg.Seed, MaxDelayed: DefaultMaxDelayed, Logger: r.log}
	var addrs []string
	for i := 1; i <= t.Nodes; i++ {
		rc.Nodes = append(rc.Nodes, RelayNode{Real: t.NodeAddr(i), Relay: t.RelayAddr(i)})
		addrs = append(addrs, t.NodeAddr(i).String())
	}
	if r.relay, err = StartRelay(rc); err != nil {
		return err
	}
	r.api = NewAPI(addrs, r.token, r.caPEM, t.HostIP())
	for i := 1; i <= t.Nodes; i++ {
		r.nodes = append(r.nodes, &NodeProc{
			Index: i, Argv: r.nodeArgv(i, founderJoin(i)), Env: []string{"GOMAXPROCS=1"},
			LogPath:          filepath.Join(r.dir("nodes"), fmt.Sprintf("n%d.log", i)),
			PidPath:          filepath.Join(r.dir("nodes"), fmt.Sprintf("n%d.pid", i)),
			OnUnexpectedExit: func(node int, status string) { r.note(NoteExit, []int{node}, map[string]any{"status": status}) },
			log:              r.log, tl: r.tl,
		})
	}
	// Node 1 founds the cluster; the others join through it.
	if err := r.nodes[0].Start(); err != nil {
		return err
	}
	if err := r.waitAnswers(ctx, 1, nodeStartBound); err != nil {
		return err
	}
	if err := r.restart(allNodes(t.Nodes)); err != nil {
		return err
	}
	if err := WaitReady(ctx, r.api, t, allNodes(t.Nodes), r.cfg.Partitions, r.cfg.SetupTimeout); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.hooks, r.hooksWhy = HasHooks(ctx, r.api, 1)
	if !r.hooks {
		r.log.Warn("skuldd has no test hooks: no clock nemeses, crashes without losing unsynced writes, no convergence polling", "why", r.hooksWhy)
		r.sum.Notes = append(r.sum.Notes, "no test hooks: "+r.hooksWhy)
	}
	if err := r.makeCredentials(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.log.Info("cluster ready", "t", secs(r.tl.Now()), "relay", r.relay.Stats())
	return nil
}

// makeCredentials makes the workload's producer and worker credentials
// with `skuldd ctl auth create`, as an operator would, through node 1.
func (r *Run) makeCredentials(ctx context.Context) error {
	for _, c := range []struct {
		role string
		dst  *string
	}{{roleProducer, &r.producerToken}, {roleWorker, &r.workerToken}} {
		ctx, cancel := context.WithTimeout(ctx, credentialBound)
		out, err := exec.CommandContext(ctx, r.cfg.Binary, "ctl", "--addr", r.cfg.Topology.NodeAddr(1).String(),
			"--cluster-secret-file", r.secretPath, "auth", "create", "fault-"+c.role, "--role", c.role).Output()
		cancel()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return fmt.Errorf("skuldd ctl auth create (%s): %w", c.role, err)
		}
		var made struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(out, &made); err != nil || made.Token == "" {
			return fmt.Errorf("skuldd ctl auth create (%s): unexpected output %q", c.role, strings.TrimSpace(string(out)))
		}
		*c.dst = made.Token
	}
	return nil
}

// waitAnswers waits until node i answers GET /v1/cluster.
func (r *Run) waitAnswers(ctx context.Context, i int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		_, err := FetchView(ctx, r.api, r.cfg.Topology, i)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d does not answer after %v: %w (log: %s)", i, bound, err, r.nodes[i-1].LogPath)
		}
		if err := sleepCtx(ctx, readyPoll); err != nil {
			return err
		}
	}
}

// founderJoin is the join list of node i at the cluster's creation: node
// 1 founds the cluster, the others join through it.
func founderJoin(i int) []int {
	if i == 1 {
		return nil
	}
	return []int{1}
}

// dataDir is node i's data directory.
func (r *Run) dataDir(i int) string { return filepath.Join(r.dir("nodes"), fmt.Sprintf("n%d", i)) }

// nodeArgv is node i's command, joining through the nodes of join (their
// relay addresses). The same at every start, but that a wiped node gets
// another join list (applyWipe): skuldd reads --join only when its data
// dir is new, so the list matters at a node's first start and after a
// wipe.
func (r *Run) nodeArgv(i int, join []int) []string {
	t, c := r.cfg.Topology, &r.cfg
	bin := c.Binary
	if c.OldBinary != "" && !r.upgraded[i] {
		bin = c.OldBinary
	}
	argv := []string{"ip", "netns", "exec", t.NS(i), bin,
		"--bind", t.NodeAddr(i).String(),
		// Peers dial node i through its relay.
		"--advertise", t.RelayAddr(i).String(),
		"--data-dir", r.dataDir(i),
		"--cluster-secret-file", r.secretPath,
		"--partitions", fmt.Sprint(c.Partitions),
		"--replicas", fmt.Sprint(c.Replicas),
		"--clock-skew-bound", c.SkewBound.String(),
		"--max-clock-drift", c.MaxDrift.String(),
		"--aae-interval", c.AAEInterval.String(),
	}
	for _, j := range join {
		argv = append(argv, "--join", t.RelayAddr(j).String())
	}
	if r.upgraded[i] {
		argv = append(argv, upgradeHoldFlag)
	}
	return append(argv, c.NodeFlags...)
}

// binaryArg is the index of the skuldd binary in nodeArgv's command.
const binaryArg = 4

// makeSecret writes a fresh cluster secret and derives the client token
// and the HTTPS authority with `skuldd ctl token` and `ctl tls-ca`.
func (r *Run) makeSecret(ctx context.Context) error {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("cluster secret: %w", err)
	}
	r.secretPath = filepath.Join(r.cfg.Out, "cluster-secret")
	if err := os.WriteFile(r.secretPath, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		return fmt.Errorf("cluster secret: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, tokenBound)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.cfg.Binary, "ctl", "token", "--cluster-secret-file", r.secretPath).Output()
	if err != nil {
		return fmt.Errorf("skuldd ctl token: %w", err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(out, &tok); err != nil || tok.Token == "" {
		return fmt.Errorf("skuldd ctl token: unexpected output %q", strings.TrimSpace(string(out)))
	}
	r.token = tok.Token
	// The HTTPS authority the secret derives, as a client of the cluster
	// gets it.
	if r.caPEM, err = exec.CommandContext(ctx, r.cfg.Binary, "ctl", "tls-ca", "--cluster-secret-file", r.secretPath).Output(); err != nil {
		return fmt.Errorf("skuldd ctl tls-ca: %w", err)
	}
	return nil
}

// runInfo is run.json.
func (r *Run) runInfo() RunInfo {
	c := &r.cfg
	ri := RunInfo{
		Seed: c.Seed, Scenario: "mix", Nodes: c.Topology.Nodes,
		Partitions: c.Partitions, Replicas: c.Replicas, W: c.W,
		SkewBoundMs: c.SkewBound.Milliseconds(), MaxDriftMs: c.MaxDrift.Milliseconds(),
		AAEIntervalMs: c.AAEInterval.Milliseconds(), TTLMs: c.TTL.Milliseconds(),
		MaxAttempts: c.MaxAttempts, Started: r.sum.Started, Command: c.Command,
		StartUnixNs: r.startUnixNs, OKFloor: OKFloors(c, r.sched),
	}
	if c.Quick {
		ri.Scenario = "mix-quick"
	}
	for i := 1; i <= c.Topology.Nodes; i++ {
		ri.Addrs = append(ri.Addrs, c.Topology.NodeAddr(i).String())
	}
	for _, k := range r.sched.Kinds() {
		if BeyondBounds(k) {
			ri.BeyondBounds = append(ri.BeyondBounds, k)
		}
	}
	ri.Shards = ShardSetName
	ri.Upgrade = c.OldBinary != ""
	return ri
}

// The floors of acknowledged operations (RunInfo.OKFloor): a run whose
// workload got almost nothing acknowledged judged nothing, however clean
// its checkers' verdict.
const (
	// okFloorFraction is the faults phase's floor as a fraction of the
	// enqueues the workload aims at over that phase's least length,
	// counted against every ok of the phase (enqueues, claims, renews,
	// updates, completes...). A quick run is about 100 s of warmup,
	// holds and gaps (15 steps of 2-4.5 s holds and 3 s gaps) at 120
	// enqueue/s: 12,000 enqueues aimed at, a floor of 1,206 oks. On the
	// loaded 2-core machine the loops reach about half the rate aimed at
	// (seed 4242: 6,471 enqueues in 110 s) and each enqueue brings about
	// four more oks (claims, updates, completes): 32,245 oks, 27 times
	// the floor, so a slower machine or a run with its windows mostly
	// unavailable still clears it; a cluster that served nothing, or a
	// workload that died in its first seconds, does not.
	okFloorFraction = 0.1
	// drainFloorPerNode: a drain that finished had drainEmpties empty
	// (ok) claims from every node, and claimed what was left besides;
	// one ok per node, a third of that least, says the drain reached
	// every node at all.
	drainFloorPerNode = 1
)

// OKFloors returns the floors of c's run with schedule s, per phase: the
// faults phase and the drain (the phases between set no client to work:
// heal and convergence run with the workers stopped, and the final reads
// are not in the history). The faults phase lasts at least its warmup
// and every step's hold and gap (the waits for recovery only add), cut
// short by Duration in a long run; the floor counts from that, never from
// an estimate it may fall short of.
func OKFloors(c *Config, s Schedule) map[string]int64 {
	var least time.Duration
	for _, st := range s.Steps {
		least += st.Hold() + st.Gap
	}
	if !c.Quick && c.Duration > 0 {
		least = min(least, c.Duration)
	}
	least += c.Warmup
	return map[string]int64{
		PhaseFaults: int64(okFloorFraction * c.EnqueuePerSec * least.Seconds()),
		PhaseDrain:  int64(drainFloorPerNode * c.Topology.Nodes),
	}
}

// NamesTask reports whether e names a task the final reads must read:
// an enqueue's invoke names its task, a placed enqueue's ok the task the
// node drew, and a claim's ok any task (one of a placed enqueue in doubt
// is known no other way).
func NamesTask(e Event) bool {
	return e.Task != "" && (e.Type == Invoke && e.F == FEnqueue || e.Type == OK && (e.F == FEnqueue || e.F == FClaim))
}

// observe sees every recorded event: it keeps the ids of the tasks
// attempted, for the final reads (NamesTask).
func (r *Run) observe(e Event) {
	if !NamesTask(e) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.seen[e.Task] {
		r.mu.seen[e.Task] = true
		r.mu.tasks = append(r.mu.tasks, e.Task)
	}
}

// Notes are nemesis events that open and close no window (F is neither
// start nor stop): what happened to the nodes besides the schedule.
const (
	// NoteExit: a node exited without the harness causing it.
	NoteExit = "node-exit"
	// NoteRestart: the harness restarted a node that had exited on its
	// own, after a step's heal.
	NoteRestart = "node-restart"
	// NoteSkipped: a scheduled fault could not be applied (no leader
	// known, no node answering); nothing was done.
	NoteSkipped = "skipped"
	// NoteRepaired: in a run with wipes, the cluster was whole again
	// (Run.waitRepaired): every partition had its replicas, holding its
	// data, and every metadata voter was alive. The checkers count the
	// replicas wipes deleted from one such note to the next.
	NoteRepaired = "repaired"
	// NotePanic: a node's log holds a panic or a Go fatal error.
	NotePanic = "node-panic"
	// NotePartial: a fault was applied to only part of what it names
	// (Detail says what was and why not the rest); what was applied was
	// healed.
	NotePartial = "partial"
	// NoteCrashFallback: a crash that should have lost the unsynced
	// writes fell back to kill -9 (the hook did not answer), so it tested
	// less than it says.
	NoteCrashFallback = "crash-fallback"
	// NotePartitionMismatch: after a partition was installed (or healed),
	// a connect check from each namespace to each other node did not
	// match what it names (Detail: the pairs that differ).
	NotePartitionMismatch = "partition-mismatch"
	// NoteHealFailed: a fault's heal failed (a restart, the iptables
	// flush, a clock reset), so the fault may hold past its stop event
	// (Detail: the nemesis and the error).
	NoteHealFailed = "heal-failed"
	// NoteWorkerExit: a worker process (one client loop) exited before
	// the harness stopped it, or had to be killed because it did not stop
	// (Detail: which, and its status): its ops in flight stay unanswered,
	// and the load the run claims to have driven was not.
	NoteWorkerExit = "worker-exit"
	// NoteServing: a node the harness started answered as started (its
	// /healthz no longer says starting; watchServing). The report counts
	// a node a fault stopped as stopped until then, not only until its
	// restart.
	NoteServing = "node-serving"
)

// HarnessFaultNotes are the notes that fail a run: the harness did not do
// what the record says it did, or a node failed by itself, so the history
// cannot be judged as if the schedule had run as drawn.
var HarnessFaultNotes = []string{NoteExit, NoteSkipped, NotePanic, NotePartial, NoteCrashFallback, NotePartitionMismatch,
	NoteHealFailed, NoteWorkerExit}

// IsHarnessFault reports whether a note's name is one of
// HarnessFaultNotes.
func IsHarnessFault(note string) bool { return slices.Contains(HarnessFaultNotes, note) }

// note records a nemesis note now.
func (r *Run) note(what string, targets []int, detail map[string]any) {
	e := Event{Proc: -1, Type: Nemesis, F: "note", TNs: r.tl.Now(), Nemesis: what, Targets: targets}
	if len(detail) > 0 {
		e.Detail, _ = json.Marshal(detail)
	}
	r.rec.Record(e)
}

// oneLine flattens an error (errors.Join puts one per line) for a
// one-line report.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// phase records a Phase event now and returns its time.
func (r *Run) phase(name string, detail map[string]any) int64 {
	e := Event{Proc: -1, Type: Phase, F: name, TNs: r.tl.Now()}
	if len(detail) > 0 {
		e.Detail, _ = json.Marshal(detail)
	}
	r.rec.Record(e)
	r.sum.Phases = append(r.sum.Phases, PhaseTime{Phase: name, TS: secs(e.TNs)})
	r.log.Info("phase", "phase", name, "t", secs(e.TNs), "detail", string(e.Detail))
	return e.TNs
}

func secs(ns int64) float64 { return float64(ns/1e6) / 1e3 }

// loopConfig is client loop k's configuration (loop Workers is the
// drain's).
func (r *Run) loopConfig(k int) LoopConfig {
	c := &r.cfg
	mix := c.Mix
	mix.EnqueuePerSec = c.EnqueuePerSec / float64(c.Workers)
	var addrs []string
	for i := 1; i <= c.Topology.Nodes; i++ {
		addrs = append(addrs, c.Topology.NodeAddr(i).String())
	}
	return LoopConfig{
		Loop: k, ProcStride: c.Workers + 1, Addrs: addrs, Local: c.Topology.HostIP(),
		Token: r.token, ProducerToken: r.producerToken, WorkerToken: r.workerToken, CA: r.caPEM, Seed: c.Seed, Start: r.tl.Start, RunTag: fmt.Sprintf("s%d", c.Seed), Partitions: c.Partitions,
		Queue: c.Queue, TTL: c.TTL, MaxAttempts: c.MaxAttempts, W: c.W,
		ReqTimeout: c.ReqTimeout, Mix: mix,
	}
}

// faults starts the workers and runs the schedule.
func (r *Run) faults(ctx context.Context) error {
	start := r.phase(PhaseFaults, map[string]any{"steps": len(r.sched.Steps)})
	var cfgs []LoopConfig
	for k := range r.cfg.Workers {
		cfgs = append(cfgs, r.loopConfig(k))
	}
	var err error
	if r.pool, err = StartWorkers(r.cfg.Self, r.dir("workers"), cfgs, r.rec, r.sink, r.tl, r.log); err != nil {
		return err
	}
	if err := sleepCtx(ctx, r.cfg.Warmup); err != nil {
		return err
	}
	if r.wipes() {
		if err := r.waitRepaired(ctx, r.cfg.SetupTimeout); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Warn("cluster not whole before the first wipe", "err", err)
			r.sum.Notes = append(r.sum.Notes, "before the faults: "+oneLine(err))
		} else {
			r.note(NoteRepaired, nil, nil)
		}
	}
	upgrades, finalize := upgradePlan(len(r.sched.Steps), r.cfg.Topology.Nodes)
	for k, st := range r.sched.Steps {
		if !r.cfg.Quick && time.Duration(r.tl.Now()-start) >= r.cfg.Duration {
			r.log.Info("faults phase over", "steps run", k, "of", len(r.sched.Steps))
			break
		}
		if err := r.step(ctx, k, st, r.recoverBound(start, k)); err != nil {
			return err
		}
		if r.cfg.OldBinary == "" {
			continue
		}
		for _, i := range upgrades[k] {
			r.upgradeNode(ctx, i, k)
		}
		if k == finalize {
			r.finalizeUpgrade(ctx)
		}
	}
	if r.cfg.OldBinary != "" {
		// A long run's time may end before the plan did.
		for i := 1; i <= r.cfg.Topology.Nodes; i++ {
			if !r.upgraded[i] {
				r.upgradeNode(ctx, i, len(r.sched.Steps)-1)
			}
		}
		if !r.upgrade.Finalized && r.upgrade.FinalizeErr == "" {
			r.finalizeUpgrade(ctx)
		}
	}
	return ctx.Err()
}

// wipes reports whether the schedule wipes nodes. Such a run waits, before
// the first fault and after each wipe, for the cluster to be whole again
// (waitRepaired): placement has given every partition its replicas, and
// the metadata group has replaced its wiped voters. So a wipe takes its
// replicas from a whole cluster and a scenario measures what it names
// (one wipe, one replica lost; w=1 with its replica lost) rather than
// wipes piling up: on partitions not yet repaired, on those a new cluster
// has not spread yet (every partition starts on the founding node alone),
// or on the metadata group, which loses its majority for good once three
// of five voters are wiped before skuldd replaces the first. Placement
// moves partitions only once membership has been quiet for a while, so
// the wipes' own cadence would keep it from catching up. Other runs do
// not wait: their faults lose no replica for good, and a quick run has no
// time to spare.
func (r *Run) wipes() bool { return slices.ContainsFunc(r.sched.Kinds(), isWipe) }

// wipeRepairBound bounds the wait for the cluster to be whole after a
// wipe: placement waits for membership to settle and copies partitions a
// few at a time, and skuldd replaces a dead voter only after its dead
// voter grace (30 s by default), so this takes longer than a restart's
// recovery.
const wipeRepairBound = 90 * time.Second

// waitRepaired waits up to bound for every partition's cohort to have its
// replicas (as many as there are nodes, at most Replicas), none of them a
// wiped node's old id, and for every metadata voter to be alive.
func (r *Run) waitRepaired(ctx context.Context, bound time.Duration) error {
	want := min(r.cfg.Replicas, r.cfg.Topology.Nodes)
	return WaitRepaired(ctx, r.api, r.cfg.Topology, r.serving(), want, bound)
}

// recoverBound is how long step k may wait for the cluster to recover:
// RecoverTimeout, less in a run with a faults budget when the steps left
// need the time.
func (r *Run) recoverBound(start int64, k int) time.Duration {
	if r.cfg.FaultsBudget <= 0 {
		return r.cfg.RecoverTimeout
	}
	left := r.cfg.FaultsBudget - time.Duration(r.tl.Now()-start)
	for _, st := range r.sched.Steps[k:] {
		left -= st.Hold() + st.Gap
	}
	return max(0, min(r.cfg.RecoverTimeout, left))
}

// step applies one step's faults, holds, heals, waits up to recover for
// the cluster to serve again, and waits out the gap.
func (r *Run) step(ctx context.Context, k int, st Step, recover time.Duration) error {
	rep := StepReport{Step: k + 1, Start: secs(r.tl.Now())}
	var acts []*active
	// In the step's order: the faults that hold nodes first, so that a
	// fault that needs a live node picks among those they leave up
	// (Step, livePicks).
	for _, f := range st.Faults {
		rep.Faults = append(rep.Faults, f.String())
		a, err := r.apply(ctx, f)
		if err != nil {
			r.log.Warn("nemesis not applied", "step", k+1, "err", err)
			rep.Errors = append(rep.Errors, oneLine(err))
			r.note(NoteSkipped, f.Targets, map[string]any{"nemesis": f.Kind, "error": oneLine(err)})
			continue
		}
		r.log.Info("nemesis", "step", k+1, "kind", f.Kind, "targets", a.targets, "detail", a.detail)
		rep.Targets = append(rep.Targets, a.targets)
		acts = append(acts, a)
	}
	// Each fault is healed when its own hold has passed, the shortest
	// first (a pause of a step that also kills is healed at the pause's
	// hold, not the kill's).
	applied := time.Now()
	slices.SortStableFunc(acts, func(a, b *active) int { return cmp.Compare(a.f.Hold, b.f.Hold) })
	for _, a := range acts {
		if err := sleepCtx(ctx, a.f.Hold-time.Since(applied)); err != nil {
			return err
		}
		if err := r.healActive(ctx, a); err != nil {
			r.log.Warn("heal", "step", k+1, "kind", a.f.Kind, "err", err)
			rep.Errors = append(rep.Errors, "heal: "+oneLine(err))
		}
	}
	if err := sleepCtx(ctx, st.Hold()-time.Since(applied)); err != nil {
		return err
	}
	// Every fault of the step is healed, so a node down now exited on
	// its own (its log says why; the reaper recorded NoteExit then) or
	// its heal's restart failed (NoteHealFailed): start it again, so
	// the steps after this one act on a whole cluster, and say so.
	for _, i := range r.down() {
		reason := "exited on its own: " + r.nodes[i-1].LastExit().Text
		if r.nodes[i-1].LastExit().Expected {
			reason = "still down after the heal: its restart failed"
		}
		r.log.Warn("restarting a node that is down", "node", i, "step", k+1, "reason", reason)
		rep.Errors = append(rep.Errors, fmt.Sprintf("node %d %s; restarted", i, reason))
		r.note(NoteRestart, []int{i}, map[string]any{"reason": reason})
		if err := r.restart([]int{i}); err != nil {
			rep.Errors = append(rep.Errors, oneLine(err))
		}
	}
	healed := time.Now()
	rep.Healed = secs(r.tl.Now())
	err := WaitReady(ctx, r.api, r.cfg.Topology, allNodes(r.cfg.Topology.Nodes), r.cfg.Partitions, recover)
	rep.RecoverS = time.Since(healed).Seconds()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("cluster did not recover", "step", k+1, "bound", recover, "err", err)
		rep.Recovered, rep.RecoverErr = false, oneLine(err)
	} else {
		rep.Recovered = true
	}
	if rep.Recovered && slices.ContainsFunc(st.Faults, func(f Fault) bool { return isWipe(f.Kind) }) {
		bound := wipeRepairBound
		if r.cfg.FaultsBudget > 0 {
			bound = min(bound, recover) // a quick run keeps to its budget
		}
		err := r.waitRepaired(ctx, bound-time.Since(healed))
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			r.log.Warn("cluster not whole after a wipe", "step", k+1, "err", err)
			rep.RepairErr = oneLine(err)
		default:
			repaired := time.Since(healed).Seconds()
			rep.RepairedS = &repaired
			r.note(NoteRepaired, nil, map[string]any{"after_heal_s": repaired})
		}
	}
	rep.Delays = r.delays.window()
	r.sum.Steps = append(r.sum.Steps, rep)
	return sleepCtx(ctx, st.Gap-time.Since(healed))
}

// down returns the nodes whose process is not running.
func (r *Run) down() []int {
	var out []int
	for i, n := range r.nodes {
		if n.State() == StateDown {
			out = append(out, i+1)
		}
	}
	return out
}

// workerStopGrace bounds the wait for the workers to finish their
// current operation.
func (r *Run) workerStopGrace() time.Duration { return 2*r.cfg.ReqTimeout + time.Second }

// healPhase stops the workload, heals every fault and returns the heal's
// time (H).
func (r *Run) healPhase(ctx context.Context) int64 {
	r.pool.Stop(r.workerStopGrace())
	err := r.healAll(ctx)
	detail := map[string]any{}
	if err != nil {
		r.log.Warn("heal", "err", err)
		detail["error"] = err.Error()
		r.note(NoteHealFailed, nil, map[string]any{"nemesis": "all", "error": oneLine(err)})
	}
	return r.phase(PhaseHeal, detail)
}

// stopNodes stops every node with SIGTERM, all at once.
func (r *Run) stopNodes() {
	var wg sync.WaitGroup
	var mu sync.Mutex // guards r.sum.Notes against the goroutines
	for _, n := range r.nodes {
		if n.State() == StateDown {
			continue
		}
		wg.Go(func() {
			if err := n.Term(r.cfg.StopGrace); err != nil {
				r.log.Warn("stop", "node", n.Index, "err", err)
				mu.Lock()
				r.sum.Notes = append(r.sum.Notes, err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// teardown removes everything the run made, whatever state it is in, but
// the history, which finish closes once the node logs are scanned.
func (r *Run) teardown(ctx context.Context) {
	if r.pool != nil {
		r.pool.Stop(time.Second)
	}
	for _, n := range r.nodes {
		if n.State() != StateDown {
			if err := n.Kill(); err != nil {
				r.log.Warn("teardown", "err", err)
			}
		}
	}
	if r.relay != nil {
		_ = r.relay.Close()
	}
	if r.api != nil {
		r.api.Close()
	}
	Teardown(ctx, r.cfg.Topology, r.log)
}

// Teardown kills what runs in the run's namespaces (the nodes of a
// harness that died: processes in namespaces the harness made), then
// removes the namespaces, veths and the bridge. Idempotent.
func Teardown(ctx context.Context, t Topology, log *slog.Logger) {
	for i := 1; i <= t.Nodes; i++ {
		for _, pid := range t.NSPids(ctx, i) {
			log.Warn("teardown: killing a process left in a namespace", "ns", t.NS(i), "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	t.TeardownNetwork(ctx)
}
