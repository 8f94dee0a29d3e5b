package clock

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Drift is a Detector's verdict on this node's clock. See the sign
// conventions at the top of drift.go.
type Drift struct {
	// Ahead is this node's clock minus the cluster's median clock: the
	// negated median of {0 (this node)} ∪ {peer offsets}. Positive: this
	// node is ahead; negative: behind (see Behind). With an even number of
	// clocks the median is the lower middle offset, i.e. the slower of the
	// two middle clocks, so in a two-node cluster the node ahead sees the
	// whole gap.
	Ahead time.Duration
	// AheadMin and AheadMax bound Ahead given every estimate's
	// uncertainty: the same median taken over each peer's lowest and
	// highest possible offset. The median is monotone in every input, so
	// the true lead lies in [AheadMin, AheadMax].
	// INVARIANT: AheadMin <= Ahead <= AheadMax.
	AheadMin, AheadMax time.Duration
	// Peers is how many peers have a current estimate.
	Peers int
	// Drifting is the verdict: this node must step down from every
	// partition it leads, neither grant nor expire claims, and report
	// unhealthy until it clears.
	Drifting bool
	// Changed says Drifting differs from the previous verdict: log it and
	// act on it (step down, or resume).
	Changed bool
	// Reason says why, in words for an operator.
	Reason string
}

// Behind is how far this node's clock is behind the cluster's median, or 0
// if it is not behind. Being behind never makes a node drift (a leader
// behind holds claims longer, which is safe), but operators want to see it.
func (d Drift) Behind() time.Duration {
	if d.Ahead >= 0 {
		return 0
	}
	return satNeg(d.Ahead)
}

// Detector decides whether this node's clock is too far ahead of the
// cluster's (docs/design.md, "Clock"). It owns an Estimator fed through Observe
// and Forget, and keeps one bit of state for hysteresis:
//
//   - not drifting → drifting when certainly ahead by more than MaxDrift:
//     AheadMin > MaxDrift. With one peer at one sample that is
//     Ahead - RTT/2 - Precision > MaxDrift. Uncertain leads do not count,
//     so a congested link cannot take a healthy node out of service.
//   - drifting → not drifting when the estimated lead falls below
//     MaxDrift*ResumeFraction (Ahead < 1s by default).
//   - fewer than MinPeers peers measured → not drifting, whatever the
//     state was. A lone node has no cluster to compare with and must keep
//     serving (a one-node cluster, or the last node after a scale-down).
//     The cost: a drifting node cut off from every peer for StaleAfter
//     clears; it cannot lead anything then anyway (no quorum), and its
//     first sample after it reconnects makes it drift again.
//
// Detector is safe for concurrent use. Lock order: Detector.mu, then
// Estimator.mu.
type Detector struct {
	cfg Config
	est *Estimator
	mu  struct {
		sync.Mutex
		drifting bool // the last verdict
	}
}

// NewDetector returns a Detector with no samples (so not drifting), or an
// error if cfg is invalid.
func NewDetector(cfg Config) (*Detector, error) {
	est, err := NewEstimator(cfg)
	if err != nil {
		return nil, err
	}
	return &Detector{cfg: cfg, est: est}, nil
}

// Observe adds one exchange with peer; see Estimator.Observe.
func (d *Detector) Observe(peer uint64, s Sample) error { return d.est.Observe(peer, s) }

// Forget drops peer, such as when it leaves the cluster; see
// Estimator.Forget.
func (d *Detector) Forget(peer uint64) { d.est.Forget(peer) }

// Offsets returns every peer's current estimate; see Estimator.Offsets.
func (d *Detector) Offsets(now time.Time) map[uint64]PeerOffset { return d.est.Offsets(now) }

// Ahead judges this node's clock at now (this node's wall clock) from the
// current estimates, updates the hysteresis state, and returns the verdict.
// Call it on a steady tick (say, every heartbeat), not only on samples, so
// that peers going stale are noticed.
func (d *Detector) Ahead(now time.Time) Drift {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := judge(&d.cfg, d.mu.drifting, d.est.Offsets(now))
	d.mu.drifting = v.Drifting
	return v
}

// judge is the pure core of Ahead: the cluster median with its bounds, then
// the hysteresis step from the previous verdict (was).
func judge(cfg *Config, was bool, offs map[uint64]PeerOffset) Drift {
	v := clusterAhead(offs)
	if v.AheadMin > v.Ahead || v.Ahead > v.AheadMax {
		panic(fmt.Sprintf("clock: ahead %v outside its bounds [%v, %v]", v.Ahead, v.AheadMin, v.AheadMax))
	}
	v.Drifting, v.Reason = decide(cfg, was, v)
	v.Changed = v.Drifting != was
	return v
}

// clusterAhead computes Ahead, AheadMin, AheadMax and Peers.
func clusterAhead(offs map[uint64]PeerOffset) Drift {
	// Index 0 is this node: offset 0, known exactly.
	mid := make([]time.Duration, 1, len(offs)+1)
	lo := make([]time.Duration, 1, len(offs)+1)
	hi := make([]time.Duration, 1, len(offs)+1)
	for _, p := range offs {
		mid = append(mid, p.Offset)
		lo = append(lo, satSub(p.Offset, p.Uncertainty))
		hi = append(hi, satAdd(p.Offset, p.Uncertainty))
	}
	return Drift{
		Ahead:    satNeg(lowerMedian(mid)),
		AheadMin: satNeg(lowerMedian(hi)),
		AheadMax: satNeg(lowerMedian(lo)),
		Peers:    len(offs),
	}
}

// lowerMedian sorts ds and returns its middle element, the lower of the two
// for an even length. ds must not be empty.
func lowerMedian(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

// decide is the hysteresis step: the new verdict and why.
func decide(cfg *Config, was bool, v Drift) (bool, string) {
	resume := cfg.resumeBelow()
	switch {
	case v.Peers < cfg.MinPeers:
		return false, fmt.Sprintf("%d of %d peers measured: too few to compare clocks with", v.Peers, cfg.MinPeers)
	case !was && v.AheadMin > cfg.MaxDrift:
		return true, fmt.Sprintf("clock ahead of the cluster median by %v (at least %v, %d peers), over max drift %v",
			v.Ahead, v.AheadMin, v.Peers, cfg.MaxDrift)
	case was && v.Ahead < resume:
		return false, fmt.Sprintf("clock back in bounds: ahead of the cluster median by %v, under %v", v.Ahead, resume)
	case was:
		return true, fmt.Sprintf("clock still ahead of the cluster median by %v (%d peers), not yet under %v",
			v.Ahead, v.Peers, resume)
	case v.Ahead < 0:
		return false, fmt.Sprintf("clock behind the cluster median by %v (%d peers); behind is safe", satNeg(v.Ahead), v.Peers)
	case v.Ahead > cfg.MaxDrift:
		return false, fmt.Sprintf("clock ahead of the cluster median by %v but only %v for certain (round trips too long), max drift %v",
			v.Ahead, v.AheadMin, cfg.MaxDrift)
	}
	return false, fmt.Sprintf("clock ahead of the cluster median by %v (%d peers), within max drift %v", v.Ahead, v.Peers, cfg.MaxDrift)
}
