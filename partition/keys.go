package partition

import (
	"slices"

	"github.com/skuldd/skuldd/task"
)

// Unique keys (task.Spec.Key): every task of one queue and key lives in
// one partition (ring.KeyPartition), whose replicas index the key, so its
// leader keeps the key unique: an enqueue whose key a kept task holds
// yields that task instead of a new one (NewTask.DupOf).
//
// A task holds its key while it is kept and not cancelled, and, when its
// spec sets UniqueFor, until EnqueuedAt+UniqueFor at most. Of several
// tasks holding one key (a write one leader took that another, stale,
// also took, later merged) the lowest id answers later enqueues, and the
// leader retires the others (DuplicateKeys): it keeps one already claimed
// or completed, else the lowest id, and cancels the rest.

// keyOf is the index key of a spec's unique key.
func keyOf(sp *task.Spec) string { return sp.Queue + "\x00" + sp.Key }

// keyLocked enters task sp in the key index, unless it has no key or is
// there already (a reopened task is inserted again).
func (r *Replica) keyLocked(sp *task.Spec) {
	if sp.Key == "" {
		return
	}
	k := keyOf(sp)
	ids := r.keys[k]
	i, found := slices.BinarySearchFunc(ids, sp.ID, task.ID.Compare)
	if !found {
		ids = slices.Insert(ids, i, sp.ID)
		r.keys[k] = ids
	}
	if len(ids) > 1 {
		r.keyConflicts[k] = struct{}{}
	}
}

// unkeyLocked takes a deleted task out of the key index.
func (r *Replica) unkeyLocked(sp *task.Spec) {
	if sp.Key == "" {
		return
	}
	k := keyOf(sp)
	ids := r.keys[k]
	if i, found := slices.BinarySearchFunc(ids, sp.ID, task.ID.Compare); found {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(r.keys, k)
	} else {
		r.keys[k] = ids
	}
	if len(ids) < 2 {
		delete(r.keyConflicts, k)
	}
}

// keyHolderLocked returns the task that holds sp's key at now, if any
// other than sp's own id. It reads the spec (for the window) and, for a
// task with no entry, the state (completed holds, cancelled does not) of
// each task indexed under the key: few, as a key has one task but after
// a merge of two.
func (r *Replica) keyHolderLocked(sp *task.Spec, now int64) (task.ID, bool, error) {
	for _, id := range r.keys[keyOf(sp)] {
		if id == sp.ID {
			continue
		}
		held, err := r.holdsKeyLocked(id, now)
		if err != nil {
			return task.ID{}, false, err
		}
		if held {
			return id, true, nil
		}
	}
	return task.ID{}, false, nil
}

// holdsKeyLocked reports whether indexed task id holds its key at now.
func (r *Replica) holdsKeyLocked(id task.ID, now int64) (bool, error) {
	sp, err := r.cfg.Store.Spec(r.cfg.Part, id)
	if err != nil {
		return false, err
	}
	if sp.UniqueFor > 0 && now >= sp.EnqueuedAt+sp.UniqueFor {
		return false, nil
	}
	if r.tasks[id] != nil {
		return true, nil // open (an ended task holds no entry)
	}
	if q := r.queues[sp.Queue]; q != nil && q.ready.Has(Head{sp.Priority, id}) {
		return true, nil // ready, never touched
	}
	st, _, err := r.cfg.Store.State(r.cfg.Part, id)
	if err != nil {
		return false, err
	}
	return st.Completion == nil || !st.Completion.Cancelled, nil
}

// Retire is a task that DuplicateKeys says to cancel: another task,
// Keeper, holds its key.
type Retire struct {
	ID, Keeper task.ID
}

// DuplicateKeys returns, on the leader, the open tasks to cancel because
// another task holds their key: of the tasks holding one key, the keeper
// is one already claimed or completed (the lowest id of those), else the
// lowest id. A key left with one holder, or whose other holders have
// ended, is forgotten. Nothing on a replica that does not lead.
func (r *Replica) DuplicateKeys(now int64) ([]Retire, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch == 0 || len(r.keyConflicts) == 0 {
		return nil, nil
	}
	var out []Retire
	for k := range r.keyConflicts {
		hs, keeper, err := r.keyHoldersLocked(k, now)
		if err != nil {
			return nil, err
		}
		retired := 0
		for i, h := range hs {
			if i != keeper && h.open {
				out = append(out, Retire{ID: h.id, Keeper: hs[keeper].id})
				retired++
			}
		}
		if retired == 0 {
			delete(r.keyConflicts, k)
		}
	}
	slices.SortFunc(out, func(a, b Retire) int { return a.ID.Compare(b.ID) })
	return out, nil
}

// keyHolder is a task that holds its key (holdsKeyLocked).
type keyHolder struct {
	id     task.ID
	worked bool // claimed or completed, now or before
	open   bool
}

// keyHoldersLocked returns the tasks that hold key k at now, in id
// order, and the index among them of the one that keeps the key when
// several do (-1: none holds it): the first one claimed or completed,
// else the first. The choice depends on the records alone, so every
// leader makes the same one.
func (r *Replica) keyHoldersLocked(k string, now int64) ([]keyHolder, int, error) {
	var hs []keyHolder
	for _, id := range r.keys[k] {
		held, err := r.holdsKeyLocked(id, now)
		if err != nil {
			return nil, -1, err
		}
		if !held {
			continue
		}
		st, _, err := r.cfg.Store.State(r.cfg.Part, id)
		if err != nil {
			return nil, -1, err
		}
		hs = append(hs, keyHolder{id: id, worked: len(st.Claims) > 0 || st.Completion != nil, open: st.Completion == nil})
	}
	keeper := -1
	for i, h := range hs { // in id order: the first worked one, else the first
		if keeper < 0 || h.worked && !hs[keeper].worked {
			keeper = i
		}
	}
	return hs, keeper, nil
}

// keyLoserLocked reports whether sp's task holds a unique key that
// another task keeps (the key has several holders here: a stale
// leader's write of the key merged in), and which task that is. Such a
// task is never claimed: ClaimReserved retires it instead.
func (r *Replica) keyLoserLocked(sp *task.Spec, now int64) (task.ID, bool, error) {
	if sp.Key == "" {
		return task.ID{}, false, nil
	}
	if _, conflict := r.keyConflicts[keyOf(sp)]; !conflict {
		return task.ID{}, false, nil
	}
	return r.repeatKeeperLocked(sp, now)
}

// repeatKeeperLocked returns, for a repeated enqueue of sp (its task is
// held here already) that has a key, the task that keeps the key if it
// is another one: a leader that took sp's task from another replica
// (a stale leader's, by anti-entropy) while another task held the key
// holds two, and retires sp's; the repeat must then answer duplicate of
// the keeper, not "new" (found by the simulation, seed 91 under load).
func (r *Replica) repeatKeeperLocked(sp *task.Spec, now int64) (task.ID, bool, error) {
	hs, keeper, err := r.keyHoldersLocked(keyOf(sp), now)
	if err != nil || keeper < 0 || hs[keeper].id == sp.ID {
		return task.ID{}, false, err
	}
	return hs[keeper].id, true, nil
}
