package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/node/listen"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Config configures a node. Default gives every default; Validate
// checks the fields against each other. Durations are wall time.
type Config struct {
	// Bind is the address of the node: UDP for QUIC and TCP for HTTP on the
	// same port. Port 0 picks a free port (tests).
	Bind string
	// DataDir holds the node's database.
	DataDir string
	// Advertise is the address other nodes reach this one at; default
	// the bound address, or for a wildcard bind (0.0.0.0) the first
	// non-loopback IPv4 address of the host's interfaces.
	Advertise string
	// Join lists members of an existing cluster to join through (any live
	// one will do). Empty: this node founds a cluster, or restarts in the
	// one its data dir belongs to.
	Join []string
	// ClusterSecret authenticates peers and clients (docs/design.md, Wire:
	// Security). Nil: no authentication, which is allowed on loopback
	// only unless Insecure.
	ClusterSecret []byte
	// Insecure allows binding a non-loopback address without a cluster
	// secret.
	Insecure bool
	// TLSCert and TLSKey are PEM files of the certificate (with its
	// chain) and key the HTTP port serves HTTPS with; both or neither.
	// Neither, with a cluster secret: the node makes its certificate,
	// signed by the authority the secret derives (wire.DeriveHTTPS).
	// With neither and no secret the HTTP port is plain HTTP.
	TLSCert, TLSKey string

	// Partitions is P, fixed when the cluster is created.
	Partitions int
	// Replicas is N, the cohort size of each partition (capped by the
	// number of nodes).
	Replicas int

	// SkewBound is the clock skew the cluster tolerates: a claim expires
	// for its leader only at end + SkewBound, so two claims of one task
	// never overlap while clocks stay within it.
	SkewBound time.Duration
	// MaxPayload bounds a task's payload and an update's data, in bytes.
	MaxPayload int
	// DefaultTTL is a claim's lease when the request gives none; MaxTTL
	// bounds any lease.
	DefaultTTL time.Duration
	MaxTTL     time.Duration
	// MaxWait bounds a claim's long-poll.
	MaxWait time.Duration
	// MaxDelay bounds enqueue delays, retry-afters and snoozes.
	MaxDelay time.Duration
	// ClaimOrderSlack is how far a claim may depart from the cluster-wide
	// order to stay on its coordinating node: among ready tasks of the
	// best priority, a node takes its own oldest one when it was created
	// at most this long after the oldest one another leader reports, and
	// routes the claim there otherwise. 0: exact priority-then-FIFO order
	// across the cluster (up to the summaries' staleness), at the cost of
	// one forwarding hop for most claims. The order within one node's
	// partitions is always exact.
	ClaimOrderSlack time.Duration
	// MaxBatch bounds the tasks in one enqueue and the count of one claim.
	MaxBatch int
	// FreshSpecBytes is the memory, across this node's partitions, for
	// the full specs of ready tasks the node enqueued as their leader and
	// has not granted yet, so a claim of fresh work reads no store
	// (partition.Config.Fresh). The partitions share it: only those the
	// node leads use it. 0 keeps none.
	FreshSpecBytes int64
	// WALMinSyncInterval is how long the next fsync of the node's
	// write-ahead log is held back while the log is busy, so that more
	// writes share it (store.Config.WALMinSyncInterval: only after a sync
	// that carried several writes; a lone writer is never held). Default
	// DefaultWALMinSyncInterval; 0 syncs as soon as a write waits.
	WALMinSyncInterval time.Duration
	// NoWALZeroAhead turns off writing zeros ahead of the write-ahead
	// log's end (store.Config.NoWALZeroAhead): for copy-on-write
	// filesystems, where the zeros save no sync any work.
	NoWALZeroAhead bool
	// DefaultMaxAttempts applies to tasks enqueued without max_attempts.
	DefaultMaxAttempts uint32
	// RetryBase and RetryMax shape the default backoff after a fail
	// without retry-after: RetryBase·2^(attempts-1), at most RetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration

	// TickInterval is the resolution of timers: how often delayed tasks
	// and expired claims are moved back to ready.
	TickInterval time.Duration
	// ReconcileInterval is how often blocked tasks re-check their deps, to
	// catch a completion notice lost to a crash.
	ReconcileInterval time.Duration
	// ElectionBackoff is the base of the random backoff between failed
	// partition-leader handoffs; ElectionBackoffMax caps it.
	ElectionBackoff    time.Duration
	ElectionBackoffMax time.Duration
	// StartTimeout bounds the start-up: metadata leader, cluster
	// initialisation and partition leaders.
	StartTimeout time.Duration
	// PromiseGrace is how long a partition leader that promised a newer
	// epoch to another candidate (and so stopped leading) waits for that
	// candidate's handoff before it takes the partition back
	// (control.Config.PromiseGrace). The default outlasts one attempt
	// of a live candidate's handoff: its promises (a peer call each), a
	// carry that gives each member up to 30 s (node/replication) and
	// the registry's CAS.
	PromiseGrace time.Duration
	// ShutdownTimeout bounds how long Close waits for in-flight requests.
	ShutdownTimeout time.Duration
	// RaftTick is the metadata raft group's tick.
	RaftTick time.Duration
	// GossipProfile picks memberlist's timing: "lan" (production) or
	// "local" (faster failure detection, for tests on one machine).
	GossipProfile string
	// VoterInterval is how often the metadata leader checks the group's
	// shape (learners to promote, dead voters to replace).
	VoterInterval time.Duration
	// DeadVoterGrace is how long a voter may be unreachable before the
	// metadata leader replaces it with a live learner.
	DeadVoterGrace time.Duration
	// PlacementSettle is how long membership must stay unchanged before
	// the metadata leader moves partitions to the ring's cohorts.
	PlacementSettle time.Duration
	// RejoinInterval is how often a node asks gossip to join the members
	// of the metadata registry it does not see alive: a node restarted
	// without --join (or with a join list that names a node cut off from
	// the rest) finds its cluster from what it stored, and gossip islands
	// of one cluster merge.
	RejoinInterval time.Duration
	// ZombieCheck is how often a node looks for partitions whose cohort it
	// left (zombies) and asks their leaders to release them; a zombie is
	// released once it has been out of the cohort, at one epoch, for two
	// checks.
	ZombieCheck time.Duration
	// AAE shapes the anti-entropy trees (the same on every node) and
	// bounds one round's work; AAEInterval is how often a partition's
	// leader runs rounds with each follower.
	AAE         antientropy.Config
	AAEInterval time.Duration
	// HintWait is how long an enqueue that asked for a hint waits for W
	// replicas of its cohort, from when its coordinator took it (a
	// forward to its leader included), before it is hinted instead (kept
	// on the coordinator and answered "hinted"); HintInterval is how often the
	// coordinator tries to hand its hints over.
	HintWait     time.Duration
	HintInterval time.Duration
	// ScheduleInterval is the longest the metadata group's leader waits
	// between looks at the periodic tasks (node/schedules); it also looks
	// at each schedule's next occurrence and at every change.
	ScheduleInterval time.Duration
	// ShardExpiryInterval is how often the metadata group's leader looks
	// for worker-shard members whose lease ran out (node/shards).
	ShardExpiryInterval time.Duration
	// Retention is how long a completed task is kept: once it and every
	// task connected to it by dependency edges completed longer ago, it
	// is garbage-collected (docs/design.md, Storage). 0 keeps everything.
	Retention time.Duration
	// GCInterval is how often a leader looks for tasks to collect.
	GCInterval time.Duration
	// GCComponentMax bounds the tasks of one dependency component a
	// collection walks: a larger component is held (logged and counted),
	// so one task with a huge fan-in cannot stall the passes.
	GCComponentMax int
	// TombstoneHorizon is how long a collected task's tombstone is kept.
	// It must be longer than any replica can stay apart from its cohort:
	// a replica away longer may still hold the task, and once every
	// other replica forgot the tombstone, nothing stops it coming back.
	TombstoneHorizon time.Duration
	// Drift configures clock-drift detection (docs/design.md, Clock):
	// Drift.MaxDrift is --max-clock-drift.
	Drift clock.Config
	// ClockProbe is how often the node reads its peers' clocks.
	ClockProbe time.Duration
	// ExitOnDrift makes a node whose clock drifted exit instead of
	// standing by until it is back in bounds.
	ExitOnDrift bool
	// JoinRetry is the pause between join attempts while starting.
	JoinRetry time.Duration
	// LeaveTimeout bounds the gossip of a graceful leave at shutdown.
	LeaveTimeout time.Duration
	// UpgradeHold keeps the cluster version where it is while this node
	// is a member (--upgrade-hold): the metadata leader raises it only
	// when `ctl upgrade finalize` asks (docs/design.md, Versions).
	UpgradeHold bool
	// UpgradeCheck is how often the metadata leader asks the members'
	// builds whether the cluster version can be raised.
	UpgradeCheck time.Duration
	// MaxVersion caps the cluster versions the node supports (0: this
	// build's, version.Max). Tests set it to play a node of an older
	// build; production leaves it 0.
	MaxVersion version.V

	// Faults injects network faults between nodes (tests only; nil in
	// production).
	Faults *peer.Faults
	// PeerNet, when set, carries the node's peer traffic instead of QUIC:
	// the node attaches to it at its address (tests and the simulation;
	// nil in production). Clients still reach the node over QUIC and HTTP,
	// unless NoListen.
	PeerNet *peer.MemNet
	// NoListen, with PeerNet, starts the node without sockets: no QUIC and
	// no HTTP listener. The node is at Advertise (else Bind) on PeerNet,
	// and its clients call Node.Service in the same process. For the
	// simulation, whose virtual time (testing/synctest) advances only
	// while every goroutine is blocked on something other than a socket.
	NoListen bool

	// Pprof serves Go's profiler at /debug/pprof/ on the HTTP port.
	Pprof bool
	// Debug, when set, serves the paths under /debug/ it handles on the
	// HTTP port, behind the client token like the API: the fault suite's
	// hooks, which only the test build (build tag skuldtest) sets. nil in
	// production builds.
	Debug http.Handler
	// StoreFS is the filesystem the store writes through; nil is the
	// disk's. The test build passes a store.CrashFS, so that the fault
	// suite can crash a node losing what it had not synced; the
	// simulation a store.MemFS. Unless NoWALZeroAhead, the store's log
	// zeroing sits above it and writes through it, so the log crashed is
	// the one production writes.
	StoreFS store.FS

	// Clock reads wall time; tests skew it (the hidden --clock-offset).
	Clock clock.Clock
	// Logger receives the node's logs; the node adds its id.
	Logger *slog.Logger
}

// Default returns the defaults: a one-node development cluster on
// 127.0.0.1:13000 with data in ./skuld-data.
func Default() Config {
	return Config{
		Bind:                "127.0.0.1:13000",
		DataDir:             "./skuld-data",
		Partitions:          64,
		Replicas:            3,
		SkewBound:           10 * time.Second,
		MaxPayload:          task.DefaultMaxData,
		DefaultTTL:          30 * time.Second,
		MaxTTL:              24 * time.Hour,
		MaxWait:             5 * time.Minute,
		MaxDelay:            365 * 24 * time.Hour,
		ClaimOrderSlack:     time.Second,
		MaxBatch:            10000,
		FreshSpecBytes:      defaultFreshSpecBytes,
		WALMinSyncInterval:  DefaultWALMinSyncInterval,
		DefaultMaxAttempts:  10,
		RetryBase:           time.Second,
		RetryMax:            10 * time.Minute,
		TickInterval:        50 * time.Millisecond,
		ReconcileInterval:   30 * time.Second,
		ElectionBackoff:     50 * time.Millisecond,
		ElectionBackoffMax:  2 * time.Second,
		StartTimeout:        60 * time.Second,
		PromiseGrace:        45 * time.Second,
		ShutdownTimeout:     10 * time.Second,
		RaftTick:            100 * time.Millisecond,
		GossipProfile:       "lan",
		VoterInterval:       time.Second,
		DeadVoterGrace:      30 * time.Second,
		JoinRetry:           500 * time.Millisecond,
		PlacementSettle:     5 * time.Second,
		ZombieCheck:         30 * time.Second,
		RejoinInterval:      2 * time.Second,
		Drift:               clock.DefaultConfig(),
		AAE:                 antientropy.DefaultConfig(),
		AAEInterval:         10 * time.Second,
		HintWait:            2 * time.Second,
		HintInterval:        time.Second,
		ScheduleInterval:    time.Second,
		ShardExpiryInterval: 500 * time.Millisecond,
		Retention:           7 * 24 * time.Hour,
		GCInterval:          time.Minute,
		GCComponentMax:      100_000,
		TombstoneHorizon:    14 * 24 * time.Hour,
		ClockProbe:          time.Second,
		LeaveTimeout:        2 * time.Second,
		UpgradeCheck:        DefaultUpgradeCheck,
		Clock:               clock.Real{},
		Logger:              slog.Default(),
	}
}

// minHorizonRounds is the fewest anti-entropy intervals a tombstone
// lives: enough rounds to reach every replica that is merely slow.
const minHorizonRounds = 10

// DefaultWALMinSyncInterval is the default hold of a busy log's next
// sync under CPU pressure (node/pressure). Measured with three nodes on two
// cores and 64 clients, in interleaved runs, holding after every sync: at
// 1 ms 16.3-17.3k enqueue/s and 7.5-7.9k claim+complete/s, against
// 14.4-15.2k and 7.0-7.4k without; 0.5 ms gained little (one run: 15.6k
// and 7.3k), and 2 ms held claims too long (one run: 6.3k
// claim+complete/s).
const DefaultWALMinSyncInterval = time.Millisecond

// DefaultUpgradeCheck is how often the metadata leader asks the members'
// builds whether the cluster version can be raised: an upgrade is done
// within seconds of its last node, and one peer call per member each
// period costs nothing.
const DefaultUpgradeCheck = 5 * time.Second

// maxWALMinSyncInterval bounds Config.WALMinSyncInterval: every durable
// write may wait this long for its sync, so more is a typo (2s for 2ms),
// not a setting.
const maxWALMinSyncInterval = 100 * time.Millisecond

// defaultFreshSpecBytes is the default claim cache. The cache counts the
// specs' own memory, and Go's collector lets the heap grow to about twice
// what is live, so the node's RSS grows by about twice this when the cache
// is full. Measured with 1e6 queued 100-byte tasks (scripts/bench.sh):
// 289 MB without the cache, 325 MB with 16 MiB, 455 MB with 64 MiB. 16
// MiB holds the specs of about 50,000 such tasks per node, more than the
// work a node hands out in a second under load.
const defaultFreshSpecBytes = 16 << 20

// maxFramePayload keeps one payload well inside a wire frame.
const maxFramePayload = 8 << 20

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.DataDir != "", "data dir is empty")
	check(c.Partitions >= 1 && c.Partitions <= ring.MaxPartitions, "partitions %d: want 1..%d", c.Partitions, ring.MaxPartitions)
	check(c.Replicas >= 1 && c.Replicas <= 7, "replicas %d: want 1..7", c.Replicas)
	check(c.SkewBound >= 0, "clock skew bound %v is negative", c.SkewBound)
	check(c.MaxPayload >= 1 && c.MaxPayload <= maxFramePayload, "max payload %d: want 1..%d bytes", c.MaxPayload, maxFramePayload)
	check(c.MaxVersion <= version.Max, "max version %d: this build supports up to %d", c.MaxVersion, version.Max)
	check(c.DefaultTTL > 0 && c.DefaultTTL <= c.MaxTTL, "default ttl %v must be in (0, max ttl %v]", c.DefaultTTL, c.MaxTTL)
	check(c.MaxWait >= 0, "max wait %v is negative", c.MaxWait)
	check(c.MaxDelay > 0, "max delay %v must be positive", c.MaxDelay)
	check(c.MaxBatch >= 1, "max batch %d must be positive", c.MaxBatch)
	check(c.FreshSpecBytes >= 0, "fresh spec cache %d bytes is negative", c.FreshSpecBytes)
	check(c.WALMinSyncInterval >= 0 && c.WALMinSyncInterval <= maxWALMinSyncInterval, "WAL min sync interval %v: want 0..%v", c.WALMinSyncInterval, maxWALMinSyncInterval)
	check(c.ClaimOrderSlack >= 0, "claim order slack %v is negative", c.ClaimOrderSlack)
	check(c.DefaultMaxAttempts >= 1, "default max attempts must be at least 1")
	check(c.RetryBase > 0 && c.RetryBase <= c.RetryMax, "retry base %v must be in (0, retry max %v]", c.RetryBase, c.RetryMax)
	for name, d := range map[string]time.Duration{
		"tick interval": c.TickInterval, "reconcile interval": c.ReconcileInterval,
		"election backoff": c.ElectionBackoff, "start timeout": c.StartTimeout,
		"shutdown timeout": c.ShutdownTimeout, "raft tick": c.RaftTick,
		"voter interval": c.VoterInterval, "dead voter grace": c.DeadVoterGrace,
		"join retry": c.JoinRetry, "leave timeout": c.LeaveTimeout, "upgrade check": c.UpgradeCheck, "placement settle": c.PlacementSettle,
		"zombie check": c.ZombieCheck, "rejoin interval": c.RejoinInterval, "clock probe": c.ClockProbe, "anti-entropy interval": c.AAEInterval,
		"gc interval": c.GCInterval, "tombstone horizon": c.TombstoneHorizon,
		"hint wait": c.HintWait, "hint interval": c.HintInterval, "schedule interval": c.ScheduleInterval,
		"shard expiry interval": c.ShardExpiryInterval,
	} {
		check(d > 0, "%s %v must be positive", name, d)
	}
	if err := c.Drift.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.AAE.Validate(); err != nil {
		errs = append(errs, err)
	}
	// Drift is caught well before it threatens claims: leases tolerate
	// SkewBound.
	check(c.SkewBound == 0 || c.Drift.MaxDrift < c.SkewBound, "max clock drift %v must be below the clock skew bound %v", c.Drift.MaxDrift, c.SkewBound)
	check(c.Retention >= 0, "retention %v is negative", c.Retention)
	check(c.GCComponentMax >= 1, "gc component max %d must be positive", c.GCComponentMax)
	// A tombstone outlives the anti-entropy rounds that spread it many
	// times over.
	check(c.TombstoneHorizon >= minHorizonRounds*c.AAEInterval, "tombstone horizon %v must be at least %d anti-entropy intervals (%v)", c.TombstoneHorizon, minHorizonRounds, minHorizonRounds*c.AAEInterval)
	check(c.ElectionBackoffMax >= c.ElectionBackoff, "election backoff max %v below base %v", c.ElectionBackoffMax, c.ElectionBackoff)
	check(c.Clock != nil, "no clock")
	check(c.Logger != nil, "no logger")
	check(c.GossipProfile == "lan" || c.GossipProfile == "local", "gossip profile %q: want lan or local", c.GossipProfile)
	check(c.ClusterSecret == nil || len(c.ClusterSecret) >= minSecretLen, "cluster secret is %d bytes; at least %d are needed", len(c.ClusterSecret), minSecretLen)
	check((c.TLSCert == "") == (c.TLSKey == ""), "tls cert %q and key %q: give both or neither", c.TLSCert, c.TLSKey)
	if err := listen.CheckBind(c.Bind, c.Insecure || c.ClusterSecret != nil); err != nil {
		errs = append(errs, err)
	}
	if err := listen.CheckAdvertise(c.Advertise); err != nil {
		errs = append(errs, err)
	}
	check(!c.NoListen || c.PeerNet != nil, "no-listen needs a peer network: without sockets, PeerNet is the node's only way to its peers")
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("join %q: %w", j, err))
		}
	}
	return errors.Join(errs...)
}

// minSecretLen is the shortest cluster secret (wire.MinSecretLen).
const minSecretLen = 16
