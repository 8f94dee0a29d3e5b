package faults

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The nemeses (TESTING.md section 7). Each is applied, held, then healed.
const (
	NemKillMinority      = "kill-minority"      // kill -9 of 1-2 random nodes, then restart
	NemKillCohort        = "kill-cohort"        // kill -9 of every replica of one partition, then restart
	NemKillAll           = "kill-all"           // kill -9 of all nodes, then restart all
	NemPauseLeader       = "pause-leader"       // SIGSTOP of a partition leader past TTL + skew bound
	NemPauseRaftLeader   = "pause-raft-leader"  // SIGSTOP of the metadata raft leader
	NemPauseWorker       = "pause-worker"       // SIGSTOP of a worker holding a claim
	NemPartitionOne      = "partition-one"      // one node cut off from the others
	NemPartitionMajority = "partition-majority" // 3 | 2
	NemPartitionBridge   = "partition-bridge"   // two halves that only see a middle node
	NemPartitionAsym     = "partition-asym"     // a partition leader hears no one; they hear it
	NemClockWithin       = "clock-within"       // every node's clock offset within --max-clock-drift
	NemClockBeyond       = "clock-beyond"       // 1-2 nodes offset beyond --clock-skew-bound
	NemPacketChaos       = "packet-chaos"       // the relay drops, delays and duplicates datagrams
	NemCrashUnsynced     = "crash-unsynced"     // a crash that loses unsynced writes, then restart
	NemTermRestart       = "term-restart"       // SIGTERM (a graceful stop) of a random node, then restart
	NemDecommission      = "decommission"       // ctl decommission of a node (it leaves, removed), back wiped as a new one
	NemWipe              = "wipe"               // kill -9 of 1 node, its data dir deleted, started again empty
	NemWipeMajority      = "wipe-majority"      // the same for 2 nodes of one partition's cohort
)

// AllNemeses lists every nemesis in a fixed order (a quick run applies
// each once, in an order drawn from the seed).
var AllNemeses = []string{
	NemKillMinority, NemKillCohort, NemKillAll, NemPauseLeader, NemPauseRaftLeader,
	NemPauseWorker, NemPartitionOne, NemPartitionMajority, NemPartitionBridge,
	NemPartitionAsym, NemClockWithin, NemClockBeyond, NemPacketChaos, NemCrashUnsynced,
	NemTermRestart, NemDecommission,
}

// OnDemandNemeses run only when a run names them (Config.Nemeses,
// --nemeses), never in the default schedules: they lose replicas for good
// (the disk is gone), which takes the partitions they hit beyond the
// design's durability promise ("no acknowledged write is lost while fewer
// than N/2 replicas of its partition are lost for good"), so a run with
// them measures that boundary instead of judging within it. A wipe of one
// node stays within the promise for writes acknowledged by a majority, but
// not for enqueues acknowledged with w=1; wipes add up when the cluster
// is not repaired in between (a run with wipes waits for the repair:
// Run.wipes).
var OnDemandNemeses = []string{NemWipe, NemWipeMajority}

// KnownNemeses lists every nemesis a run can name: the default ones
// (AllNemeses), then the on-demand ones. Schedules draw from their pool in
// this order, so a seed draws the same schedule whatever order the names
// were given in.
func KnownNemeses() []string { return slices.Concat(AllNemeses, OnDemandNemeses) }

// nemesisClass groups nemeses that cannot be combined in one step: two
// process faults could act on the same node.
func nemesisClass(kind string) string {
	switch kind {
	case NemKillAll:
		return "all"
	case NemKillMinority, NemKillCohort, NemPauseLeader, NemPauseRaftLeader, NemCrashUnsynced, NemTermRestart,
		NemWipe, NemWipeMajority, NemDecommission:
		return "process"
	case NemPauseWorker:
		return "worker"
	case NemPartitionOne, NemPartitionMajority, NemPartitionBridge, NemPartitionAsym:
		return "network"
	case NemClockWithin, NemClockBeyond:
		return "clock"
	case NemPacketChaos:
		return "relay"
	}
	return kind
}

// BeyondBounds reports whether a nemesis takes the cluster outside what
// the design promises (RunInfo.BeyondBounds): a clock offset beyond the
// skew bound, or replicas lost for good. The checkers still judge which
// anomalies such a fault can explain (check.go, history.beyond).
func BeyondBounds(kind string) bool {
	switch kind {
	case NemClockBeyond, NemWipe, NemWipeMajority:
		return true
	}
	return false
}

// Fault is one nemesis as the seed drew it. What depends on the cluster's
// state when it is applied (which node leads partition Partition, which
// worker holds a claim) is resolved then.
type Fault struct {
	Kind string `json:"kind"`
	// Targets are nodes drawn from the seed (kill-minority,
	// crash-unsynced, partition-one, the clock nemeses).
	Targets []int `json:"targets,omitempty"`
	// Spares are the other nodes, in an order drawn from the seed, of a
	// fault that needs its targets up (clock-beyond): a target that is
	// not up when the fault is applied (held down or paused by another
	// fault of the step, applied before it) gives its place and offset
	// to the first spare that is (livePicks).
	Spares []int `json:"spares,omitempty"`
	// Groups are a partition's sides: majority [big, small]; bridge
	// [a, [mid], b].
	Groups [][]int `json:"groups,omitempty"`
	// Partition picks the partition whose leader or cohort is hit
	// (wipe-majority: the cohort two of whose members are wiped).
	Partition int `json:"partition,omitempty"`
	// OffsetsMs are clock offsets, one per target.
	OffsetsMs []int64 `json:"offsets_ms,omitempty"`
	Chaos     *Chaos  `json:"chaos,omitempty"`
	// Hold is how long the fault lasts before it is healed.
	Hold time.Duration `json:"hold"`
}

// Step is one or more faults applied together, held, and healed, followed
// by a gap without faults. Its faults are applied in order, and those
// that hold nodes down or paused (holdsNodes) come first (orderStep): a
// fault that needs a live node (needsLiveNode) then picks among the nodes
// the others leave up, which it can know only once they are applied (a
// cohort, a leader: resolved when applied).
type Step struct {
	Faults []Fault       `json:"faults"`
	Gap    time.Duration `json:"gap"`
}

// Hold is the longest hold of the step's faults.
func (s Step) Hold() time.Duration {
	var h time.Duration
	for _, f := range s.Faults {
		h = max(h, f.Hold)
	}
	return h
}

// Schedule is a run's nemesis schedule.
type Schedule struct {
	Seed  int64  `json:"seed"`
	Steps []Step `json:"steps"`
}

// ScheduleConfig is what drawing a schedule depends on.
type ScheduleConfig struct {
	Nodes      int
	Partitions int
	// Replicas bounds how many nodes a kill-cohort takes down (0: up to
	// every node).
	Replicas int
	// TTL and SkewBound fix the pauses' hold (past TTL + SkewBound, so
	// a paused holder's claims expire); MaxDrift the clock offsets.
	TTL       time.Duration
	SkewBound time.Duration
	MaxDrift  time.Duration
	// Hold is the hold of partitions, clocks and packet chaos; KillHold
	// how long killed nodes stay down; PauseMargin what a pause adds to
	// TTL + SkewBound; Gap the quiet after each step.
	Hold        time.Duration
	KillHold    time.Duration
	PauseMargin time.Duration
	Gap         time.Duration
	// ComboProb is the chance a step of a long run combines two
	// nemeses.
	ComboProb float64
	// Nemeses is the pool the schedule draws from (nil: AllNemeses; the
	// on-demand nemeses only when named here).
	Nemeses []string
}

// pool returns the nemeses to draw from, in KnownNemeses' order.
func (c ScheduleConfig) pool() []string {
	if c.Nemeses == nil {
		return AllNemeses
	}
	var out []string
	for _, k := range KnownNemeses() {
		if slices.Contains(c.Nemeses, k) {
			out = append(out, k)
		}
	}
	return out
}

// Draw bounds of the nemeses' parameters.
const (
	// withinFrac: "within" offsets stay this fraction of MaxDrift from
	// zero, so measurement noise does not push a node over it.
	withinFrac = 0.8
	// beyondMin, beyondMax: "beyond" offsets are this many skew bounds.
	beyondMin = 1.5
	beyondMax = 4.0
	// Packet chaos: drop 10-30%, delay 50±40 ms, duplicate 5%.
	chaosDropMin  = 0.10
	chaosDropMax  = 0.30
	chaosDelayMin = 10 * time.Millisecond
	chaosDelayMax = 90 * time.Millisecond
	chaosDup      = 0.05
	// killAllHold: everything down briefly; the restart is the test.
	killAllHold = 2 * time.Second
	// crashHold: how long a crashed node stays down.
	crashHold = 2 * time.Second
)

// PauseHold is how long a pause lasts: past the lease and the skew bound,
// so the paused process's claims expire while it is stopped.
func (c ScheduleConfig) PauseHold() time.Duration { return c.TTL + c.SkewBound + c.PauseMargin }

// QuickSchedule applies every nemesis of the pool once, in an order drawn
// from seed, except that kill-all comes last: a cluster that does not
// come back from a full restart leaves nothing for the steps after it to
// act on, and a quick run should still try every other nemesis on a
// working cluster. Its restart then leads straight into the heal,
// convergence and drain.
func QuickSchedule(seed int64, c ScheduleConfig) Schedule {
	rng := scheduleRNG(seed)
	s := Schedule{Seed: seed}
	var pool []string
	last := false
	for _, k := range c.pool() {
		if k == NemKillAll {
			last = true
			continue
		}
		pool = append(pool, k)
	}
	for _, i := range rng.Perm(len(pool)) {
		s.Steps = append(s.Steps, Step{Faults: []Fault{drawFault(pool[i], rng, c)}, Gap: c.Gap})
	}
	if last {
		s.Steps = append(s.Steps, Step{Faults: []Fault{drawFault(NemKillAll, rng, c)}, Gap: c.Gap})
	}
	return s
}

// LongSchedule draws steps until their estimated time reaches d: each a
// nemesis picked at random, sometimes (ComboProb) with a second one of
// another class.
func LongSchedule(seed int64, d time.Duration, c ScheduleConfig) Schedule {
	rng := scheduleRNG(seed)
	s := Schedule{Seed: seed}
	pool := c.pool()
	if len(pool) == 0 {
		return s
	}
	var total time.Duration
	// The step count is bounded by d (every step takes at least Gap
	// plus a hold of a second or more).
	for total < d {
		kind := pool[rng.IntN(len(pool))]
		st := Step{Faults: []Fault{drawFault(kind, rng, c)}, Gap: c.Gap}
		if nemesisClass(kind) != "all" && kind != NemCrashUnsynced && rng.Float64() < c.ComboProb {
			var others []string
			for _, k := range pool {
				if combinable(kind, k, c) {
					others = append(others, k)
				}
			}
			if len(others) > 0 {
				st.Faults = append(st.Faults, drawFault(others[rng.IntN(len(others))], rng, c))
			}
		}
		orderStep(st.Faults)
		s.Steps = append(s.Steps, st)
		total += EstimateStep(st)
	}
	return s
}

// combinable reports whether a step may combine nemesis b with a: of
// another class (two process faults could act on the same node), neither
// kill-all nor crash-unsynced, and neither needing a live node while the
// other may hold every node (a kill-cohort whose cohort is the whole
// cluster): the step always leaves a fault that needs a live node one to
// pick.
func combinable(a, b string, c ScheduleConfig) bool {
	for _, k := range []string{a, b} {
		if nemesisClass(k) == "all" || k == NemCrashUnsynced {
			return false
		}
	}
	if nemesisClass(a) == nemesisClass(b) {
		return false
	}
	return !(needsLiveNode(a) && maxHeld(b, c) >= c.Nodes) && !(needsLiveNode(b) && maxHeld(a, c) >= c.Nodes)
}

// needsLiveNode reports whether a nemesis acts on nodes that must be up
// when it is applied: a clock offset is set through the running node; a
// one-way cut of a partition's leader needs a leader that serves. Such a
// fault picks among the nodes its step's other faults leave up (Step,
// livePicks, pickPartition).
func needsLiveNode(kind string) bool {
	switch kind {
	case NemClockWithin, NemClockBeyond, NemPartitionAsym:
		return true
	}
	return false
}

// maxHeld bounds how many nodes a nemesis holds down or paused.
func maxHeld(kind string, c ScheduleConfig) int {
	if !holdsNodes(kind) {
		return 0
	}
	switch kind {
	case NemKillAll:
		return c.Nodes
	case NemKillMinority:
		return max((c.Nodes-1)/2, 1)
	case NemKillCohort:
		if c.Replicas <= 0 {
			return c.Nodes
		}
		return min(c.Replicas, c.Nodes)
	case NemWipeMajority:
		if c.Replicas <= 0 {
			return c.Nodes
		}
		return min(majority(c.Replicas), c.Nodes)
	}
	return 1 // a pause, a crash, a SIGTERM, a wipe: one node
}

// orderStep puts a step's faults in the order they are applied: those
// that hold nodes first, so that the others, applied after, see which
// nodes are held (Run.held) and pick around them. Stable otherwise.
func orderStep(faults []Fault) {
	slices.SortStableFunc(faults, func(a, b Fault) int {
		return cmp.Compare(b2i(holdsNodes(b.Kind)), b2i(holdsNodes(a.Kind)))
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func scheduleRNG(seed int64) *rand.Rand {
	// A stream of its own: the workload draws from the same seed.
	const scheduleStream = 0x5c4ed
	return rand.New(rand.NewPCG(uint64(seed), scheduleStream))
}

// restartAllowance estimates how long a step's restarts take to serve
// again (a kill-all restarts the whole cluster).
func restartAllowance(kind string) time.Duration {
	switch kind {
	case NemKillAll:
		return 12 * time.Second
	case NemKillMinority, NemKillCohort, NemCrashUnsynced, NemTermRestart:
		return 4 * time.Second
	case NemDecommission:
		// The moves of its partitions, then its start as a new member.
		return decommissionAllowance
	case NemWipe, NemWipeMajority:
		// An empty node joins as a new member, and then the run waits
		// for the cluster to be whole (Run.waitRepaired): about 28 s
		// from the heal in practice, as skuldd replaces a wiped voter
		// after its 30 s dead voter grace. The gap passes meanwhile.
		return wipeRestartAllowance
	}
	return 0
}

// wipeRestartAllowance is a wipe's restartAllowance: the repair wait
// less the gap it takes up.
const wipeRestartAllowance = 22 * time.Second

// decommissionAllowance is a decommission's restartAllowance: its moves
// (a copy and a handover per partition, a few at a time) and the leave.
const decommissionAllowance = 8 * time.Second

// EstimateStep estimates a step's wall time: hold, restarts, gap.
func EstimateStep(s Step) time.Duration {
	var restart time.Duration
	for _, f := range s.Faults {
		restart = max(restart, restartAllowance(f.Kind))
	}
	return s.Hold() + restart + s.Gap
}

// Estimate estimates the schedule's wall time.
func (s Schedule) Estimate() time.Duration {
	var d time.Duration
	for _, st := range s.Steps {
		d += EstimateStep(st)
	}
	return d
}

// drawFault draws kind's parameters.
func drawFault(kind string, rng *rand.Rand, c ScheduleConfig) Fault {
	f := Fault{Kind: kind, Hold: c.Hold}
	nodes := rng.Perm(c.Nodes)
	for i := range nodes {
		nodes[i]++
	}
	minority := (c.Nodes - 1) / 2
	switch kind {
	case NemKillMinority:
		f.Targets, f.Hold = sorted(nodes[:1+rng.IntN(max(minority, 1))]), c.KillHold
	case NemKillCohort:
		f.Partition, f.Hold = rng.IntN(c.Partitions), c.KillHold
	case NemKillAll:
		f.Hold = killAllHold
	case NemCrashUnsynced:
		f.Targets, f.Hold = nodes[:1], crashHold
	case NemTermRestart:
		f.Targets, f.Hold = nodes[:1], crashHold
	case NemDecommission:
		f.Targets, f.Hold = nodes[:1], crashHold
	case NemWipe:
		f.Targets, f.Hold = nodes[:1], c.KillHold
	case NemWipeMajority:
		// Which two of the cohort is resolved when applied: the cohort
		// is known only then.
		f.Partition, f.Hold = rng.IntN(c.Partitions), c.KillHold
	case NemPauseLeader:
		f.Partition, f.Hold = rng.IntN(c.Partitions), c.PauseHold()
	case NemPauseRaftLeader, NemPauseWorker:
		f.Hold = c.PauseHold()
	case NemPartitionOne:
		f.Targets = nodes[:1]
	case NemPartitionMajority:
		f.Groups = [][]int{sorted(nodes[minority:]), sorted(nodes[:minority])}
	case NemPartitionBridge:
		half := (c.Nodes - 1) / 2
		f.Groups = [][]int{sorted(nodes[:half]), nodes[half : half+1], sorted(nodes[half+1:])}
	case NemPartitionAsym:
		f.Partition = rng.IntN(c.Partitions)
	case NemClockWithin:
		f.Targets = sorted(nodes)
		span := int64(withinFrac * float64(c.MaxDrift.Milliseconds()))
		for range f.Targets {
			f.OffsetsMs = append(f.OffsetsMs, rng.Int64N(2*span+1)-span)
		}
	case NemClockBeyond:
		n := 1 + rng.IntN(2)
		f.Targets, f.Spares = sorted(nodes[:n]), slices.Clone(nodes[n:])
		lo := int64(beyondMin * float64(c.SkewBound.Milliseconds()))
		hi := int64(beyondMax * float64(c.SkewBound.Milliseconds()))
		for range f.Targets {
			off := lo + rng.Int64N(hi-lo+1)
			if rng.IntN(2) == 0 {
				off = -off
			}
			f.OffsetsMs = append(f.OffsetsMs, off)
		}
	case NemPacketChaos:
		f.Chaos = &Chaos{
			Drop:     chaosDropMin + rng.Float64()*(chaosDropMax-chaosDropMin),
			Dup:      chaosDup,
			DelayMin: chaosDelayMin,
			DelayMax: chaosDelayMax,
		}
	}
	return f
}

func sorted(v []int) []int {
	out := slices.Clone(v)
	slices.Sort(out)
	return out
}

// String describes the fault on one line.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	if len(f.Targets) > 0 {
		fmt.Fprintf(&b, " nodes %v", f.Targets)
	}
	if len(f.Groups) > 0 {
		parts := make([]string, len(f.Groups))
		for i, g := range f.Groups {
			parts[i] = fmt.Sprint(g)
		}
		fmt.Fprintf(&b, " sides %s", strings.Join(parts, " | "))
	}
	switch f.Kind {
	case NemKillCohort, NemPauseLeader, NemPartitionAsym, NemWipeMajority:
		fmt.Fprintf(&b, " partition %d", f.Partition)
	}
	if len(f.OffsetsMs) > 0 {
		fmt.Fprintf(&b, " offsets_ms %v", f.OffsetsMs)
	}
	if len(f.Spares) > 0 {
		fmt.Fprintf(&b, " spares %v", f.Spares)
	}
	if f.Chaos != nil {
		fmt.Fprintf(&b, " drop %.0f%% delay %v-%v dup %.0f%%", 100*f.Chaos.Drop, f.Chaos.DelayMin, f.Chaos.DelayMax, 100*f.Chaos.Dup)
	}
	fmt.Fprintf(&b, " hold %v", f.Hold)
	return b.String()
}

// Lines describes the schedule, one line per step.
func (s Schedule) Lines() []string {
	out := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		parts := make([]string, len(st.Faults))
		for j, f := range st.Faults {
			parts[j] = f.String()
		}
		out[i] = fmt.Sprintf("step %2d: %s; gap %v", i+1, strings.Join(parts, " + "), st.Gap)
	}
	return out
}

// Kinds returns the distinct nemeses the schedule uses, sorted.
func (s Schedule) Kinds() []string {
	var out []string
	for _, st := range s.Steps {
		for _, f := range st.Faults {
			if !slices.Contains(out, f.Kind) {
				out = append(out, f.Kind)
			}
		}
	}
	slices.Sort(out)
	return out
}
