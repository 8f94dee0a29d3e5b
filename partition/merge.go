package partition

import (
	"errors"
	"fmt"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// CompletedError is a replica's refusal of a record that carries a claim
// on a task it knows to be completed (docs/design.md, "Operations", claim). It
// wraps task.ErrCompleted and carries the completion, so the leader can
// record it and pick another task.
type CompletedError struct {
	ID         task.ID
	Claim      uint32 // the refused claim index
	Completion task.Completion
}

func (e *CompletedError) Error() string {
	return fmt.Sprintf("%v: %s was completed by claim %d at seq %d; refusing claim %d",
		task.ErrCompleted, e.ID, e.Completion.Claim, e.Completion.Seq, e.Claim)
}

// Unwrap makes errors.Is(err, task.ErrCompleted) hold.
func (e *CompletedError) Unwrap() error { return task.ErrCompleted }

// Record returns task id as the leader ships it after a local write: its
// current merged state (from the hot cache of a claimed task, else the
// store), its spec with payload if withSpec, and updates. The record is
// Full when updates are every update this replica holds of the task. It
// fails with task.ErrNotFound for an unknown task.
//
// The state is read after the write, so it may include later writes
// (and merges) too: it is a CRDT, so shipping more is harmless. A caller
// shipping a claim it just granted must not hand the claim out if
// State.Completion is set: a completion merged in after the claim was
// written, and followers accept a claim that comes with a completion.
func (r *Replica) Record(id task.ID, withSpec bool, updates ...task.Update) (task.Record, error) {
	rec := task.Record{ID: id, Updates: updates}
	if withSpec {
		// The spec is immutable: read it, with its payload, before taking
		// the lock.
		sp, err := r.cfg.Store.FullSpec(r.cfg.Part, id)
		if errors.Is(err, store.ErrNotFound) {
			return task.Record{}, fmt.Errorf("%w: %s", task.ErrNotFound, id)
		}
		if err != nil {
			return task.Record{}, fmt.Errorf("partition %d: record %s: %w", r.cfg.Part, id, err)
		}
		rec.Spec = sp
	}
	r.mu.Lock()
	var st task.State
	var err error
	switch e := r.tasks[id]; {
	case e != nil && e.hot != nil:
		st = e.hot.st.Clone()
	case e != nil || withSpec:
		// Known to exist (indexed, or its spec was just read): only the
		// state is needed.
		st, err = r.stateLocked(id, e)
	default:
		_, st, err = r.loadLocked(id)
	}
	r.mu.Unlock()
	if err != nil {
		return task.Record{}, err
	}
	rec.State = &st
	given := make(map[updateKey]bool, len(updates))
	for _, u := range updates {
		given[updateKey{id, u.Claim, u.Seq}] = true
	}
	rec.Full = true
	err = r.cfg.Store.Updates(r.cfg.Part, id, func(u task.Update) bool {
		rec.Full = given[updateKey{id, u.Claim, u.Seq}]
		return rec.Full
	})
	if err != nil {
		return task.Record{}, fmt.Errorf("partition %d: record %s: %w", r.cfg.Part, id, err)
	}
	return rec, nil
}

// Source says whom the records of a Merge come from, which decides what of
// them this replica takes: see "Epochs and orphans" in the package doc.
type Source struct {
	// Epoch is the epoch the records are merged at. A call below the
	// epoch this replica promised (or leads at) is refused whole
	// (task.ErrEpoch); one above it raises this replica's promise to it,
	// so that from then on it refuses the older epochs too. A record
	// stamped above Epoch is refused (task.ErrEpoch): its sender is
	// behind a newer leader.
	Epoch uint64
	// Authority, when not 0, says that the sender holds, of the writes
	// stamped below Authority, exactly those the handoffs carried: it is
	// the leader at Authority, or a replica the handoff to Authority
	// sealed. A state here stamped below Authority is then replaced by
	// the sender's, whatever the sender's own stamp.
	Authority uint64
	// Floor: a state stamped below it is not taken (nor its updates),
	// for the sender may hold writes of superseded leaders below it.
	Floor uint64
	// From is the sending node's id (0: not known), kept with a promise
	// the merge raises.
	From uint64
}

// Merge merges records into this replica, in one store batch, and
// indexes the result as a local write would. A record of a task this
// replica lacks must carry the spec. It returns the Durable to wait on
// (after Merge returns, outside the lock) before acknowledging, and one
// error per record (nil if all were merged): a record refused is not
// written at all, and does not stop the others.
//
// What a record's state and updates do here follows src and the stamps
// (task.State.Stamp; see "Epochs and orphans"): a state stamped below
// src.Floor is left out; with src.Authority above this replica's stamp,
// or a stamp above this replica's, the record's state and updates
// replace this replica's; with equal stamps they are joined (the CRDT
// merge); a record stamped below this replica's is left out. Specs,
// reverse edges and tombstones are grow-only and always merged.
//
// A call at an epoch below the one this replica promised (or leads at)
// fails with task.ErrEpoch and writes nothing: a leader of an older epoch
// is cut off, so once a majority promised a newer epoch it can no longer
// get a claim acknowledged.
//
// Per-record refusals: task.ErrInvalid (malformed, or not of this
// partition), task.ErrNotFound (unknown task and no spec, or a state to
// take in place of a non-zero one here without the whole update set:
// resend the whole record), task.ErrConflict (another spec under the id,
// or other data under an update key of a joined record), task.ErrEpoch
// (a record stamped above src.Epoch), and a *CompletedError for a new
// claim on a task this replica knows to be completed.
func (r *Replica) Merge(src Source, recs []task.Record, now int64) (Durable, []error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A replica that leads at an epoch it never promised (see Promise)
	// fences by that epoch too.
	if fence := max(r.promised, r.epoch); src.Epoch < fence {
		return nil, nil, fmt.Errorf("%w: partition %d: merge at epoch %d, promised %d, leading at %d", task.ErrEpoch, r.cfg.Part, src.Epoch, r.promised, r.epoch)
	}
	m := &merger{
		r:     r,
		src:   src,
		b:     r.cfg.Store.NewBatch(),
		tasks: make(map[task.ID]*merging),
		ups:   make(map[updateKey][]byte),
		edges: make(map[edgeKey]bool),
		tombs: make(map[task.ID]int64),
	}
	// Records at an epoch above the promise are as good as a promise to
	// their sender: the replica keeps refusing older epochs from now on,
	// so a superseded leader cannot slip a write in after a newer one's
	// (Promise's rule, made durable with the records).
	raise := src.Epoch > max(r.promised, r.epoch)
	if raise {
		if err := m.b.PutPromise(r.cfg.Part, src.Epoch, src.From); err != nil {
			m.b.Close()
			return nil, nil, err
		}
	}
	var errs []error
	merged := 0
	// Tombstones first: a record of an id that a tombstone of this call
	// collects is then a no-op, as if the tombstone had been merged before.
	for _, tombs := range []bool{true, false} {
		for i := range recs {
			if (recs[i].Tomb != 0) != tombs {
				continue
			}
			refused, err := m.merge(&recs[i])
			if err != nil {
				m.b.Close()
				return nil, nil, fmt.Errorf("partition %d: merge %s: %w", r.cfg.Part, recs[i].ID, err)
			}
			if refused == nil {
				merged++
				continue
			}
			if errs == nil {
				errs = make([]error, len(recs))
			}
			errs[i] = refused
		}
	}
	d, err := m.apply(now, merged > 0)
	if err != nil {
		return nil, nil, err
	}
	if raise {
		r.promised, r.promTo = src.Epoch, src.From
		if r.epoch > 0 && r.epoch < src.Epoch && src.From != r.cfg.Self {
			r.log.Info("stepping down: records of a newer epoch arrived", "epoch", r.epoch, "newer", src.Epoch, "from", src.From)
			r.unpublishLocked()
		}
	}
	return d, errs, nil
}

// merge stages one record: a tombstone or a task's data.
func (m *merger) merge(rec *task.Record) (refused, err error) {
	if err := m.r.checkRecord(rec); err != nil {
		return err, nil
	}
	if rec.Tomb != 0 {
		return nil, m.tomb(rec)
	}
	return m.record(rec)
}

// merger is one Merge call: the batch it fills and the tasks it touched.
// Reads go to the store, which does not see the batch yet, so a task
// touched twice in one call is read from tasks the second time, and the
// update keys and edges staged are kept to be known as held.
//
// Every write staged adds its tree items to delta: the spec item of a new
// task, the item of each new update key and each new edge, and (in apply)
// the replacement of each written state's item. apply applies delta once
// the batch applied.
type merger struct {
	r     *Replica
	src   Source
	b     *store.Batch
	tasks map[task.ID]*merging
	order []task.ID            // tasks in the order first touched
	ups   map[updateKey][]byte // updates put in b
	edges map[edgeKey]bool     // edges put in b
	delta treeDelta
	// tombs are the tombstones put in b, by id, with their time;
	// dropped the tasks they collected, to take out of the indexes.
	tombs   map[task.ID]int64
	dropped []collected
}

// merging is a task as the store holds it plus the records merged so far.
type merging struct {
	sp     *task.Spec // without payload
	full   *task.Spec // with payload, for a task new in this call
	st     task.State
	stored task.State // the state in the store before this call (zero if new)
	isNew  bool       // not in the store before this call: inserted, not reindexed
	dirty  bool       // st differs from the stored state
	// specChanged: the spec was replaced (replaceSpec): the indexes
	// re-derive the task (its not-before may have moved).
	specChanged bool
	ups         bool // gained updates: the hot cache's next seq may be stale
}

type updateKey struct {
	id    task.ID
	claim uint32
	seq   uint64
}

// edgeKey is a reverse edge: dependent waits on dep.
type edgeKey struct{ dep, dependent task.ID }

// record stages rec's writes in the batch. refused is the record's
// refusal (nothing of it staged); err is a store failure that aborts the
// call.
func (m *merger) record(rec *task.Record) (refused, err error) {
	if _, collected := m.tombs[rec.ID]; collected {
		// A tombstone of this call collects the task: the batch deletes
		// what the store still shows, so nothing of the record may be
		// staged after it (it would bring the task back).
		return nil, nil
	}
	cur, fresh, refused, err := m.current(rec)
	if cur == nil || refused != nil || err != nil {
		return refused, err // nil, nil, nil: a collected task, not brought back
	}
	var firstSpec *task.Spec // rec's spec, to hold in place of this replica's
	if rec.Spec != nil && !fresh {
		held, refused, err := m.checkSameSpec(cur, rec.Spec)
		if refused != nil || err != nil {
			return refused, err
		}
		if specFirst(rec.Spec, held) {
			firstSpec = rec.Spec
		}
	}
	take, refused := m.decide(cur, rec)
	if refused != nil {
		return refused, nil
	}
	if take == takeJoin && rec.State != nil {
		if c, ok := claimOnCompleted(&cur.st, rec.State); ok {
			return &CompletedError{ID: rec.ID, Claim: c, Completion: *cur.st.Completion}, nil
		}
	}
	var adds []task.Update
	var drops []updateKey
	switch take {
	case takeJoin:
		if adds, refused, err = m.newUpdates(rec, cur.isNew); refused != nil || err != nil {
			return refused, err
		}
	case takeReplace:
		if adds, drops, err = m.replaceUpdates(rec, cur); err != nil {
			return nil, err
		}
	}
	edges, err := m.newEdges(rec, cur.isNew)
	if err != nil {
		return nil, err
	}

	// Accepted: stage the writes.
	if fresh {
		if err := m.putSpec(rec.Spec); err != nil {
			return nil, err
		}
	}
	if m.tasks[rec.ID] == nil {
		m.tasks[rec.ID] = cur
		m.order = append(m.order, rec.ID)
	}
	if firstSpec != nil {
		if err := m.replaceSpec(cur, firstSpec); err != nil {
			return nil, err
		}
	}
	switch take {
	case takeJoin:
		st := cur.st.Clone()
		st.Merge(rec.State)
		if !sameState(&st, &cur.st) {
			cur.st, cur.dirty = st, true
		}
	case takeReplace:
		if st := rec.State.Clone(); !sameState(&st, &cur.st) {
			cur.st, cur.dirty = st, true
		}
	}
	if err := m.dropUpdates(rec.ID, cur, drops); err != nil {
		return nil, err
	}
	return nil, m.putNew(rec.ID, cur, adds, edges)
}

// current returns the task of rec as this call merges it: what an earlier
// record of the call left, else what the store holds, else (fresh) a new
// task from rec's spec. A nil task without refusal or error: the task was
// collected, and rec is acknowledged without a write.
func (m *merger) current(rec *task.Record) (cur *merging, fresh bool, refused, err error) {
	if cur := m.tasks[rec.ID]; cur != nil {
		return cur, false, nil, nil
	}
	r := m.r
	var sp *task.Spec
	var st task.State
	switch {
	case !r.ids.mayHold(rec.ID):
		// Certainly new (see idFilter): no store read, and no
		// message (this is the hot path of every replicated
		// enqueue; the error only steers the switch below).
		err = task.ErrNotFound
	case r.untouchedReadyLocked(rec.ID, rec.Meta):
		// The first claim of a task, as followers see most claims:
		// its spec is the leader's, its state the zero state.
		sp = rec.Meta
	default:
		sp, st, err = r.loadLocked(rec.ID)
	}
	if errors.Is(err, task.ErrNotFound) && r.ids.mayHold(rec.ID) {
		// A collected task is not brought back: its record is
		// acknowledged and not written. (Tombstoned ids stay in the
		// id filter, so a certainly new id needs no lookup.)
		switch tomb, terr := m.tombstoned(rec.ID); {
		case terr != nil:
			return nil, false, nil, terr
		case tomb:
			return nil, false, nil, nil
		}
	}
	switch {
	case errors.Is(err, task.ErrNotFound) && rec.Spec == nil:
		return nil, false, fmt.Errorf("%w: %s: send the record with its spec", task.ErrNotFound, rec.ID), nil
	case errors.Is(err, task.ErrNotFound):
		if err := checkSpec(rec.Spec); err != nil {
			return nil, false, err, nil
		}
		return &merging{sp: withoutData(rec.Spec), full: rec.Spec, isNew: true}, true, nil, nil
	case err != nil:
		return nil, false, nil, err
	}
	return &merging{sp: sp, st: st, stored: st}, false, nil, nil
}

// What a record's state and updates do to the replica's (see Merge).
type taking uint8

const (
	takeNone    taking = iota // leave this replica's state and updates as they are
	takeJoin                  // join the record's into this replica's (the CRDT merge)
	takeReplace               // take the record's in place of this replica's
)

// decide says what rec's state and updates do to cur's: the rules of
// "Epochs and orphans" (package doc). refused is the record's refusal.
func (m *merger) decide(cur *merging, rec *task.Record) (take taking, refused error) {
	if rec.State == nil {
		return takeNone, nil // spec, edges or meta only
	}
	in, here := rec.State.Stamp, cur.st.Stamp
	src := m.src
	switch {
	case in > src.Epoch:
		return takeNone, fmt.Errorf("%w: %s: state stamped by epoch %d, above the sender's %d", task.ErrEpoch, rec.ID, in, src.Epoch)
	case in < src.Floor:
		return takeNone, nil
	case src.Authority > 0 && here < src.Authority, in > here:
		// The record's line of writes supersedes this replica's: its
		// updates replace this replica's, and from then on this replica
		// holds the line, which the next handoff may take from it as
		// the whole of the line's updates. So the record must hold all
		// of them (Full), unless its line can have none: its state has
		// no claim (every update belongs to a claim) and this replica
		// holds none to drop (a zero state). A partial record with
		// claims taken into a zero state left a replica holding an
		// epoch's state with only the updates of the write that
		// carried it; a handoff then took that state from it and the
		// earlier claims' acknowledged updates were dropped on every
		// replica (the simulation's seed 300649).
		if !rec.Full && (!cur.st.IsZero() || len(rec.State.Claims) > 0) {
			return takeNone, fmt.Errorf("%w: %s: the state stamped %d replaces one stamped %d: send the whole record", task.ErrNotFound, rec.ID, in, here)
		}
		return takeReplace, nil
	case in == here:
		return takeJoin, nil
	}
	return takeNone, nil // an older line of writes than this replica's
}

// replaceUpdates returns the updates of rec (a whole record, or one for a
// task holding none here) this replica lacks or holds with other data
// (adds), and the update keys it holds that rec lacks or holds with other
// data (drops): taking the record in place of this replica's task makes
// its update set rec's.
func (m *merger) replaceUpdates(rec *task.Record, cur *merging) (adds []task.Update, drops []updateKey, err error) {
	want := make(map[updateKey][]byte, len(rec.Updates))
	for _, u := range rec.Updates {
		want[updateKey{rec.ID, u.Claim, u.Seq}] = u.Data
	}
	held := make(map[updateKey][]byte)
	if !cur.isNew {
		err = m.r.cfg.Store.Updates(m.r.cfg.Part, rec.ID, func(u task.Update) bool {
			held[updateKey{rec.ID, u.Claim, u.Seq}] = u.Data
			return true
		})
		if err != nil {
			return nil, nil, err
		}
	}
	for k, v := range m.ups { // staged by this call, not in the store yet
		if k.id == rec.ID {
			held[k] = v
		}
	}
	for k, v := range held {
		if w, ok := want[k]; !ok || string(w) != string(v) {
			drops = append(drops, k)
		}
	}
	for _, u := range rec.Updates {
		k := updateKey{rec.ID, u.Claim, u.Seq}
		if v, ok := held[k]; ok && string(v) == string(u.Data) {
			continue
		}
		if _, dup := want[k]; !dup {
			continue // a key repeated within rec: taken once
		}
		delete(want, k)
		adds = append(adds, u)
	}
	return adds, drops, nil
}

// dropUpdates stages the removal of update keys this replica holds for
// task id, with their tree items.
func (m *merger) dropUpdates(id task.ID, cur *merging, drops []updateKey) error {
	part := m.r.cfg.Part
	for _, k := range drops {
		old, staged := m.ups[k]
		if !staged {
			v, err := m.r.cfg.Store.Update(part, id, k.claim, k.seq)
			if err != nil {
				return err
			}
			old = v
		}
		if err := m.b.DeleteUpdate(part, id, k.claim, k.seq); err != nil {
			return err
		}
		delete(m.ups, k)
		m.delta.add(id, antientropy.UpdateItem(id, k.claim, k.seq, old)) // XOR: the item goes
		cur.ups = true
	}
	return nil
}

// putNew stages the update keys and the edges of task id that this
// replica lacks (see newUpdates and newEdges), with their tree items.
func (m *merger) putNew(id task.ID, cur *merging, ups []task.Update, dependents []task.ID) error {
	part := m.r.cfg.Part
	for _, u := range ups {
		if err := m.b.PutUpdate(part, id, u.Claim, u.Seq, u.Data); err != nil {
			return err
		}
		m.ups[updateKey{id, u.Claim, u.Seq}] = u.Data
		m.delta.add(id, antientropy.UpdateItem(id, u.Claim, u.Seq, u.Data))
		cur.ups = true
	}
	for _, d := range dependents {
		if err := m.b.PutEdge(part, id, d); err != nil {
			return err
		}
		m.edges[edgeKey{id, d}] = true
		m.delta.add(id, antientropy.EdgeItem(id, d))
	}
	return nil
}

// newEdges returns rec's dependents that this replica does not hold as
// edges yet, neither in the store nor staged by this call. Writing a held
// edge again would be harmless to the store but would add its item to
// the tree a second time. A task new in this call has no stored edge.
func (m *merger) newEdges(rec *task.Record, isNew bool) ([]task.ID, error) {
	if len(rec.Dependents) == 0 {
		return nil, nil
	}
	return m.r.newEdgesLocked(rec.ID, rec.Dependents, m.edges, !isNew)
}

// checkSameSpec refuses sp, the spec a record carries for a task cur that
// is already held, unless it describes the same task (see SameTask; the
// payload included): a task's spec is never replaced by another task's.
// It returns the spec held.
func (m *merger) checkSameSpec(cur *merging, sp *task.Spec) (held *task.Spec, refused, err error) {
	held = cur.full
	if held == nil {
		// Specs are sent only to replicas thought to lack the task, so
		// this read of the payload is off the common path.
		if held, err = m.r.cfg.Store.FullSpec(m.r.cfg.Part, sp.ID); err != nil {
			return nil, nil, err
		}
	}
	if !SameTask(held, sp) {
		return nil, fmt.Errorf("%w: id %s is already used by another task", task.ErrConflict, sp.ID), nil
	}
	return held, nil, nil
}

// replaceSpec stages sp, a spec of cur's task that comes before the one
// held (specFirst: a retried enqueue reached some replicas with other
// derived times), in place of it, with its tree item.
func (m *merger) replaceSpec(cur *merging, sp *task.Spec) error {
	held := cur.full
	if held == nil {
		var err error
		if held, err = m.r.cfg.Store.FullSpec(m.r.cfg.Part, sp.ID); err != nil {
			return err
		}
	}
	if err := m.b.PutSpec(m.r.cfg.Part, sp); err != nil {
		return err
	}
	m.delta.replace(sp.ID, specDigest(held), specDigest(sp))
	cur.sp, cur.full, cur.specChanged = withoutData(sp), sp, true
	return nil
}

// putSpec stages a new task's spec, as an enqueue writes it. (The reverse
// edges of its deps belong to the deps' partitions: see AddDependents.)
func (m *merger) putSpec(sp *task.Spec) error {
	r := m.r
	if err := m.b.PutSpec(r.cfg.Part, sp); err != nil {
		return err
	}
	r.ids.add(sp.ID)
	m.delta.add(sp.ID, specDigest(sp))
	return nil
}

// newUpdates returns rec's updates that this replica lacks. An update it
// holds with the same data is skipped (merging is idempotent, and its
// item is in the tree already); with other data the record is refused: a
// key has one value, and the one held is kept rather than silently
// replaced. A task new in this call (isNew) has no stored update to read.
func (m *merger) newUpdates(rec *task.Record, isNew bool) (adds []task.Update, refused, err error) {
	var inRec map[updateKey][]byte // rec's own keys, against duplicates within it
	if len(rec.Updates) > 1 {
		inRec = make(map[updateKey][]byte, len(rec.Updates))
	}
	for _, u := range rec.Updates {
		k := updateKey{rec.ID, u.Claim, u.Seq}
		old, have := m.ups[k]
		if !have {
			old, have = inRec[k]
		}
		if !have && !isNew {
			v, err := m.r.cfg.Store.Update(m.r.cfg.Part, rec.ID, u.Claim, u.Seq)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, nil, err
			default:
				old, have = v, true
			}
		}
		if have {
			if string(old) != string(u.Data) {
				return nil, fmt.Errorf("%w: %s: update seq %d of claim %d exists with other data", task.ErrConflict, rec.ID, u.Seq, u.Claim), nil
			}
			continue
		}
		if inRec != nil {
			inRec[k] = u.Data
		}
		adds = append(adds, u)
	}
	return adds, nil, nil
}

// apply writes the merged states, applies the batch and indexes what
// changed. It returns what the caller waits on: the batch, a barrier if
// records were accepted without a write (what they found may not be
// durable yet), or nothing if every record was refused.
func (m *merger) apply(now int64, accepted bool) (Durable, error) {
	r := m.r
	digests := make(map[task.ID]antientropy.Digest) // new state items of the dirty tasks
	for _, id := range m.order {
		if t := m.tasks[id]; t.dirty {
			if err := m.b.PutState(r.cfg.Part, id, &t.st); err != nil {
				m.b.Close()
				return nil, fmt.Errorf("partition %d: merge %s: %w", r.cfg.Part, id, err)
			}
			d := stateDigest(id, &t.st)
			digests[id] = d
			// The hot cache still holds the stored state: reindexing
			// comes after the batch.
			m.delta.replace(id, r.stateDigestLocked(id, &t.stored), d)
		}
	}
	if m.b.Empty() {
		m.b.Close()
		if accepted {
			return barrier{r.cfg.Store}, nil
		}
		return nothing{}, nil
	}
	p, err := m.b.Apply()
	if err != nil {
		return nil, fmt.Errorf("partition %d: merge: %w", r.cfg.Part, err)
	}
	r.applyTreeLocked(m.delta)
	for _, c := range m.dropped {
		r.dropIndexLocked(c.sp, &c.st)
	}
	for _, id := range m.order {
		t := m.tasks[id]
		switch {
		case t.isNew:
			r.insertLocked(t.sp, &t.st, now)
		case t.dirty && t.stored.Completion != nil && t.st.Completion == nil:
			// An orphan completion or cancel, replaced by the line of
			// writes that counts (see "Epochs and orphans"): the only way
			// a task stops being ended.
			r.reopenLocked(t.sp, t.stored.Completion.Status(), &t.st, now)
		case t.dirty && t.stored.Completion != nil && t.stored.Completion.Status() != t.st.Completion.Status():
			// One end replaced by the other (a completion by a cancel of
			// the line that counts, or back): an ended task holds no
			// entry, so only its count moves.
			q := r.queueLocked(t.sp.Queue)
			r.countLocked(q, id, t.stored.Completion.Status(), false)
			r.countLocked(q, id, t.st.Completion.Status(), true)
		case t.dirty:
			r.reindexLocked(t.sp, &t.st, digests[id], now)
		case t.specChanged:
			r.reindexLocked(t.sp, &t.st, r.stateDigestLocked(id, &t.st), now)
		}
		if t.specChanged {
			r.fresh.take(id) // a leader's cached spec is the one replaced
		}
		if t.ups {
			r.forgetNextSeqLocked(id) // the history may have grown: recount it
		}
	}
	return p, nil
}

// nothing is the Durable of a Merge that accepted no record.
type nothing struct{}

func (nothing) Wait() error { return nil }
