package sim

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/store"
)

// TestSchedule: a seed fixes the schedule; within a track faults never
// overlap and all end by FaultTime; over seeds every kind is drawn, link
// faults name a peer other than their node, and one node draws no link
// fault, freeze or majority.
func TestSchedule(t *testing.T) {
	cfg := DefaultConfig()
	draw := func(seed uint64, c *Config) []fault {
		return schedule(c, rand.New(rand.NewPCG(seed, streamSchedule)))
	}
	if a, b := draw(7, &cfg), draw(7, &cfg); !reflect.DeepEqual(a, b) {
		t.Fatal("one seed drew two schedules")
	}
	seen := map[faultKind]bool{}
	for seed := range uint64(200) {
		fs := draw(seed, &cfg)
		end := map[int]int64{}
		for i, f := range fs {
			seen[f.Kind] = true
			if i > 0 && f.At < fs[i-1].At {
				t.Fatalf("seed %d: schedule not sorted by start at fault %d", seed, i)
			}
			if int64(f.At) < end[f.Track] {
				t.Fatalf("seed %d: %v starts before its track's previous fault ends", seed, f)
			}
			end[f.Track] = int64(f.At + f.For)
			if f.At+f.For > cfg.FaultTime {
				t.Fatalf("seed %d: %v ends after the fault time %v", seed, f, cfg.FaultTime)
			}
			if f.link() && f.Peer == f.Node {
				t.Fatalf("seed %d: %v names its node as its peer", seed, f)
			}
		}
	}
	for k := range numFaultKinds {
		if !seen[k] {
			t.Errorf("no seed of 200 drew %v", k)
		}
	}
	one := DefaultConfig()
	one.Nodes, one.Replicas = 1, 1
	for seed := range uint64(50) {
		for _, f := range draw(seed, &one) {
			if f.link() || f.Kind == faultFreeze || f.Kind == faultIsolate {
				t.Fatalf("seed %d: one node drew %v", seed, f)
			}
		}
	}
}

// TestClockShiftsWithinBound: at every instant of every schedule, every
// node's clock offset (0 outside a clock fault) is within half the skew
// bound of true time and any two are at most the bound apart, so the
// design's no-overlap promise holds (Config.SkewBound); the offsets are
// whole ms, one per distinct node shifted. And the draws reach what they
// are for: the full bound apart, several nodes at once, both directions.
func TestClockShiftsWithinBound(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		skew  time.Duration
	}{
		{1, 100 * time.Millisecond},
		{3, 100 * time.Millisecond},
		{5, 100 * time.Millisecond},
		{3, 101 * time.Millisecond}, // an odd bound: halves round down
		{3, 10 * time.Second},
	} {
		t.Run(fmt.Sprintf("%d nodes, bound %v", tc.nodes, tc.skew), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.Replicas, cfg.SkewBound = tc.nodes, min(cfg.Replicas, tc.nodes), tc.skew
			half := tc.skew.Milliseconds() / 2
			var faultsSeen, several, fullBound, ahead, behind int
			for seed := range uint64(2000) {
				for _, f := range schedule(&cfg, rand.New(rand.NewPCG(seed, streamSchedule))) {
					if f.Kind != faultClock {
						continue
					}
					faultsSeen++
					if len(f.Shifted) == 0 || len(f.Shifted) != len(f.OffsetsMs) || f.Node != f.Shifted[0] {
						t.Fatalf("seed %d: %v: want one offset per shifted node, Node the first", seed, f)
					}
					offsets := make([]int64, tc.nodes) // the unshifted keep true time
					seen := map[int]bool{}
					for k, n := range f.Shifted {
						if n < 0 || n >= tc.nodes || seen[n] {
							t.Fatalf("seed %d: %v: node %d shifted twice or out of range", seed, f, n)
						}
						seen[n] = true
						offsets[n] = f.OffsetsMs[k]
						if o := f.OffsetsMs[k]; o > half || o < -half {
							t.Fatalf("seed %d: %v: offset %d ms beyond half the bound (%d ms)", seed, f, o, half)
						}
					}
					spread := slices.Max(offsets) - slices.Min(offsets)
					if time.Duration(spread)*time.Millisecond > tc.skew {
						t.Fatalf("seed %d: %v: clocks %d ms apart, over the bound %v", seed, f, spread, tc.skew)
					}
					if len(f.Shifted) > 1 {
						several++
					}
					if spread == 2*half {
						fullBound++
					}
					if slices.Max(offsets) > 0 {
						ahead++
					}
					if slices.Min(offsets) < 0 {
						behind++
					}
				}
			}
			if faultsSeen == 0 || ahead == 0 || behind == 0 {
				t.Fatalf("%d clock faults, %d with a clock ahead, %d behind; want some of each", faultsSeen, ahead, behind)
			}
			if tc.nodes > 1 && (several == 0 || fullBound == 0) {
				t.Errorf("of %d clock faults %d shifted several nodes, %d put two the full bound apart; want some of each", faultsSeen, several, fullBound)
			}
		})
	}
}

// TestNodesNeverHoldSyncs: a simulated node holds no write-ahead log
// sync. The hold is decided by the real scheduler's latency and ended by
// a timer; in a bubble, a goroutine waiting on a mutex meanwhile keeps
// virtual time from reaching that timer, and the run hung (seen in CI
// under the load of every package's tests).
func TestNodesNeverHoldSyncs(t *testing.T) {
	c := &cluster{cfg: &Config{Partitions: 4, Replicas: 3, SkewBound: 100 * time.Millisecond}, net: peer.NewMemNet(), log: slog.New(slog.DiscardHandler)}
	cfg := c.nodeConfig(0, &simNode{fs: store.NewMemFS(), shift: clock.NewShift(clock.Real{}, 0)})
	if cfg.WALMinSyncInterval != 0 {
		t.Fatalf("simulated node's WAL min sync interval %v; want 0, no holds", cfg.WALMinSyncInterval)
	}
}
