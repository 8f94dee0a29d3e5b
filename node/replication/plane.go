package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Config is what the plane needs of the node's configuration. node fills
// it from its own Config, whose defaults and validation are the user's;
// Validate checks what the plane relies on.
type Config struct {
	// Self is this node's id.
	Self uint64
	// Partitions is the cluster's partition count.
	Partitions int
	// AAE bounds one anti-entropy round; AAEInterval is how often a
	// leader compares each partition it leads with each follower.
	AAE         antientropy.Config
	AAEInterval time.Duration
	// Retention is how long a completed task is kept (0: no garbage
	// collection); GCInterval is how often a leader looks for tasks to
	// collect; GCComponentMax bounds the tasks of one dependency
	// component a pass walks.
	Retention      time.Duration
	GCInterval     time.Duration
	GCComponentMax int
	// TombstoneHorizon is how long a collected task's tombstone is kept.
	TombstoneHorizon time.Duration
	Clock            clock.Clock
	Log              *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Self != 0, "no node id")
	check(c.Partitions >= 1, "partitions %d must be positive", c.Partitions)
	check(c.AAEInterval > 0, "anti-entropy interval %v must be positive", c.AAEInterval)
	check(c.GCInterval > 0, "gc interval %v must be positive", c.GCInterval)
	check(c.Retention >= 0, "retention %v is negative", c.Retention)
	check(c.GCComponentMax >= 1, "gc component max %d must be positive", c.GCComponentMax)
	check(c.TombstoneHorizon > 0, "tombstone horizon %v must be positive", c.TombstoneHorizon)
	check(c.Clock != nil, "no clock")
	check(c.Log != nil, "no logger")
	if err := c.AAE.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("replication: config: %w", err)
	}
	return nil
}

// Host is what the plane sees of the node that runs it.
type Host interface {
	// Replica returns this node's replica of part (part <
	// Config.Partitions). The plane asks only once the partitions are
	// loaded: its loops start after the load, and node's peer handlers
	// refuse partition ops before it.
	Replica(part uint16) *partition.Replica
	// Cohort returns part's cohort as the registry has it: shared, not
	// to be modified.
	Cohort(part int) []uint64
	// LeaderOf returns the node the registry names leader of part (0:
	// none).
	LeaderOf(part uint16) uint64
	// AddrOf returns node id's peer address ("" when unknown).
	AddrOf(id uint64) string
	// Peers is the node's connection pool. The plane calls peers only
	// once the node has started (its handlers are registered before the
	// pool exists: they serve, they do not call).
	Peers() *peer.Pool
	// NoteDependents is told of records about to be merged here, before
	// their reverse edges are written (node's dependency notices).
	NoteDependents(recs []task.Record)
	// Collected is told of each task this node garbage-collected.
	Collected(id task.ID)
	// Departing reports whether the node is handing off its partitions
	// to stop: it starts no garbage-collection pass then.
	Departing() bool
	// QueueRetentions returns the queues whose ended tasks are kept for a
	// time of their own instead of Config.Retention (queue settings). A
	// garbage-collection pass reads it once, at its start.
	QueueRetentions() map[string]time.Duration
}

// Stats are the plane's running totals, read by node's metrics
// (node/metrics) and cluster view at any time.
type Stats struct {
	// Shipping, as a leader: requests sent to followers, the partition
	// items and records they carried (items per request is what batching
	// buys), requests that failed whole, and the nanoseconds requests
	// spent between being sent and answered (over Requests, a
	// follower's round trip as this leader sees it).
	Requests, Items, Records, Failed, InFlightNanos atomic.Int64
	// As a follower: requests served, and the nanoseconds spent merging
	// them and then waiting for their sync.
	Served, MergeNanos, SyncNanos atomic.Int64
	// Anti-entropy rounds run as a leader, those that found the replicas
	// equal, records fetched and merged here, records sent to followers,
	// and bytes of tree exchanges.
	AAERounds, AAEInSync, AAEPulled, AAEPushed, AAEBytes atomic.Int64
	// Garbage collection: passes, tasks collected, candidates held, and
	// tombstones dropped after the horizon.
	GCPasses, GCCollected, GCHeld, GCExpired atomic.Int64
}

// Plane is one node's replication data plane.
type Plane struct {
	cfg   Config
	host  Host
	log   *slog.Logger
	links *links
	stats Stats
	// gcMu runs one garbage-collection pass at a time (the background
	// loop's and the client op's).
	gcMu sync.Mutex
}

// New returns the plane of a node. ctx bounds the links to followers: once it is cancelled they answer
// what they hold with wire.ErrShuttingDown and end (Wait).
func New(ctx context.Context, cfg Config, host Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plane{cfg: cfg, host: host, log: cfg.Log}
	p.links = &links{p: p, ctx: ctx, queue: make(map[uint64]chan *replItem)}
	return p, nil
}

// Stats returns the plane's running totals.
func (p *Plane) Stats() *Stats { return &p.stats }

// Register registers the handlers of the plane's peer ops on mux, each
// wrapped by replica (node's: it refuses partition ops until the
// partitions are loaded).
func (p *Plane) Register(mux *peer.Mux, replica func(wire.Handler) wire.Handler) {
	mux.Handle(wire.OpReplicate, replica(peer.Unary(func(_ context.Context, req *wire.Request, r *wire.ReplicateRequest) (any, error) {
		return p.serveReplicate(req.PeerID, r)
	})))
	mux.Handle(wire.OpAAENodes, replica(peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.AAERequest) (any, error) {
		return p.serveAAENodes(r)
	})))
	mux.Handle(wire.OpAAEBuckets, replica(peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.AAERequest) (any, error) {
		return p.serveAAEBuckets(r)
	})))
	mux.Handle(wire.OpAAEFetch, replica(peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.AAEFetchRequest) (any, error) {
		return p.serveAAEFetch(r)
	})))
	mux.Handle(wire.OpGCInfo, replica(peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.GCInfoRequest) (any, error) {
		return p.serveGCInfo(r)
	})))
	mux.Handle(wire.OpExport, replica(wire.HandlerFunc(p.serveExportOp)))
}

// now is the node's clock in Unix milliseconds.
func (p *Plane) now() int64 { return clock.UnixMilli(p.cfg.Clock) }

// partOf returns the partition of id.
func (p *Plane) partOf(id task.ID) uint16 { return ring.PartitionOf(id[:], p.cfg.Partitions) }

// leads reports whether this node's replica of part leads it.
func (p *Plane) leads(part uint16) bool { return p.host.Replica(part).Epoch() > 0 }

// NeedAcks is the number of durable replicas a write of part waits for:
// w, or a majority of the partition's cohort when w is 0. A cohort in
// the middle of a move (old and new members) counts as it is.
func (p *Plane) NeedAcks(part uint16, w int) int {
	size := len(p.host.Cohort(int(part)))
	if size == 0 {
		size = 1
	}
	if w == 0 {
		return ring.Majority(size)
	}
	return min(w, size)
}

// serveExportOp streams a partition's pages to a puller.
func (p *Plane) serveExportOp(ctx context.Context, req *wire.Request, w wire.ResponseWriter) {
	var r wire.ExportRequest
	if err := wire.Unmarshal(req.Body, &r); err != nil {
		_ = w.Error(wire.Errorf(wire.CodeBadFrame, "%s: %v", req.Op, err))
		return
	}
	if err := p.serveExport(ctx, &r, w.Send); err != nil {
		_ = w.Error(err)
		return
	}
	_ = w.Reply(&wire.ExportPage{Done: true})
}
