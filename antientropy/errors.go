package antientropy

import "errors"

// Sentinel errors. Callers test them with errors.Is; the messages carry the
// values involved.
var (
	// ErrConfig is returned for a Config, Shape or Limits that fails
	// validation.
	ErrConfig = errors.New("antientropy: invalid config")

	// ErrShape is returned when a peer's request names another tree shape
	// than this replica's, or a level, node or bucket outside the shape. The
	// two peers must be configured alike before they can compare trees.
	ErrShape = errors.New("antientropy: shape mismatch")

	// ErrMalformed is returned for input that breaks the encoding or the
	// contract of Remote: a decoder's input that is truncated, oversized,
	// unsorted or has trailing bytes, a response with the wrong number of
	// digests or lists, or an entry list with a duplicate id, the zero id or
	// an id of another bucket.
	ErrMalformed = errors.New("antientropy: malformed input")
)
