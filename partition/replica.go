package partition

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/internal/invariant"

	"github.com/google/btree"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// ErrNotLeader is returned by a claim on a replica that does not lead its
// partition (or was superseded by a promise to a higher epoch).
var ErrNotLeader = errors.New("not the partition leader")

// ErrCopyChanged: a zombie's copy changed after its leader was asked to
// gather it; the release waits for a gather of the copy as it is now.
var ErrCopyChanged = errors.New("the copy changed since the release was asked")

// Config configures a Replica.
type Config struct {
	// Part is the partition number; Partitions is P, the cluster's count.
	Part       uint16
	Partitions int
	// Self is this node's id: a promise to another candidate at a higher
	// epoch makes the replica step down.
	Self  uint64
	Store *store.Store
	// SkewBound is added to a claim's end before the leader treats it as
	// expired (docs/design.md, "Partition leaders").
	SkewBound time.Duration
	// RetryBase and RetryMax shape the backoff of a failed task whose
	// client gave no retry-after: RetryBase·2^(attempts-1), at most
	// RetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration
	Logger    *slog.Logger
	// OnHead is called with the replica's lock held whenever queue's best
	// ready task changes while the replica leads (ok=false: the queue has
	// none). It must not block or call into the replica.
	OnHead func(part uint16, queue string, head Head, ok bool)
	// OnMove is called with the replica's lock held whenever a task of
	// queue moves to another status while the replica leads, for the
	// node's counters (each move is counted once, by the leader that made
	// or learned of it). It must not block or call into the replica.
	OnMove func(queue string, to task.Status)
	// OnClaimEnd is called when a claim of a task of queue ends by a fail
	// (expired false) or because its lease ran out (expired true) while
	// the replica leads, for the node's counters; with or without the
	// replica's lock held. It must not block or call into the replica.
	OnClaimEnd func(queue string, expired bool)
	// OnTimer is called with the replica's lock held whenever a timer is
	// set, with its due time, so the caller can run Tick on time. It must
	// not block or call into the replica.
	OnTimer func(due int64)
	// TreeShape is the shape of the replica's anti-entropy hash tree; the
	// zero Shape means antientropy.DefaultConfig().Shape. Every replica of
	// a cluster must use the same shape (peers refuse to compare others).
	// It must be valid (antientropy.Shape.Validate): Load fails otherwise.
	TreeShape antientropy.Shape
	// Fresh is the memory for the full specs of ready tasks this replica
	// enqueued while leading and has not granted yet (see freshSpecs),
	// shared with the node's other replicas; nil keeps none, and every
	// claim reads its spec from the store.
	Fresh *FreshBudget
}

// Replica is one partition's replica on this node. Safe for concurrent use.
type Replica struct {
	cfg  Config
	skew int64 // SkewBound in ms
	log  *slog.Logger

	// mu guards the fields below and orders every write of the partition.
	mu     sync.Mutex
	tasks  map[task.ID]*entry
	queues map[string]*queueIndex
	timers *btree.BTreeG[timerItem]
	// groups and labelled are the label indexes (labels.go): each group
	// by name, and the labels of each task that has one.
	groups   map[string]*labelIndex
	labelled map[task.ID]taskLabels
	// keys indexes the tasks with a unique key (keys.go): queue and key
	// to their ids, sorted.
	keys map[string][]task.ID
	// keyConflicts are the keys of keys with more than one task, for the
	// leader to settle (DuplicateKeys).
	keyConflicts map[string]struct{}
	promised     uint64 // highest epoch promised
	promTo       uint64 // candidate it was promised to
	epoch        uint64 // epoch this replica leads at; 0 when not leading
	// ids holds every id whose spec is stored, so a new task's write
	// need not read the store to learn it is new (see idFilter).
	ids *idFilter
	// maxOwn is the highest id in the partition that this node issued
	// (its node field is Self), found by Load.
	maxOwn task.ID
	// tree is the anti-entropy hash tree of the partition's records (see
	// digest.go for the items). INVARIANT: it equals the XOR of the items
	// of the records this partition holds in the store. Every write of
	// task data updates it after its batch applied and before r.mu is
	// released (treeDelta), Load rebuilds it, Release empties it; so any
	// store snapshot taken under r.mu holds exactly the records the tree
	// sums. The pointer is set by New and never changes.
	tree *antientropy.Tree
	// treeErr is New's error for an invalid Config.TreeShape (tree is
	// nil); Load returns it.
	treeErr error
	// tombFloor is the highest horizon ExpireTombs expired tombstones
	// to: Merge does not write a tombstone older than it (see gc.go).
	tombFloor int64

	// leading mirrors epoch for readers that must not wait for mu (a
	// request asking whether this node leads): written only with mu held,
	// together with epoch, so the two are always equal.
	leading atomic.Uint64

	// fresh caches the specs of fresh ready tasks for the claims that
	// grant them; empty whenever epoch is 0.
	fresh freshSpecs
}

// New returns an empty replica; call Load before use.
func New(cfg Config) *Replica {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnHead == nil {
		cfg.OnHead = func(uint16, string, Head, bool) {}
	}
	if cfg.OnTimer == nil {
		cfg.OnTimer = func(int64) {}
	}
	if cfg.OnMove == nil {
		cfg.OnMove = func(string, task.Status) {}
	}
	if cfg.OnClaimEnd == nil {
		cfg.OnClaimEnd = func(string, bool) {}
	}
	if cfg.TreeShape == (antientropy.Shape{}) {
		cfg.TreeShape = antientropy.DefaultConfig().Shape
	}
	r := &Replica{
		cfg:   cfg,
		skew:  cfg.SkewBound.Milliseconds(),
		log:   cfg.Logger.With("partition", cfg.Part),
		ids:   newIDFilter(),
		fresh: freshSpecs{budget: cfg.Fresh},
	}
	r.resetIndexesLocked()
	if r.tree, r.treeErr = antientropy.NewTree(cfg.TreeShape); r.treeErr != nil {
		r.treeErr = fmt.Errorf("partition %d: tree shape: %w", cfg.Part, r.treeErr)
	}
	return r
}

// Part returns the partition number.
func (r *Replica) Part() uint16 { return r.cfg.Part }

// Load rebuilds the indexes and the hash tree from the store. It must be
// called once, before any other method.
//
// It reads every record of the partition whole (store.ExportPartition: one
// pass over the specs, small payloads inline, states, updates and edges,
// and a lookup per large payload) and hashes it, so its cost follows the
// partition's bytes, payloads included: the tree is not persisted, so it
// can never disagree with the store after a crash.
func (r *Replica) Load(now int64) error {
	if r.treeErr != nil {
		return r.treeErr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, to, err := r.cfg.Store.Promise(r.cfg.Part)
	if err != nil {
		return fmt.Errorf("partition %d: load promise: %w", r.cfg.Part, err)
	}
	r.promised, r.promTo = p, to
	r.tree.Reset()
	err = r.cfg.Store.ExportPartition(r.cfg.Part, task.ID{}, func(t store.TaskExport) (bool, error) {
		id := t.Spec.ID
		r.tree.Add(id, exportDigest(&t))
		t.Spec.Data = nil // hashed; the indexes keep no payload
		r.insertLocked(t.Spec, &t.State, now)
		r.ids.add(id)
		if id.Node() == r.cfg.Self {
			r.maxOwn = id // the scan is in id order
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("partition %d: load: %w", r.cfg.Part, err)
	}
	// Tombstones: in the tree and the id filter, not in the indexes.
	err = r.cfg.Store.Tombs(r.cfg.Part, task.ID{}, func(id task.ID, _ int64) (bool, error) {
		r.tree.Add(id, antientropy.TombItem(id))
		r.ids.add(id)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("partition %d: load: %w", r.cfg.Part, err)
	}
	return nil
}

// MaxOwnID returns the highest id in the partition that this node issued,
// as Load found it (the zero id if none).
func (r *Replica) MaxOwnID() task.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxOwn
}

// resetIndexesLocked empties the in-memory indexes.
func (r *Replica) resetIndexesLocked() {
	r.tasks = make(map[task.ID]*entry)
	r.queues = make(map[string]*queueIndex)
	r.timers = btree.NewG(btreeDegree, timerLess)
	r.groups = make(map[string]*labelIndex)
	r.labelled = make(map[task.ID]taskLabels)
	r.keys = make(map[string][]task.ID)
	r.keyConflicts = make(map[string]struct{})
}

func (r *Replica) queueLocked(name string) *queueIndex {
	q := r.queues[name]
	if q == nil {
		q = newQueueIndex(name)
		r.queues[name] = q
	}
	return q
}

// insertLocked adds a task the indexes do not hold yet. A ready task that
// was never claimed (the common case: fresh work) gets no entry, only its
// place in the ready index, so memory per queued task is the index item;
// entryLocked materialises the entry when the task is first touched. It
// reports whether the task went in that way: untouched and ready.
func (r *Replica) insertLocked(sp *task.Spec, st *task.State, now int64) (untouched bool) {
	q := r.queueLocked(sp.Queue)
	r.labelLocked(q, sp)
	r.keyLocked(sp)
	status, due := task.Derive(sp, st, now, r.skew)
	if status.Ended() {
		r.countLocked(q, sp.ID, status, true) // an ended task holds no entry
		return false
	}
	if status == task.Ready && isZeroState(st) {
		r.countLocked(q, sp.ID, task.Ready, true)
		r.pushReadyLocked(q, Head{sp.Priority, sp.ID})
		return true
	}
	e := &entry{
		q:           q,
		priority:    sp.Priority,
		pendingDeps: uint16(st.DepsPending(sp)),
		attempts:    st.Attempts(status == task.Claimed),
		maxAttempts: sp.MaxAttempts,
		stored:      !isZeroState(st),
	}
	r.tasks[sp.ID] = e
	e.status = status
	r.countLocked(q, sp.ID, status, true)
	r.placeLocked(sp.ID, e, due)
	return false
}

// reopenLocked indexes task sp, counted as was (completed or cancelled),
// under st, a state that is not ended: a completion or cancel that no
// handoff carried (an orphan) was replaced. An ended task holds no entry,
// so it is inserted afresh.
func (r *Replica) reopenLocked(sp *task.Spec, was task.Status, st *task.State, now int64) {
	r.countLocked(r.queueLocked(sp.Queue), sp.ID, was, false)
	r.log.Warn("an end no majority acknowledged was replaced: the task is open again", "task", sp.ID, "was", was)
	r.insertLocked(sp, st, now)
}

// entryLocked returns the entry of task sp, materialising one for a ready
// task indexed without an entry; nil for a completed or unknown task.
func (r *Replica) entryLocked(sp *task.Spec) *entry {
	if e := r.tasks[sp.ID]; e != nil {
		return e
	}
	q := r.queues[sp.Queue]
	if q == nil || !q.ready.Has(Head{sp.Priority, sp.ID}) {
		return nil
	}
	e := &entry{q: q, priority: sp.Priority, status: task.Ready, maxAttempts: sp.MaxAttempts}
	r.tasks[sp.ID] = e
	return e
}

// placeLocked puts e into the ready index or the timers according to its
// status. e must be in neither.
func (r *Replica) placeLocked(id task.ID, e *entry, due int64) {
	switch e.status {
	case task.Ready:
		r.pushReadyLocked(e.q, Head{e.priority, id})
	case task.Delayed, task.Claimed:
		e.due = due
		r.timers.ReplaceOrInsert(timerItem{due, id})
		r.cfg.OnTimer(due)
	}
}

// unplaceLocked removes e from the ready index or the timers.
func (r *Replica) unplaceLocked(id task.ID, e *entry) {
	switch e.status {
	case task.Ready:
		// A reserved task is already out of the index; taking it out of
		// the ready state cancels the reservation.
		e.reserved = false
		r.popReadyLocked(e.q, Head{e.priority, id})
	case task.Delayed, task.Claimed:
		r.timers.Delete(timerItem{e.due, id})
		e.due = 0
	}
}

// setStatusLocked moves e to status (with timer due) and keeps counts and
// indexes in step.
func (r *Replica) setStatusLocked(id task.ID, e *entry, status task.Status, due int64) {
	if status != task.Claimed {
		e.hot = nil
	}
	if e.status == task.Ready && status != task.Ready {
		// A ready task leaves the fresh cache when it stops being ready.
		// A claim took its spec already; any other way (a completion or
		// claim merged in from another replica) would leave the entry
		// taking room until this replica stops leading.
		r.fresh.take(id)
	}
	r.unplaceLocked(id, e)
	r.countLocked(e.q, id, e.status, false)
	if r.epoch > 0 && e.status != status {
		r.cfg.OnMove(e.q.name, status)
	}
	e.status = status
	r.countLocked(e.q, id, status, true)
	if status.Ended() {
		delete(r.tasks, id)
		return
	}
	r.placeLocked(id, e, due)
}

// FreshBytes returns the memory this replica's fresh spec cache is charged
// for, of its share of Config.Fresh.
func (r *Replica) FreshBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fresh.bytes
}

func (r *Replica) pushReadyLocked(q *queueIndex, h Head) {
	old, had := q.head()
	q.push(h)
	if r.epoch > 0 && (!had || h.Less(old)) {
		r.cfg.OnHead(r.cfg.Part, q.name, h, true)
	}
}

func (r *Replica) popReadyLocked(q *queueIndex, h Head) {
	old, had := q.head()
	if !q.pop(h) || !had || old != h || r.epoch == 0 {
		return
	}
	nh, ok := q.head()
	r.cfg.OnHead(r.cfg.Part, q.name, nh, ok)
}

// rederiveLocked recomputes a task's state from its spec and state after a
// write and moves it in the indexes.
func (r *Replica) rederiveLocked(sp *task.Spec, st *task.State, now int64) {
	e := r.entryLocked(sp)
	if e == nil {
		// A completed task (or one being added): completions are final.
		return
	}
	status, due := task.Derive(sp, st, now, r.skew)
	e.maxAttempts = sp.MaxAttempts
	e.pendingDeps = uint16(st.DepsPending(sp))
	e.attempts = st.Attempts(status == task.Claimed)
	if status == e.status && e.due == due {
		return
	}
	r.setStatusLocked(sp.ID, e, status, due)
}

// NextDue returns when the earliest timer is due, and false if none is set.
func (r *Replica) NextDue() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	it, ok := r.timers.Min()
	return it.due, ok
}

// Tick moves tasks whose timers are due at now: delayed tasks become ready,
// expired claims become ready again (or dead after max attempts). It
// returns the queues that gained ready tasks, for waking long-polls.
func (r *Replica) Tick(now int64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var woke []string
	for {
		it, ok := r.timers.Min()
		if !ok || it.due > now {
			return woke
		}
		e := r.tasks[it.id]
		if err := invariant.Check(e != nil && e.due == it.due, r.log, "timers and entries change together", "task", it.id); err != nil {
			// Drop the stray timer rather than loop on it.
			r.timers.Delete(it)
			continue
		}
		switch e.status {
		case task.Claimed:
			if r.epoch > 0 {
				r.cfg.OnClaimEnd(e.q.name, true)
			}
			e.attempts++
			if e.maxAttempts > 0 && e.attempts >= e.maxAttempts {
				r.setStatusLocked(it.id, e, task.Dead, 0)
				continue
			}
		case task.Delayed:
		default:
			r.timers.Delete(it)
			continue
		}
		// The task's deps were complete and its not-before passed when it
		// was delayed or claimed; expiry makes it ready.
		r.setStatusLocked(it.id, e, task.Ready, 0)
		if !slices.Contains(woke, e.q.name) {
			woke = append(woke, e.q.name)
		}
	}
}

// NewTask is one task to enqueue on this replica.
type NewTask struct {
	Spec *task.Spec
	// State is the initial state: deps already known complete.
	State task.State
	// CheckExisting says the id may already be stored (a client's id, or
	// a retry): the caller must then not ship the task to the followers
	// before Enqueue has checked it. Enqueue itself checks every id
	// (cheaply, through the id filter, for a new one).
	CheckExisting bool
	// DupOf is set by Enqueue when the task's key is held by another
	// task (keys.go): that task's id; nothing was written for this one.
	DupOf task.ID
	// Hinted: a hinted enqueue of a keyed task, handed over by the node
	// that acknowledged it (wire.EnqueueTask.Hinted). If another task
	// holds its key it is written anyway, retired at once: its State
	// is then cancelled with task.RetiredKeyReason and that task's id,
	// which the caller ships as it ships any first state.
	Hinted bool
}

// Enqueue durably writes new tasks and indexes them. A task whose id exists with the same content is
// accepted again without a write (a retry); with other content it fails
// with task.ErrConflict and nothing of the batch is written. So does a task
// repeated within tasks. A task whose unique key another task holds (a
// stored one, or an earlier one of tasks) is not written: Enqueue sets
// its DupOf to the holder's id.
func (r *Replica) Enqueue(tasks []NewTask, now int64) error {
	d, err := r.EnqueueApply(tasks, now)
	if err != nil {
		return err
	}
	return d.Wait()
}

// EnqueueApply is Enqueue without the wait: it returns once the tasks are
// applied and indexed, with the Durable to wait on before acknowledging
// (after the call, outside the lock, so that callers share fsyncs).
func (r *Replica) EnqueueApply(tasks []NewTask, now int64) (Durable, error) {
	r.mu.Lock()
	b := r.cfg.Store.NewBatch()
	fresh := make([]NewTask, 0, len(tasks))
	var delta treeDelta
	// staged holds the specs this call writes, against a task repeated
	// in tasks: the store does not see the batch, and writing a spec
	// twice would add its item to the tree twice.
	var staged map[task.ID]*task.Spec
	if len(tasks) > 1 {
		staged = make(map[task.ID]*task.Spec, len(tasks))
	}
	var stagedKeys map[string]task.ID
	for i, nt := range tasks {
		dup, err := r.stagedOrExistsLocked(staged, nt)
		if err != nil {
			r.mu.Unlock()
			b.Close()
			return nil, err
		}
		if dup {
			if nt.Spec.Key == "" {
				continue
			}
			keeper, other, err := r.repeatKeeperLocked(nt.Spec, now)
			if err != nil {
				r.mu.Unlock()
				b.Close()
				return nil, fmt.Errorf("partition %d: enqueue %s: its key: %w", r.cfg.Part, nt.Spec.ID, err)
			}
			if other {
				tasks[i].DupOf = keeper
			}
			continue
		}
		if nt.Spec.Key != "" {
			holder, held, err := r.keyHolderLocked(nt.Spec, now)
			if err != nil {
				r.mu.Unlock()
				b.Close()
				return nil, fmt.Errorf("partition %d: enqueue %s: its key: %w", r.cfg.Part, nt.Spec.ID, err)
			}
			if !held {
				holder, held = stagedKeys[keyOf(nt.Spec)]
			}
			if held && nt.Hinted {
				// Written, so that the hinted enqueue's task exists,
				// but never claimable: the key stays its holder's.
				nt.State.Completion = &task.Completion{Claim: nt.State.NextClaim(), At: now, Cancelled: true,
					Reason: task.RetiredKeyReason + holder.String()}
			} else if held {
				tasks[i].DupOf = holder
				continue
			}
			if !held {
				if stagedKeys == nil {
					stagedKeys = map[string]task.ID{}
				}
				stagedKeys[keyOf(nt.Spec)] = nt.Spec.ID
			}
		}
		if !nt.State.IsZero() {
			nt.State.Stamp = r.epoch // a leader's write (see mutateApply)
			tasks[i].State = nt.State
		}
		if err := r.putNewLocked(b, nt, &delta); err != nil {
			r.mu.Unlock()
			b.Close()
			return nil, err
		}
		if staged != nil {
			staged[nt.Spec.ID] = nt.Spec
		}
		fresh = append(fresh, nt)
	}
	if b.Empty() {
		// Every task was there already: retries. What they found may not
		// be durable yet (a concurrent first attempt); wait until it is.
		r.mu.Unlock()
		b.Close()
		return barrier{r.cfg.Store}, nil
	}
	p, err := b.Apply()
	if err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("partition %d: enqueue: %w", r.cfg.Part, err)
	}
	r.applyTreeLocked(delta)
	for i := range fresh {
		if _, ok := r.tasks[fresh[i].Spec.ID]; !ok {
			// A leader's fresh ready task is what its next claims take.
			if r.insertLocked(fresh[i].Spec, &fresh[i].State, now) && r.epoch > 0 {
				r.fresh.add(fresh[i].Spec)
			}
		}
	}
	r.mu.Unlock()
	return p, nil
}

// EnqueueDirect takes an enqueue's new tasks as their coordinator wrote
// them to this replica, whether it leads the partition or not (see
// wire.ReplicateItem.Direct): each record is a spec alone, of a task
// without key or deps (whose checks need the leader), and is written as
// Enqueue writes it: a task held with the same content is a repeat, one
// held with other content refuses the whole call (task.ErrConflict), and
// nothing of a refused call is written. No epoch is checked: a spec is a
// grow-only fact, and a leader that lacks the task takes it from here
// (anti-entropy, or a read on a miss) with its own line of writes.
func (r *Replica) EnqueueDirect(recs []task.Record, now int64) (Durable, error) {
	tasks := make([]NewTask, len(recs))
	for i := range recs {
		rec := &recs[i]
		if err := r.checkRecord(rec); err != nil {
			return nil, err
		}
		switch {
		case rec.Spec == nil || rec.State != nil || len(rec.Updates) > 0 || len(rec.Dependents) > 0 || rec.Tomb != 0 || rec.Meta != nil:
			return nil, fmt.Errorf("%w: direct enqueue of %s: a record must be a spec alone", task.ErrInvalid, rec.ID)
		case rec.Spec.Key != "" || len(rec.Spec.Deps) > 0:
			return nil, fmt.Errorf("%w: direct enqueue of %s: a task with a key or deps is enqueued through its leader", task.ErrInvalid, rec.ID)
		}
		if err := checkSpec(rec.Spec); err != nil {
			return nil, err
		}
		tasks[i] = NewTask{Spec: rec.Spec, CheckExisting: true}
	}
	return r.EnqueueApply(tasks, now)
}

// stagedOrExistsLocked reports whether nt's task is already written, by
// this call (staged) or before (the store): a retry, which writes nothing.
// Other content under its id is a conflict. Ids the node issued skip the
// store read (the id filter knows them to be new) unless the filter has a
// false positive; they are checked anyway, as writing a held spec again
// would corrupt the indexes and the tree.
func (r *Replica) stagedOrExistsLocked(staged map[task.ID]*task.Spec, nt NewTask) (bool, error) {
	if prev, ok := staged[nt.Spec.ID]; ok {
		if !SameTask(prev, nt.Spec) {
			return false, fmt.Errorf("%w: id %s is used by two tasks of one enqueue", task.ErrConflict, nt.Spec.ID)
		}
		return true, nil
	}
	return r.existsLocked(nt.Spec)
}

// putNewLocked stages a new task's writes in b and their tree items in
// delta: the spec item, and the state item of an initial state.
func (r *Replica) putNewLocked(b *store.Batch, nt NewTask, delta *treeDelta) error {
	if err := b.PutSpec(r.cfg.Part, nt.Spec); err != nil {
		return err
	}
	r.ids.add(nt.Spec.ID)
	delta.add(nt.Spec.ID, specDigest(nt.Spec))
	if !nt.State.IsZero() {
		if err := b.PutState(r.cfg.Part, nt.Spec.ID, &nt.State); err != nil {
			return err
		}
		delta.add(nt.Spec.ID, stateDigest(nt.Spec.ID, &nt.State))
	}
	// The reverse edges of its deps go to the deps' partitions, written by
	// their leaders: AddDependents.
	return nil
}

// existsLocked reports whether sp's id is already stored with the same
// content; other content under the same id is a conflict.
func (r *Replica) existsLocked(sp *task.Spec) (bool, error) {
	if !r.ids.mayHold(sp.ID) {
		return false, nil
	}
	old, err := r.cfg.Store.FullSpec(r.cfg.Part, sp.ID)
	if errors.Is(err, store.ErrNotFound) {
		// A collected task is never written again (see gc.go).
		if _, tomb, err := r.cfg.Store.Tomb(r.cfg.Part, sp.ID); err != nil || tomb {
			if err == nil {
				err = fmt.Errorf("%w: id %s was used by a task since collected", task.ErrConflict, sp.ID)
			}
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !SameTask(old, sp) {
		return false, fmt.Errorf("%w: id %s is already used by another task", task.ErrConflict, sp.ID)
	}
	return true, nil
}

// SameTask reports whether two specs describe the same task: what the
// client sent is equal (the enqueue time and not-before, which the node
// derives from its clock, may differ between a request and its retry).
func SameTask(a, b *task.Spec) bool {
	return a.ID == b.ID && a.Queue == b.Queue && a.Priority == b.Priority && slices.Equal(a.Deps, b.Deps) &&
		a.Group == b.Group && a.Description == b.Description && a.MaxAttempts == b.MaxAttempts &&
		a.TimeLimit == b.TimeLimit && a.Kind == b.Kind && a.Subtopic == b.Subtopic && a.Key == b.Key && a.UniqueFor == b.UniqueFor && string(a.Data) == string(b.Data)
}

// loadLocked reads a task's spec (without payload) and state for a
// mutation: from the hot cache of a claimed task, else from the store. The
// state returned is the caller's to modify.
func (r *Replica) loadLocked(id task.ID) (*task.Spec, task.State, error) {
	e := r.tasks[id]
	if e != nil && e.hot != nil {
		return e.hot.spec, e.hot.st.Clone(), nil
	}
	sp, err := r.cfg.Store.Spec(r.cfg.Part, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, task.State{}, fmt.Errorf("%w: %s", task.ErrNotFound, id)
	}
	if err != nil {
		return nil, task.State{}, err
	}
	if e == nil {
		// A task in the ready index without an entry has no state record
		// (insertLocked gives every other task an entry): no lookup. This
		// is a follower merging the first claim of a task.
		if q := r.queues[sp.Queue]; q != nil && q.ready.Has(Head{sp.Priority, id}) {
			return sp, task.State{}, nil
		}
	}
	st, err := r.stateLocked(id, e)
	return sp, st, err
}

// untouchedReadyLocked reports whether meta, a spec without payload that
// a record carries for task id, stands for the spec this replica stores:
// the replica holds the task untouched, as an entry-less ready task of
// meta's queue at meta's priority (see insertLocked). Such a task has the
// zero state and no deps (a task with deps has a state record, or is
// blocked), so only meta's other fields are taken on trust; they are the
// leader's copy of a spec that is written once, and a replica refuses a
// record whose spec differs from the one it holds, so they are the same
// as the stored ones.
func (r *Replica) untouchedReadyLocked(id task.ID, meta *task.Spec) bool {
	if meta == nil || meta.ID != id || meta.Data != nil || len(meta.Deps) > 0 || r.tasks[id] != nil {
		return false
	}
	q := r.queues[meta.Queue]
	return q != nil && q.ready.Has(Head{meta.Priority, id})
}

// stateLocked reads a task's state record, skipping the lookup for a task
// known to have none.
func (r *Replica) stateLocked(id task.ID, e *entry) (task.State, error) {
	if e != nil && !e.stored {
		return task.State{}, nil
	}
	st, _, err := r.cfg.Store.State(r.cfg.Part, id)
	return st, err
}

// nextSeqLocked returns the length of claim idx's contiguous update
// history.
func (r *Replica) nextSeqLocked(id task.ID, idx uint32) (uint64, error) {
	e := r.tasks[id]
	var h *hotTask
	if e != nil && e.hot != nil {
		if c, ok := e.hot.st.Latest(); ok && c.Index == idx {
			h = e.hot
		}
	}
	if h != nil && h.seqKnown {
		return h.nextSeq, nil
	}
	next, err := r.cfg.Store.NextSeq(r.cfg.Part, id, idx)
	if err == nil && h != nil {
		h.nextSeq, h.seqKnown = next, true
	}
	return next, err
}

// refreshHotLocked caches (or drops) a task's spec and state after a
// state write: claimed tasks are cached, with d, the state's tree item.
func (r *Replica) refreshHotLocked(sp *task.Spec, st *task.State, d antientropy.Digest) {
	e := r.tasks[sp.ID]
	if e == nil {
		return
	}
	e.stored = true
	if e.status != task.Claimed {
		e.hot = nil
		return
	}
	h := &hotTask{spec: sp, st: st.Clone(), digest: d}
	if sp.Data != nil {
		meta := *sp
		meta.Data = nil
		h.spec = &meta
	}
	if old := e.hot; old != nil && old.seqKnown {
		oc, _ := old.st.Latest()
		nc, _ := st.Latest()
		if oc.Index == nc.Index {
			h.nextSeq, h.seqKnown = old.nextSeq, true
		}
	}
	e.hot = h
}

// writeStateLocked applies a batch holding st, the new state of a task
// whose stored state has the tree item old, replaces that item with st's,
// re-derives the task and returns the pending sync. The caller unlocks and
// then waits.
func (r *Replica) writeStateLocked(sp *task.Spec, old antientropy.Digest, st *task.State, now int64) (*store.Pending, error) {
	d := stateDigest(sp.ID, st)
	b := r.cfg.Store.NewBatch()
	if err := b.PutState(r.cfg.Part, sp.ID, st); err != nil {
		b.Close()
		return nil, err
	}
	p, err := b.Apply()
	if err != nil {
		return nil, fmt.Errorf("partition %d: write %s: %w", r.cfg.Part, sp.ID, err)
	}
	r.tree.Replace(sp.ID, old, d)
	r.reindexLocked(sp, st, d, now)
	return p, nil
}

// reindexLocked moves an indexed task after its new state st (of tree
// item d) was applied to the store, and refreshes its hot cache. Every
// state write of a task the indexes already hold goes through it.
func (r *Replica) reindexLocked(sp *task.Spec, st *task.State, d antientropy.Digest, now int64) {
	if st.Completion != nil {
		if e := r.entryLocked(sp); e != nil {
			r.setStatusLocked(sp.ID, e, st.Completion.Status(), 0)
		}
	} else {
		r.rederiveLocked(sp, st, now)
	}
	r.refreshHotLocked(sp, st, d)
}

// waited waits for an applied write: the waiting form of an ...Apply op.
func waited(w Write, err error) error {
	if err != nil {
		return err
	}
	return w.Wait()
}

// Durable is what a write returns before it is durable: Wait blocks until
// it is. It is either an applied batch or, for a repeat that wrote
// nothing, a sync barrier behind the write the repeat found.
type Durable interface{ Wait() error }

// barrier is the Durable of a repeat that wrote nothing.
type barrier struct{ s *store.Store }

func (b barrier) Wait() error { return b.s.Barrier() }

// Write is a leader's write as applied to its replica, before it is
// durable: the task's record as the write left it (its state, and the
// progress entry an update appended), which the leader ships to the
// followers while its own sync runs, and the Durable it waits on before
// acknowledging the write. Rec holds a copy: the caller may keep it.
type Write struct {
	Rec task.Record
	Durable
}

// mutateApply runs fn on the task's spec and state under the lock; if fn
// returns write=true the new state is written (applied, not yet durable),
// and the caller ships its record and waits on it before acknowledging
// it. A repeat of a write already made writes nothing; its record is the
// task's state as it is.
//
// Only the leader writes a task's state: the write is stamped with its
// epoch (see "Epochs and orphans" in the package doc).
func (r *Replica) mutateApply(id task.ID, now int64, fn func(sp *task.Spec, st *task.State) (write bool, err error)) (Write, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLeaderLocked(); err != nil {
		return Write{}, err
	}
	sp, st, err := r.loadLocked(id)
	if err != nil {
		return Write{}, err
	}
	if err := r.checkStampLocked(id, &st); err != nil {
		return Write{}, err
	}
	old := r.stateDigestLocked(id, &st) // before fn changes st
	write, err := fn(sp, &st)
	if err != nil {
		return Write{}, err
	}
	if !write {
		// A repeat of a write already made: acknowledge it only once that
		// write is durable.
		return Write{Rec: stateRecord(id, &st), Durable: barrier{r.cfg.Store}}, nil
	}
	st.Stamp = r.epoch
	p, err := r.writeStateLocked(sp, old, &st, now)
	if err != nil {
		return Write{}, err
	}
	return Write{Rec: stateRecord(id, &st), Durable: p}, nil
}

// stateRecord is task id's record of state st alone, on a copy of st.
func stateRecord(id task.ID, st *task.State) task.Record {
	c := st.Clone()
	return task.Record{ID: id, State: &c}
}

// ReleaseAt drops the replica's data: this node left the partition's
// cohort and the partition's leader, serving with the new cohort, holds
// what it held (a zombie released; docs/design.md, Topology). registry is the
// registry epoch at which the release was decided, root the replica's
// tree root (Root) when this node asked the leader: the leader gathered
// the copy as it was then. The promise stays, so the replica still
// refuses epochs it promised away. A leading replica is not released, nor
// one that promised an epoch above registry: a handoff to that epoch may
// be carrying the partition to this node and count it among the epoch's
// sealed members, which must hold the data (the carry first raises each
// member's promise to the epoch, so a carried copy is never released
// behind it). Nor is one whose root moved since the ask (ErrCopyChanged):
// a write merged meanwhile (a stale coordinator's w=1 enqueue, say) may
// be on this copy alone.
func (r *Replica) ReleaseAt(registry uint64, root antientropy.Digest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch != 0 {
		return fmt.Errorf("%w: partition %d: release while leading at epoch %d", ErrNotLeader, r.cfg.Part, r.epoch)
	}
	if r.promised > registry {
		return fmt.Errorf("%w: partition %d: release decided at registry epoch %d, but this replica promised epoch %d: a handoff may count on its copy",
			task.ErrEpoch, r.cfg.Part, registry, r.promised)
	}
	if now := r.tree.Root(); now != root {
		return fmt.Errorf("%w: partition %d: tree root %v, the leader gathered %v", ErrCopyChanged, r.cfg.Part, now, root)
	}
	if err := r.cfg.Store.DropPartition(r.cfg.Part); err != nil {
		return err
	}
	r.tree.Reset() // the store holds no record of the partition
	r.resetIndexesLocked()
	r.ids = newIDFilter()
	return nil
}
