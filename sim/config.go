package sim

import (
	"errors"
	"fmt"
	"time"
)

// Config shapes a simulated run. DefaultConfig gives every default; all
// durations are virtual time.
type Config struct {
	// Nodes is the cluster size; Partitions and Replicas are its P and N.
	Nodes      int
	Partitions int
	Replicas   int
	// Clients is the number of client loops of the workload.
	Clients int

	// FaultTime is how long the workload runs under the fault schedule.
	FaultTime time.Duration
	// FaultGapMin..FaultGapMax is the quiet before each fault, and
	// FaultLenMin..FaultLenMax how long it lasts (one fault at a time on
	// each of the schedule's two tracks).
	FaultGapMin, FaultGapMax time.Duration
	FaultLenMin, FaultLenMax time.Duration
	// DelayMax bounds a link's injected delay.
	DelayMax time.Duration
	// MaxUnsyncedPercent bounds how much of what a crashed node had not
	// synced survives its crash (each crash draws 0..this).
	MaxUnsyncedPercent int

	// SkewBound is the nodes' clock skew bound (node.Config.SkewBound).
	// The design promises no two live claims of a task while every pair
	// of clocks is within it: a claim that leader A (clock offset oA)
	// grants at real time ti ends at E = ti + oA + TTL by A's clock, and
	// any leader B (offset oB) takes it for expired only once B's clock
	// reads E + SkewBound, at real time ti + TTL + SkewBound - (oB - oA):
	// no earlier than the lease's real end ti + TTL while
	// oB - oA <= SkewBound.
	//
	// So a clock fault (clockShifts) shifts one or more nodes, each by a
	// whole number of ms within ±SkewBound/2, the others keeping true
	// time; clock faults share one track and never overlap, so at every
	// instant any two clocks are at most SkewBound apart: up to the bound
	// (with clockSpreadProb two nodes sit at its two ends), never beyond
	// it, and the checkers must find no overlap.
	//
	// The nodes' drift limit is Drift.MaxDrift = SkewBound/2 (maxDrift):
	// a node more than that ahead of the cluster's median clock (the
	// lower median of its own and its peers') stands by: it hands off
	// what it leads, leads nothing, and grants and renews no claim until
	// its lead is under half the limit again. One node up to SkewBound/2
	// ahead of peers at true time is within the limit and keeps serving,
	// so the lease arithmetic alone must keep its claims apart from the
	// others'; a node at +SkewBound/2 with the other two at -SkewBound/2
	// is the whole bound ahead of the median and stands by, which
	// exercises the drift handoff too. Safety within the bound never
	// rests on the drift watch.
	SkewBound time.Duration
	// AAEInterval is the nodes' anti-entropy interval.
	AAEInterval time.Duration
	// ReconcileInterval is how often the nodes re-check their blocked
	// tasks' dependencies (node.Config.ReconcileInterval, 30 s by default):
	// short, so a completion notice lost to a crash is caught within the
	// drain's settle window, which waits for it.
	ReconcileInterval time.Duration

	// TTL is the lease a client asks for; MaxAttempts its tasks'
	// max_attempts.
	TTL         time.Duration
	MaxAttempts uint32
	// EnqueueProb is the chance a client's next step is an enqueue rather
	// than a claim; after MaxTasksPerClient enqueues it only claims.
	EnqueueProb       float64
	MaxTasksPerClient int
	// DepProb is the chance an enqueue depends on 1..MaxDeps tasks the
	// client saw acknowledged earlier (as the fault suite's workload,
	// faults.Mix): a dependent is claimable only once they complete.
	DepProb float64
	MaxDeps int
	// W1Prob is the chance an enqueue asks w=1 (acknowledged once one
	// replica holds the task) rather than the default, a majority. The
	// simulated crashes lose only what a node had not synced, and a node
	// syncs before it acknowledges, so a w=1 task acknowledged must never
	// be lost either: nothing here is beyond the bounds.
	W1Prob float64
	// CancelProb is the chance that an enqueue is followed by the cancel
	// of the task the client saw acknowledged last (claimed by another
	// client or not), as the fault suite's workload does.
	CancelProb float64
	// GroupSize is how many consecutive enqueues of a client share a
	// group label; GroupCancelProb the chance that an enqueue is followed
	// by the cancel of its group (which then races the group's claims,
	// completions and later enqueues), as the fault suite's workload
	// does.
	GroupSize       int
	GroupCancelProb float64
	// KeyedProb is the chance an enqueue carries a unique key, one of the
	// client's KeyPool keys (so keys repeat), as the fault suite's
	// workload does.
	KeyedProb float64
	KeyPool   int
	// PlacedProb is the chance an enqueue without key or deps sends no
	// id: the node draws it where it can write it (faults.Mix.Placed).
	PlacedProb float64
	// HintProb is the chance an enqueue asks for a hint
	// (faults.Mix.Hinted).
	HintProb float64
	// Work bounds a claimed task's work; a slow task (SlowProb) works
	// about SlowWork and renews every TTL/renewsPerTTL meanwhile.
	Work     time.Duration
	SlowProb float64
	SlowWork time.Duration
	// The fate of a claimed task besides completion: fail (retried after
	// RetryAfter), snooze (for SnoozeDelay), or abandon (its lease
	// expires).
	FailProb, SnoozeProb, AbandonProb float64
	RetryAfter, SnoozeDelay           time.Duration
	// IdlePause is a client's pause after an empty claim.
	IdlePause time.Duration
	// RequestTimeout bounds one client request (the coordinator retries
	// within it).
	RequestTimeout time.Duration

	// StartTimeout bounds a node's start; RecoverTimeout the wait, after
	// heal, for every node to serve again; ConvergeTimeout the wait for
	// the replicas to agree; DrainTimeout the drain.
	StartTimeout    time.Duration
	RecoverTimeout  time.Duration
	ConvergeTimeout time.Duration
	DrainTimeout    time.Duration
	// Quiet is how long after heal the drain waits at least: leases of
	// abandoned claims end and delayed tasks come due.
	Quiet time.Duration
	// PollInterval is how often convergence and readiness are polled.
	PollInterval time.Duration
}

// clockSpreadProb is the chance that a clock fault shifting two or more
// nodes puts the first at +SkewBound/2 and the second at -SkewBound/2:
// the full bound apart, the case the lease arithmetic is tightest in
// (the second's leader expiring the first's claims).
const clockSpreadProb = 0.5

// maxDrift is the nodes' drift limit (Drift.MaxDrift): half the skew
// bound, below it as node.Config.Validate wants (see SkewBound).
func (c *Config) maxDrift() time.Duration { return c.SkewBound / 2 }

// renewsPerTTL is how often a slow task is renewed per lease.
const renewsPerTTL = 3

// convergedPolls is how many polls in a row must find every replica in
// agreement (TESTING.md 6.5: 3 consecutive polls).
const convergedPolls = 3

// DefaultConfig is a run sized for CI: a few hundred seeds on two cores
// in three minutes (measured in sim_test.go's comment).
func DefaultConfig() Config {
	return Config{
		Nodes:              3,
		Partitions:         4,
		Replicas:           3,
		Clients:            3,
		FaultTime:          20 * time.Second,
		FaultGapMin:        500 * time.Millisecond,
		FaultGapMax:        2 * time.Second,
		FaultLenMin:        time.Second,
		FaultLenMax:        4 * time.Second,
		DelayMax:           200 * time.Millisecond,
		MaxUnsyncedPercent: 50,
		SkewBound:          100 * time.Millisecond,
		AAEInterval:        200 * time.Millisecond,
		ReconcileInterval:  500 * time.Millisecond,
		TTL:                time.Second,
		MaxAttempts:        20,
		EnqueueProb:        0.5,
		MaxTasksPerClient:  20,
		DepProb:            0.15,
		MaxDeps:            2,
		W1Prob:             0.3,
		CancelProb:         0.03,
		GroupSize:          5,
		GroupCancelProb:    0.05,
		KeyedProb:          0.2,
		KeyPool:            3,
		PlacedProb:         0.3,
		HintProb:           0.2,
		Work:               50 * time.Millisecond,
		SlowProb:           0.05,
		SlowWork:           2500 * time.Millisecond,
		FailProb:           0.08,
		SnoozeProb:         0.05,
		AbandonProb:        0.05,
		RetryAfter:         300 * time.Millisecond,
		SnoozeDelay:        400 * time.Millisecond,
		IdlePause:          100 * time.Millisecond,
		RequestTimeout:     15 * time.Second,
		StartTimeout:       30 * time.Second,
		RecoverTimeout:     30 * time.Second,
		ConvergeTimeout:    20 * time.Second,
		DrainTimeout:       60 * time.Second,
		Quiet:              3 * time.Second,
		PollInterval:       100 * time.Millisecond,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Nodes >= 1, "nodes %d: want at least 1", c.Nodes)
	check(c.Replicas >= 1 && c.Replicas <= c.Nodes, "replicas %d: want 1..nodes (%d)", c.Replicas, c.Nodes)
	check(c.Partitions >= 1, "partitions %d: want at least 1", c.Partitions)
	check(c.Clients >= 1, "clients %d: want at least 1", c.Clients)
	check(c.FaultGapMin > 0 && c.FaultGapMin <= c.FaultGapMax, "fault gap %v..%v: want 0 < min <= max", c.FaultGapMin, c.FaultGapMax)
	check(c.FaultLenMin > 0 && c.FaultLenMin <= c.FaultLenMax, "fault length %v..%v: want 0 < min <= max", c.FaultLenMin, c.FaultLenMax)
	check(c.MaxUnsyncedPercent >= 0 && c.MaxUnsyncedPercent <= 100, "max unsynced percent %d: want 0..100", c.MaxUnsyncedPercent)
	check(c.TTL > c.SkewBound, "ttl %v must exceed the skew bound %v", c.TTL, c.SkewBound)
	check(c.MaxTasksPerClient >= 1, "max tasks per client %d: want at least 1", c.MaxTasksPerClient)
	check(c.MaxDeps >= 1, "max deps %d: want at least 1", c.MaxDeps)
	check(c.GroupSize >= 1 && c.KeyPool >= 1, "group size %d, key pool %d: want at least 1", c.GroupSize, c.KeyPool)
	for name, p := range map[string]float64{"enqueue": c.EnqueueProb, "slow": c.SlowProb, "dep": c.DepProb, "w=1": c.W1Prob, "cancel": c.CancelProb,
		"group cancel": c.GroupCancelProb, "keyed": c.KeyedProb, "placed": c.PlacedProb, "hint": c.HintProb} {
		check(p >= 0 && p <= 1, "%s probability %v: want 0..1", name, p)
	}
	check(c.FailProb >= 0 && c.SnoozeProb >= 0 && c.AbandonProb >= 0 && c.FailProb+c.SnoozeProb+c.AbandonProb <= 1,
		"fail, snooze and abandon probabilities %v, %v, %v: want each >= 0, summing to at most 1", c.FailProb, c.SnoozeProb, c.AbandonProb)
	for name, d := range map[string]time.Duration{
		"fault time": c.FaultTime, "delay max": c.DelayMax, "skew bound": c.SkewBound, "aae interval": c.AAEInterval, "reconcile interval": c.ReconcileInterval,
		"work": c.Work, "slow work": c.SlowWork, "retry after": c.RetryAfter, "snooze delay": c.SnoozeDelay,
		"idle pause": c.IdlePause, "request timeout": c.RequestTimeout, "start timeout": c.StartTimeout,
		"recover timeout": c.RecoverTimeout, "converge timeout": c.ConvergeTimeout, "drain timeout": c.DrainTimeout,
		"quiet": c.Quiet, "poll interval": c.PollInterval,
	} {
		check(d > 0, "%s %v must be positive", name, d)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}
