package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

// Hints: enqueues this node acknowledged as hinted because their cohort
// could not be reached (docs/design.md, Operations: placement and hints). A
// hint is the task's spec and the w its enqueue asked, kept under its id
// until the node has handed it to W replicas of the cohort. A hint is
// synced before its enqueue is answered and deleted only after the
// handover was acknowledged: an acknowledged hinted enqueue is never lost,
// and a handover repeated after a crash is idempotent (by id).

// Hint is one hinted enqueue.
type Hint struct {
	Spec *task.Spec `cbor:"1,keyasint"`
	// W is the w its enqueue asked (0: a majority of the cohort).
	W int `cbor:"2,keyasint,omitempty"`
	// At is when it was hinted (Unix ms, the node's clock).
	At int64 `cbor:"3,keyasint"`
}

func hintKey(id task.ID) []byte {
	k := make([]byte, 0, 1+task.IDLen)
	return append(append(k, kindHint), id[:]...)
}

// PutHints durably stores hints (synced before it returns).
func (s *Store) PutHints(hs []Hint) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, h := range hs {
		if h.Spec == nil || h.Spec.ID.IsZero() {
			return fmt.Errorf("store: put hint: no task")
		}
		v, err := encode(&h)
		if err != nil {
			return err
		}
		if err := b.Set(hintKey(h.Spec.ID), v, nil); err != nil {
			return fmt.Errorf("store: put hint %s: %w", h.Spec.ID, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: put hints: %w", err)
	}
	return nil
}

// DeleteHints deletes the hints of ids (synced: a hint handed over must
// not come back after a crash only to be handed over again, which would
// be harmless but noisy).
func (s *Store) DeleteHints(ids []task.ID) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, id := range ids {
		if err := b.Delete(hintKey(id), nil); err != nil {
			return fmt.Errorf("store: delete hint %s: %w", id, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: delete hints: %w", err)
	}
	return nil
}

// Hints calls fn with each stored hint, in id order, until fn returns
// false.
func (s *Store) Hints(fn func(Hint) bool) error {
	lo := []byte{kindHint}
	return s.scan(lo, prefixEnd(lo), func(_, v []byte) (bool, error) {
		var h Hint
		if err := decode(v, &h); err != nil {
			return false, fmt.Errorf("store: hint: %w", err)
		}
		if h.Spec == nil {
			return false, fmt.Errorf("%w: hint without a task", ErrCorrupt)
		}
		return fn(h), nil
	})
}
