package partition

import (
	"errors"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/task"
)

// Reverse dependency edges: "T waits on D", kept in D's partition and
// written by its leader (node/deps drives the protocol).

// AddDependents records that each of dependents waits on dep, a task of
// this partition, and reports whether dep is already completed. A
// cancelled dep, or the tombstone of one, is refused (task.ErrConflict):
// it satisfies no dependency, ever. The edges
// and the completion are read and written under the replica's lock, so a
// completion of dep either comes before (and is reported here) or after
// (and finds the edges). It fails with task.ErrNotFound for an unknown
// dep. The caller waits on the Durable before relying on the edges, and
// ships them to the cohort (Record.Dependents).
func (r *Replica) AddDependents(dep task.ID, dependents []task.ID) (completed bool, d Durable, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ids.mayHold(dep) {
		return false, nil, fmt.Errorf("%w: %s", task.ErrNotFound, dep)
	}
	_, st, err := r.loadLocked(dep)
	if errors.Is(err, task.ErrNotFound) {
		// A collected dep was completed, or cancelled: no edge is written
		// under its tombstone (see gc.go); its new dependents start with
		// a completed one done, and are refused a cancelled one.
		if at, tomb, terr := r.cfg.Store.Tomb(r.cfg.Part, dep); terr != nil || tomb {
			switch {
			case terr != nil:
				return false, nil, terr
			case task.TombCancelled(at):
				return false, nil, fmt.Errorf("%w: dependency %s was cancelled and is gone: it will never complete", task.ErrConflict, dep)
			}
			return true, nil, fmt.Errorf("%w: %s", ErrCollected, dep)
		}
	}
	if err != nil {
		return false, nil, err
	}
	if c := st.Completion; c != nil && c.Cancelled {
		// Refused, not recorded: a cancelled task's edges never grow, so
		// the delete that cancelled it finds the count it checked.
		return false, nil, fmt.Errorf("%w: dependency %s was cancelled: it will never complete", task.ErrConflict, dep)
	}
	for _, t := range dependents {
		if t.IsZero() || t == dep {
			return false, nil, fmt.Errorf("%w: %s cannot wait on %s", task.ErrInvalid, t, dep)
		}
	}
	// Only the edges not stored yet are written, and add their items.
	fresh, err := r.newEdgesLocked(dep, dependents, nil, true)
	if err != nil {
		return false, nil, fmt.Errorf("partition %d: dependents of %s: %w", r.cfg.Part, dep, err)
	}
	if len(fresh) == 0 {
		// Every edge was there: a retry. What it found may not be
		// durable yet; the caller waits until it is.
		return st.Completed(), barrier{r.cfg.Store}, nil
	}
	b := r.cfg.Store.NewBatch()
	var delta treeDelta
	for _, t := range fresh {
		if err := b.PutEdge(r.cfg.Part, dep, t); err != nil {
			b.Close()
			return false, nil, err
		}
		delta.add(dep, antientropy.EdgeItem(dep, t))
	}
	p, err := b.Apply()
	if err != nil {
		return false, nil, fmt.Errorf("partition %d: dependents of %s: %w", r.cfg.Part, dep, err)
	}
	r.applyTreeLocked(delta)
	return st.Completed(), p, nil
}

// edgeLookupsMax is how many of a task's dependents newEdgesLocked looks
// up one by one (a point lookup each, cheap when absent thanks to the
// bloom filters); for more it scans the task's edges once instead.
const edgeLookupsMax = 8

// newEdgesLocked returns those of dependents (without repeats, in their
// first order) that are not held as reverse edges of dep: neither in
// staged (edges a Merge call staged) nor, if stored is set, in the store.
// These are the edges a write adds, and whose items it adds to the tree:
// an edge written again would add its item a second time, cancelling it.
// stored is false for a task that has no stored edge (new in the write).
func (r *Replica) newEdgesLocked(dep task.ID, dependents []task.ID, staged map[edgeKey]bool, stored bool) ([]task.ID, error) {
	var seen map[task.ID]bool // held or already returned; nil for a few dependents
	if len(dependents) > edgeLookupsMax {
		seen = make(map[task.ID]bool, len(dependents))
		if stored {
			err := r.cfg.Store.Dependents(r.cfg.Part, dep, func(t task.ID) bool {
				seen[t] = true
				return true
			})
			if err != nil {
				return nil, err
			}
		}
	}
	fresh := make([]task.ID, 0, len(dependents))
	for _, t := range dependents {
		if staged[edgeKey{dep, t}] {
			continue
		}
		if seen != nil {
			if !seen[t] {
				seen[t] = true
				fresh = append(fresh, t)
			}
			continue
		}
		if slices.Contains(fresh, t) { // at most edgeLookupsMax of them
			continue
		}
		if stored {
			have, err := r.cfg.Store.HasEdge(r.cfg.Part, dep, t)
			if err != nil {
				return nil, err
			}
			if have {
				continue
			}
		}
		fresh = append(fresh, t)
	}
	return fresh, nil
}
