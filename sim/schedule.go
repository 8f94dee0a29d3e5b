package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	// faultClock shifts one node's clock within the skew bound.
	faultClock
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"partition-one", "drop-replication", "delay", "lose-replies", "kill", "crash", "clock-skew"}

func (k faultKind) String() string {
	if k >= 0 && k < numFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

func (k faultKind) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// fault is one fault of the schedule: Kind on node Node (0-based; for a
// link fault, the link from Node to Peer) from At for For.
type fault struct {
	Kind faultKind     `json:"kind"`
	At   time.Duration `json:"at"`
	For  time.Duration `json:"for"`
	Node int           `json:"node"`
	Peer int           `json:"peer"`
	// Delay is a delay fault's delay; Shift a clock fault's shift;
	// Unsynced the percent of unsynced writes a crash keeps.
	Delay    time.Duration `json:"delay,omitempty"`
	Shift    time.Duration `json:"shift,omitempty"`
	Unsynced int           `json:"unsynced,omitempty"`
	// Seed draws which unsynced writes a crash keeps.
	Seed uint64 `json:"seed,omitempty"`
}

// link reports whether the fault acts on a link between two nodes.
func (f fault) link() bool {
	return f.Kind == faultDropReplication || f.Kind == faultDelay || f.Kind == faultLoseReplies
}

// targets returns the nodes the fault acts on, 1-based as the history
// names nodes.
func (f fault) targets() []int {
	if f.link() {
		return []int{f.Node + 1, f.Peer + 1}
	}
	return []int{f.Node + 1}
}

func (f fault) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// schedule draws the faults of a run from rng: one at a time, each after
// a quiet gap, until FaultTime. With one node there is no link to cut.
func schedule(cfg *Config, rng *rand.Rand) []fault {
	var out []fault
	at := time.Duration(0)
	for {
		at += between(rng, cfg.FaultGapMin, cfg.FaultGapMax)
		f := fault{At: at, For: between(rng, cfg.FaultLenMin, cfg.FaultLenMax), Node: rng.IntN(cfg.Nodes)}
		if f.At+f.For > cfg.FaultTime {
			return out
		}
		f.Kind = faultKind(rng.IntN(int(numFaultKinds)))
		if cfg.Nodes == 1 && (f.link() || f.Kind == faultIsolate) {
			f.Kind = faultKill
		}
		if f.link() {
			f.Peer = (f.Node + 1 + rng.IntN(cfg.Nodes-1)) % cfg.Nodes
		}
		switch f.Kind {
		case faultDelay:
			f.Delay = between(rng, time.Millisecond, cfg.DelayMax)
		case faultClock:
			bound := cfg.SkewBound / clockShiftDivisor
			f.Shift = between(rng, -bound, bound)
		case faultCrash:
			f.Unsynced = rng.IntN(cfg.MaxUnsyncedPercent + 1)
			f.Seed = rng.Uint64()
		}
		out = append(out, f)
		at += f.For
	}
}

// between draws a duration in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
