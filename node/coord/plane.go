package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/deps"
	"github.com/skuldd/skuldd/node/heads"
	"github.com/skuldd/skuldd/node/hints"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/queues"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/node/schedules"
	"github.com/skuldd/skuldd/node/shards"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Limits of single requests.
const (
	// MaxClaimCount bounds the tasks one claim may take.
	MaxClaimCount = 1000
	// listPageSize is the number of tasks per streamed list frame.
	listPageSize = 256
	// maxClaimRaces bounds how often a claim picks again after the
	// partition it picked stepped down or its task stopped being
	// claimable.
	maxClaimRaces = 16
)

// Config is the coordinator plane's part of a node's configuration: the
// limits it applies to requests (node/config documents and validates
// each; New checks that none is missing).
type Config struct {
	Self       uint64
	Partitions int
	// MaxBatch bounds the tasks of one enqueue; MaxPayload a task's data.
	MaxBatch   int
	MaxPayload int
	// MaxTTL, MaxWait and MaxDelay bound a claim's lease, a long poll and
	// any delay a request names; DefaultTTL is the lease of a claim that
	// names none (a queue's setting first).
	MaxTTL, MaxWait, MaxDelay, DefaultTTL time.Duration
	// DefaultMaxAttempts applies to a task that names none (a queue's
	// setting first).
	DefaultMaxAttempts uint32
	// SkewBound is the clock skew a task's view allows for.
	SkewBound time.Duration
	// HintWait bounds a hinted enqueue's wait for its cohort.
	HintWait time.Duration
	// ClaimOrderSlack is how much better another node's head must be for
	// a claim to go there (heads.ClaimHere).
	ClaimOrderSlack time.Duration
	// Retention is how long finished tasks are kept (0: no garbage
	// collection).
	Retention time.Duration
	// CallTimeout bounds a background peer call (a retirement shipped);
	// DialTimeout bounds dialing a peer for a forward.
	CallTimeout, DialTimeout time.Duration
	Clock                    clock.Clock
	Log                      *slog.Logger
}

// Validate reports a missing or impossible setting.
func (c Config) Validate() error {
	var errs []error
	if c.Self == 0 {
		errs = append(errs, errors.New("no node id"))
	}
	if c.Partitions <= 0 || c.MaxBatch <= 0 || c.MaxPayload <= 0 {
		errs = append(errs, fmt.Errorf("partitions %d, max batch %d, max payload %d: each must be positive", c.Partitions, c.MaxBatch, c.MaxPayload))
	}
	if c.MaxTTL <= 0 || c.DefaultTTL <= 0 || c.CallTimeout <= 0 || c.DialTimeout <= 0 || c.HintWait <= 0 {
		errs = append(errs, errors.New("max ttl, default ttl, hint wait and the peer timeouts must be positive"))
	}
	if c.Clock == nil || c.Log == nil {
		errs = append(errs, errors.New("no clock or logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	return nil
}

// Planes are the node's parts the coordinator acts through, each built
// before the plane and never replaced.
type Planes struct {
	// Parts are this node's replicas, by partition.
	Parts     []*partition.Replica
	Store     *store.Store
	Repl      *replication.Plane
	Deps      *deps.Plane
	Hints     *hints.Plane
	Queues    *queues.Settings
	Heads     *heads.Index
	Summaries *heads.Summaries
	Schedules *schedules.Plane
	Shards    *shards.Plane
	IDs       *task.IDGen
	Peers     *peer.Pool
}

// Host is what the coordinator plane sees of the node's state, which
// changes while it serves.
type Host interface {
	// Serving is nil while the node serves client requests, else why it
	// does not (starting, shutting down).
	Serving() error
	// Stopping reports whether the node's shutdown began; Stopped is
	// closed then (it ends long polls).
	Stopping() bool
	Stopped() <-chan struct{}
	// Go runs f in the background; the node waits for it before it
	// closes its store.
	Go(f func())
	// Leaders is the registry's leader of each partition (0: none), and
	// Cohort a partition's cohort, from the node's cached copy: shared,
	// never to be modified. CohortSize is the replicas a write may ask
	// for: N capped by the members.
	Leaders() []uint64
	Cohort(part int) []uint64
	CohortSize() int
	// Alive reports whether gossip holds node id alive; AddrOf is its
	// address ("": unknown).
	Alive(id uint64) bool
	AddrOf(id uint64) string
	// Drifting reports whether this node's clock is not trusted, and
	// why; ErrDrifting is the refusal to give then.
	Drifting() (bool, string)
	ErrDrifting() error
	// CatchUp runs the partitions' timers that are due, before a request
	// looks at states.
	CatchUp()
	// Cluster answers `ctl cluster`; Leave hands this node's partitions
	// off and stops it.
	Cluster(ctx context.Context) (*wire.ClusterResponse, error)
	Leave(ctx context.Context) (*wire.LeaveResponse, error)
}

// Plane is the coordinator plane of one node.
type Plane struct {
	cfg Config
	h   Host
	log *slog.Logger

	parts  []*partition.Replica
	store  *store.Store
	repl   *replication.Plane
	deps   *deps.Plane
	hints  *hints.Plane
	queues *queues.Settings
	heads  *heads.Index
	sums   *heads.Summaries
	sched  *schedules.Plane
	shards *shards.Plane
	ids    *task.IDGen
	peers  *peer.Pool

	gate *gate // the ops in flight (Close)
}

// New returns the coordinator plane over pl and h.
func New(cfg Config, pl Planes, h Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(pl.Parts) != cfg.Partitions {
		return nil, fmt.Errorf("coord: %d replicas for %d partitions", len(pl.Parts), cfg.Partitions)
	}
	return &Plane{
		cfg: cfg, h: h, log: cfg.Log,
		parts: pl.Parts, store: pl.Store, repl: pl.Repl, deps: pl.Deps, hints: pl.Hints, queues: pl.Queues,
		heads: pl.Heads, sums: pl.Summaries, sched: pl.Schedules, shards: pl.Shards, ids: pl.IDs, peers: pl.Peers,
		gate: newGate(),
	}, nil
}

func (p *Plane) now() int64 { return clock.UnixMilli(p.cfg.Clock) }

func (p *Plane) partOf(id task.ID) uint16 { return ring.PartitionOf(id[:], p.cfg.Partitions) }

// leads reports whether this node serves part's requests itself.
func (p *Plane) leads(part uint16) bool { return p.parts[part].Epoch() > 0 }

// leadsAll reports whether this node leads every partition (a one-node
// cluster): requests then never need routing.
func (p *Plane) leadsAll() bool {
	for _, r := range p.parts {
		if r.Epoch() == 0 {
			return false
		}
	}
	return true
}

// acksFor checks a requested W against the cohort and returns the number
// of durable acks the write needs.
func (p *Plane) acksFor(w int) (int, error) {
	size := p.h.CohortSize()
	switch {
	case w < 0:
		return 0, fmt.Errorf("%w: w=%d is negative", task.ErrInvalid, w)
	case w == 0:
		return ring.Majority(size), nil
	case w > size:
		return 0, fmt.Errorf("%w: w=%d exceeds the partition's cohort of %d replica(s)", task.ErrInvalid, w, size)
	}
	return w, nil
}
