package control

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skuldd/skuldd/clock"
)

// Config is the control plane's knobs. node fills it from node.Config
// (whose defaults are the defaults) and from its peer timeouts.
type Config struct {
	// Self is this node's id. INVARIANT: non-zero (New refuses 0).
	Self uint64
	// Logger carries the node's id; control adds the partition.
	Logger *slog.Logger
	// Clock is the clock the drift detector judges against the peers'.
	Clock clock.Clock
	// Drift configures the drift detector (docs/design.md, Clock);
	// Drift.MaxDrift is --max-clock-drift.
	Drift clock.Config
	// ClockProbe is how often the clock loop reads the peers' clocks,
	// and bounds one reading.
	ClockProbe time.Duration
	// ExitOnDrift makes a node whose clock drifted exit (Host.Exit)
	// instead of standing by.
	ExitOnDrift bool
	// VoterInterval is how often the metadata leader checks the group's
	// shape (a membership change checks it at once).
	VoterInterval time.Duration
	// DeadVoterGrace is how long a voter may be unreachable before the
	// metadata leader replaces it, and how long a partition leader gossip
	// never heard of stays unknown before failover counts it dead.
	DeadVoterGrace time.Duration
	// PlacementSettle is how long membership must stay unchanged before
	// the metadata leader moves partitions.
	PlacementSettle time.Duration
	// ZombieCheck is how often a node asks to release the partitions it
	// holds without being in their cohort.
	ZombieCheck time.Duration
	// StartTimeout bounds one takeover failover starts.
	StartTimeout time.Duration
	// PromiseGrace is how long a partition the registry names this node
	// leader of may stand promised away (its replica not leading, having
	// promised a newer epoch to another candidate) before this node takes
	// it back with a handoff of its own (PlanFailover, TakeoverAbandoned).
	// The promise stopped this replica leading; a candidate that crashed,
	// was cut off or gave up after it never takes over, and nobody else
	// takes over from a leader that is alive. Long enough for a live
	// candidate to finish (a contending takeover is safe, epochs order
	// the two, but undoes the other's work); short, since the partition
	// serves no claim meanwhile. INVARIANT: above ElectionBackoffMax, so
	// that a candidate whose attempt failed retries at least once first.
	PromiseGrace time.Duration
	// ElectionBackoff is the base of the random backoff between failed
	// handoffs; ElectionBackoffMax caps it. INVARIANT: base <= max.
	ElectionBackoff, ElectionBackoffMax time.Duration
	// CallTimeout bounds one change of the metadata group's voters.
	CallTimeout time.Duration
	// DialTimeout bounds dialing a peer asked to take over or to copy a
	// partition; the request itself is bounded by its move's deadline.
	DialTimeout time.Duration
}

// Validate reports every knob out of range (Self is New's to check: node
// validates its config before it knows its id).
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	for name, d := range map[string]time.Duration{
		"clock probe": c.ClockProbe, "voter interval": c.VoterInterval, "dead voter grace": c.DeadVoterGrace,
		"placement settle": c.PlacementSettle, "zombie check": c.ZombieCheck, "start timeout": c.StartTimeout, "promise grace": c.PromiseGrace,
		"election backoff": c.ElectionBackoff, "call timeout": c.CallTimeout, "dial timeout": c.DialTimeout,
	} {
		check(d > 0, "control: %s %v must be positive", name, d)
	}
	check(c.ElectionBackoffMax >= c.ElectionBackoff, "control: election backoff max %v below base %v", c.ElectionBackoffMax, c.ElectionBackoff)
	check(c.PromiseGrace > c.ElectionBackoffMax, "control: promise grace %v must exceed the election backoff max %v", c.PromiseGrace, c.ElectionBackoffMax)
	check(c.Logger != nil, "control: no logger")
	check(c.Clock != nil, "control: no clock")
	if err := c.Drift.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("control: %w", err))
	}
	return errors.Join(errs...)
}

// Placement and failover timing, and the bounds of their work. Not
// knobs: docs/design.md's timings are built on them.
const (
	// failoverInterval is how often a node checks the leaders of its
	// cohorts.
	failoverInterval = 100 * time.Millisecond
	// placementInterval is how often the metadata leader checks placement.
	placementInterval = 500 * time.Millisecond
	// maxMoves bounds the partitions moving at once (and the hand-offs
	// running at once).
	maxMoves = 4
	// moveTimeout bounds one partition move.
	moveTimeout = 5 * time.Minute
	// takeoverTimeout bounds a takeover another node asked for.
	takeoverTimeout = time.Minute
	// abandonedTellTimeout bounds telling the registry's leader of a
	// handoff given up (tellAbandoned): a leader out of reach waits out
	// its promise grace instead.
	abandonedTellTimeout = 2 * time.Second
	// fenceLiftSettle is how long a fenced leader waits, once gossip shows
	// a majority of the cohort again, before it grants claims: time for
	// the metadata group to bring it the registry's news (a newer leader
	// chosen while it was cut off, on which it steps down) first.
	fenceLiftSettle = time.Second
	// HandOffTimeout bounds handing off the partitions at a graceful stop
	// (HandOffAll). With node's ShutdownTimeout and LeaveTimeout it bounds
	// the whole stop (27 s by default): scripts/cluster.sh and the systemd
	// unit wait longer than that before they kill.
	HandOffTimeout = 15 * time.Second
	// gatherParallel bounds the gathers of zombies' copies a leader runs
	// at once (one per zombie and partition at most): after a move of
	// many partitions each zombie asks for each, and a gather is a whole
	// anti-entropy pass with the zombie.
	gatherParallel = 2
	// gatherTimeout bounds one gather of a zombie's copy, like a move's
	// carry (moveTimeout) of the same partition.
	gatherTimeout = moveTimeout
	// electParallel bounds how many partition handoffs run at once at start.
	electParallel = 8
	// clockCheckWait bounds how long a starting node waits for its clock's
	// first verdict before it goes on without leading anything (its peers
	// are down: it could not win a handoff anyway; the failover loop leads
	// what the registry names it for once the clock is judged).
	clockCheckWait = 10 * time.Second
	// clockAwaitPolls is how many times per ClockProbe AwaitClock looks
	// for the first verdict.
	clockAwaitPolls = 4
	// maxVoters is the metadata group's largest voter count (docs/design.md).
	maxVoters = 5
)
