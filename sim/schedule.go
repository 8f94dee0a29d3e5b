package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// faultKind is one kind of fault of the schedule.
type faultKind int

const (
	// faultIsolate cuts one node from every other, both ways.
	faultIsolate faultKind = iota
	// faultDropReplication drops the replication (writes and
	// anti-entropy) one node sends another, while raft, gossip and
	// forwarded requests still pass.
	faultDropReplication
	// faultDelay delays every request between two nodes, both ways.
	faultDelay
	// faultLoseReplies loses the answers of the client requests one node
	// forwards to another: served there, in doubt here.
	faultLoseReplies
	// faultKill kills a node (what it synced and wrote survives, as a
	// kill -9 leaves the page cache) and restarts it when the fault ends.
	faultKill
	// faultCrash cuts a node's power: only what it synced survives, and a
	// drawn share of the rest. It restarts when the fault ends.
	faultCrash
	// faultClock shifts the clocks of one or more nodes, each within half
	// the skew bound of true time, so no two are more than the bound apart
	// (Config.SkewBound).
	faultClock
	// faultCut drops what one node sends another, one way: the other's
	// requests still arrive and are answered.
	faultCut
	// faultDuplicate delivers every request one node sends another twice.
	faultDuplicate
	// faultReorder delays each request between two nodes by its own draw
	// up to DelayMax, both ways: requests overtake each other.
	faultReorder
	// faultFreeze stops a node as SIGSTOP would: it is cut from every
	// other node and the client requests that reach it wait, to be served
	// when it thaws with whatever it then believes.
	faultFreeze
	// faultMajorityDown cuts the power of a majority of the nodes at once
	// (Node and Peer of three): only what each synced survives, and a
	// drawn share of the rest. They restart when the fault ends.
	faultMajorityDown
	numFaultKinds
)

var faultNames = [numFaultKinds]string{
	"partition-one", "drop-replication", "delay", "lose-replies", "kill", "crash", "clock-skew",
	"cut-one-way", "duplicate", "reorder", "freeze", "majority-down",
}

// linkKinds are the faults of the link track, nodeKinds those of the node
// track (schedule): the two tracks run at once, so a link fault may
// overlap a fault of a node.
var (
	linkKinds = []faultKind{faultIsolate, faultDropReplication, faultDelay, faultLoseReplies, faultCut, faultDuplicate, faultReorder}
	nodeKinds = []faultKind{faultKill, faultCrash, faultClock, faultFreeze, faultMajorityDown}
)

func (k faultKind) String() string {
	if k >= 0 && k < numFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

func (k faultKind) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// fault is one fault of the schedule: Kind on node Node (0-based; for a
// link fault, the link from Node to Peer; for a clock fault, the first of
// Shifted) from At for For.
type fault struct {
	Kind faultKind `json:"kind"`
	// Track is the fault's track (schedule): faults of one track never
	// overlap.
	Track int           `json:"track"`
	At    time.Duration `json:"at"`
	For   time.Duration `json:"for"`
	Node  int           `json:"node"`
	Peer  int           `json:"peer"`
	// Delay is a delay fault's delay (a reorder's bound); Unsynced the
	// percent of unsynced writes a crash keeps.
	Delay    time.Duration `json:"delay,omitempty"`
	Unsynced int           `json:"unsynced,omitempty"`
	// Shifted are a clock fault's nodes (0-based) and OffsetsMs their
	// clock offsets, in the same order: the nemesis event's detail, where
	// the checkers read "offsets_ms" against its targets.
	Shifted   []int   `json:"shifted,omitempty"`
	OffsetsMs []int64 `json:"offsets_ms,omitempty"`
	// Seed draws which unsynced writes a crash keeps.
	Seed uint64 `json:"seed,omitempty"`
}

// link reports whether the fault acts on a link between two nodes (or,
// for majority-down, on two nodes): it names Peer too.
func (f fault) link() bool {
	switch f.Kind {
	case faultDropReplication, faultDelay, faultLoseReplies, faultCut, faultDuplicate, faultReorder, faultMajorityDown:
		return true
	}
	return false
}

// targets returns the nodes the fault acts on, 1-based as the history
// names nodes.
func (f fault) targets() []int {
	if f.Kind == faultClock {
		out := make([]int, len(f.Shifted))
		for i, n := range f.Shifted {
			out[i] = n + 1
		}
		return out
	}
	if f.link() {
		return []int{f.Node + 1, f.Peer + 1}
	}
	return []int{f.Node + 1}
}

func (f fault) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// schedule draws the faults of a run from rng on two tracks, each one
// fault at a time after a quiet gap, until FaultTime: the link track (cuts,
// drops, delays, duplicates, reordering) and the node track (kills,
// crashes, clocks, freezes, a majority down), which overlap. Sorted by
// start. A single node has no link to cut and no majority to lose, and
// draws kills, crashes and clocks only.
func schedule(cfg *Config, rng *rand.Rand) []fault {
	out := track(cfg, rng, nodeKinds, 0)
	if cfg.Nodes > 1 {
		out = append(out, track(cfg, rng, linkKinds, 1)...)
	}
	slices.SortStableFunc(out, func(a, b fault) int { return cmp.Compare(a.At, b.At) })
	return out
}

// track draws one track's faults of kinds.
func track(cfg *Config, rng *rand.Rand, kinds []faultKind, id int) []fault {
	var out []fault
	at := time.Duration(0)
	for {
		at += between(rng, cfg.FaultGapMin, cfg.FaultGapMax)
		f := fault{Track: id, At: at, For: between(rng, cfg.FaultLenMin, cfg.FaultLenMax), Node: rng.IntN(cfg.Nodes)}
		if f.At+f.For > cfg.FaultTime {
			return out
		}
		f.Kind = kinds[rng.IntN(len(kinds))]
		if cfg.Nodes == 1 && (f.Kind == faultFreeze || f.Kind == faultMajorityDown) {
			f.Kind = faultKill
		}
		if f.link() {
			f.Peer = (f.Node + 1 + rng.IntN(cfg.Nodes-1)) % cfg.Nodes
		}
		switch f.Kind {
		case faultDelay, faultReorder:
			f.Delay = between(rng, time.Millisecond, cfg.DelayMax)
		case faultClock:
			f.Shifted, f.OffsetsMs = clockShifts(cfg, rng)
			f.Node = f.Shifted[0]
		case faultCrash, faultMajorityDown:
			f.Unsynced = rng.IntN(cfg.MaxUnsyncedPercent + 1)
			f.Seed = rng.Uint64()
		}
		out = append(out, f)
		at += f.For
	}
}

// clockShifts draws a clock fault's nodes, 1 to all of them, and their
// offsets: each a whole number of ms (so the history's offsets_ms are the
// offsets exactly) within ±SkewBound/2, so that with the other nodes at
// true time no two clocks are more than SkewBound apart (Config.SkewBound
// has the arithmetic). With clockSpreadProb, two of them go to the two
// ends, the full bound apart.
func clockShifts(cfg *Config, rng *rand.Rand) (nodes []int, offsetsMs []int64) {
	half := cfg.SkewBound.Milliseconds() / 2
	nodes = rng.Perm(cfg.Nodes)[:1+rng.IntN(cfg.Nodes)]
	offsetsMs = make([]int64, len(nodes))
	for i := range offsetsMs {
		offsetsMs[i] = rng.Int64N(2*half+1) - half
	}
	if len(nodes) >= 2 && rng.Float64() < clockSpreadProb {
		offsetsMs[0], offsetsMs[1] = half, -half
	}
	return nodes, offsetsMs
}

// between draws a duration in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
