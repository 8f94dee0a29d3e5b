package deps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Config is what the plane needs of the node's configuration (node fills
// it from its own, validated there; Validate checks what the plane
// relies on).
type Config struct {
	// Partitions is the cluster's partition count.
	Partitions int
	// MaxBatch bounds the tasks of one dependency request from a peer.
	MaxBatch int
	// CallTimeout bounds one dependency call to another leader.
	CallTimeout time.Duration
	Clock       clock.Clock
	Log         *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	var errs []error
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions %d must be positive", c.Partitions))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max batch %d must be positive", c.MaxBatch))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("call timeout %v must be positive", c.CallTimeout))
	}
	if c.Clock == nil || c.Log == nil {
		errs = append(errs, errors.New("no clock or no logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deps: config: %w", err)
	}
	return nil
}

// Host is what the plane sees of the node that runs it.
type Host interface {
	// Replica returns this node's replica of part; asked only once the
	// partitions are loaded.
	Replica(part uint16) *partition.Replica
	// Store is the node's store (reverse edges, specs, states and
	// tombstones are read from it).
	Store() *store.Store
	// RouteTo returns the address of part's leader, "" when this node
	// leads it.
	RouteTo(ctx context.Context, part uint16) (string, error)
	// GetAtLeader reads task id at its partition's leader when that is
	// another node (handled); handled is false when this node leads it.
	GetAtLeader(ctx context.Context, part uint16, id task.ID) (v *wire.TaskView, handled bool, err error)
	// Peers is the node's connection pool.
	Peers() *peer.Pool
	// Replication is the node's replication plane.
	Replication() *replication.Plane
}

// Plane is one node's part of the dependency protocol (dependencies.go).
type Plane struct {
	cfg  Config
	host Host
	set  *set
	// ctx ends the notices still retrying in the background (wg).
	ctx context.Context
	wg  sync.WaitGroup
}

// New returns the plane of a node; ctx ends its background notices.
func New(ctx context.Context, cfg Config, host Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plane{cfg: cfg, host: host, set: newSet(), ctx: ctx}, nil
}

// Wait waits for the background notices to end, once ctx is cancelled.
func (p *Plane) Wait() { p.wg.Wait() }

// Load adds every dependency whose reverse edges the store holds: run
// once, when the partitions are loaded and before the node serves.
func (p *Plane) Load() error {
	if err := p.host.Store().DepTargets(p.set.add); err != nil {
		return fmt.Errorf("load dependency edges: %w", err)
	}
	return nil
}

// Register registers the plane's peer ops on mux, each wrapped by replica
// (node's: it refuses partition ops until the partitions are loaded).
func (p *Plane) Register(mux *peer.Mux, replica func(wire.Handler) wire.Handler) {
	mux.Handle(wire.OpDependents, replica(peer.Unary(func(ctx context.Context, _ *wire.Request, r *wire.DependentsRequest) (any, error) {
		return p.serveDependents(ctx, r)
	})))
	mux.Handle(wire.OpDepDone, replica(peer.Unary(func(_ context.Context, _ *wire.Request, r *wire.DepDoneRequest) (any, error) {
		return nil, p.serveDepDone(r)
	})))
}

// Completed tells the dependents of id, which just completed at this
// leader, if it is anyone's dependency. Not only when newly completed: a
// retry of a completion whose first attempt failed after the write must
// still tell them (the set forgets id once told, so they are told once).
func (p *Plane) Completed(id task.ID) {
	if p.set.take(id) {
		p.notifyDependents(id)
	}
}

// Collected forgets id, garbage-collected here: no completion of it is
// left to tell.
func (p *Plane) Collected(id task.ID) { p.set.take(id) }

func (p *Plane) now() int64 { return clock.UnixMilli(p.cfg.Clock) }

func (p *Plane) partOf(id task.ID) uint16 { return ring.PartitionOf(id[:], p.cfg.Partitions) }

func (p *Plane) leads(part uint16) bool { return p.host.Replica(part).Epoch() > 0 }

// State reports whether dep exists and is completed.
func (p *Plane) State(dep task.ID) (completed bool, err error) {
	part := p.partOf(dep)
	// A collected task was completed (or cancelled: its tombstone says
	// which), and a tombstone is forever (up to the horizon): a local one
	// is the truth.
	if at, tomb, err := p.host.Store().Tomb(part, dep); err == nil && tomb {
		return !task.TombCancelled(at), nil
	}
	// Asked of the dep's leader: a follower's copy may hold a completion
	// no majority acknowledged (partition's "Epochs and orphans"), which
	// must not make a dependent ready.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
	defer cancel()
	if v, handled, err := p.host.GetAtLeader(ctx, part, dep); handled {
		if errors.Is(err, task.ErrNotFound) {
			// Collected reads as not found; the leader's tombstone says
			// whether it completed (or was cancelled: never done).
			if infos, lerr := p.host.Replication().GCLookup(ctx, []task.ID{dep}); lerr == nil && len(infos) == 1 {
				switch infos[0].Status {
				case partition.GCCollected:
					return true, nil
				case partition.GCCollectedCancelled:
					return false, nil
				}
			}
			return false, fmt.Errorf("%w: %s", task.ErrDepNotFound, dep)
		}
		if err != nil {
			return false, err
		}
		return v.State == task.Completed.String(), nil
	}
	if _, err := p.host.Store().Spec(part, dep); errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("%w: %s", task.ErrDepNotFound, dep)
	} else if err != nil {
		return false, err
	}
	st, _, err := p.host.Store().State(part, dep)
	if err != nil {
		return false, err
	}
	return st.Completed(), nil
}

// CheckNew runs after new tasks are durable: a dep that completed between
// the pre-check and the write of the reverse edge is caught here (the
// dep's completer reads edges after writing its completion; the enqueuer
// reads completions after writing its edges, so one of them sees the
// other).
func (p *Plane) CheckNew(batch []partition.NewTask) {
	now := p.now()
	for _, nt := range batch {
		for _, d := range nt.Spec.Deps {
			if slices.Contains(nt.State.DepsDone, d) {
				continue
			}
			done, err := p.State(d)
			if err != nil || !done {
				continue
			}
			if err := p.host.Replica(p.partOf(nt.Spec.ID)).DepDone(nt.Spec.ID, d, now); err != nil {
				p.cfg.Log.Warn("marking dependency done", "task", nt.Spec.ID, "dep", d, "err", err)
			}
		}
	}
}

// Reconcile re-checks the deps of every blocked task of the partitions
// this node leads (a follower learns of deps done from its leader). It
// reports whether some check could not be made (a dep's leader out of
// reach, a write that failed): the caller then reconciles again soon
// rather than a whole interval later, since a completion's notice that
// was lost (its dependent's leader down, or every node killed at once
// right after it) is found only so.
func (p *Plane) Reconcile() (incomplete bool) {
	now := p.now()
	for i := range p.cfg.Partitions {
		part := uint16(i)
		r := p.host.Replica(part)
		if !p.leads(part) {
			continue
		}
		for _, id := range r.Blocked() {
			sp, err := p.host.Store().Spec(part, id)
			if err != nil {
				continue
			}
			for _, d := range sp.Deps {
				done, err := p.State(d)
				if err != nil && !errors.Is(err, task.ErrDepNotFound) {
					incomplete = true
				}
				if err == nil && done {
					wr, err := r.DepDoneApply(id, d, now)
					if err != nil {
						p.cfg.Log.Warn("reconcile dependency", "task", id, "dep", d, "err", err)
						incomplete = true
						continue
					}
					p.host.Replication().ReplicateQuietly(part, wr)
				}
			}
		}
	}
	return incomplete
}
