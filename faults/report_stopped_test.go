package faults

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The two overlapping windows of the stopped-node tests: a one-way
// partition of node 5, and within it a kill of nodes 4 and 5, restarted
// before the partition heals.
const (
	asymStart, asymStop = 10_000, 16_000
	killStart, killStop = 11_000, 15_000
)

// timedEnq is an enqueue of a window test and its invoke time (ms).
type timedEnq struct {
	atMs int64
	enq
}

// TestWindowsLeaveOutNodesOtherFaultsStopped: a window's enqueue, placed
// and hinted columns, and why those not ok were not, leave out the
// enqueues sent to a node that any fault held stopped when they were
// invoked, the window's own or one that overlaps it (here the kill
// within the partition), from the fault's start to its stop (the
// restart); sent before or after, or to a node no fault stopped, they
// count, a restarted node's "starting" refusals too.
func TestWindowsLeaveOutNodesOtherFaultsStopped(t *testing.T) {
	refused := enq{typ: Info, code: "conn_refused", err: "dial tcp 10.0.0.5:7000: connect: connection refused"}
	at := func(ms int64, node int, placed, hint bool, like enq) timedEnq {
		like.node, like.placed, like.hint = node, placed, hint
		return timedEnq{ms, like}
	}
	okEnq := enq{typ: OK}
	timeout := enq{typ: Info, code: "timeout", err: "context deadline exceeded"}
	starting := enq{typ: Info, code: "unavailable", err: "unavailable: node is starting"}
	type want struct {
		enqueue, placed, hinted  OpStats
		placedNotOK, hintedNotOK *NotOK
	}
	tests := []struct {
		name string
		enqs []timedEnq
		// asym and kill: the partition's window and the kill's.
		asym, kill want
	}{
		{name: "to node 5 during the kill: left out of the partition's window as of the kill's",
			enqs: []timedEnq{
				at(12_000, 5, true, true, refused),
				at(12_100, 5, false, false, refused),
				at(12_200, 1, true, false, okEnq),
			},
			asym: want{placed: stats(1, 1)},
			kill: want{placed: stats(1, 1)}},
		{name: "to node 5 and to node 4 before the kill: counted",
			enqs: []timedEnq{
				at(10_500, 5, true, true, timeout),
				at(10_600, 4, true, false, okEnq),
				at(10_700, 4, false, true, okEnq),
			},
			asym: want{enqueue: stats(1, 1), placed: stats(2, 1), hinted: stats(2, 1),
				placedNotOK: &NotOK{Codes: map[string]int{"timeout": 1}},
				hintedNotOK: &NotOK{Codes: map[string]int{"timeout": 1}}}},
		{name: "to node 4 during the kill: left out, though the partition's fault spares it",
			enqs: []timedEnq{
				at(12_000, 4, true, true, refused),
				at(13_000, 2, true, true, okEnq),
			},
			asym: want{placed: stats(1, 1), hinted: stats(1, 1)},
			kill: want{placed: stats(1, 1), hinted: stats(1, 1)}},
		{name: "to node 5 after its restart: counted, starting refusals too",
			enqs: []timedEnq{
				at(15_200, 5, true, true, starting),
				at(15_300, 5, true, false, okEnq),
			},
			asym: want{placed: stats(2, 1), hinted: stats(1, 0),
				placedNotOK: &NotOK{Codes: map[string]int{"unavailable": 1}, Starting: 1},
				hintedNotOK: &NotOK{Codes: map[string]int{"unavailable": 1}, Starting: 1}}},
		{name: "from the kill's start to its stop: at the start left out, at the stop counted",
			enqs: []timedEnq{
				at(killStart, 5, true, false, refused),
				at(killStop-1, 5, true, false, refused),
				at(killStop, 5, true, false, okEnq),
			},
			asym: want{placed: stats(1, 1)},
			kill: want{placed: stats(0, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			b.nemesis(NemPartitionAsym, asymStart, asymStop, 5)
			b.nemesis(NemKillMinority, killStart, killStop, 4, 5)
			for i, e := range tc.enqs {
				b.windowEnqueue(i, e.enq, e.atMs)
			}
			r := Analyze(b.input())
			if len(r.Windows) != 3 {
				t.Fatalf("%d windows; want base's and the test's two", len(r.Windows))
			}
			for _, c := range []struct {
				w    WindowStats
				name string
				want want
			}{{r.Windows[1], NemPartitionAsym, tc.asym}, {r.Windows[2], NemKillMinority, tc.kill}} {
				if c.w.Nemesis != c.name {
					t.Fatalf("window is %s; want %s", c.w.Nemesis, c.name)
				}
				for _, col := range []struct {
					name      string
					got, want OpStats
				}{{"enqueue", c.w.Enqueue, c.want.enqueue}, {"placed", c.w.Placed, c.want.placed}, {"hinted", c.w.Hinted, c.want.hinted}} {
					if col.got.Attempted != col.want.Attempted || col.got.OK != col.want.OK {
						t.Errorf("%s window, %s: %d attempted, %d ok; want %d, %d",
							c.name, col.name, col.got.Attempted, col.got.OK, col.want.Attempted, col.want.OK)
					}
				}
				if !reflect.DeepEqual(c.w.PlacedNotOK, c.want.placedNotOK) {
					t.Errorf("%s window: placed not ok = %v; want %v", c.name, c.w.PlacedNotOK, c.want.placedNotOK)
				}
				if !reflect.DeepEqual(c.w.HintedNotOK, c.want.hintedNotOK) {
					t.Errorf("%s window: hinted not ok = %v; want %v", c.name, c.w.HintedNotOK, c.want.hintedNotOK)
				}
			}
		})
	}
}

// TestStoppedNodes: which nemeses stop which nodes, and for how long.
func TestStoppedNodes(t *testing.T) {
	b := base()
	b.nemesis(NemPartitionOne, 10_000, 12_000, 3) // stops nothing
	b.nemesis(NemPauseLeader, 11_000, 11_500, 2)
	b.nemesis(NemTermRestart, 20_000, 21_000, 1)
	b.nemesis(NemKillAll, 30_000, 31_000, 1, 2, 3)
	h := digest(b.input())
	down := stoppedNodes(h.windows, h.serving)
	ms := func(v int64) int64 { return v * nsPerMs }
	tests := []struct {
		node int
		atMs int64
		want bool
	}{
		{3, 11_000, false}, // partitioned, not stopped
		{2, 10_999, false},
		{2, 11_000, true}, // paused
		{2, 11_499, true},
		{2, 11_500, false}, // resumed
		{1, 20_500, true},  // SIGTERMed, not restarted yet
		{1, 21_000, false},
		{2, 20_500, false},
		{3, 30_000, true},
		{1, 30_999, true},
		{4, 30_500, false}, // not a target
	}
	for _, tc := range tests {
		if got := down.at(tc.node, ms(tc.atMs)); got != tc.want {
			t.Errorf("node %d stopped at %d ms: %v; want %v", tc.node, tc.atMs, got, tc.want)
		}
	}
}

// The windows table's header says what its enqueue columns leave out.
func TestWindowsHeaderSaysStoppedLeftOut(t *testing.T) {
	b := base()
	b.nemesis(NemPartitionAsym, asymStart, asymStop, 5)
	var buf bytes.Buffer
	if err := Analyze(b.input()).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	hdr := lineWith(strings.Split(buf.String(), "\n"), "Nemesis windows (")
	if !strings.Contains(hdr, "leaving out those sent to a node that this or any other fault had stopped") {
		t.Errorf("windows header %q does not say which enqueues it leaves out", hdr)
	}
}

// TestStoppedUntilServing: a node a fault restarted counts as stopped
// until the harness's serving note says it answers as started, when that
// comes after the stop (within servingWatchBound); a note before the stop
// ends the span at the stop; with none, or one too late to be this
// restart's, the span ends at the stop. ServedMs says how long after the
// stop the last target served.
func TestStoppedUntilServing(t *testing.T) {
	ms := func(v int64) int64 { return v * nsPerMs }
	late := int64(12_000) + servingWatchBound.Milliseconds() + 1
	tests := []struct {
		name       string
		serving    []int64 // node 2's notes, ms
		stoppedAt  map[int64]bool
		wantServed *int64
	}{
		{"served after the stop", []int64{14_000},
			map[int64]bool{11_000: true, 13_999: true, 14_000: false}, ptr(int64(2000))},
		{"served before the stop", []int64{11_500},
			map[int64]bool{11_999: true, 12_000: false}, ptr(int64(0))},
		{"no note", nil,
			map[int64]bool{11_999: true, 12_000: false}, nil},
		{"a note too late for this restart", []int64{late},
			map[int64]bool{11_999: true, 12_000: false}, nil},
		{"a note from before the fault", []int64{9_000},
			map[int64]bool{11_999: true, 12_000: false}, nil},
	}
	for _, tc := range tests {
		b := base()
		b.nemesis(NemKillMinority, 10_000, 12_000, 2)
		for _, at := range tc.serving {
			b.note(NoteServing, at, 2)
		}
		h := digest(b.input())
		down := stoppedNodes(h.windows, h.serving)
		for at, want := range tc.stoppedAt {
			if got := down.at(2, ms(at)); got != want {
				t.Errorf("%s: node 2 stopped at %d ms: %v; want %v", tc.name, at, got, want)
			}
		}
		var w *window
		for i := range h.windows {
			if h.windows[i].nemesis == NemKillMinority {
				w = &h.windows[i]
			}
		}
		got := servedMs(*w, h.serving)
		if (got == nil) != (tc.wantServed == nil) || got != nil && *got != *tc.wantServed {
			t.Errorf("%s: served %v ms after the stop; want %v", tc.name, deref(got), deref(tc.wantServed))
		}
	}
}

func ptr[T any](v T) *T { return &v }

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestStartedAnswer: what a node's /readyz answer says of its start.
func TestStartedAnswer(t *testing.T) {
	tests := []struct {
		res  Result
		want bool
	}{
		{Result{Type: OK, Status: 200}, true},
		{Result{Type: Info, Status: 503, Body: []byte(`{"status":"not ready","reasons":["this node's clock is not trusted: ahead"]}`)}, true},
		{Result{Type: Info, Status: 503, Body: []byte(`{"status":"not ready","reasons":["metadata group: no leader","partitions this node should lead but does not yet: 3"]}`)}, true},
		{Result{Type: Info, Status: 503, Body: []byte(`{"status":"not ready","reasons":["starting"]}`)}, false},
		{Result{Type: Info, Status: 503, Body: []byte(`{"status":"not ready","reasons":["shutting down"]}`)}, false},
		{Result{Type: Info, Status: 503, Body: []byte(`{"error":"unavailable: starting","code":"unavailable"}`)}, false},
		{Result{Type: Info, Status: 503, Body: []byte(`not json`)}, false},
		{Result{Type: Info, Code: "conn_refused"}, false},
		{Result{Type: Info, Code: "timeout"}, false},
	}
	for _, tc := range tests {
		if got := startedAnswer(tc.res); got != tc.want {
			t.Errorf("startedAnswer(%d %s %s) = %v; want %v", tc.res.Status, tc.res.Code, tc.res.Body, got, tc.want)
		}
	}
}
