package faults

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestGrudgePartners: two nodes exchange packets only when neither drops
// the other's; a node cut off one way (asymmetric) has no partner.
func TestGrudgePartners(t *testing.T) {
	tests := []struct {
		name string
		g    Grudge
		want map[int]int // node: partners among 1..5
	}{
		{"none", Grudge{}, map[int]int{1: 4, 3: 4, 5: 4}},
		{"isolate 1", Isolate(1, 5), map[int]int{1: 0, 2: 3, 5: 3}},
		{"asymmetric 5", Asymmetric(5, 5), map[int]int{5: 0, 1: 3, 4: 3}},
		{"split 3 | 2", Split([]int{1, 2, 3}, []int{4, 5}), map[int]int{1: 2, 3: 2, 4: 1, 5: 1}},
		{"bridge", Bridge([]int{1, 3}, 5, []int{2, 4}), map[int]int{1: 2, 2: 2, 5: 4}},
	}
	for _, tc := range tests {
		for n, want := range tc.want {
			if got := tc.g.Partners(n, 5); got != want {
				t.Errorf("%s: node %d has %d partners; want %d", tc.name, n, got, want)
			}
		}
	}
}

// TestCutOffNodes: a node is cut off from every cohort while the
// partitions in force and the nodes faults hold stopped leave it fewer
// live partners than a write of the run's w needs besides its own
// replica; faults that cut no link cut no node off by themselves.
func TestCutOffNodes(t *testing.T) {
	windows := []window{
		{nemesis: NemPartitionOne, start: 10, stop: 20, grudge: Isolate(1, 5)},
		{nemesis: NemPartitionAsym, start: 30, stop: 40, grudge: Asymmetric(5, 5)},
		{nemesis: NemPartitionMajority, start: 50, stop: 60, grudge: Split([]int{1, 2, 3}, []int{4, 5})},
		// A minority side whose other node is killed meanwhile: alone.
		{nemesis: NemKillMinority, start: 55, stop: 58, targets: []int{5}},
		{nemesis: NemKillCohort, start: 70, stop: 80, targets: []int{3, 4, 5}},
		{nemesis: NemPartitionOne, start: 72, stop: 78, grudge: Isolate(1, 5)},
	}
	tests := []struct {
		name string
		w    int
		want map[int][]int64 // node: the times it is cut off at, among probes
	}{
		{"w=0: a majority of 3, one live partner needed", 0, map[int][]int64{
			1: {10, 19, 72, 77}, 5: {30, 39}, 4: {55, 57}, 2: {72, 77}}},
		{"w=1: the node's own replica is enough", 1, map[int][]int64{}},
		{"w=3: two live partners needed", 3, map[int][]int64{
			1: {10, 19, 70, 72, 77, 79}, 2: {70, 72, 77, 79}, 4: {50, 55, 57, 59}, 5: {30, 39, 50, 59}}},
	}
	probes := []int64{9, 10, 19, 20, 30, 39, 40, 50, 55, 57, 59, 60, 70, 72, 77, 79, 80}
	for _, tc := range tests {
		run := RunInfo{Nodes: 5, Replicas: 3, W: tc.w}
		down := stoppedNodes(windows, nil)
		c := cutOffNodes(windows, run, down)
		for n := 1; n <= 5; n++ {
			for _, at := range probes {
				if down.at(n, at) {
					continue // no request to a stopped node is counted
				}
				want := slices.Contains(tc.want[n], at)
				if got := c.at(n, at); got != want {
					t.Errorf("%s: node %d cut off at %d: %v; want %v", tc.name, n, at, got, want)
				}
			}
		}
	}
}

// TestWindowsPlacedToCutOffNode: an enqueue without id nor hint sent to a
// node a partition cut off from every cohort is counted apart
// (PlacedCut), out of the placed column, whatever its outcome; one that
// asked for a hint there stays in placed and hinted (a hint keeps it
// there), as do those sent to the nodes that still reach a cohort.
func TestWindowsPlacedToCutOffNode(t *testing.T) {
	b := base()
	detail, err := json.Marshal(map[string]any{"grudge": Isolate(3, 3)})
	if err != nil {
		t.Fatal(err)
	}
	b.events = append(b.events,
		Event{Proc: -1, Type: Nemesis, F: "start", Nemesis: NemPartitionOne, Targets: []int{3}, Detail: detail, TNs: 10_000 * nsPerMs},
		Event{Proc: -1, Type: Nemesis, F: "stop", Nemesis: NemPartitionOne, Targets: []int{3}, TNs: 16_000 * nsPerMs})
	timeout := enq{typ: Info, code: "timeout", err: "context deadline exceeded"}
	okEnq := enq{typ: OK}
	for i, e := range []struct {
		atMs         int64
		node         int
		placed, hint bool
		like         enq
	}{
		{11_000, 3, true, false, timeout}, // cut off: apart
		{11_100, 3, true, false, okEnq},   // cut off: apart, ok or not
		{11_200, 3, true, true, okEnq},    // hinted: counted
		{11_300, 3, false, false, timeout},
		{11_400, 1, true, false, okEnq},
		{17_000, 3, true, false, timeout}, // after the heal: counted (in no window)
	} {
		like := e.like
		like.node, like.placed, like.hint = e.node, e.placed, e.hint
		b.windowEnqueue(i, like, e.atMs)
	}
	b.run.W = 0 // a majority of 3: the isolated node 3 has no partner
	r := Analyze(b.input())
	if len(r.Windows) != 2 {
		t.Fatalf("%d windows; want base's and the partition", len(r.Windows))
	}
	w := r.Windows[1]
	checkWindowEnqueues(t, w, [3]OpStats{stats(1, 0), stats(2, 2), stats(1, 1)}, nil, nil)
	if w.PlacedCut == nil || w.PlacedCut.Attempted != 2 || w.PlacedCut.OK != 1 {
		t.Errorf("placed to the cut-off node = %+v; want 2 attempted, 1 ok", w.PlacedCut)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cut off") || !strings.Contains(out.String(), "50.00% of 2") {
		t.Errorf("report text does not show the cut-off enqueues:\n%s", out.String())
	}
}
