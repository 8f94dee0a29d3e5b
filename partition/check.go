package partition

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
)

// The checks a record from a peer passes before Merge stages any of it.

// checkRecord checks what Merge relies on in any record: that it is of
// this partition, names one task, and carries a well-formed state.
func (r *Replica) checkRecord(rec *task.Record) error {
	if rec.ID.IsZero() {
		return fmt.Errorf("%w: record of the zero id", task.ErrInvalid)
	}
	if p := ring.PartitionOf(rec.ID[:], r.cfg.Partitions); p != r.cfg.Part {
		return fmt.Errorf("%w: task %s is in partition %d, not %d", task.ErrInvalid, rec.ID, p, r.cfg.Part)
	}
	if rec.Tomb != 0 && (rec.Spec != nil || rec.State != nil || len(rec.Updates) > 0 || len(rec.Dependents) > 0) {
		return fmt.Errorf("%w: tombstone of %s at %d carries task data", task.ErrInvalid, rec.ID, rec.Tomb)
	}
	if rec.Spec != nil && rec.Spec.ID != rec.ID {
		return fmt.Errorf("%w: record of %s carries the spec of %s", task.ErrInvalid, rec.ID, rec.Spec.ID)
	}
	if rec.State == nil && (len(rec.Updates) > 0 || rec.Full) {
		// Updates belong to the line of writes of a state: what they do
		// here depends on its stamp (see Merge).
		return fmt.Errorf("%w: record of %s carries updates without its state", task.ErrInvalid, rec.ID)
	}
	if m := rec.Meta; m != nil && (m.ID != rec.ID || m.Data != nil || rec.Spec != nil || rec.Tomb != 0) {
		return fmt.Errorf("%w: record of %s: meta must be the task's own spec without payload, on a record without spec", task.ErrInvalid, rec.ID)
	}
	if rec.State != nil {
		if err := checkState(rec.State); err != nil {
			return fmt.Errorf("%w: task %s: %w", task.ErrInvalid, rec.ID, err)
		}
	}
	for _, d := range rec.Dependents {
		if d.IsZero() || d == rec.ID {
			return fmt.Errorf("%w: task %s: dependent %s", task.ErrInvalid, rec.ID, d)
		}
	}
	return nil
}

// checkState checks the invariants of task.State that merging and
// deriving rely on: claims, releases and deps done strictly increasing.
// A claim index of MaxUint32 is refused too: the next claim would wrap
// to 0 and break the order. Claim indices need not be dense: a replica
// may hold a later claim without an earlier one (handoff step 7).
func checkState(st *task.State) error {
	if !strictlyIncreasing(st.Claims, func(a, b task.Claim) int { return cmp.Compare(a.Index, b.Index) }) {
		return errors.New("claims not in strictly increasing index order")
	}
	if c, ok := st.Latest(); ok && c.Index == math.MaxUint32 {
		return errors.New("claim index out of range")
	}
	if !strictlyIncreasing(st.Releases, func(a, b task.Release) int { return cmp.Compare(a.Claim, b.Claim) }) {
		return errors.New("releases not in strictly increasing claim order")
	}
	if !strictlyIncreasing(st.DepsDone, task.ID.Compare) {
		return errors.New("deps done not sorted and unique")
	}
	return nil
}

func strictlyIncreasing[T any](s []T, compare func(a, b T) int) bool {
	for i := 1; i < len(s); i++ {
		if compare(s[i-1], s[i]) >= 0 {
			return false
		}
	}
	return true
}

// checkSpec checks a spec this replica is about to store for the first
// time, as the enqueue path validated it on the coordinator: the indexes
// rely on a valid queue name and on at most task.MaxDeps sorted, unique
// deps (the pending-dep count is a uint16).
func checkSpec(sp *task.Spec) error {
	if sp.ID.IsZero() {
		return fmt.Errorf("%w: spec of the zero id", task.ErrInvalid)
	}
	if err := task.ValidateQueue(sp.Queue); err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	if err := task.ValidateGroup(sp.Group); err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	if err := task.ValidateLabel("kind", sp.Kind); err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	if err := task.ValidateLabel("subtopic", sp.Subtopic); err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	if err := task.ValidateDescription(sp.Description); err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	deps, err := task.NormalizeDeps(sp.Deps, sp.ID)
	if err != nil {
		return fmt.Errorf("task %s: %w", sp.ID, err)
	}
	if !slices.Equal(deps, sp.Deps) {
		return fmt.Errorf("%w: task %s: deps not sorted and unique", task.ErrInvalid, sp.ID)
	}
	return nil
}

// claimOnCompleted reports a claim of in that local, a completed state,
// does not know. A record that carries a completion of its own is not
// refused: every replica that merges it derives the task completed, so
// the claim can never be acted on, and refusing it would keep the
// replicas from converging (the leader merges the completion it is told
// of, and its record then carries both).
func claimOnCompleted(local, in *task.State) (uint32, bool) {
	if local.Completion == nil || in.Completion != nil {
		return 0, false
	}
	for _, c := range in.Claims {
		_, known := slices.BinarySearchFunc(local.Claims, c.Index, func(l task.Claim, idx uint32) int { return cmp.Compare(l.Index, idx) })
		if !known {
			return c.Index, true
		}
	}
	return 0, false
}

// sameState reports whether two states are equal.
func sameState(a, b *task.State) bool { return a.Equal(b) }

// withoutData returns a copy of sp without its payload.
func withoutData(sp *task.Spec) *task.Spec {
	meta := *sp
	meta.Data = nil
	return &meta
}
