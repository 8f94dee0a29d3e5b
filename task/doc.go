// Package task owns the task data model: ids, the immutable task spec, the
// mutable state kept as CRDTs, their merge, the derived state (ready,
// claimed, delayed, blocked, completed, dead) and the validation of
// everything a client may send about a task.
//
// Everything here is pure: no goroutines, no I/O, and no clock reads except
// in IDGen, which takes its clock as a parameter. Times are wall-clock Unix
// milliseconds passed in by the caller.
//
// The package imports only clock. Store, wire and partition build on it; it
// must not import any of them.
//
// # Invariants
//
//   - A Spec never changes once written: replicas merge only State.
//   - Merge is commutative, associative and idempotent; completion is
//     absorbing (once set it stays set, and the earliest completion wins).
//   - Claim indices of a task are dense and only grow; a claim index is never
//     reused, so it can serve as a fencing token.
package task
