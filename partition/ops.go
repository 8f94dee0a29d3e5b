package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/internal/invariant"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Granted is a claim just granted, with the task it is on.
type Granted struct {
	Spec  *task.Spec // with its payload
	State task.State
	Claim task.Claim
	// Retired, when set, says that no claim was granted: another task
	// (Retired) keeps the task's unique key, so the task was retired
	// (cancelled, task.RetiredKeyReason) instead. State is the retired
	// state, to ship to the followers (Record) like a claim's.
	Retired task.ID
}

// Record is the grant's record to ship to the followers: the state, and
// the spec without its payload as Meta (a follower indexes the claim
// without reading its spec back). The task's first claim's record is
// Full: no update can exist before a task's first claim (updates belong
// to claims, and claims are never dropped), so its empty update set is
// the whole of its line's, and a follower holding the task unclaimed
// takes it without asking for the whole record (Merge).
func (g *Granted) Record() task.Record {
	st := g.State.Clone()
	meta := *g.Spec
	meta.Data = nil
	return task.Record{ID: g.Spec.ID, State: &st, Meta: &meta, Full: len(st.Claims) == 1}
}

// maxClaimRetries bounds how often ClaimBest picks again when the task it
// reserved stopped being claimable before it could claim it.
const maxClaimRetries = 8

// ClaimBest claims queue's best ready task for ttl ms, if accept (called
// with the lock held) agrees that this partition's head is the best to
// take. It returns nil when there is nothing to claim or accept declines.
// The claim is durable when ClaimBest returns. It is Reserve and
// ClaimReserved in one call, for callers that pick within one partition.
func (r *Replica) ClaimBest(queue string, now, ttl int64, accept func(Head) bool) (*Granted, error) {
	for range maxClaimRetries {
		id, ok, err := r.reserve(queue, accept)
		if err != nil || !ok {
			return nil, err
		}
		g, p, err := r.ClaimReserved(id, now, ttl)
		if err != nil {
			return nil, err
		}
		if g == nil {
			continue // no longer claimable; pick again
		}
		if err := p.Wait(); err != nil {
			return nil, err
		}
		return g, nil
	}
	return nil, fmt.Errorf("partition %d: ready index inconsistent for queue %q", r.cfg.Part, queue)
}

// Reserve takes queue's best ready task out of the ready index, so no
// other claim picks it, and returns its id; ok=false when there is none. It
// is the fast half of a claim, done while the caller holds whatever lock
// orders picks across partitions; ClaimReserved then does the store work.
// A reserved task counts as ready until it is claimed or put back.
func (r *Replica) Reserve(queue string) (id task.ID, ok bool, err error) {
	return r.reserve(queue, nil)
}

// reserve is Reserve, declining when accept (if set) rejects the head.
func (r *Replica) reserve(queue string, accept func(Head) bool) (id task.ID, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLeaderLocked(); err != nil {
		return id, false, err
	}
	q := r.queues[queue]
	if q == nil {
		return id, false, nil
	}
	h, ok := q.head()
	if !ok || accept != nil && !accept(h) {
		return id, false, nil
	}
	e := r.tasks[h.ID]
	if e == nil {
		// A fresh ready task, indexed without an entry: make one to hold
		// the reservation (ClaimReserved fills in the rest from the spec).
		e = &entry{q: q, priority: h.Priority, status: task.Ready}
		r.tasks[h.ID] = e
	}
	if err := invariant.Check(e.status == task.Ready && !e.reserved, r.log, "the ready index holds exactly the unreserved ready tasks", "task", h.ID, "status", e.status, "reserved", e.reserved); err != nil {
		// Drop the stray item rather than hand it out.
		r.popReadyLocked(q, h)
		return id, false, nil
	}
	r.popReadyLocked(q, h)
	e.reserved = true
	return h.ID, true, nil
}

// ClaimReserved claims a task Reserve returned, for ttl ms. The claim is
// applied but not yet durable: the caller must Wait on the Pending before
// acknowledging it. It returns nil (and puts the task back) if the task
// stopped being claimable since Reserve, for instance because an expired
// but not superseded claim completed it.
func (r *Replica) ClaimReserved(id task.ID, now, ttl int64) (*Granted, *store.Pending, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.fresh.take(id)
	var err error
	if sp == nil {
		// The spec is immutable: read it, with its payload, without the
		// lock, so concurrent claims of one partition overlap their
		// lookups.
		r.mu.Unlock()
		sp, err = r.cfg.Store.FullSpec(r.cfg.Part, id)
		r.mu.Lock()
	}
	e := r.tasks[id]
	if e == nil || !e.reserved {
		return nil, nil, nil // completed meanwhile; nothing to put back
	}
	e.reserved = false
	if err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, fmt.Errorf("partition %d: claim %s: %w", r.cfg.Part, id, err)
	}
	if err := r.checkLeaderLocked(); err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, err
	}
	st, err := r.stateLocked(id, e)
	if err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, err
	}
	if err := r.checkStampLocked(id, &st); err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, err
	}
	if status, _ := task.Derive(sp, &st, now, r.skew); status != task.Ready {
		r.log.Warn("reserved task no longer ready", "task", id, "state", status)
		r.unreserveLocked(id, e)
		r.rederiveLocked(sp, &st, now)
		return nil, nil, nil
	}
	old := r.stateDigestLocked(id, &st)
	if keeper, lost, err := r.keyLoserLocked(sp, now); err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, err
	} else if lost {
		// Another task keeps the key: this one is never claimed. Retire
		// it now rather than at the next reconcile round, in which both
		// would be claimable.
		if _, err := st.Cancel(now, task.RetiredKeyReason+keeper.String()); err != nil {
			r.unreserveLocked(id, e)
			return nil, nil, err
		}
		st.Stamp = r.epoch
		p, err := r.writeStateLocked(sp, old, &st, now)
		if err != nil {
			r.unreserveLocked(id, e)
			return nil, nil, err
		}
		r.log.Info("retired a task whose key another holds, instead of claiming it", "task", id, "keeper", keeper)
		return &Granted{Spec: sp, State: st, Retired: keeper}, p, nil
	}
	c := task.Claim{Index: st.NextClaim(), Start: now, Epoch: r.epoch}
	c.End = sp.LeaseEnd(c, now, ttl) // at most the time limit
	st.AddClaim(c)
	st.Stamp = r.epoch
	p, err := r.writeStateLocked(sp, old, &st, now)
	if err != nil {
		r.unreserveLocked(id, e)
		return nil, nil, err
	}
	if e.hot != nil {
		e.hot.nextSeq, e.hot.seqKnown = 0, true // a new claim has no updates yet
	}
	return &Granted{Spec: sp, State: st, Claim: c}, p, nil
}

// unreserveLocked puts a reserved-then-abandoned task back in the ready
// index if it is still ready.
func (r *Replica) unreserveLocked(id task.ID, e *entry) {
	e.reserved = false
	if e.status == task.Ready {
		r.pushReadyLocked(e.q, Head{e.priority, id})
	}
}

func (r *Replica) checkLeaderLocked() error {
	if r.epoch == 0 {
		return fmt.Errorf("%w: partition %d", ErrNotLeader, r.cfg.Part)
	}
	if r.promised > r.epoch {
		r.resignLocked()
		return fmt.Errorf("%w: partition %d promised epoch %d to node %d", ErrNotLeader, r.cfg.Part, r.promised, r.promTo)
	}
	return nil
}

// checkStampLocked refuses a leader's write to a task whose state a
// newer leader wrote: this replica merged that leader's records, so it
// promised its epoch, and leads no more (it steps down here).
func (r *Replica) checkStampLocked(id task.ID, st *task.State) error {
	if st.Stamp <= r.epoch {
		return nil
	}
	r.log.Warn("stepping down: a task holds the writes of a newer leader", "task", id, "epoch", r.epoch, "stamp", st.Stamp)
	r.unpublishLocked()
	return fmt.Errorf("%w: partition %d: %s was written at epoch %d", ErrNotLeader, r.cfg.Part, id, st.Stamp)
}

// Renew extends claim idx of task id to now+ttl, never past the claim's
// start plus its task's time limit (task.State.Renew).
func (r *Replica) Renew(id task.ID, idx uint32, now, ttl int64) (task.Claim, error) {
	c, w, err := r.RenewApply(id, idx, now, Lease{TTL: ttl})
	if err != nil {
		return c, err
	}
	return c, w.Wait()
}

// Lease is how long a renewal extends a claim: TTL ms when above 0; else
// QueueTTL of the task's queue (its default lease, as the node resolves
// it). One of them is above 0.
type Lease struct {
	TTL      int64
	QueueTTL func(queue string) int64
}

// of returns the lease in ms for a task of queue.
func (l Lease) of(queue string) int64 {
	if l.TTL > 0 || l.QueueTTL == nil {
		return l.TTL
	}
	return l.QueueTTL(queue)
}

// RenewApply is Renew without the wait (see Write).
func (r *Replica) RenewApply(id task.ID, idx uint32, now int64, lease Lease) (task.Claim, Write, error) {
	var out task.Claim
	w, err := r.mutateApply(id, now, func(sp *task.Spec, st *task.State) (bool, error) {
		ttl := lease.of(sp.Queue)
		if ttl <= 0 {
			return false, fmt.Errorf("%w: renew %s: no lease", task.ErrInvalid, id)
		}
		c, err := st.Renew(sp, idx, now, ttl)
		out = c
		return err == nil, err
	})
	return out, w, err
}

// task.Update appends progress entry seq to claim idx's history. A repeat of
// an entry with the same data succeeds without a write.
func (r *Replica) Update(id task.ID, idx uint32, seq uint64, data []byte, now int64) error {
	return waited(r.UpdateApply(id, idx, seq, data, now))
}

// UpdateApply is task.Update without the wait (see Write): its record is the
// task's state and the entry.
func (r *Replica) UpdateApply(id task.ID, idx uint32, seq uint64, data []byte, now int64) (Write, error) {
	r.mu.Lock()
	if err := r.checkLeaderLocked(); err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	sp, st, err := r.loadLocked(id)
	if err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	if err := r.checkStampLocked(id, &st); err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	next, err := r.nextSeqLocked(id, idx)
	if err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	dup, err := st.CheckUpdate(idx, seq, next)
	if err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	// A key below next is held. The key next is not, by definition of
	// next, unless the hot cache's count lags behind keys merged past a
	// gap of the history: look it up too, as a held key is never written
	// again (it keeps its first value, and its tree item would be added a
	// second time, cancelling it).
	old, err := r.cfg.Store.Update(r.cfg.Part, id, idx, seq)
	switch {
	case err == nil:
		if !dup {
			r.forgetNextSeqLocked(id) // the count lagged: recount it
		}
		rec := updateRecord(id, &st, idx, seq, data)
		r.mu.Unlock()
		if string(old) != string(data) {
			return Write{}, fmt.Errorf("%w: update seq %d of claim %d exists with other data", task.ErrConflict, seq, idx)
		}
		// The repeat is acknowledged once the original is durable.
		return Write{Rec: rec, Durable: barrier{r.cfg.Store}}, nil
	case dup || !errors.Is(err, store.ErrNotFound):
		r.mu.Unlock()
		return Write{}, err
	}
	// The key is not stored: its item is new to the tree. The first
	// write of an epoch to the task stamps its state too: the update
	// joins this leader's line of writes.
	b := r.cfg.Store.NewBatch()
	if err := b.PutUpdate(r.cfg.Part, sp.ID, idx, seq, data); err != nil {
		r.mu.Unlock()
		b.Close()
		return Write{}, err
	}
	restamp := st.Stamp != r.epoch
	var oldState antientropy.Digest
	if restamp {
		oldState = r.stateDigestLocked(id, &st)
		st.Stamp = r.epoch
		if err := b.PutState(r.cfg.Part, sp.ID, &st); err != nil {
			r.mu.Unlock()
			b.Close()
			return Write{}, err
		}
	}
	p, err := b.Apply()
	if err != nil {
		r.mu.Unlock()
		return Write{}, err
	}
	r.tree.Add(sp.ID, antientropy.UpdateItem(sp.ID, idx, seq, data))
	if restamp {
		d := stateDigest(sp.ID, &st)
		r.tree.Replace(sp.ID, oldState, d)
		r.reindexLocked(sp, &st, d, now)
	}
	if e := r.tasks[id]; e != nil && e.hot != nil && e.hot.seqKnown {
		if c, _ := e.hot.st.Latest(); c.Index == idx {
			e.hot.nextSeq = next + 1 // seq == next: the history grew by one
		}
	}
	rec := updateRecord(id, &st, idx, seq, data)
	r.mu.Unlock()
	return Write{Rec: rec, Durable: p}, nil
}

// updateRecord is task id's record of state st and one progress entry.
func updateRecord(id task.ID, st *task.State, idx uint32, seq uint64, data []byte) task.Record {
	rec := stateRecord(id, st)
	rec.Updates = []task.Update{{Claim: idx, Seq: seq, Data: data}}
	return rec
}

// forgetNextSeqLocked drops the hot cache's count of task id's contiguous
// update history, so the next use recounts it from the store.
func (r *Replica) forgetNextSeqLocked(id task.ID) {
	if e := r.tasks[id]; e != nil && e.hot != nil {
		e.hot.seqKnown = false
	}
}

// Complete completes task id under claim idx at seq (nil: the next seq of
// the claim's history). It returns newly=true when this call completed the
// task, false for a repeat of the same completion.
func (r *Replica) Complete(id task.ID, idx uint32, seq *uint64, now int64) (newly bool, err error) {
	newly, w, err := r.CompleteApply(id, idx, seq, now)
	if err != nil {
		return false, err
	}
	return newly, w.Wait()
}

// CompleteApply is Complete without the wait (see Write).
func (r *Replica) CompleteApply(id task.ID, idx uint32, seq *uint64, now int64) (newly bool, w Write, err error) {
	w, err = r.mutateApply(id, now, func(_ *task.Spec, cur *task.State) (bool, error) {
		next, err := r.nextSeqLocked(id, idx)
		if err != nil {
			return false, err
		}
		s := next
		if seq != nil {
			s = *seq
		}
		newly, err = cur.Complete(idx, s, next, now)
		return newly, err
	})
	return newly, w, err
}

// Fail ends claim idx as a failed attempt. The task is retried after
// retryAfter ms (nil: exponential backoff), or is dead after max attempts.
func (r *Replica) Fail(id task.ID, idx uint32, reason string, retryAfter *int64, now int64) error {
	return waited(r.FailApply(id, idx, reason, Retry{After: retryAfter}, now))
}

// FailApply is Fail without the wait (see Write).
func (r *Replica) FailApply(id task.ID, idx uint32, reason string, retry Retry, now int64) (Write, error) {
	var queue string
	var wrote bool
	w, err := r.mutateApply(id, now, func(sp *task.Spec, st *task.State) (bool, error) {
		queue = sp.Queue
		var wait int64
		switch {
		case retry.NoRetry:
			// Dead at once: no delay to wait out.
		case retry.After != nil:
			wait = *retry.After
		default:
			base, maxD := r.cfg.RetryBase, r.cfg.RetryMax
			if retry.Backoff != nil {
				if b, m := retry.Backoff(sp.Queue); b > 0 {
					base, maxD = b, max(m, b)
				}
			}
			// Attempts(false) already counts claim idx, the one failing now.
			wait = backoff(id, st.Attempts(false), base, maxD)
		}
		done, err := st.End(idx, task.Release{At: now, Until: now + wait, Reason: task.TrimReason(reason), NoRetry: retry.NoRetry})
		wrote = done && err == nil
		return done, err
	})
	if err == nil && wrote {
		// mutateApply wrote only as the leader (checkLeaderLocked).
		r.cfg.OnClaimEnd(queue, false)
	}
	return w, err
}

// Retry is how long a task failed by FailApply waits: not at all when
// NoRetry (the task is dead at once); After ms when set; else the backoff
// after its n-th failed attempt, base·2^(n-1) jittered (backoff) at most
// max, with Backoff's base and max for the task's queue when it gives a
// base above 0, and the replica's RetryBase and RetryMax otherwise.
type Retry struct {
	NoRetry bool
	After   *int64
	Backoff func(queue string) (base, max time.Duration)
}

// backoffJitter is the fraction by which a backoff delay is spread
// either way: tasks that failed together (a dependency was down) do not
// all come back at once.
const backoffJitter = 0.25

// backoff is the retry delay in ms of task id after its failed-th failed
// attempt: base·2^(failed-1), drawn within ±backoffJitter of it, at most
// maxD. The draw is a hash of the id and failed, not a random number, so
// that a replay (the simulation, a test) computes the same delay, and
// different tasks different ones.
func backoff(id task.ID, failed uint32, base, maxD time.Duration) int64 {
	d := base
	for i := uint32(1); i < failed && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	h := mix64(binary.BigEndian.Uint64(id[0:8]))
	h = mix64(h ^ binary.BigEndian.Uint64(id[8:16]))
	h = mix64(h ^ uint64(binary.BigEndian.Uint32(id[16:20]))<<32 ^ uint64(failed))
	u := float64(h>>11) / (1 << 53) // in [0, 1)
	d = time.Duration(float64(d) * (1 + backoffJitter*(2*u-1)))
	return max(min(d, maxD).Milliseconds(), 1)
}

// mix64 is splitmix64's finalizer: every input bit moves every output
// bit, so ids that differ in a few bits draw far apart.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Snooze ends claim idx without counting an attempt; the task is ready
// again after delay ms.
func (r *Replica) Snooze(id task.ID, idx uint32, delay, now int64) error {
	return waited(r.SnoozeApply(id, idx, delay, now))
}

// SnoozeApply is Snooze without the wait (see Write).
func (r *Replica) SnoozeApply(id task.ID, idx uint32, delay, now int64) (Write, error) {
	return r.mutateApply(id, now, func(_ *task.Spec, st *task.State) (bool, error) {
		done, err := st.End(idx, task.Release{At: now, Snooze: true, Until: now + delay})
		return done, err
	})
}

// ReleaseUnansweredApply ends claim idx of task id as a snooze that
// takes effect now, if idx is the claim granted at epoch ep: the claim a
// leader at ep granted and could not get acknowledged, which nobody
// holds (node/coord's releaseUnanswered). Any other claim under that
// index is left alone, and nothing is written: after the leader stepped
// down and led again, the index may name another leader's claim, which
// was acknowledged (the fault suite's seed 3636 on e794c6a released such
// a claim 1.1 s into its lease, and the task was claimed again while it
// was held). A claim that ended already is refused as by Snooze.
func (r *Replica) ReleaseUnansweredApply(id task.ID, idx uint32, ep uint64, now int64) (Write, error) {
	return r.mutateApply(id, now, func(_ *task.Spec, st *task.State) (bool, error) {
		if !slices.ContainsFunc(st.Claims, func(c task.Claim) bool { return c.Index == idx && c.Epoch == ep }) {
			return false, fmt.Errorf("%w: claim %d of task %s is not the one granted at epoch %d", errOtherGrant, idx, id, ep)
		}
		return st.End(idx, task.Release{At: now, Snooze: true, Until: now})
	})
}

// errOtherGrant refuses ReleaseUnansweredApply of a claim another
// leader granted.
var errOtherGrant = errors.New("not this leader's grant")

// CancelApply ends task id as cancelled (task.State.Cancel): its live
// claim, if any, is superseded, and it is never claimed again. A repeat is
// a no-op; a completed task is refused (task.ErrCompleted). Like every
// write here it is applied, not yet durable (see Write).
func (r *Replica) CancelApply(id task.ID, reason string, now int64) (Write, error) {
	return r.mutateApply(id, now, func(_ *task.Spec, st *task.State) (bool, error) {
		return st.Cancel(now, reason)
	})
}

// CancelUnderApply is CancelApply by the holder of claim idx
// (task.State.CancelUnder): refused unless idx is the latest claim, not
// ended.
func (r *Replica) CancelUnderApply(id task.ID, idx uint32, reason string, now int64) (Write, error) {
	return r.mutateApply(id, now, func(_ *task.Spec, st *task.State) (bool, error) {
		return st.CancelUnder(idx, now, reason)
	})
}

// Requeue makes a dead task ready again.
func (r *Replica) Requeue(id task.ID, now int64) error {
	return waited(r.RequeueApply(id, now))
}

// RequeueApply is Requeue without the wait (see Write).
func (r *Replica) RequeueApply(id task.ID, now int64) (Write, error) {
	return r.mutateApply(id, now, func(sp *task.Spec, st *task.State) (bool, error) {
		if status, _ := task.Derive(sp, st, now, r.skew); status != task.Dead {
			return false, fmt.Errorf("%w: %s is %s", task.ErrNotDead, id, status)
		}
		st.Requeue()
		return true, nil
	})
}

// DepDone records that dep, a dependency of task id, completed.
func (r *Replica) DepDone(id, dep task.ID, now int64) error {
	return waited(r.DepDoneApply(id, dep, now))
}

// DepDoneApply is DepDone without the wait (see Write).
func (r *Replica) DepDoneApply(id, dep task.ID, now int64) (Write, error) {
	return r.mutateApply(id, now, func(sp *task.Spec, st *task.State) (bool, error) {
		if !slices.Contains(sp.Deps, dep) {
			return false, fmt.Errorf("%w: %s does not depend on %s", task.ErrInvalid, id, dep)
		}
		if _, ok := slices.BinarySearchFunc(st.DepsDone, dep, task.ID.Compare); ok {
			return false, nil
		}
		st.AddDepDone(dep)
		return true, nil
	})
}

// Blocked returns the ids of tasks waiting on deps, for the dependency
// reconcile.
func (r *Replica) Blocked() []task.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []task.ID
	for id, e := range r.tasks {
		if e.status == task.Blocked {
			ids = append(ids, id)
		}
	}
	return ids
}

// Stats calls fn with each queue's counts by state.
// InStatus returns the ids of this replica's tasks in status, of queue
// unless it is "", in ascending order, from memory: every task that has
// not ended is an entry or, ready and never touched, an item of its
// queue's ready index. It is the index of a listing by state: it reads
// no task from the store. status must not be an ended one (completed,
// cancelled), which memory does not hold.
func (r *Replica) InStatus(status task.Status, queue string) []task.ID {
	r.mu.Lock()
	var ids []task.ID
	for id, e := range r.tasks {
		if e.status == status && (queue == "" || e.q.name == queue) {
			ids = append(ids, id)
		}
	}
	if status == task.Ready {
		add := func(q *queueIndex) {
			q.ready.Ascend(func(h Head) bool {
				if r.tasks[h.ID] == nil { // an entry's was added above
					ids = append(ids, h.ID)
				}
				return true
			})
		}
		if queue != "" {
			if q := r.queues[queue]; q != nil {
				add(q)
			}
		} else {
			for _, q := range r.queues {
				add(q)
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}

// OldestReady calls fn with each queue that has ready tasks here and
// the enqueue time (the id's, Unix ms) of its oldest. The ready index is
// ordered by priority, then id, so the oldest is the first task of one of
// its priorities: it visits one task per distinct priority.
func (r *Replica) OldestReady(fn func(queue string, at int64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, q := range r.queues {
		if id, ok := q.oldestReady(); ok {
			fn(name, id.Millis())
		}
	}
}

func (r *Replica) Stats(fn func(queue string, counts [task.NumStatus]int64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, q := range r.queues {
		fn(name, q.counts)
	}
}

// Promise is the voter side of the handoff (package epoch, step 3):
// promise epoch to candidate and persist it. From then on the replica
// refuses writes of lower epochs (Merge), and a leader here steps down.
// A replica that promised this epoch to another candidate, or a higher
// epoch, refuses with an *epoch.RefusedError naming it.
func (r *Replica) Promise(ep, candidate uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep < r.promised || ep == r.promised && r.promTo != candidate {
		return &epoch.RefusedError{Part: int(r.cfg.Part), Promised: r.promised, To: r.promTo}
	}
	if ep > r.promised {
		b := r.cfg.Store.NewBatch()
		if err := b.PutPromise(r.cfg.Part, ep, candidate); err != nil {
			b.Close()
			return err
		}
		// Waited under the lock: no claim may be written after the promise
		// is given and before it is durable.
		if err := b.Commit(); err != nil {
			return fmt.Errorf("partition %d: persist promise: %w", r.cfg.Part, err)
		}
		r.promised, r.promTo = ep, candidate
	}
	// A promise of a newer epoch ends the leadership at this one, even to
	// this node itself: in its own handoff (a move) the carry makes the
	// new epoch's sealed members hold what this leader wrote, and a write
	// acknowledged at the old epoch after the carry reached them would be
	// on no sealed member but this one, which a later handoff need not
	// consult (the seeded simulation lost such a completion, seed 1371).
	// <=: a replica may lead at an epoch it never promised to itself; a
	// promise of that epoch to another node ends its leadership too.
	if r.epoch > 0 && (r.epoch < ep || r.epoch == ep && candidate != r.cfg.Self) {
		r.resignLocked()
	}
	return nil
}

// Lead makes the replica grant claims at ep, which the caller won through
// the handoff, and publishes its queue heads.
func (r *Replica) Lead(ep uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep < r.promised || ep == r.promised && r.promTo != r.cfg.Self {
		return fmt.Errorf("%w: partition %d: lead at epoch %d, promised %d to node %d", ErrNotLeader, r.cfg.Part, ep, r.promised, r.promTo)
	}
	r.epoch = ep
	r.leading.Store(ep)
	for name, q := range r.queues {
		if h, ok := q.head(); ok {
			r.cfg.OnHead(r.cfg.Part, name, h, true)
		}
	}
	return nil
}

// Resign stops the replica from granting claims.
func (r *Replica) Resign() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch != 0 {
		r.log.Debug("resigning", "epoch", r.epoch)
	}
	r.unpublishLocked()
}

// ResignAt stops the replica from granting claims if it still leads at
// epoch ep, and reports whether it did: a leader that handed the
// partition off, or learnt of a newer epoch, steps down at once, and
// never resigns a later leadership of its own by mistake.
func (r *Replica) ResignAt(ep uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep == 0 || r.epoch != ep {
		return false
	}
	r.log.Info("stepping down", "epoch", ep)
	r.unpublishLocked()
	return true
}

// resignLocked steps down because another candidate won a promise.
func (r *Replica) resignLocked() {
	if r.epoch == 0 {
		return
	}
	r.log.Info("stepping down: promised a newer epoch (to another node, or to this one for its own handoff)", "epoch", r.epoch, "promised", r.promised, "to", r.promTo)
	r.unpublishLocked()
}

// unpublishLocked stops leading and withdraws the queue heads.
func (r *Replica) unpublishLocked() {
	if r.epoch == 0 {
		return
	}
	r.epoch = 0
	r.leading.Store(0)
	r.fresh.reset() // only a leader grants claims
	for name := range r.queues {
		r.cfg.OnHead(r.cfg.Part, name, Head{}, false)
	}
}

// Epoch returns the epoch the replica leads at, 0 if it does not lead.
// It does not take the replica's lock: a write holding it does not delay
// a request asking who leads.
func (r *Replica) Epoch() uint64 { return r.leading.Load() }

// Promised returns the highest epoch this replica promised and the
// candidate it promised it to (0, 0 if none).
func (r *Replica) Promised() (ep, candidate uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.promised, r.promTo
}
