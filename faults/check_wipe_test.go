package faults

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
)

// The checkers excuse only the anomalies the wipes can explain: those of
// tasks whose partition lost, from the anomaly's first event on, as many
// replicas as the promise no longer covers.

// The checker's copy of the partition function is ring's.
func TestPartitionOfMatchesRing(t *testing.T) {
	for k := range 2000 {
		var id task.ID
		for j := range id {
			id[j] = byte(k*31 + j*7 + k>>3)
		}
		for _, p := range []int{1, 3, 4, 16, 4096} {
			if got, want := partitionOf(id[:], p), int(ring.PartitionOf(id[:], p)); got != want {
				t.Fatalf("id %s, %d partitions: %d; ring says %d", id, p, got, want)
			}
		}
		if got := partitionOfTask(id.String(), 16); got != int(ring.PartitionOf(id[:], 16)) {
			t.Fatalf("partitionOfTask(%s) = %d", id, got)
		}
	}
	if partitionOfTask("not hex", 16) != -1 || partitionOfTask(id(1), 0) != -1 {
		t.Errorf("unparseable id or no partition count: want -1")
	}
}

// wipe adds a wipe window whose start event records the cohorts (none if
// cohorts is nil), and names the nemesis beyond the bounds.
func (b *builder) wipe(name string, startMs, stopMs int64, cohorts map[int][]int, targets ...int) {
	var detail map[string]any
	if cohorts != nil {
		detail = map[string]any{detailCohorts: cohorts, "partition": 0}
	}
	b.wipeWith(name, startMs, stopMs, detail, targets...)
}

// wipeWith adds a wipe window whose start event has the detail given.
func (b *builder) wipeWith(name string, startMs, stopMs int64, d map[string]any, targets ...int) {
	if !slices.Contains(b.run.BeyondBounds, name) {
		b.run.BeyondBounds = append(b.run.BeyondBounds, name)
	}
	var detail json.RawMessage
	if d != nil {
		detail, _ = json.Marshal(d)
	}
	b.events = append(b.events,
		Event{Proc: -1, Type: Nemesis, F: "start", Nemesis: name, Targets: targets, Detail: detail, TNs: startMs * nsPerMs},
		Event{Proc: -1, Type: Nemesis, F: "stop", Nemesis: name, Targets: targets, Detail: detail, TNs: stopMs * nsPerMs})
}

// repaired adds the harness's note that the cluster is whole again.
func (b *builder) repaired(atMs int64) {
	b.events = append(b.events, Event{Proc: -1, Type: Nemesis, F: "note", Nemesis: NoteRepaired, TNs: atMs * nsPerMs})
}

// wipeCohortsOf gives a task's partition the cohort [1 2 3] and the next
// partition [3 4 5]; the run has five nodes.
func wipeCohortsOf(b *builder, taskID string) map[int][]int {
	b.run.Nodes = 5
	p := partitionOfTask(taskID, b.run.Partitions)
	return map[int][]int{p: {1, 2, 3}, (p + 1) % b.run.Partitions: {3, 4, 5}}
}

// A loss is beyond the bounds when the wipes after the task's
// acknowledgement deleted as many of its partition's replicas as the
// promise allows to lose less than: a majority, or w when the enqueue
// was acknowledged with fewer. Otherwise it fails the run.
func TestWipeExcusesLoss(t *testing.T) {
	const check = "total-queue (dequeue = acknowledged complete)"
	w1 := func(b *builder) { b.run.W = 1 }
	runFlagCases(t, []flagCase{
		{name: "w=1, a replica of its partition wiped long after the ack: beyond", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			w1(b)
			ackedReady(b)
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskG), 2)
		}},
		{name: "w=1, a node outside its partition's cohort wiped: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			w1(b)
			ackedReady(b)
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskG), 4)
		}},
		{name: "w=1, the wipe ended before the ack: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			w1(b)
			ackedReady(b)
			b.wipe(NemWipe, 5, 20, wipeCohortsOf(b, taskG), 2)
		}},
		{name: "w=1, cohorts unknown: the wiped node taken for a replica: beyond", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			w1(b)
			ackedReady(b)
			b.wipe(NemWipe, 1000, 2000, nil, 2)
		}},
		{name: "majority w, one replica wiped: within (the promise holds)", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskG), 2)
		}},
		{name: "majority w, one wipe, cohorts unknown: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			b.wipe(NemWipe, 1000, 2000, nil, 2)
		}},
		{name: "majority w, two wipes of its cohort after the ack: beyond", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			ackedReady(b)
			c := wipeCohortsOf(b, taskG)
			b.wipe(NemWipe, 1000, 2000, c, 2)
			b.wipe(NemWipe, 2500, 2900, c, 3)
		}},
		{name: "majority w, two wipes of its cohort with a repair between: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			c := wipeCohortsOf(b, taskG)
			b.wipe(NemWipe, 1000, 2000, c, 2)
			b.repaired(2400)
			b.wipe(NemWipe, 2500, 2900, c, 3)
		}},
		{name: "majority w, wipe-majority after a repair: beyond", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			ackedReady(b)
			c := wipeCohortsOf(b, taskG)
			b.wipe(NemWipe, 1000, 2000, c, 2)
			b.repaired(2400)
			b.wipe(NemWipeMajority, 2500, 2900, c, 1, 3)
		}},
		{name: "majority w, one of two wipes before the ack: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			c := wipeCohortsOf(b, taskG)
			b.wipe(NemWipe, 5, 20, c, 2)
			b.wipe(NemWipe, 2500, 2900, c, 3)
		}},
		{name: "wipe-majority of its cohort: beyond", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			ackedReady(b)
			b.wipe(NemWipeMajority, 1000, 2000, wipeCohortsOf(b, taskG), 1, 3)
		}},
		{name: "wipe-majority of a cohort sharing one node with its own: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			b.wipe(NemWipeMajority, 1000, 2000, wipeCohortsOf(b, taskG), 3, 4)
		}},
		{name: "a clock beyond the bound with a wipe that explains nothing: within", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			b.beyondFault(NemClockBeyond, 1000, 2000)
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskG), 4)
		}},
	})
}

// The same rule for the other durability anomalies: an acknowledged
// update lost, the cluster not converging.
func TestWipeExcusesOtherAnomalies(t *testing.T) {
	runFlagCases(t, []flagCase{
		{name: "update missing after a wipe-majority of its cohort: beyond", check: "updates", kind: kindUpdateMissing, beyond: 1, inject: func(b *builder) {
			b.views[taskA].Updates = nil
			b.wipe(NemWipeMajority, 1000, 2000, wipeCohortsOf(b, taskA), 1, 2)
		}},
		{name: "update missing after one wipe: within", check: "updates", kind: kindUpdateMissing, want: 1, inject: func(b *builder) {
			b.views[taskA].Updates = nil
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskA), 1)
		}},
		{name: "update missing after one wipe, even with w=1 (updates need a majority): within", check: "updates", kind: kindUpdateMissing, want: 1, inject: func(b *builder) {
			b.run.W = 1
			b.views[taskA].Updates = nil
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskA), 1)
		}},
		{name: "not converged after a wipe-majority: beyond", check: "convergence", kind: kindNotConverged, beyond: 1, inject: func(b *builder) {
			setConverged(b, phaseNotConverged, 20000)
			b.wipe(NemWipeMajority, 1000, 2000, wipeCohortsOf(b, taskA), 1, 2)
		}},
		{name: "not converged after one wipe, even with w=1: within", check: "convergence", kind: kindNotConverged, want: 1, inject: func(b *builder) {
			b.run.W = 1
			setConverged(b, phaseNotConverged, 20000)
			b.wipe(NemWipe, 1000, 2000, wipeCohortsOf(b, taskA), 1)
		}},
		{name: "not converged after wipes of three of five metadata voters: beyond", check: "convergence", kind: kindNotConverged, beyond: 1, inject: func(b *builder) {
			setConverged(b, phaseNotConverged, 20000)
			// Nodes 1, 4 and 5 share no cohort beyond one member.
			d := map[string]any{detailCohorts: map[int][]int{0: {1, 2, 3}, 1: {2, 3, 4}, 2: {2, 3, 5}}, detailVoters: []int{1, 2, 3, 4, 5}}
			b.wipeWith(NemWipe, 1000, 2000, d, 1)
			b.wipeWith(NemWipe, 3000, 4000, d, 4)
			b.wipeWith(NemWipe, 5000, 6000, d, 5)
		}},
		{name: "not converged after wipes of two of five metadata voters: within", check: "convergence", kind: kindNotConverged, want: 1, inject: func(b *builder) {
			setConverged(b, phaseNotConverged, 20000)
			d := map[string]any{detailCohorts: map[int][]int{0: {1, 2, 3}, 1: {2, 3, 4}, 2: {2, 3, 5}}, detailVoters: []int{1, 2, 3, 4, 5}}
			b.wipeWith(NemWipe, 1000, 2000, d, 1)
			b.wipeWith(NemWipe, 3000, 4000, d, 4)
		}},
	})
}

// A run with wipes states the rule its counts follow; one without does
// not.
func TestWipeNote(t *testing.T) {
	b := base()
	b.run.W = 1
	b.wipe(NemWipe, 1000, 2000, nil, 2)
	notes := strings.Join(findCheck(t, Analyze(b.input()), "history").Notes, "\n")
	for _, want := range []string{"1 wipe(s)", "at least 1 replica(s)", "w=1", "recorded no cohorts", "0 repaired"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	if n := findCheck(t, Analyze(base().input()), "history").Notes; len(n) != 0 {
		t.Errorf("a run without wipes has notes %q", n)
	}
}

// A task blocked for good behind a dependency the wipes took is excused
// with it; behind one whose loss is within the bounds it is not.
func TestWipeExcusesBlockedDependents(t *testing.T) {
	const check = "total-queue (dequeue = acknowledged complete)"
	if partitionOfTask(taskH, testRun().Partitions) == partitionOfTask(taskK, testRun().Partitions) {
		t.Fatalf("fixture: tasks H and K share a partition")
	}
	// H is acknowledged and never completed; K, acknowledged after it,
	// depends on it and stays blocked. Only H's partition is wiped.
	inject := func(b *builder, name string, targets ...int) {
		b.run.Nodes = 5
		b.enqueue(taskH, 30, 40, OK)
		b.view(taskH, stateReady)
		b.enqueue(taskK, 50, 60, OK, taskH)
		b.view(taskK, finalBlocked).Deps = []task.ID{b.views[taskH].ID}
		cohorts := map[int][]int{
			partitionOfTask(taskH, b.run.Partitions): {1, 2, 3},
			partitionOfTask(taskK, b.run.Partitions): {3, 4, 5},
		}
		b.wipe(name, 1000, 2000, cohorts, targets...)
	}
	runFlagCases(t, []flagCase{
		{name: "dependency's partition lost a majority: both beyond", check: check, kind: kindLost, beyond: 2, inject: func(b *builder) {
			inject(b, NemWipeMajority, 1, 2)
		}},
		{name: "dependency's partition lost one replica: both within", check: check, kind: kindLost, want: 2, inject: func(b *builder) {
			inject(b, NemWipe, 1)
		}},
	})
}
