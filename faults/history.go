package faults

import "encoding/json"

// The history is the record of a run that the checkers judge (TESTING.md
// section 5, "History format"): one JSON object per line, in the order the
// harness recorded them. Every client operation appears twice, as an
// invoke and then as its outcome (ok, fail or info) with the same Proc and
// F; the nemesis's actions and the harness's fenced sink appear once.
//
// Outcomes (Jepsen's meaning, which the checkers rely on):
//   - ok: skuldd acknowledged the operation; it took effect.
//   - fail: skuldd answered a definite refusal (a 4xx code: invalid,
//     not_found, claim_superseded, claim_expired, completed, conflict,
//     seq, ...); the operation took effect nowhere, ever.
//   - info: the outcome is unknown (a timeout, a reset, a 5xx such as
//     unavailable or timeout): it may or may not have taken effect. After
//     an info the client process takes a new Proc, as Jepsen does, so one
//     Proc never has two operations in flight.
//
// Times (TNs) are nanoseconds of the harness's monotonic clock since the
// run began: the one real-time reference, since every node shares the
// machine's physical clock. Node clocks (Start, End in task views) are
// Unix milliseconds by the node's own, possibly offset, clock.

// Event types.
const (
	Invoke  = "invoke"
	OK      = "ok"
	Fail    = "fail"
	Info    = "info"
	Nemesis = "nemesis" // a fault starting or healing (F: "start" or "stop")
	Effect  = "effect"  // a worker's side effect offered to the fenced sink
	Phase   = "phase"   // the run moving on (F: "faults", "heal", "drain", "final")
)

// CodeBadResponse marks an ok outcome whose 2xx answer did not decode.
const CodeBadResponse = "bad_response"

// Operation names (Event.F for client operations).
const (
	FEnqueue  = "enqueue"
	FClaim    = "claim"
	FRenew    = "renew"
	FUpdate   = "update"
	FComplete = "complete"
	FFail     = "fail"
	FSnooze   = "snooze"
	FCancel   = "cancel"
	FGet      = "get"
	// FGroupCancel cancels every open task of a group (Group), with
	// Value its reason, unique per group cancel invoked.
	FGroupCancel = "group-cancel"
)

// opNames are the operations in the order every table and plot of a run
// lists them (report.txt, the summary, the throughput plot).
var opNames = []string{FEnqueue, FClaim, FRenew, FUpdate, FComplete, FFail, FSnooze, FCancel, FGroupCancel, FGet}

// Event is one line of the history.
type Event struct {
	// Index is the event's position in the history, from 0.
	Index int64 `json:"idx"`
	// Proc is the client process; -1 for the nemesis and the harness.
	Proc int    `json:"proc"`
	Type string `json:"type"`
	// F is the operation (FEnqueue, ...), or for nemesis events "start"
	// or "stop", for phases the phase's name.
	F string `json:"f"`
	// TNs is the harness's monotonic time, ns since the run began.
	TNs int64 `json:"t_ns"`
	// Node is the node (1-based) the request was sent to; 0 if none.
	Node int `json:"node,omitempty"`

	// Task is the task's id: client-chosen on enqueue (40 hex chars), or
	// the node's on a placed enqueue's ok; the claimed task's on a
	// claim's ok.
	Task string `json:"task,omitempty"`
	// Placed marks an enqueue sent without id (its invoke has no Task):
	// the node chose it (Mix.Placed).
	Placed bool `json:"placed,omitempty"`
	// Hint marks an enqueue that asked for a hint (Mix.Hinted): on its
	// invoke, and on its outcome, which repeats the invoke's fields.
	// Histories from before it have none: their enqueues count as not
	// asking.
	Hint bool `json:"hint,omitempty"`
	// As is the role whose credential sent the request ("producer",
	// "worker"; empty: the cluster token, the admin's). An enqueue sent
	// as the worker (Mix.Forbidden) must be refused, and its task never
	// appear.
	As string `json:"as,omitempty"`
	// Hinted is set on an enqueue's ok that answered "hinted": the node
	// holds the task until it can hand it to its cohort (Mix.Hinted). It
	// is acknowledged like any other.
	Hinted bool `json:"hinted,omitempty"`
	// Value is the unique payload of an enqueue (and of the task a
	// claim's ok granted), an update's data, or a cancel's reason (unique per cancel invoked, so a final view's
	// reason names the cancel that took effect).
	Value string `json:"value,omitempty"`
	// Deps are an enqueue's dependencies.
	Deps []string `json:"deps,omitempty"`
	// MaxAttempts is an enqueue's max_attempts (0: the node's default).
	MaxAttempts uint32 `json:"max_attempts,omitempty"`
	// Queue is the queue of an enqueue or a claim.
	Queue string `json:"queue,omitempty"`
	// Group is an enqueue's group label, or the group a group cancel
	// names.
	Group string `json:"group,omitempty"`
	// Key is an enqueue's unique key. Holder is set on a keyed enqueue's
	// ok that answered duplicate: the task that holds the key (the
	// invoke's Task, whose id the enqueue drew in the key's partition,
	// was not created).
	Key    string `json:"key,omitempty"`
	Holder string `json:"holder,omitempty"`
	// Claim is the claim id: the one a renew, update, complete, fail or
	// snooze acts under, or the one a claim's ok was granted.
	Claim *uint32 `json:"claim,omitempty"`
	// Epoch is the epoch of the claim granted (a claim's ok), from the
	// task view's claims.
	Epoch uint64 `json:"epoch,omitempty"`
	// Seq is an update's sequence number or a complete's seq.
	Seq *uint64 `json:"seq,omitempty"`
	// TTLMs is the lease asked for by a claim or renew.
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// DelayMs is a snooze's delay or a fail's retry_after.
	DelayMs int64 `json:"delay_ms,omitempty"`
	// End is a claim's or renew's lease end as the node reported it (Unix
	// ms by the granting leader's clock).
	End int64 `json:"end,omitempty"`
	// Attempts is the task's attempt count as a claim's ok reported it.
	Attempts uint32 `json:"attempts,omitempty"`
	// Acks is an enqueue's ok answer's acks: how many replicas held the
	// task when it was acknowledged (at least the w asked for).
	Acks int `json:"acks,omitempty"`
	// Tasks is, on a claim's invoke, how many tasks it asked for (count),
	// and on its ok how many tasks the answer held; on a group cancel's
	// ok, how many tasks it cancelled; 0: not recorded.
	Tasks int `json:"tasks,omitempty"`
	// TimeLimitMs is an enqueue's time limit (0: none): how long one
	// claim of the task may run, renewals included.
	TimeLimitMs int64 `json:"time_limit_ms,omitempty"`
	// NoRetry: a fail that said no_retry (the task is dead at once).
	NoRetry bool `json:"no_retry,omitempty"`

	// Code is skuldd's error code (for fail and info), Err its message or
	// the transport's error. An ok whose 2xx body did not decode carries
	// CodeBadResponse and the decoder's error: the node acknowledged, so
	// it is ok, and an answer the client cannot read is an anomaly.
	Code string `json:"code,omitempty"`
	Err  string `json:"err,omitempty"`

	// Nemesis names the fault of a nemesis event ("kill", "pause",
	// "partition-majority", "clock-skew", ...), Targets the nodes it acts
	// on, and Detail anything else (the offset, the drop rate, ...).
	Nemesis string          `json:"nemesis,omitempty"`
	Targets []int           `json:"targets,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`

	// Accepted is the fenced sink's answer to an Effect: false when the
	// sink had already taken an effect of the same task under a higher
	// claim id.
	Accepted *bool `json:"accepted,omitempty"`
}

// FinalRead is one task as one node's replica holds it after heal and
// drain (a GET with r=1 through that node): what the convergence and
// total-queue checkers read. Written to final.jsonl, one per (task, node).
type FinalRead struct {
	Task string `json:"task"`
	Node int    `json:"node"`
	// TNs is when the read was answered.
	TNs int64 `json:"t_ns"`
	// Found is false for a task the replica does not hold (or that the
	// node answered not_found for).
	Found bool `json:"found"`
	// View is the task view as the node returned it (the JSON of
	// wire.TaskView: state, claims, updates, attempts, ...).
	View json.RawMessage `json:"view,omitempty"`
	// Err is set when the read failed for another reason.
	Err string `json:"err,omitempty"`
}

// RunInfo describes a run: written to run.json before the first event, it
// carries what the checkers need besides the history (the bounds the
// guarantees hold within) and what a reader needs to rerun it.
type RunInfo struct {
	// Seed draws the nemesis schedule and the workload; the same seed and
	// options replay the same schedule.
	Seed     int64  `json:"seed"`
	Scenario string `json:"scenario"`
	// Nodes is the cluster's size; Addrs[i] is node i+1's address
	// (host:port, HTTP on TCP and QUIC on UDP).
	Nodes int      `json:"nodes"`
	Addrs []string `json:"addrs"`
	// Partitions, Replicas and W are the cluster's P, N and the enqueue
	// acknowledgement count the workload asked for (0: a majority).
	Partitions int `json:"partitions"`
	Replicas   int `json:"replicas"`
	W          int `json:"w"`
	// SkewBoundMs is --clock-skew-bound, MaxDriftMs --max-clock-drift,
	// AAEIntervalMs --aae-interval: the bounds the checkers judge with.
	SkewBoundMs   int64 `json:"skew_bound_ms"`
	MaxDriftMs    int64 `json:"max_drift_ms"`
	AAEIntervalMs int64 `json:"aae_interval_ms"`
	// TTLMs is the claim lease the workload asks for; MaxAttempts the
	// max_attempts of its tasks.
	TTLMs       int64  `json:"ttl_ms"`
	MaxAttempts uint32 `json:"max_attempts"`
	// BeyondBounds lists the nemeses of this run that take the cluster
	// outside what the design promises (clock skew over the bound, a
	// majority lost for good, W=1 with its replica lost): the anomalies
	// they cause are reported as the guarantee's boundary, not failed.
	BeyondBounds []string `json:"beyond_bounds,omitempty"`
	// Started is the wall-clock time the run began (RFC 3339), for people.
	Started string `json:"started"`
	// StartUnixNs is the machine's wall clock (Unix ns, no test offset)
	// when TNs was 0: it maps node clocks (task views' Unix ms, a node's
	// own clock plus its test offset) to the history's timeline. 0: not
	// recorded, and the checkers judge nothing that needs it.
	StartUnixNs int64 `json:"start_unix_ns,omitempty"`
	// OKFloor is, per phase (Phase events' F), the fewest client
	// operations invoked in that phase that must come back ok for the run
	// to count: a run that acknowledged almost nothing proves nothing.
	// A phase not named has no floor.
	OKFloor map[string]int64 `json:"ok_floor,omitempty"`
	// Command is the command line that reproduces the run.
	Command string `json:"command"`
	// Shards names the shard set the run's members joined (shards.go):
	// a run that names one must have its shards.json. Empty in runs from
	// before worker shards.
	Shards string `json:"shards,omitempty"`
	// Upgrade: the run started on an older build and replaced it
	// (upgrade mode); its upgrade.json must say so.
	Upgrade bool `json:"upgrade,omitempty"`
}

// Leadership is one node leading one partition at one epoch: written to
// leaders.jsonl after the run from the nodes' logs (each node logs
// "leading" with the partition and epoch when a handoff makes it leader).
// An epoch of a partition has one leader (its handoff's CAS names it), so
// the records map a claim's epoch to the node that granted it: what the
// checkers need to tell whether a clock fault on that node can explain an
// overlap. The file is optional; without it no granting node is known.
type Leadership struct {
	Node      int    `json:"node"`
	Partition int    `json:"partition"`
	Epoch     uint64 `json:"epoch"`
	// TNs is when the node logged it (its log's wall-clock time mapped to
	// the timeline), 0 if unknown.
	TNs int64 `json:"t_ns,omitempty"`
}
