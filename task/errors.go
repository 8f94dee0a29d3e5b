package task

import "errors"

// Sentinel errors for task operations. They are the domain errors every
// layer above wraps with context; wire maps each to a stable error code.
var (
	// ErrInvalid marks a request that is malformed or out of range.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound is returned for an id no replica knows.
	ErrNotFound = errors.New("task not found")
	// ErrDepNotFound is returned when an enqueue names a dependency that
	// does not exist.
	ErrDepNotFound = errors.New("dependency not found")
	// ErrTooLarge is returned for a payload or batch over its limit.
	ErrTooLarge = errors.New("too large")
	// ErrNoSuchClaim is returned for a claim index the task never had.
	ErrNoSuchClaim = errors.New("no such claim")
	// ErrClaimSuperseded is returned when a newer claim of the task exists:
	// only the latest claim may act on a task (fencing).
	ErrClaimSuperseded = errors.New("claim superseded")
	// ErrClaimExpired is returned when renewing a claim whose end has passed.
	ErrClaimExpired = errors.New("claim expired")
	// ErrTimeLimit is returned when renewing a claim that ran for its
	// task's time limit: the claim ended there, a failed attempt.
	ErrTimeLimit = errors.New("time limit")
	// ErrClaimEnded is returned when a claim was already ended by fail or
	// snooze.
	ErrClaimEnded = errors.New("claim already ended")
	// ErrCompleted is returned for an operation on a completed task that
	// needs it open.
	ErrCompleted = errors.New("task already completed")
	// ErrCancelled is returned for an operation on a cancelled task that
	// needs it open: its claim's renewals, updates, completion, fail or
	// snooze after the cancel (the cancel superseded the claim).
	ErrCancelled = errors.New("task cancelled")
	// ErrConflict is returned for a write that contradicts an earlier one:
	// a complete with another (claim, seq), an update with other data.
	ErrConflict = errors.New("conflict")
	// ErrSeq is returned for an update or completion out of sequence.
	ErrSeq = errors.New("sequence out of order")
	// ErrNotDead is returned when requeueing a task that is not dead.
	ErrNotDead = errors.New("task is not dead")
	// ErrStale is returned by a read that cannot satisfy the caller's
	// min_seq: the history the caller saw is longer than what was found.
	ErrStale = errors.New("history older than min_seq")
	// ErrEpoch is returned by a replica asked to write a claim from an epoch
	// below the one it promised.
	ErrEpoch = errors.New("stale epoch")
)
