package hints

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/replication"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Config is what the plane needs of the node's configuration.
type Config struct {
	Self       uint64
	Partitions int
	// Interval is how often the plane tries to hand its hints over.
	Interval time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Partitions <= 0:
		return fmt.Errorf("hints: %d partitions", c.Partitions)
	case c.Interval <= 0:
		return fmt.Errorf("hints: interval %v must be positive", c.Interval)
	case c.Clock == nil || c.Log == nil:
		return errors.New("hints: clock and logger are required")
	}
	return nil
}

// Host is what the plane sees of the node that runs it.
type Host interface {
	Store() *store.Store
	Replica(part uint16) *partition.Replica
	Replication() *replication.Plane
	// Placeable reports whether enough of part's cohort is reachable to
	// take a write of w (the node's placement view).
	Placeable(part uint16, w int) bool
	// HandOverKeyed hands keyed hints to their key's leader, which
	// checks the key (and retires a task whose key was taken meanwhile);
	// nil once W replicas hold every one.
	HandOverKeyed(ctx context.Context, w int, specs []*task.Spec) error
}

// handOverBatch bounds the hints one handover write carries.
const handOverBatch = 256

// Plane is one node's hints.
type Plane struct {
	cfg  Config
	host Host
	// mu orders Add's stores and counts with a handover's scan and
	// deletes, so that pending counts what the store holds; and with
	// Close, so that nothing writes the store once Close returned.
	mu sync.Mutex
	// closed: the node is stopping and its store may be closed; Add
	// refuses (guarded by mu).
	closed     bool
	pending    atomic.Int64
	handedOver atomic.Int64
	// oldest is the At of the oldest pending hint (0: none), as of the
	// last Add or handover.
	oldest atomic.Int64
}

// New returns the plane, counting the hints the store holds.
func New(cfg Config, host Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plane{cfg: cfg, host: host}
	n, oldest := int64(0), int64(0)
	if err := host.Store().Hints(func(h store.Hint) bool {
		n++
		if oldest == 0 || h.At < oldest {
			oldest = h.At
		}
		return true
	}); err != nil {
		return nil, err
	}
	p.pending.Store(n)
	p.oldest.Store(oldest)
	return p, nil
}

// Add durably stores hints for specs, enqueued with w: synced when it
// returns, so the enqueue may be answered "hinted".
func (p *Plane) Add(specs []*task.Spec, w int) error {
	now := clock.UnixMilli(p.cfg.Clock)
	hs := make([]store.Hint, len(specs))
	for i, sp := range specs {
		if len(sp.Deps) > 0 {
			return fmt.Errorf("%w: task %s has deps: it cannot be hinted", task.ErrInvalid, sp.ID)
		}
		hs[i] = store.Hint{Spec: sp, W: w, At: now}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w: hints: %w", wire.ErrUnavailable, wire.ErrShuttingDown)
	}
	if err := p.host.Store().PutHints(hs); err != nil {
		return err
	}
	p.pending.Add(int64(len(hs)))
	p.oldest.CompareAndSwap(0, now)
	p.cfg.Log.Info("hints kept: their cohort is out of reach of the node that took their enqueue", "tasks", len(hs), "first", hs[0].Spec.ID)
	return nil
}

// ServePut keeps r's tasks as hints (wire.OpHintPut): hints a
// coordinator spread to other nodes when its direct write of tasks
// without key or deps was left in doubt (node/coord's spread). It takes
// only what a coordinator may spread: tasks without key or deps (a keyed hint is handed over by
// the node that took its enqueue alone, which the key's leader checks),
// each with an id and a queue.
func (p *Plane) ServePut(r *wire.HintPutRequest) error {
	if len(r.Specs) == 0 || r.W < 0 {
		return fmt.Errorf("%w: hint put: %d tasks, w=%d", task.ErrInvalid, len(r.Specs), r.W)
	}
	for i, sp := range r.Specs {
		switch {
		case sp == nil || sp.ID.IsZero():
			return fmt.Errorf("%w: hint put: task %d of %d has no id", task.ErrInvalid, i+1, len(r.Specs))
		case sp.Key != "" || len(sp.Deps) > 0:
			return fmt.Errorf("%w: hint put: task %s has a key or deps", task.ErrInvalid, sp.ID)
		}
		if err := task.ValidateQueue(sp.Queue); err != nil {
			return fmt.Errorf("hint put: task %s: %w", sp.ID, err)
		}
	}
	return p.Add(r.Specs, r.W)
}

// Close makes Add refuse from now on, once an Add under way is done:
// the node closes its store next, which a request still on its way (an
// enqueue that was waiting for its replicas) must not write then.
func (p *Plane) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// handOverWarnEvery bounds how often the loop logs a failed handover at
// Warn (the rest at Debug): a hint that cannot be handed over is an
// acknowledged enqueue waiting, which an operator must be able to see
// without a log line every Interval.
const handOverWarnEvery = time.Minute

// Loop hands hints over every Interval until ctx ends.
func (p *Plane) Loop(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.pending.Load() == 0 {
			continue
		}
		err := p.HandOver(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case time.Since(warned) >= handOverWarnEvery:
			warned = time.Now()
			p.cfg.Log.Warn("hints not handed over yet; retrying", "pending", p.pending.Load(), "err", err)
		default:
			p.cfg.Log.Debug("hints not handed over yet; retrying", "pending", p.pending.Load(), "err", err)
		}
	}
}

// HandOver hands every hint whose cohort can be reached to it, a
// partition at a time, and deletes those W replicas acknowledged.
func (p *Plane) HandOver(ctx context.Context) error {
	type group struct {
		part uint16
		w    int
	}
	byPart := map[group][]store.Hint{}
	var order []group
	oldest, total := int64(0), int64(0)
	p.mu.Lock()
	err := p.host.Store().Hints(func(h store.Hint) bool {
		total++
		g := group{ring.PartitionOf(h.Spec.ID[:], p.cfg.Partitions), h.W}
		if _, ok := byPart[g]; !ok {
			order = append(order, g)
		}
		byPart[g] = append(byPart[g], h)
		if oldest == 0 || h.At < oldest {
			oldest = h.At
		}
		return true
	})
	if err == nil {
		p.pending.Store(total)
		p.oldest.Store(oldest)
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range order {
		hs := byPart[g]
		if !p.host.Placeable(g.part, g.w) {
			continue
		}
		for len(hs) > 0 {
			n := min(len(hs), handOverBatch)
			cohortFailed, err := p.handOver(ctx, g.part, g.w, hs[:n])
			if err != nil {
				errs = append(errs, fmt.Errorf("partition %d: %w", g.part, err))
			}
			if cohortFailed {
				break // the next batch would fail the same way
			}
			hs = hs[n:]
		}
	}
	return errors.Join(errs...)
}

// handOver writes hs, hints of part enqueued with w, to the cohort and
// deletes each once W replicas hold it: the hints without key directly,
// in one write, then each keyed one through its key's leader, on its
// own. One hint that cannot be handed over keeps no other from it (the
// 30-minute fault run on bb729d4 lost two acknowledged hinted enqueues
// that waited, until the end, behind a keyed hint of their partition
// whose handover kept failing). cohortFailed says the direct write
// failed: the cohort did not take it.
func (p *Plane) handOver(ctx context.Context, part uint16, w int, hs []store.Hint) (cohortFailed bool, err error) {
	var recs []task.Record
	var plain []task.ID
	var keyed []*task.Spec
	for _, h := range hs {
		if h.Spec.Key != "" {
			keyed = append(keyed, h.Spec)
		} else {
			recs = append(recs, task.Record{ID: h.Spec.ID, Spec: h.Spec})
			plain = append(plain, h.Spec.ID)
		}
	}
	var errs []error
	if len(recs) > 0 {
		if err := p.writeDirect(ctx, part, w, recs); err != nil {
			return true, err
		}
		if err := p.handed(part, plain); err != nil {
			return false, err
		}
	}
	for _, sp := range keyed {
		if err := p.host.HandOverKeyed(ctx, w, []*task.Spec{sp}); err != nil {
			errs = append(errs, fmt.Errorf("keyed task %s: %w", sp.ID, err))
			continue
		}
		if err := p.handed(part, []task.ID{sp.ID}); err != nil {
			return false, err
		}
	}
	return false, errors.Join(errs...)
}

// handed deletes the hints of ids, of part, which W replicas hold now.
func (p *Plane) handed(part uint16, ids []task.ID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.host.Store().DeleteHints(ids); err != nil {
		return err
	}
	p.pending.Add(-int64(len(ids)))
	p.handedOver.Add(int64(len(ids)))
	p.cfg.Log.Info("hints handed over", "partition", part, "tasks", len(ids))
	return nil
}

// writeDirect writes recs, specs of hinted tasks of part without key,
// to its cohort (replication.Plane.ShipNew) and waits for W of it.
func (p *Plane) writeDirect(ctx context.Context, part uint16, w int, recs []task.Record) error {
	repl := p.host.Replication()
	s := repl.ShipNew(part, repl.NeedAcks(part, w), recs)
	var local partition.Durable
	if s.Held() {
		var err error
		if local, err = p.host.Replica(part).EnqueueDirect(slices.Clone(recs), clock.UnixMilli(p.cfg.Clock)); err != nil {
			return fmt.Errorf("%w: this replica: %v", wire.ErrUnavailable, err)
		}
	}
	_, err := s.Finish(ctx, local)
	return err
}

// Stats are the plane's figures: hints pending, handed over since
// start, and the age of the oldest pending one.
type Stats struct {
	Pending, Handed int64
	OldestAt        int64 // Unix ms; 0: none pending
}

// Stats returns the plane's figures.
func (p *Plane) Stats() Stats {
	st := Stats{Pending: p.pending.Load(), Handed: p.handedOver.Load(), OldestAt: p.oldest.Load()}
	if st.Pending == 0 {
		st.OldestAt = 0
	}
	return st
}

// List returns up to limit pending hints, in id order, as their task
// views would show them.
func (p *Plane) List(limit int) ([]store.Hint, error) {
	var out []store.Hint
	err := p.host.Store().Hints(func(h store.Hint) bool {
		out = append(out, h)
		return len(out) < limit
	})
	return out, err
}
