package client

import (
	"errors"
	"fmt"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The errors a call's error may match with errors.Is.
var (
	// ErrNotFound: no such task.
	ErrNotFound = task.ErrNotFound
	// ErrInvalid: the request was malformed or out of range (a bad queue
	// name, a payload over the limit, an unknown dependency).
	ErrInvalid = task.ErrInvalid
	// ErrConflict: the write contradicts an earlier one (an enqueue of an
	// existing id with another spec, a completion at another sequence
	// number).
	ErrConflict = task.ErrConflict
	// ErrUnavailable: no node could serve the call within Config.RetryFor
	// (unreachable, shutting down, overloaded, or the cluster without a
	// quorum for the task's partition). The write may or may not have
	// happened: send it again.
	ErrUnavailable = wire.ErrUnavailable
	// ErrClaimSuperseded: a newer claim of the task exists.
	ErrClaimSuperseded = task.ErrClaimSuperseded
	// ErrCompleted: the task is completed (by this claim or another).
	ErrCompleted = task.ErrCompleted
	// ErrCancelled: the task was cancelled (Client.Cancel, or a delete);
	// a claim of it allows no more writes.
	ErrCancelled = task.ErrCancelled
	// ErrStale: a read showed less history than GetOptions.MinSeq says
	// the caller saw (a replica behind); read again.
	ErrStale = task.ErrStale
	// ErrClaimLost matches every reason a claim no longer allows writes:
	// superseded, expired, ended by fail or snooze, never granted, or the
	// task completed or cancelled.
	ErrClaimLost = errors.New("claim lost")
)

// Error is the error of a call that a node refused or that no node
// served. errors.Is matches it against the package's errors and the
// task package's; Code is the node's stable error name ("not_found",
// "claim_superseded", ...), "unreachable" when no node answered.
type Error struct {
	// Op is the operation ("enqueue", "claim", ...).
	Op string
	// Node is the address of the node that answered last.
	Node string
	// Code is the node's error name.
	Code string
	// Err is the node's error (a *wire.Error) or the transport's.
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("skuldd %s via %s: %s: %v", e.Op, e.Node, e.Code, e.Err)
}

// Unwrap returns the node's error, which unwraps to the task package's
// sentinel of its code.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the umbrella errors: ErrClaimLost and ErrUnavailable.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrClaimLost:
		return claimLost(e.Err)
	case ErrUnavailable:
		return unavailable(e.Err)
	}
	return false
}

// claimLost reports whether err says the claim allows no more writes.
func claimLost(err error) bool {
	switch wire.CodeOf(err) {
	case wire.CodeClaimSuperseded, wire.CodeClaimExpired, wire.CodeClaimEnded, wire.CodeNoSuchClaim, wire.CodeCompleted,
		wire.CodeCancelled:
		return true
	}
	return false
}

// retryable reports whether another node, or the same one a little
// later, may serve the call: the node could not be reached or answered
// that it cannot serve now.
func retryable(err error) bool {
	return !errors.As(err, new(notRetried)) && unavailable(err)
}

// unavailable reports whether err says the node could not be reached or
// could not serve now, whether or not the call may be sent again (a
// listing that already yielded tasks may not).
func unavailable(err error) bool {
	var we *wire.Error
	if !errors.As(err, &we) {
		return true // the transport's: the node was not reached, or the answer lost
	}
	switch we.Code {
	case wire.CodeUnavailable, wire.CodeShuttingDown, wire.CodeOverloaded, wire.CodeTimeout:
		return true // CodeTimeout: the outcome is unknown; every call is safe to send again
	}
	return false
}

// codeName is err's stable code name.
func codeName(err error) string {
	var we *wire.Error
	if !errors.As(err, &we) {
		return "unreachable"
	}
	return we.Code.Name()
}

// notRetried wraps an error that must not be retried, whatever it is (a
// listing that already yielded tasks).
type notRetried struct{ err error }

func (e notRetried) Error() string { return e.err.Error() }
func (e notRetried) Unwrap() error { return e.err }
