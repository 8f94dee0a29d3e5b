package clock

import (
	"fmt"
	"sync"
	"time"
)

// PeerOffset is the estimate of one peer's clock, from the sample with the
// smallest round trip in its window.
type PeerOffset struct {
	// Offset is the peer's clock minus this node's clock: positive means
	// the peer is ahead of this node.
	Offset time.Duration
	// Uncertainty bounds the error: the true offset lies in
	// [Offset-Uncertainty, Offset+Uncertainty], as long as neither clock
	// was stepped since the sample. It is RTT/2 + Config.Precision.
	Uncertainty time.Duration
	// RTT is the chosen sample's round trip.
	RTT time.Duration
	// At is when the chosen sample was received, by this node's clock.
	At time.Time
	// Samples is how many current samples the window holds.
	Samples int
}

// sample is a Sample reduced to what the filter needs.
type sample struct {
	offset time.Duration
	unc    time.Duration
	rtt    time.Duration
	at     time.Time // Recv, monotonic reading stripped
}

// Estimator keeps, per peer, the last Config.Window samples younger than
// Config.StaleAfter, and estimates each peer's offset by the one with the
// smallest round trip: queueing only ever adds delay, so the fastest
// exchange is the one whose two legs were most nearly equal, and its
// uncertainty (RTT/2) is the smallest (the classic NTP clock filter).
//
// A new sample whose interval [offset ± uncertainty] does not overlap an
// older sample's evicts that older sample: delays alone can never make two
// intervals disjoint (each contains the true offset), so one of the clocks
// was stepped, and the newest reading is the one that describes the clocks
// now.
//
// Estimator is safe for concurrent use. Its methods never block on anything
// but its own mutex, which is never held across a call out of the package.
type Estimator struct {
	cfg Config
	mu  struct {
		sync.Mutex
		// peers holds each peer's window, oldest sample first.
		// INVARIANT: every window holds 1..cfg.Window samples (empty
		// windows are deleted), and len(peers) <= cfg.MaxPeers.
		peers map[uint64][]sample
	}
}

// NewEstimator returns an empty Estimator, or an error if cfg is invalid.
func NewEstimator(cfg Config) (*Estimator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Estimator{cfg: cfg}
	e.mu.peers = make(map[uint64][]sample)
	return e, nil
}

// Observe adds one exchange with peer. It returns an error wrapping
// ErrBadSample or ErrTooManyPeers, and changes nothing, if the sample is
// dropped. Peer must be another node's id (never this node's, never 0).
func (e *Estimator) Observe(peer uint64, s Sample) error {
	if peer == 0 {
		return fmt.Errorf("peer 0: %w: node ids are non-zero", ErrBadSample)
	}
	if err := s.check(&e.cfg); err != nil {
		return fmt.Errorf("peer %d: %w", peer, err)
	}
	n := sample{offset: s.Offset(), unc: s.Uncertainty(e.cfg.Precision), rtt: s.RTT, at: s.Recv.Round(0)}

	e.mu.Lock()
	defer e.mu.Unlock()
	w, known := e.mu.peers[peer]
	if !known && len(e.mu.peers) >= e.cfg.MaxPeers {
		e.pruneLocked(n.at)
		if len(e.mu.peers) >= e.cfg.MaxPeers {
			return fmt.Errorf("peer %d: %w: %d tracked", peer, ErrTooManyPeers, len(e.mu.peers))
		}
	}
	w = e.freshLocked(w, n.at)
	w = consistent(w, n)
	if len(w) == e.cfg.Window {
		// Slide: drop the oldest, keeping the backing array's size.
		copy(w, w[1:])
		w = w[:len(w)-1]
	}
	e.mu.peers[peer] = append(w, n)
	return nil
}

// Forget drops everything known about peer, such as when it leaves the
// cluster. Forgetting an unknown peer does nothing.
func (e *Estimator) Forget(peer uint64) {
	e.mu.Lock()
	delete(e.mu.peers, peer)
	e.mu.Unlock()
}

// Offsets returns the current estimate for every peer with a sample no
// older than Config.StaleAfter at now (this node's wall clock). Peers
// without one are forgotten. The map is the caller's.
func (e *Estimator) Offsets(now time.Time) map[uint64]PeerOffset {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pruneLocked(now.Round(0))
	out := make(map[uint64]PeerOffset, len(e.mu.peers))
	for peer, w := range e.mu.peers {
		out[peer] = best(w)
	}
	return out
}

// pruneLocked drops stale samples of every peer, and peers left with none.
func (e *Estimator) pruneLocked(now time.Time) {
	for peer, w := range e.mu.peers {
		if w = e.freshLocked(w, now); len(w) == 0 {
			delete(e.mu.peers, peer)
		} else {
			e.mu.peers[peer] = w
		}
	}
}

// freshLocked filters w in place to the samples usable at now. A sample
// from further in the future than StaleAfter is stale too: this node's
// clock was stepped back since, so the sample measured a different clock.
func (e *Estimator) freshLocked(w []sample, now time.Time) []sample {
	kept := w[:0]
	for _, s := range w {
		age := now.Sub(s.at)
		if age <= e.cfg.StaleAfter && age >= -e.cfg.StaleAfter {
			kept = append(kept, s)
		}
	}
	return kept
}

// consistent filters w in place to the samples whose interval overlaps n's.
func consistent(w []sample, n sample) []sample {
	kept := w[:0]
	for _, s := range w {
		gap := satSub(s.offset, n.offset)
		if gap < 0 {
			gap = satNeg(gap)
		}
		if gap <= satAdd(s.unc, n.unc) {
			kept = append(kept, s)
		}
	}
	return kept
}

// best returns the estimate from w's sample with the smallest round trip;
// among equals, the newest, so the answer never depends on map order and
// follows the latest reading. w must not be empty.
func best(w []sample) PeerOffset {
	b := w[0]
	for _, s := range w[1:] {
		if s.rtt <= b.rtt {
			b = s
		}
	}
	return PeerOffset{Offset: b.offset, Uncertainty: b.unc, RTT: b.rtt, At: b.at, Samples: len(w)}
}
