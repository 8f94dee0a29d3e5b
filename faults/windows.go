package faults

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
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
				num: len(h.windows) + 1, nemesis: e.Nemesis, targets: e.Targets, detail: e.Detail, start: e.TNs, stop: h.tEnd, open: true,
				beyond: beyond[e.Nemesis], clock: isClockFault(e.Nemesis), wipe: isWipe(e.Nemesis),
			}
			if w.wipe {
				w.cohorts, w.voters = wipeDetail(e.Detail)
			}
			if w.clock {
				w.offsetsMs = clockOffsets(e.Targets, e.Detail)
			}
			w.grudge = grudgeDetail(e.Detail)
			h.windows = append(h.windows, w)
			open = append(open, len(h.windows)-1)
			continue
		}
		if e.F != "stop" {
			switch e.Nemesis {
			case NoteRepaired:
				h.repairs = append(h.repairs, e.TNs)
			case NoteServing:
				if h.serving == nil {
					h.serving = map[int][]int64{}
				}
				for _, n := range e.Targets {
					h.serving[n] = append(h.serving[n], e.TNs)
				}
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

// excuse says which faults beyond the design's bounds explain an anomaly,
// for the report (Example.Excused); "" when none does and the anomaly
// fails the run.
//
// Two kinds of fault take the cluster beyond its bounds. Those that lose
// data for good (wipes; any other nemesis the run names beyond the bounds
// and that is not a clock fault) may explain any anomaly of the tasks they
// touch (beyond). A clock moved beyond the skew bound breaks only the
// promises that rest on clocks, leases not overlapping, and only through
// the node whose clock it moved: a lease that node granted, or one it
// judged expired and granted again (timingExcuse). It never explains a
// lost write, a reused claim id or a stale op accepted.
type excuse string

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

// grudgeDetail reads the grudge a partition's start event recorded; nil
// when it recorded none (or none that parses).
func grudgeDetail(detail json.RawMessage) Grudge {
	var d struct {
		Grudge Grudge `json:"grudge"`
	}
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil {
		return nil
	}
	return d.Grudge
}

// beyond says which faults beyond the bounds that lose data explain an
// anomaly on task id ("" for one of no single task) whose span is
// [from, to]: from its earliest event (often the acknowledgement a fault
// could have undone) to its latest. Every fault counted overlaps the
// span; a clock fault never counts (timingExcuse judges those).
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
// between), but only in runs with wipes. A run with no beyond-bounds
// fault, or only clock faults, excuses nothing here.
func (h *history) beyond(id string, from, to int64) excuse {
	return h.explained(id, from, to, majority(max(h.in.Run.Replicas, 1)))
}

// beyondLoss is beyond for a task lost whole (the total-queue checks'
// lost): the wipes need only delete as many of its partition's replicas
// as its enqueue was acknowledged by (wipeLossNeed).
func (h *history) beyondLoss(id string, from, to int64) excuse {
	return h.explained(id, from, to, h.wipeLossNeed())
}

// explained is beyond with the replicas of a task's partition the wipes
// must delete (need); an anomaly of no single task needs a majority.
func (h *history) explained(id string, from, to int64, need int) excuse {
	part := -1 // unknown: each wipe counts all its targets
	if id != "" {
		part = partitionOfTask(id, h.in.Run.Partitions)
	}
	return h.explainedIn(part, id != "", from, to, need)
}

// explainedIn is explained by partition: for an anomaly of one task of
// partition part (perTask; -1: unknown), which may be known by its
// partition alone (a keyed task that may not exist: its key fixes the
// partition), or of no single task (!perTask).
func (h *history) explainedIn(part int, perTask bool, from, to int64, need int) excuse {
	run := &h.in.Run
	// The sums, per stretch between repairs (the repairs before a wipe
	// started number its stretch).
	type sums struct {
		wiped       map[int]int // partition (-1: unknown) -> replicas wiped
		votersWiped int
		voters      int
		windows     []string
	}
	stretches := map[int]*sums{}
	for i := range h.windows {
		w := &h.windows[i]
		if !w.beyond || w.clock {
			continue
		}
		if w.start > to || from > w.stop {
			continue
		}
		if !w.wipe {
			return excuse(w.describe())
		}
		k, _ := slices.BinarySearch(h.repairs, w.start)
		st := stretches[k]
		if st == nil {
			st = &sums{wiped: map[int]int{}}
			stretches[k] = st
		}
		st.windows = append(st.windows, w.describe())
		if perTask {
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
	if !perTask {
		need = majority(max(run.Replicas, 1))
	}
	for _, k := range slices.Sorted(maps.Keys(stretches)) {
		st := stretches[k]
		if st.voters > 0 && st.votersWiped >= majority(st.voters) {
			return excuse(fmt.Sprintf("%s: %d of %d metadata voters wiped", strings.Join(st.windows, "; "), st.votersWiped, st.voters))
		}
		for _, p := range slices.Sorted(maps.Keys(st.wiped)) {
			// An unknown partition's count (a wipe without cohorts)
			// adds to every known one's.
			n := st.wiped[p]
			if p >= 0 {
				n += st.wiped[-1]
			}
			if n >= need {
				return excuse(fmt.Sprintf("%s: %d replica(s) of partition %d wiped, %d enough to lose it", strings.Join(st.windows, "; "), n, p, need))
			}
		}
	}
	return ""
}

// describe names a window for an excuse: its number in the report's
// windows table, the nemesis, its nodes, its span.
func (w *window) describe() string {
	return fmt.Sprintf("window %d, %s on nodes %v from %s to %s", w.num, w.nemesis, w.targets, fmtSec(w.start), fmtSec(w.stop))
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

// clockOffsets reads a clock fault's offsets by node from its start
// event's detail ("offsets_ms", one per target, in the targets' order);
// nil when it recorded none that fit.
func clockOffsets(targets []int, detail json.RawMessage) map[int]int64 {
	var d struct {
		OffsetsMs []int64 `json:"offsets_ms"`
	}
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil || len(d.OffsetsMs) != len(targets) {
		return nil
	}
	out := make(map[int]int64, len(targets))
	for i, n := range targets {
		out[n] = d.OffsetsMs[i]
	}
	return out
}

// partEpoch names one epoch of one partition: one leader's line of writes.
type partEpoch struct {
	part  int
	epoch uint64
}

// buildLeaders maps each partition's epochs to the nodes that led them.
// An epoch has one leader, named by its handoff's CAS; two nodes logging
// the same epoch of a partition would be two leaders of one line of
// writes, which checkClaimIDs reports.
func (h *history) buildLeaders() {
	h.leaders, h.conflicts = map[partEpoch]int{}, map[partEpoch][]int{}
	for _, l := range h.in.Leaders {
		k := partEpoch{l.Partition, l.Epoch}
		prev, ok := h.leaders[k]
		switch {
		case !ok:
			h.leaders[k] = l.Node
		case prev != l.Node && !slices.Contains(h.conflicts[k], l.Node):
			if len(h.conflicts[k]) == 0 {
				h.conflicts[k] = []int{prev}
			}
			h.conflicts[k] = append(h.conflicts[k], l.Node)
		}
	}
}

// grantRef is a claim involved in a timing anomaly, as far as the run
// knows it: its id and epoch, and when it was granted: between lo and hi
// on the timeline (its claim op's invoke and ok; hi 0 when the history
// never saw it answered ok), or at startMs by the granting node's clock
// (a final record's start; 0 if unknown).
type grantRef struct {
	claim   uint32
	epoch   uint64
	lo, hi  int64
	startMs int64
}

// refOfGrant is what an ok claim op tells of its grant.
func refOfGrant(g *op) grantRef {
	return grantRef{claim: g.claim, epoch: g.out.Epoch, lo: g.ti, hi: g.tc}
}

// refOfRecord is what a final claim record tells of its grant, with the
// bounds of the claim op that granted it if the history saw it ok.
func refOfRecord(t *taskHist, cl wire.ClaimView) grantRef {
	ref := grantRef{claim: cl.Claim, epoch: cl.Epoch, startMs: cl.Start}
	if i := slices.IndexFunc(t.grants, func(g *op) bool { return g.claim == cl.Claim }); i >= 0 {
		ref.lo, ref.hi = t.grants[i].ti, t.grants[i].tc
	}
	return ref
}

// timingExcuse says which faults beyond the bounds explain a timing
// anomaly (two leases of task t held at once) that involves the claims
// refs over the span [from, to]. A clock moved beyond the skew bound
// explains it only through a claim the node whose clock moved granted
// (its leader at the claim's epoch, from the nodes' logs): granted while
// the offset held, or within a lease and the bound after, while leases it
// granted with the offset, and its view of others' expiry, still stood.
// Failing that, the faults that lose data explain it as they explain any
// anomaly (beyond).
func (h *history) timingExcuse(t *taskHist, refs []grantRef, from, to int64) excuse {
	part := partitionOfTask(t.id, h.in.Run.Partitions)
	for i := range h.windows {
		w := &h.windows[i]
		if !w.beyond || !w.clock {
			continue
		}
		for _, ref := range refs {
			n := h.leaders[partEpoch{part, ref.epoch}]
			if n == 0 || !slices.Contains(w.targets, n) || !h.grantedDuring(ref, w, n) {
				continue
			}
			return excuse(fmt.Sprintf("%s: node %d, its clock offset %d ms, granted claim %d (epoch %d of partition %d)",
				w.describe(), n, w.offsetsMs[n], ref.claim, ref.epoch, part))
		}
	}
	return h.beyond(t.id, from, to)
}

// grantedDuring reports whether node n can have granted ref while clock
// fault w moved its clock, or within a lease and the skew bound after w
// ended. The grant's time is what the history saw of it, or its start by
// n's clock read back to the timeline two ways: as if n's clock was true
// then (granted after w), and as if w's offset was on it (granted during
// w). Each comparison allows the skew bound and the clocks' grain.
func (h *history) grantedDuring(ref grantRef, w *window, n int) bool {
	run := &h.in.Run
	tol := (run.SkewBoundMs + clockGrainMs) * nsPerMs
	until := w.stop + (run.TTLMs+run.SkewBoundMs)*nsPerMs + tol
	if ref.hi > 0 && ref.lo <= until && ref.hi >= w.start-tol {
		return true
	}
	if ref.startMs == 0 || run.StartUnixNs == 0 {
		return false
	}
	t0 := ref.startMs*nsPerMs - run.StartUnixNs
	if t0 >= w.start-tol && t0 <= until {
		return true
	}
	off, ok := w.offsetsMs[n]
	if !ok {
		return false
	}
	t1 := t0 - off*nsPerMs
	return t1 >= w.start-tol && t1 <= w.stop+tol
}
