package clock

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustDetector(t testing.TB, edit func(*Config)) *Detector {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	d, err := NewDetector(cfg)
	if err != nil {
		t.Fatalf("new detector: %v", err)
	}
	return d
}

// checkBounds fails unless the verdict's bounds hold Ahead.
func checkBounds(t *testing.T, name string, v Drift) {
	t.Helper()
	if v.AheadMin > v.Ahead || v.Ahead > v.AheadMax {
		t.Errorf("%s: ahead %v outside [%v, %v]", name, v.Ahead, v.AheadMin, v.AheadMax)
	}
}

// Verdicts from one node's point of view, given each peer's true offset
// (peer clock minus this node's clock) and the exchanges' legs.
// Reference: docs/design.md, "Clock": ahead of the cluster's median by more than
// --max-clock-drift (default 2s here) means drifting; behind never does.
func TestDetectorVerdicts(t *testing.T) {
	ms, s := time.Millisecond, time.Second
	tests := []struct {
		name      string
		minPeers  int // 0: the default
		peers     []time.Duration
		legs      leg
		ahead     time.Duration
		drifting  bool
		reasonHas string
	}{
		{"30s ahead of two peers", 0, []time.Duration{-30 * s, -30 * s}, leg{ms, ms}, 30 * s, true, "over max drift"},
		{"1s ahead of two peers", 0, []time.Duration{-s, -s}, leg{ms, ms}, s, false, "within max drift"},
		{"30s behind two peers", 0, []time.Duration{30 * s, 30 * s}, leg{ms, ms}, -30 * s, false, "behind is safe"},
		{"a peer of the node 30s ahead", 0, []time.Duration{30 * s, 0}, leg{ms, ms}, 0, false, "within max drift"},
		{"two nodes, the one ahead", 0, []time.Duration{-30 * s}, leg{ms, ms}, 30 * s, true, "over max drift"},
		{"two nodes, the one behind", 0, []time.Duration{30 * s}, leg{ms, ms}, 0, false, "within max drift"},
		{"ahead of one peer of three", 0, []time.Duration{-30 * s, 0, 0}, leg{ms, ms}, 0, false, "within max drift"},
		{"ahead of two peers of three", 0, []time.Duration{-30 * s, -30 * s, 0}, leg{ms, ms}, 30 * s, true, "over max drift"},
		{"just over, certain", 0, []time.Duration{-2100 * ms, -2100 * ms}, leg{ms, ms}, 2100 * ms, true, "over max drift"},
		{"just over, uncertain", 0, []time.Duration{-2100 * ms, -2100 * ms}, leg{200 * ms, 200 * ms}, 2100 * ms, false, "for certain"},
		// AheadMin = 2002ms - (1ms rtt/2 + 1ms precision) = MaxDrift: not over.
		{"certain lead exactly max drift", 0, []time.Duration{-2002 * ms, -2002 * ms}, leg{ms, ms}, 2002 * ms, false, "for certain"},
		{"no peers", 0, nil, leg{ms, ms}, 0, false, "too few"},
		{"fewer than min peers", 2, []time.Duration{-30 * s}, leg{ms, ms}, 30 * s, false, "too few"},
		{"min peers met", 2, []time.Duration{-30 * s, -30 * s}, leg{ms, ms}, 30 * s, true, "over max drift"},
	}
	for _, tt := range tests {
		d := mustDetector(t, func(c *Config) {
			if tt.minPeers != 0 {
				c.MinPeers = tt.minPeers
			}
		})
		for i, off := range tt.peers {
			mustObserve(t, d, uint64(i+1), exchange(base, off, tt.legs.out, tt.legs.back))
		}
		v := d.Ahead(base.Add(time.Second))
		checkBounds(t, tt.name, v)
		if v.Ahead != tt.ahead || v.Drifting != tt.drifting || v.Peers != len(tt.peers) {
			t.Errorf("%s: got ahead %v drifting %v peers %d; want %v %v %d (%s)",
				tt.name, v.Ahead, v.Drifting, v.Peers, tt.ahead, tt.drifting, len(tt.peers), v.Reason)
		}
		if v.Changed != tt.drifting {
			t.Errorf("%s: changed %v; want %v (the first verdict after not drifting)", tt.name, v.Changed, tt.drifting)
		}
		if !strings.Contains(v.Reason, tt.reasonHas) {
			t.Errorf("%s: reason %q; want it to mention %q", tt.name, v.Reason, tt.reasonHas)
		}
		if want := max(-tt.ahead, 0); v.Behind() != want {
			t.Errorf("%s: behind %v; want %v", tt.name, v.Behind(), want)
		}
	}
}

// Every node of one cluster judges itself from its own samples: with node 0
// 30s ahead of nodes 1 and 2, only node 0 drifts.
func TestDetectorWholeClusterAgrees(t *testing.T) {
	clocks := []time.Duration{30 * time.Second, 0, 0} // each node's clock minus true time
	for self := range clocks {
		d := mustDetector(t, nil)
		now := base.Add(clocks[self])
		for peer := range clocks {
			if peer != self {
				mustObserve(t, d, uint64(peer+1), exchange(now, clocks[peer]-clocks[self], time.Millisecond, time.Millisecond))
			}
		}
		v := d.Ahead(now)
		if want := self == 0; v.Drifting != want {
			t.Errorf("node %d: drifting %v; want %v (%s)", self, v.Drifting, want, v.Reason)
		}
	}
}

// Reference: docs/design.md, "Clock": a drifting node resumes when back in
// bounds. It enters above MaxDrift (2s) and leaves only below
// MaxDrift*ResumeFraction (1s), so a clock near the limit does not flap.
func TestDetectorHysteresis(t *testing.T) {
	ms := time.Millisecond
	steps := []struct {
		ahead    time.Duration // this node's true lead over both peers
		drifting bool
		changed  bool
	}{
		{1000 * ms, false, false},
		{1900 * ms, false, false},
		{2500 * ms, true, true}, // enters above MaxDrift
		{1500 * ms, true, false},
		{2500 * ms, true, false},
		{1001 * ms, true, false}, // above the resume threshold
		{999 * ms, false, true},  // leaves below MaxDrift/2
		{1500 * ms, false, false},
		// The 1ms/0ms legs bias the estimate by -0.5ms and leave 1.5ms of
		// uncertainty (rtt/2 + precision): certain lead = true lead - 2ms.
		{2001 * ms, false, false}, // over, but not for certain
		{2002 * ms, false, false}, // certain lead exactly MaxDrift: not over
		{2003 * ms, true, true},
	}
	d := mustDetector(t, nil)
	now := base
	for i, st := range steps {
		// Each step moves the lead by more than the samples' uncertainty,
		// so the new samples evict the old ones (a stepped clock).
		for peer := uint64(1); peer <= 2; peer++ {
			mustObserve(t, d, peer, exchange(now, -st.ahead, ms, 0))
		}
		v := d.Ahead(now)
		name := fmt.Sprintf("step %d (ahead %v)", i, st.ahead)
		checkBounds(t, name, v)
		if v.Ahead != st.ahead-ms/2 {
			t.Errorf("%s: estimate %v; want %v", name, v.Ahead, st.ahead-ms/2)
		}
		if v.Drifting != st.drifting || v.Changed != st.changed {
			t.Errorf("%s: drifting %v changed %v; want %v %v (%s)", name, v.Drifting, v.Changed, st.drifting, st.changed, v.Reason)
		}
		now = now.Add(time.Second)
	}
}

// A node that loses its peers (stale or forgotten) stops drifting: with no
// one to compare with it has no evidence, and a lone node must serve.
func TestDetectorTooFewPeersClears(t *testing.T) {
	d := mustDetector(t, nil)
	stale := DefaultConfig().StaleAfter
	for peer := uint64(1); peer <= 2; peer++ {
		mustObserve(t, d, peer, exchange(base, -30*time.Second, time.Millisecond, time.Millisecond))
	}
	if v := d.Ahead(base); !v.Drifting {
		t.Fatalf("before: not drifting (%s)", v.Reason)
	}
	v := d.Ahead(base.Add(stale + time.Second))
	if v.Drifting || !v.Changed || v.Peers != 0 || !strings.Contains(v.Reason, "too few") {
		t.Fatalf("peers stale: got %+v; want a change to not drifting, too few peers", v)
	}
	// The first sample after reconnecting makes it drift again.
	at := base.Add(stale + 2*time.Second)
	mustObserve(t, d, 1, exchange(at, -30*time.Second, time.Millisecond, time.Millisecond))
	if v := d.Ahead(at); !v.Drifting || !v.Changed {
		t.Fatalf("reconnected: got %+v; want drifting again", v)
	}
	d.Forget(1)
	if v := d.Ahead(at); v.Drifting || v.Peers != 0 {
		t.Fatalf("forgotten: got %+v; want not drifting", v)
	}
}

// Run under go test -race: every method from many goroutines at once.
func TestDetectorConcurrentUse(t *testing.T) {
	const (
		peers  = 8
		rounds = 200
	)
	d := mustDetector(t, nil)
	var wg sync.WaitGroup
	for p := uint64(1); p <= peers; p++ {
		wg.Go(func() {
			for i := range rounds {
				at := base.Add(time.Duration(i) * time.Millisecond)
				if err := d.Observe(p, exchange(at, -30*time.Second, time.Millisecond, time.Millisecond)); err != nil {
					t.Errorf("observe peer %d: %v", p, err)
					return
				}
			}
		})
	}
	// A peer that comes and goes, on ids the others do not use.
	wg.Go(func() {
		for i := range rounds {
			_ = d.Observe(100, exchange(base, 0, 0, 0))
			d.Forget(100)
			_ = d.Offsets(base.Add(time.Duration(i) * time.Millisecond))
		}
	})
	for range 2 {
		wg.Go(func() {
			for i := range rounds {
				checkBounds(t, "concurrent", d.Ahead(base.Add(time.Duration(i)*time.Millisecond)))
			}
		})
	}
	wg.Wait()
	d.Forget(100)
	v := d.Ahead(base.Add(rounds * time.Millisecond))
	if !v.Drifting || v.Peers != peers || v.Ahead != 30*time.Second {
		t.Fatalf("after: got %+v; want drifting 30s ahead of %d peers", v, peers)
	}
}

// Peers' readings are outside input: no value may panic, wrap around, or
// break the verdict's bounds (judge panics if it does).
func FuzzObserve(f *testing.F) {
	f.Add(int64(0), int64(30), int64(1_000_000), int64(1_000_000), int64(0))
	f.Add(int64(0), int64(-1<<62), int64(0), int64(0), int64(1<<40))
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62), int64(5), int64(-1<<62))
	f.Fuzz(func(t *testing.T, sentNs, peerSec, recvDeltaNs, rttNs, nowDeltaNs int64) {
		d := mustDetector(t, nil)
		sent := time.Unix(0, sentNs)
		s := Sample{Sent: sent, Peer: time.Unix(peerSec, 0), Recv: sent.Add(time.Duration(recvDeltaNs)), RTT: time.Duration(rttNs)}
		err := d.Observe(1, s)
		// A sane second peer, so the median has something to weigh.
		_ = d.Observe(2, exchange(sent, 0, time.Millisecond, time.Millisecond))
		if err == nil {
			p, ok := d.Offsets(s.Recv)[1]
			if !ok || p.Uncertainty < 0 || p.RTT != s.RTT {
				t.Fatalf("accepted %+v but estimate is %+v (present %v)", s, p, ok)
			}
		}
		v := d.Ahead(sent.Add(time.Duration(nowDeltaNs)))
		checkBounds(t, "fuzz", v)
		if v.Reason == "" {
			t.Fatalf("verdict without a reason: %+v", v)
		}
	})
}
