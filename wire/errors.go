package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/task"
)

// Code is a stable numeric error code carried in error frames and HTTP
// error bodies. Codes never change meaning; new ones are only appended.
type Code uint16

// The error codes. 0 means success and never appears in an error.
const (
	CodeOK              Code = 0
	CodeInternal        Code = 1  // a bug or an unexpected storage failure
	CodeInvalid         Code = 2  // malformed or out-of-range request
	CodeNotFound        Code = 3  // no such task
	CodeDepNotFound     Code = 4  // enqueue names an unknown dependency
	CodeTooLarge        Code = 5  // payload or batch over its limit
	CodeNoSuchClaim     Code = 6  // claim index never granted
	CodeClaimSuperseded Code = 7  // a newer claim of the task exists
	CodeClaimExpired    Code = 8  // renew after the claim's end
	CodeClaimEnded      Code = 9  // claim already failed or snoozed
	CodeCompleted       Code = 10 // task already completed
	CodeConflict        Code = 11 // contradicts an earlier write
	CodeSeq             Code = 12 // sequence number out of order
	CodeNotDead         Code = 13 // requeue of a task that is not dead
	CodeStale           Code = 14 // history shorter than min_seq
	CodeEpoch           Code = 15 // claim write from a stale epoch
	CodeUnavailable     Code = 16 // not enough replicas or no leader; retry
	CodeTimeout         Code = 17 // deadline passed; the outcome is unknown
	CodeBadFrame        Code = 18 // undecodable frame or body
	CodeFrameTooLarge   Code = 19 // frame over the size limit
	CodeVersion         Code = 20 // unsupported protocol version
	CodeUnknownOp       Code = 21 // op this node does not know
	CodeShuttingDown    Code = 22 // node is stopping; retry elsewhere
	CodeOverloaded      Code = 23 // too many requests in flight; retry
	CodeCancelled       Code = 24 // task cancelled
	CodeTimeLimit       Code = 25 // renew of a claim that ran for its task's time limit
	// CodeMethodNotAllowed: an HTTP method the path has no route for
	// (HTTP only; the QUIC protocol has no methods).
	CodeMethodNotAllowed Code = 26
	// CodeUnauthenticated: the request proved no credential the node
	// holds; CodeForbidden: its credential does not allow the operation.
	CodeUnauthenticated Code = 27
	CodeForbidden       Code = 28
	// CodeClusterVersion: the cluster's version does not have the
	// operation yet (an upgrade is not finalized).
	CodeClusterVersion Code = 29
)

type codeInfo struct {
	name     string
	sentinel error // the task sentinel the code maps to, if any
	http     int
}

// codes is the one table of error codes: name, domain sentinel and HTTP
// status.
var codes = map[Code]codeInfo{
	CodeInternal:         {"internal", nil, http.StatusInternalServerError},
	CodeInvalid:          {"invalid", task.ErrInvalid, http.StatusBadRequest},
	CodeNotFound:         {"not_found", task.ErrNotFound, http.StatusNotFound},
	CodeDepNotFound:      {"dep_not_found", task.ErrDepNotFound, http.StatusBadRequest},
	CodeTooLarge:         {"too_large", task.ErrTooLarge, http.StatusRequestEntityTooLarge},
	CodeNoSuchClaim:      {"no_such_claim", task.ErrNoSuchClaim, http.StatusConflict},
	CodeClaimSuperseded:  {"claim_superseded", task.ErrClaimSuperseded, http.StatusConflict},
	CodeClaimExpired:     {"claim_expired", task.ErrClaimExpired, http.StatusConflict},
	CodeClaimEnded:       {"claim_ended", task.ErrClaimEnded, http.StatusConflict},
	CodeCompleted:        {"completed", task.ErrCompleted, http.StatusConflict},
	CodeConflict:         {"conflict", task.ErrConflict, http.StatusConflict},
	CodeSeq:              {"seq", task.ErrSeq, http.StatusConflict},
	CodeNotDead:          {"not_dead", task.ErrNotDead, http.StatusConflict},
	CodeStale:            {"stale", task.ErrStale, http.StatusConflict},
	CodeEpoch:            {"stale_epoch", task.ErrEpoch, http.StatusConflict},
	CodeUnavailable:      {"unavailable", ErrUnavailable, http.StatusServiceUnavailable},
	CodeTimeout:          {"timeout", context.DeadlineExceeded, http.StatusGatewayTimeout},
	CodeBadFrame:         {"bad_frame", nil, http.StatusBadRequest},
	CodeFrameTooLarge:    {"frame_too_large", nil, http.StatusRequestEntityTooLarge},
	CodeVersion:          {"version", nil, http.StatusBadRequest},
	CodeUnknownOp:        {"unknown_op", nil, http.StatusNotFound},
	CodeShuttingDown:     {"shutting_down", ErrShuttingDown, http.StatusServiceUnavailable},
	CodeOverloaded:       {"overloaded", ErrOverloaded, http.StatusTooManyRequests},
	CodeCancelled:        {"cancelled", task.ErrCancelled, http.StatusConflict},
	CodeTimeLimit:        {"time_limit", task.ErrTimeLimit, http.StatusConflict},
	CodeMethodNotAllowed: {"method_not_allowed", nil, http.StatusMethodNotAllowed},
	CodeUnauthenticated:  {"unauthorized", ErrUnauthenticated, http.StatusUnauthorized},
	CodeForbidden:        {"forbidden", ErrForbidden, http.StatusForbidden},
	CodeClusterVersion:   {"cluster_version", ErrClusterVersion, http.StatusConflict},
}

// Errors the transport and node produce that are not task errors.
var (
	// ErrUnavailable: not enough replicas answered, or no leader; retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrShuttingDown: the node is stopping.
	ErrShuttingDown = errors.New("shutting down")
	// ErrOverloaded: the node refused the request for lack of capacity.
	ErrOverloaded = errors.New("overloaded")
)

// Error is an error that crossed the wire: a code and a message.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the domain sentinel for e's code, so errors.Is(err,
// task.ErrNotFound) holds on the client side too.
func (e *Error) Unwrap() error { return codes[e.Code].sentinel }

// Name returns the code's stable name ("not_found", ...).
func (c Code) Name() string {
	if ci, ok := codes[c]; ok {
		return ci.name
	}
	if c == CodeOK {
		return "ok"
	}
	return fmt.Sprintf("code_%d", uint16(c))
}

// HTTPStatus returns the HTTP status for the code.
func (c Code) HTTPStatus() int {
	if ci, ok := codes[c]; ok {
		return ci.http
	}
	return http.StatusInternalServerError
}

// CodeOf returns the code for err: the code of a wire *Error, else the code
// whose sentinel err wraps, else CodeInternal.
func CodeOf(err error) Code {
	var we *Error
	if errors.As(err, &we) {
		return we.Code
	}
	var notYet *version.NotYetError
	if errors.As(err, &notYet) {
		return CodeClusterVersion
	}
	// Check the most specific sentinels first: a task error may wrap more
	// than one (task.ErrDepNotFound messages also say not found).
	for _, c := range codeOrder {
		if s := codes[c].sentinel; s != nil && errors.Is(err, s) {
			return c
		}
	}
	if errors.Is(err, context.Canceled) {
		return CodeTimeout
	}
	return CodeInternal
}

// codeOrder fixes the order CodeOf tries sentinels in.
var codeOrder = []Code{
	CodeDepNotFound, CodeNotFound, CodeTooLarge, CodeNoSuchClaim, CodeClaimSuperseded,
	CodeTimeLimit, CodeClaimExpired, CodeClaimEnded, CodeCompleted, CodeCancelled, CodeConflict, CodeSeq, CodeNotDead,
	CodeStale, CodeEpoch, CodeUnavailable, CodeTimeout, CodeShuttingDown, CodeOverloaded,
	CodeUnauthenticated, CodeForbidden, CodeClusterVersion, CodeInvalid,
}

// Errorf returns a wire error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// ToError converts err to a wire *Error for sending.
func ToError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	return &Error{Code: CodeOf(err), Msg: err.Error()}
}
