package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// enq is one enqueue of a window test: the node it is sent to, whether it
// sends no id (placed) and asks for a hint, and its outcome (typ "": the
// history ends before it, code and err as the outcome records them).
type enq struct {
	node         int
	placed, hint bool
	// deps: a dependent (it cannot be hinted).
	deps      bool
	typ       string
	code, err string
}

// hintWindow is the window the tests put their enqueues in, after
// everything base records.
const hintWindowStart, hintWindowStop = 10_000, 11_000

// windowEnqueue records e invoked at tiMs; its outcome repeats the
// invoke's fields, as the workload's does (Loop.call).
func (b *builder) windowEnqueue(n int, e enq, tiMs int64) {
	inv := Event{Node: e.node, Placed: e.placed, Hint: e.hint, Value: fmt.Sprintf("payload-w%d", n), Queue: "q"}
	if e.deps {
		inv.Deps = []string{id(0x6000 + n)}
	}
	tid := id(0x7000 + n)
	if !e.placed {
		inv.Task = tid
	}
	out := inv
	out.Code, out.Err = e.code, e.err
	if e.typ == OK && e.placed {
		out.Task = tid // the node's id
	}
	b.absent = append(b.absent, tid)
	b.op(FEnqueue, tiMs, tiMs+5, e.typ, inv, out)
}

func stats(attempted, ok int) OpStats { return OpStats{Attempted: attempted, OK: ok} }

// checkWindowEnqueues checks w's enqueue, placed and hinted columns
// (Attempted and OK of each, in that order) and why its placed and
// hinted enqueues were not ok.
func checkWindowEnqueues(t *testing.T, w WindowStats, want [3]OpStats, placedNotOK, hintedNotOK *NotOK) {
	t.Helper()
	for i, got := range []OpStats{w.Enqueue, w.Placed, w.Hinted} {
		if got.Attempted != want[i].Attempted || got.OK != want[i].OK {
			t.Errorf("%s: %d attempted, %d ok; want %d, %d", []string{"enqueue", "placed", "hinted"}[i], got.Attempted, got.OK, want[i].Attempted, want[i].OK)
		}
	}
	if !reflect.DeepEqual(w.PlacedNotOK, placedNotOK) {
		t.Errorf("placed not ok = %v; want %v", w.PlacedNotOK, placedNotOK)
	}
	if !reflect.DeepEqual(w.HintedNotOK, hintedNotOK) {
		t.Errorf("hinted not ok = %v; want %v", w.HintedNotOK, hintedNotOK)
	}
}

// TestWindowHintedEnqueues: a window's hinted column counts the enqueues
// that asked for a hint, with an id or without, sent to nodes the fault
// left running, as its placed column does the id-less ones; and each
// says why those not ok were not, by code.
func TestWindowHintedEnqueues(t *testing.T) {
	starting := "unavailable: node is starting"
	tests := []struct {
		name    string
		nemesis string
		targets []int
		enqs    []enq
		// before are enqueues invoked before the window opens.
		before []enq
		// want: Attempted and OK of the enqueue, placed, hinted columns.
		wantEnqueue, wantPlaced, wantHinted OpStats
		wantPlacedNotOK, wantHintedNotOK    *NotOK
	}{
		{name: "a history from before the hint was recorded: no hinted data", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, typ: OK},
				{node: 1, placed: true, typ: OK},
				{node: 2, placed: true, typ: Info, code: "timeout", err: "context deadline exceeded"},
			},
			wantEnqueue: stats(1, 1), wantPlaced: stats(2, 1),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{"timeout": 1}}},
		{name: "a dependent that asked for a hint is not hintable: not in the hinted column", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, hint: true, typ: OK},
				{node: 2, hint: true, deps: true, typ: Info, code: "timeout", err: "context deadline exceeded"},
			},
			wantEnqueue: stats(2, 1), wantHinted: stats(1, 1)},
		{name: "hinted with and without id, placed with and without hint", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, hint: true, typ: OK},
				{node: 3, hint: true, typ: Info, code: "timeout", err: "context deadline exceeded"},
				{node: 2, placed: true, hint: true, typ: OK},
				{node: 1, placed: true, typ: Info, code: "unavailable", err: starting},
				{node: 2, placed: true, typ: OK},
				{node: 2, typ: Fail, code: "conflict", err: "key held"},
			},
			// The conflict answers the request: left out (TestWindowRefusedEnqueues).
			wantEnqueue: stats(2, 1), wantPlaced: stats(3, 2), wantHinted: stats(3, 2),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{"unavailable": 1}, Starting: 1},
			wantHintedNotOK: &NotOK{Codes: map[string]int{"timeout": 1}}},
		{name: "several codes and starting refusals", nemesis: NemPartitionMajority, targets: []int{1, 2, 3},
			enqs: []enq{
				{node: 1, placed: true, hint: true, typ: Info, code: "unavailable", err: starting},
				{node: 2, placed: true, hint: true, typ: Info, code: "unavailable", err: "unavailable: no quorum"},
				{node: 3, hint: true, typ: Info, code: "unavailable", err: starting},
				{node: 3, hint: true, typ: Info, code: "conn_refused", err: "dial tcp: connection refused"},
				{node: 1, hint: true, typ: OK},
			},
			wantEnqueue: stats(3, 1), wantPlaced: stats(2, 0), wantHinted: stats(5, 1),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{"unavailable": 2}, Starting: 1},
			wantHintedNotOK: &NotOK{Codes: map[string]int{"unavailable": 3, "conn_refused": 1}, Starting: 2}},
		{name: "requests to the node the fault killed are left out", nemesis: NemKillMinority, targets: []int{2},
			enqs: []enq{
				{node: 2, hint: true, typ: Info, code: "conn_refused", err: "dial tcp: connection refused"},
				{node: 2, placed: true, hint: true, typ: Info, code: "conn_refused", err: "dial tcp: connection refused"},
				{node: 1, hint: true, typ: OK},
				{node: 3, placed: true, typ: OK},
			},
			wantEnqueue: stats(1, 1), wantPlaced: stats(1, 1), wantHinted: stats(1, 1)},
		{name: "a partition leaves every node running: all counted", nemesis: NemPartitionOne, targets: []int{2},
			enqs: []enq{
				{node: 2, hint: true, typ: Info, code: "unavailable", err: "unavailable: no quorum"},
				{node: 1, hint: true, typ: OK},
			},
			wantEnqueue: stats(2, 1), wantHinted: stats(2, 1),
			wantHintedNotOK: &NotOK{Codes: map[string]int{"unavailable": 1}}},
		{name: "no answer before the history ended", nemesis: NemPartitionOne, targets: []int{3},
			enqs: []enq{
				{node: 1, placed: true, hint: true},
				{node: 1, placed: true, hint: true, typ: OK},
			},
			wantPlaced: stats(2, 1), wantHinted: stats(2, 1),
			wantPlacedNotOK: &NotOK{Codes: map[string]int{codeNoAnswer: 1}},
			wantHintedNotOK: &NotOK{Codes: map[string]int{codeNoAnswer: 1}}},
		{name: "invoked before the window: not counted", nemesis: NemPartitionOne, targets: []int{3},
			before: []enq{
				{node: 1, placed: true, hint: true, typ: Info, code: "timeout", err: "context deadline exceeded"},
			},
			enqs:       []enq{{node: 1, placed: true, hint: true, typ: OK}},
			wantPlaced: stats(1, 1), wantHinted: stats(1, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			b.nemesis(tc.nemesis, hintWindowStart, hintWindowStop, tc.targets...)
			for i, e := range tc.before {
				b.windowEnqueue(100+i, e, hintWindowStart-500+int64(i)*10)
			}
			for i, e := range tc.enqs {
				b.windowEnqueue(i, e, hintWindowStart+100+int64(i)*10)
			}
			r := Analyze(b.input())
			if len(r.Windows) != 2 {
				t.Fatalf("%d windows; want base's and the test's", len(r.Windows))
			}
			w := r.Windows[1]
			if w.Nemesis != tc.nemesis {
				t.Fatalf("window 1 is %s; want %s", w.Nemesis, tc.nemesis)
			}
			checkWindowEnqueues(t, w, [3]OpStats{tc.wantEnqueue, tc.wantPlaced, tc.wantHinted}, tc.wantPlacedNotOK, tc.wantHintedNotOK)
		})
	}
}

func TestBelowGoal(t *testing.T) {
	tests := []struct {
		attempted, ok int
		want          bool
	}{
		{0, 0, false}, // nothing to judge
		{1, 1, false},
		{1000, 999, false}, // exactly 99.9%
		{1000, 998, true},
		{10000, 9990, false},
		{10000, 9989, true},
		{3, 2, true},
	}
	for _, tc := range tests {
		if got := belowGoal(stats(tc.attempted, tc.ok)); got != tc.want {
			t.Errorf("belowGoal(%d of %d ok) = %v; want %v", tc.ok, tc.attempted, got, tc.want)
		}
	}
}

func TestNotOKString(t *testing.T) {
	tests := []struct {
		n    *NotOK
		want string
	}{
		{nil, "-"},
		{&NotOK{Codes: map[string]int{"timeout": 1}}, "timeout 1"},
		// Most frequent first, ties by name.
		{&NotOK{Codes: map[string]int{"timeout": 2, "unavailable": 5, "conn_refused": 2}, Starting: 3},
			"unavailable 5, conn_refused 2, timeout 2 (starting 3)"},
	}
	for _, tc := range tests {
		if got := tc.n.String(); got != tc.want {
			t.Errorf("%#v.String() = %q; want %q", tc.n, got, tc.want)
		}
	}
}

// The hinted figures reach report.txt (the operations' "of which hinted"
// row, the windows' hinted column, and the why of each window below the
// goal, only those) and report.json.
func TestReportHinted(t *testing.T) {
	b := base()
	// Window 2: below the goal; window 3: every enqueue ok.
	b.nemesis(NemPartitionOne, hintWindowStart, hintWindowStop, 3)
	b.nemesis(NemPartitionMajority, 20_000, 21_000, 1, 2, 3)
	for i, e := range []enq{
		{node: 1, hint: true, typ: OK},
		{node: 1, placed: true, hint: true, typ: Info, code: "unavailable", err: "unavailable: node is starting"},
		{node: 2, placed: true, typ: OK},
		{node: 2, placed: true, typ: OK},
	} {
		b.windowEnqueue(i, e, hintWindowStart+100+int64(i)*10)
	}
	for i, e := range []enq{{node: 1, hint: true, typ: OK}, {node: 2, placed: true, typ: OK}} {
		b.windowEnqueue(10+i, e, 20_100+int64(i)*10)
	}
	rep := Analyze(b.input())

	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	txt := buf.String()
	lines := strings.Split(txt, "\n")
	row := func(prefix string) string {
		t.Helper()
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no line starting %q:\n%s", prefix, txt)
		return ""
	}
	// 3 hinted enqueues in all, 2 ok; 4 placed, 3 ok.
	if got, want := row("  of which hinted"), "of which hinted 3 2 0 1 66.7%"; got != want {
		t.Errorf("ops row %q; want %q", got, want)
	}
	if got, want := row("  of which placed"), "of which placed 4 3 0 1 75.0%"; got != want {
		t.Errorf("ops row %q; want %q", got, want)
	}
	hdr := lineWith(lines, "recover enqueue")
	header := strings.Join(strings.Fields(hdr), " ")
	if !strings.Contains(header, "enqueue placed hinted recover claim") {
		t.Errorf("windows header %q lacks the hinted column after placed", header)
	}
	// Window 2's columns: enqueue 100%, placed 66.7%, hinted 50.0%.
	if w2 := row("2 "); !strings.Contains(w2, "100.0% 66.7% 50.0%") {
		t.Errorf("window 2 row %q; want enqueue, placed, hinted 100.0%% 66.7%% 50.0%%", w2)
	}
	// The kill window of base has no enqueue: "-" in each column.
	if w1 := row("1 "); !strings.Contains(w1, "- - -") {
		t.Errorf("window 1 row %q; want - for enqueue, placed and hinted", w1)
	}
	_, why, ok := strings.Cut(txt, "\nPlaced and hinted enqueues below 99.9% ok")
	if !ok {
		t.Fatalf("no why section:\n%s", txt)
	}
	why, _, _ = strings.Cut(why, "\nChecks")
	var whyRows []string
	for _, l := range strings.Split(why, "\n")[2:] {
		if f := strings.Fields(l); len(f) > 0 {
			whyRows = append(whyRows, strings.Join(f, " "))
		}
	}
	want := []string{"2 partition-one 66.67% of 3 unavailable 1 (starting 1) 50.00% of 2 unavailable 1 (starting 1) -"} // no cut-off node: "-"
	if !reflect.DeepEqual(whyRows, want) {
		t.Errorf("why rows %q; want %q (window 3 met the goal)", whyRows, want)
	}
	// The columns stay aligned: the header's "hinted" above the rows'.
	r2 := lineOf(lines, "2 ")
	if col := strings.Index(hdr, " hinted ") + 1; col <= 0 || !strings.HasPrefix(r2[col:], "50.0%") {
		t.Errorf("hinted column misaligned:\n%s\n%s", hdr, r2)
	}

	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	w2, w3 := got.Windows[1], got.Windows[2]
	if w2.Hinted.Attempted != 2 || w2.Hinted.OK != 1 || w2.Hinted.F != fHintedEnqueue {
		t.Errorf("window 2 hinted = %+v; want 1 of 2 ok", w2.Hinted)
	}
	if want := (&NotOK{Codes: map[string]int{"unavailable": 1}, Starting: 1}); !reflect.DeepEqual(w2.HintedNotOK, want) || !reflect.DeepEqual(w2.PlacedNotOK, want) {
		t.Errorf("window 2 not ok: placed %v, hinted %v; want %v each", w2.PlacedNotOK, w2.HintedNotOK, want)
	}
	if w3.Hinted.Attempted != 1 || w3.Hinted.OK != 1 || w3.HintedNotOK != nil || w3.PlacedNotOK != nil {
		t.Errorf("window 3 = hinted %+v, not ok %v %v; want 1 of 1 ok, none not ok", w3.Hinted, w3.PlacedNotOK, w3.HintedNotOK)
	}
}

// lineWith is the first of lines that holds s, or "".
func lineWith(lines []string, s string) string {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// lineOf is the first of lines that starts with prefix, or "".
func lineOf(lines []string, prefix string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// A history recorded before the invoke carried the hint still reads: its
// enqueues ask for none.
func TestHintAbsentFromOldHistory(t *testing.T) {
	old := `{"idx":3,"proc":0,"type":"invoke","f":"enqueue","t_ns":1770614193,"node":3,"placed":true,"value":"s3131-l0-1","max_attempts":10,"queue":"faults"}`
	var e Event
	if err := json.Unmarshal([]byte(old), &e); err != nil {
		t.Fatal(err)
	}
	if e.Hint || !e.Placed {
		t.Errorf("decoded hint %v, placed %v; want false, true", e.Hint, e.Placed)
	}
	j, err := json.Marshal(Event{F: FEnqueue, Hint: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"hint":true`) {
		t.Errorf("an enqueue that asked for a hint encodes as %s; want \"hint\":true", j)
	}
	if j, _ := json.Marshal(Event{F: FEnqueue}); strings.Contains(string(j), "hint") {
		t.Errorf("an enqueue that asked for none encodes as %s; want no hint field", j)
	}
}
