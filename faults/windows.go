package faults

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/task"
)

// The nemesis windows of a run, and whether an anomaly falls within
// the faults beyond the design's bounds that explain it.

// buildWindows pairs each nemesis stop with the earliest open start of the
// same fault (same name and targets, else the same name). A start never
// stopped lasts until the heal phase after it, or the history's end.
func (h *history) buildWindows() {
	beyond := map[string]bool{}
	for _, n := range h.in.Run.BeyondBounds {
		beyond[n] = true
	}
	var open []int // indices into h.windows, oldest first
	for i := range h.in.Events {
		e := &h.in.Events[i]
		if e.Type != Nemesis {
			continue
		}
		if e.F == "start" {
			w := window{
				nemesis: e.Nemesis, targets: e.Targets, detail: e.Detail, start: e.TNs, stop: h.tEnd, open: true,
				beyond: beyond[e.Nemesis], clock: isClockFault(e.Nemesis), wipe: isWipe(e.Nemesis),
			}
			if w.wipe {
				w.cohorts, w.voters = wipeDetail(e.Detail)
			}
			h.windows = append(h.windows, w)
			open = append(open, len(h.windows)-1)
			continue
		}
		if e.F != "stop" {
			if e.Nemesis == NoteRepaired {
				h.repairs = append(h.repairs, e.TNs)
			}
			continue // a nemesis's own note: no window starts or ends
		}
		k := slices.IndexFunc(open, func(w int) bool {
			return h.windows[w].nemesis == e.Nemesis && slices.Equal(h.windows[w].targets, e.Targets)
		})
		if k < 0 {
			k = slices.IndexFunc(open, func(w int) bool { return h.windows[w].nemesis == e.Nemesis })
		}
		if k < 0 {
			h.defect(kindUnpairedStop, e, fmt.Sprintf("stop of %s %v", e.Nemesis, e.Targets))
			continue
		}
		w := &h.windows[open[k]]
		w.stop, w.open = e.TNs, false
		open = slices.Delete(open, k, k+1)
	}
	for _, i := range open {
		w := &h.windows[i]
		for _, p := range h.phases {
			if p.F == phaseHeal && p.TNs >= w.start {
				w.stop = p.TNs
				break
			}
		}
	}
}

// isClockFault tells a clock fault by its name. Such a fault beyond the
// bound may break the time-based promises (leases not overlapping) but not
// durability or fencing, which do not depend on clocks.
func isClockFault(nemesis string) bool {
	n := strings.ToLower(nemesis)
	return strings.Contains(n, "clock") || strings.Contains(n, "skew")
}

// Bound classes: which beyond-bounds faults may excuse an anomaly.
type boundClass int

const (
	// timing anomalies (overlapping leases) are excused by any fault
	// beyond the bounds: a clock beyond the skew bound, or claims lost
	// with a majority.
	timing boundClass = iota
	// durability anomalies (a lost write, a reused claim id, a stale op
	// accepted) are excused only by faults that lose data beyond the
	// bounds; a clock fault, whatever its size, must not cause them.
	durability
)

// isWipe tells the nemeses that delete nodes' data dirs.
func isWipe(nemesis string) bool { return nemesis == NemWipe || nemesis == NemWipeMajority }

// wipeDetail reads the cohorts and the metadata voters a wipe's start
// event recorded; each is nil when it recorded none (or none that parses).
func wipeDetail(detail json.RawMessage) (cohorts map[int][]int, voters []int) {
	var d struct {
		Cohorts map[int][]int `json:"cohorts"`
		Voters  []int         `json:"voters"`
	}
	if len(detail) == 0 {
		return nil, nil
	}
	if json.Unmarshal(detail, &d) != nil {
		return nil, nil
	}
	return d.Cohorts, d.Voters
}

// beyond reports whether faults beyond the bounds can explain an anomaly
// of the class on task id ("" for one of no single task) whose span
// is [from, to]: from its earliest event (often the acknowledgement a
// fault could have undone) to its latest. Every fault counted overlaps
// the span; a clock fault never explains a durability anomaly.
//
// Any such fault but a wipe explains it outright. Wipes are judged by
// what they deleted, since one wipe is not beyond the bounds for every
// write: the design promises that no acknowledged write is lost while
// fewer than N/2 replicas of its partition are lost for good. So the
// wipes overlapping the span are summed per partition (their targets in
// the partition's cohort just before each wipe: replicasWiped), and they
// explain the anomaly when that sum reaches
//
//   - for a task, a majority of N: claims, updates and completions are
//     acknowledged by a majority whatever the run's w;
//   - for a task lost whole (beyondLoss: never dequeued, or gone),
//     wipeLossNeed: the run's w if it acknowledged enqueues with fewer
//     than a majority (with w=1 one replica wiped may have been the only
//     one), else a majority;
//   - for no single task (the cluster not converging), a majority of N
//     in some partition, or a majority of the metadata group's voters
//     (without which no partition changes leader or placement again).
//
// A span that starts before a wipe is the case that matters: a task
// acknowledged early and lost for good shows no operation near the wipe,
// only its acknowledgement and the final reads (to = the history's end).
// A wipe that ended before the span began cannot have deleted what was
// acknowledged after it (an acknowledgement means w copies existed then),
// so it does not count. Wipes add up only until the cluster is whole
// again: a NoteRepaired note (every cohort back to its replicas, holding
// their data, every voter alive) ends one sum and starts the next, and
// the largest sum decides. Without such notes the sum runs over the whole
// span, which errs towards excusing (the copies may have been restored in
// between), but only in runs with wipes. Without a wipe the rule is the
// overlap alone, as before: a run with no beyond-bounds fault, or only
// clock faults, excuses no lost write.
func (h *history) beyond(class boundClass, id string, from, to int64) bool {
	return h.explained(class, id, from, to, majority(max(h.in.Run.Replicas, 1)))
}

// beyondLoss is beyond for a task lost whole (the total-queue checks'
// lost): the wipes need only delete as many of its partition's replicas
// as its enqueue was acknowledged by (wipeLossNeed).
func (h *history) beyondLoss(id string, from, to int64) bool {
	return h.explained(durability, id, from, to, h.wipeLossNeed())
}

// explained is beyond with the replicas of a task's partition the wipes
// must delete (need); an anomaly of no single task needs a majority.
func (h *history) explained(class boundClass, id string, from, to int64, need int) bool {
	run := &h.in.Run
	part := -1 // unknown: each wipe counts all its targets
	if id != "" {
		part = partitionOfTask(id, run.Partitions)
	}
	// The sums, per stretch between repairs (the repairs before a wipe
	// started number its stretch).
	type sums struct {
		wiped       map[int]int // partition (-1: unknown) -> replicas wiped
		votersWiped int
		voters      int
	}
	stretches := map[int]*sums{}
	for i := range h.windows {
		w := &h.windows[i]
		if !w.beyond || class == durability && w.clock {
			continue
		}
		if w.start > to || from > w.stop {
			continue
		}
		if !w.wipe {
			return true
		}
		k, _ := slices.BinarySearch(h.repairs, w.start)
		st := stretches[k]
		if st == nil {
			st = &sums{wiped: map[int]int{}}
			stretches[k] = st
		}
		if id != "" {
			st.wiped[part] += w.replicasWiped(part, run.Replicas)
			continue
		}
		if w.voters != nil {
			st.voters = max(st.voters, len(w.voters))
			for _, t := range w.targets {
				if slices.Contains(w.voters, t) {
					st.votersWiped++
				}
			}
		}
		if w.cohorts == nil {
			st.wiped[-1] += w.replicasWiped(-1, run.Replicas)
			continue
		}
		for p := range w.cohorts {
			st.wiped[p] += w.replicasWiped(p, run.Replicas)
		}
	}
	if id == "" {
		need = majority(max(run.Replicas, 1))
	}
	for _, st := range stretches {
		if st.voters > 0 && st.votersWiped >= majority(st.voters) {
			return true
		}
		for p, n := range st.wiped {
			// An unknown partition's count (a wipe without cohorts)
			// adds to every known one's.
			if p >= 0 {
				n += st.wiped[-1]
			}
			if n >= need {
				return true
			}
		}
	}
	return false
}

// wipeLossNeed is how many of a task's partition's replicas must be lost
// for good before the design no longer promises the task survives: a
// majority of N; fewer when the run acknowledged enqueues with a w below
// a majority, since an enqueue acknowledged by w replicas may exist on
// those alone until the others catch up.
func (h *history) wipeLossNeed() int {
	need := majority(max(h.in.Run.Replicas, 1))
	if w := h.in.Run.W; w > 0 && w < need {
		need = w
	}
	return need
}

// partitionOfTask is the partition of a task id (hex), or -1 when the id
// or the partition count does not parse.
func partitionOfTask(id string, partitions int) int {
	tid, err := task.ParseID(id)
	if err != nil || partitions < 1 {
		return -1
	}
	return partitionOf(tid[:], partitions)
}

// partitionOf mirrors ring.PartitionOf (which faults may not import: it
// drives skuldd from outside, layering_test.go): FNV-1a 64 of the id's
// bytes modulo the partition count. ring's hash is part of skuldd's
// on-disk format and never changes; TestPartitionOfMatchesRing holds this
// copy to it.
func partitionOf(id []byte, partitions int) int {
	h := fnv.New64a()
	_, _ = h.Write(id)
	return int(h.Sum64() % uint64(partitions))
}
