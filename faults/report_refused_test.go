package faults

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestWindowRefusedEnqueues: an enqueue the node refused as the answer
// to the request itself (conflict, invalid, a missing dependency, over
// a limit) is left out of a window's enqueue, placed and hinted columns
// and of why those were not ok, and counted in EnqueueRefused instead;
// an enqueue the node could not serve (unavailable, overloaded,
// internal), or whose outcome is in doubt (timeout), still counts as
// not ok.
func TestWindowRefusedEnqueues(t *testing.T) {
	cancelledDep := "conflict: dependency 00000000000000000000000000000000000000aa was cancelled: it will never complete"
	tests := []struct {
		name    string
		nemesis string
		targets []int
		enqs    []enq
		// want: Attempted and OK of the enqueue, placed, hinted columns.
		wantEnqueue, wantPlaced, wantHinted OpStats
		wantPlacedNotOK, wantHintedNotOK    *NotOK
		wantRefused                         *Refused
	}{
		{name: "conflict left out, timeout and unavailable not ok", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, placed: true, typ: OK},
				{node: 2, hint: true, typ: Fail, code: "conflict", err: cancelledDep},
				{node: 1, placed: true, hint: true, typ: Info, code: "timeout", err: "context deadline exceeded"},
				{node: 2, placed: true, hint: true, typ: Info, code: "unavailable", err: "unavailable: no quorum"},
			},
			wantPlaced: stats(3, 1), wantHinted: stats(2, 0),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{"timeout": 1, "unavailable": 1}},
			wantHintedNotOK: &NotOK{Codes: map[string]int{"timeout": 1, "unavailable": 1}},
			wantRefused:     &Refused{Enqueue: 1, Hinted: 1, Codes: map[string]int{"conflict": 1}}},
		{name: "a placed hinted conflict is left out of both columns", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, placed: true, hint: true, typ: OK},
				{node: 1, placed: true, hint: true, typ: Fail, code: "conflict", err: cancelledDep},
			},
			wantPlaced: stats(1, 1), wantHinted: stats(1, 1),
			wantRefused: &Refused{Placed: 1, Hinted: 1, Codes: map[string]int{"conflict": 1}}},
		{name: "every code of a wrong or impossible request is left out", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, placed: true, hint: true, typ: OK},
				{node: 1, placed: true, typ: Fail, code: "invalid", err: "invalid: empty queue"},
				{node: 1, placed: true, hint: true, typ: Fail, code: "dep_not_found", err: "dependency not found: x"},
				{node: 2, hint: true, typ: Fail, code: "not_found", err: "not found: x"},
				{node: 2, typ: Fail, code: "too_large", err: "too large"},
				{node: 2, typ: Fail, code: "conflict", err: "key held"},
			},
			wantPlaced: stats(1, 1), wantHinted: stats(1, 1),
			wantRefused: &Refused{Enqueue: 3, Placed: 2, Hinted: 2,
				Codes: map[string]int{"invalid": 1, "dep_not_found": 1, "not_found": 1, "too_large": 1, "conflict": 1}}},
		{name: "a node that could not serve is not ok, refusal or not", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, placed: true, hint: true, typ: Fail, code: "overloaded", err: "overloaded"},
				{node: 1, placed: true, hint: true, typ: Info, code: "internal", err: "internal: disk"},
				{node: 2, placed: true, hint: true, typ: Info, code: "shutting_down", err: "shutting down"},
				{node: 2, placed: true, hint: true, typ: Info, code: "conn_refused", err: "dial tcp: connection refused"},
				{node: 2, placed: true, hint: true, typ: Info, code: "conn_error", err: "connection reset"},
				{node: 2, hint: true, typ: Fail, code: "stale", err: "stale"},
			},
			wantEnqueue: stats(1, 0), wantPlaced: stats(5, 0), wantHinted: stats(6, 0),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{"overloaded": 1, "internal": 1, "shutting_down": 1, "conn_refused": 1, "conn_error": 1}},
			wantHintedNotOK: &NotOK{Codes: map[string]int{"overloaded": 1, "internal": 1, "shutting_down": 1, "conn_refused": 1, "conn_error": 1, "stale": 1}}},
		{name: "a refusal from a node a fault stopped is left out as any request to it", nemesis: NemKillMinority, targets: []int{2},
			enqs: []enq{
				{node: 2, hint: true, typ: Fail, code: "conflict", err: cancelledDep},
				{node: 1, hint: true, typ: OK},
			},
			wantEnqueue: stats(1, 1), wantHinted: stats(1, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			b.nemesis(tc.nemesis, hintWindowStart, hintWindowStop, tc.targets...)
			for i, e := range tc.enqs {
				b.windowEnqueue(i, e, hintWindowStart+100+int64(i)*10)
			}
			r := Analyze(b.input())
			if len(r.Windows) != 2 {
				t.Fatalf("%d windows; want base's and the test's", len(r.Windows))
			}
			w := r.Windows[1]
			checkWindowEnqueues(t, w, [3]OpStats{tc.wantEnqueue, tc.wantPlaced, tc.wantHinted}, tc.wantPlacedNotOK, tc.wantHintedNotOK)
			if !reflect.DeepEqual(w.EnqueueRefused, tc.wantRefused) {
				t.Errorf("refused = %+v; want %+v", w.EnqueueRefused, tc.wantRefused)
			}
		})
	}
}

// The refusals left out reach report.json as enqueue_refused, the
// windows' header says so, a window whose only enqueues not ok were such
// refusals meets the goal, and the operations table at the top still
// counts them as it did.
func TestReportRefusedEnqueues(t *testing.T) {
	b := base()
	b.nemesis(NemPartitionOne, hintWindowStart, hintWindowStop, 3)
	for i, e := range []enq{
		{node: 1, placed: true, hint: true, typ: OK},
		{node: 2, hint: true, typ: Fail, code: "conflict", err: "conflict: dependency x was cancelled: it will never complete"},
	} {
		b.windowEnqueue(i, e, hintWindowStart+100+int64(i)*10)
	}
	rep := Analyze(b.input())

	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	txt := buf.String()
	lines := strings.Split(txt, "\n")
	if hdr := lineWith(lines, "Nemesis windows ("); !strings.Contains(hdr, "enqueue_refused") {
		t.Errorf("windows header %q does not say refusals are left out", hdr)
	}
	if strings.Contains(txt, "below 99.9% ok") {
		t.Errorf("a window whose only enqueue not ok was a conflict is below the goal:\n%s", txt)
	}
	if got, want := strings.Join(strings.Fields(lineOf(lines, "  of which hinted")), " "), "of which hinted 2 1 1 0 50.0%"; got != want {
		t.Errorf("ops row %q; want %q (the top table unchanged)", got, want)
	}
	if w2 := strings.Join(strings.Fields(lineOf(lines, "2 ")), " "); !strings.Contains(w2, "- 100.0% 100.0%") {
		t.Errorf("window 2 row %q; want enqueue, placed, hinted - 100.0%% 100.0%%", w2)
	}

	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"enqueue_refused"`) {
		t.Errorf("report.json lacks enqueue_refused")
	}
	var got Report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if want := (&Refused{Enqueue: 1, Hinted: 1, Codes: map[string]int{"conflict": 1}}); !reflect.DeepEqual(got.Windows[1].EnqueueRefused, want) {
		t.Errorf("window 2 enqueue_refused = %+v; want %+v", got.Windows[1].EnqueueRefused, want)
	}
	if got.Windows[0].EnqueueRefused != nil {
		t.Errorf("window 1 enqueue_refused = %+v; want none", got.Windows[0].EnqueueRefused)
	}
}
