package sim

import (
	"log/slog"
	"math/rand/v2"
	"reflect"
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
