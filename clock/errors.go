package clock

import "errors"

// Sentinel errors for offset estimation. Observe wraps them with the peer and
// the reading at fault; test for them with errors.Is.
var (
	// ErrBadSample is returned by Observe for a sample that cannot be a
	// measurement: peer id 0, a zero time, a negative round trip or one
	// over Config.MaxRTT, or a wall clock that stepped during the exchange.
	// The sample is dropped; the estimator is unchanged.
	ErrBadSample = errors.New("bad clock sample")
	// ErrTooManyPeers is returned by Observe for a new peer when
	// Config.MaxPeers peers already have current samples. The sample is
	// dropped.
	ErrTooManyPeers = errors.New("too many peers")
)
