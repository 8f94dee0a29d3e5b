package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The tests build small histories by hand: a clean run every checker must
// pass (base), and for each checker the same run with one anomaly injected,
// which that checker must flag.

// nodeEpochMs is the node clocks' reading at the run's start: views carry
// Unix ms, the history ns since the start.
const nodeEpochMs = 1_700_000_000_000

// testNodes is the replicas every task of the fixture lives on.
var testNodes = []int{1, 2, 3}

func testRun() RunInfo {
	return RunInfo{Seed: 7, Scenario: "unit", Nodes: 3, Partitions: 4, Replicas: 3, W: 2,
		SkewBoundMs: 250, MaxDriftMs: 50, AAEIntervalMs: 1000, TTLMs: 2000, MaxAttempts: 2,
		StartUnixNs: nodeEpochMs * nsPerMs}
}

// builder accumulates a history and the final views.
type builder struct {
	run    RunInfo
	events []Event
	proc   int
	// views holds the view every replica has of a task; perNode a
	// replica's own when it differs; absent the tasks no replica holds.
	views   map[string]*wire.TaskView
	perNode map[string]map[int]*wire.TaskView
	absent  []string
	// leaders are the leaderships the run logged besides the default:
	// node testLeader leads every partition at testEpoch.
	leaders []Leadership
	// periodic is the run's periodic record (periodic.json); nil: none.
	periodic *PeriodicRecord
	// shards is the run's shard record (shards.json); nil: none.
	shards *ShardRecord
	// listing is the run's final listing (listing.json); nil: none.
	listing *QueueListing
	// upgrade is the run's upgrade record (upgrade.json); nil: none.
	upgrade *UpgradeRecord
	// corrupt, if set, damages the input after it is built.
	corrupt func(in *Input)
}

// Every claim of the fixture is granted at testEpoch of its partition,
// which testLeader leads.
const (
	testEpoch  = 1
	testLeader = 1
)

func newBuilder() *builder {
	return &builder{run: testRun(), views: map[string]*wire.TaskView{}, perNode: map[string]map[int]*wire.TaskView{}}
}

func id(n int) string { return fmt.Sprintf("%040x", n) }

func u32(v uint32) *uint32 { return &v }
func u64(v uint64) *uint64 { return &v }
func yes() *bool           { v := true; return &v }
func no() *bool            { v := false; return &v }

// op appends an operation under a fresh proc: its invoke at tiMs with inv's
// fields, and unless typ is "" its outcome at tcMs with out's.
func (b *builder) op(f string, tiMs, tcMs int64, typ string, inv, out Event) {
	b.proc++
	inv.Proc, inv.Type, inv.F, inv.TNs = b.proc, Invoke, f, tiMs*nsPerMs
	b.events = append(b.events, inv)
	if typ != "" {
		out.Proc, out.Type, out.F, out.TNs = b.proc, typ, f, tcMs*nsPerMs
		b.events = append(b.events, out)
	}
}

func (b *builder) enqueue(task string, ti, tc int64, typ string, deps ...string) {
	b.op(FEnqueue, ti, tc, typ, Event{Task: task, Value: "payload-" + task, Queue: "q", Deps: deps}, Event{})
}

// claim records a claim; only its ok names the task and claim id.
func (b *builder) claim(task string, claim uint32, ti, tc int64, typ string) {
	out := Event{}
	if typ == OK {
		out = Event{Task: task, Claim: u32(claim), Epoch: testEpoch, End: nodeEpochMs + tc + b.run.TTLMs}
	}
	b.op(FClaim, ti, tc, typ, Event{Queue: "q", TTLMs: b.run.TTLMs}, out)
}

// under records a renew, complete, fail or snooze under a claim.
func (b *builder) under(f, task string, claim uint32, ti, tc int64, typ string) {
	inv := Event{Task: task, Claim: u32(claim)}
	if f == FRenew {
		inv.TTLMs = b.run.TTLMs
	}
	b.op(f, ti, tc, typ, inv, Event{})
}

func (b *builder) update(task string, claim uint32, seq uint64, data string, ti, tc int64, typ string) {
	b.op(FUpdate, ti, tc, typ, Event{Task: task, Claim: u32(claim), Seq: u64(seq), Value: data}, Event{})
}

func (b *builder) nemesis(name string, startMs, stopMs int64, targets ...int) {
	b.events = append(b.events,
		Event{Proc: -1, Type: Nemesis, F: "start", Nemesis: name, Targets: targets, TNs: startMs * nsPerMs},
		Event{Proc: -1, Type: Nemesis, F: "stop", Nemesis: name, Targets: targets, TNs: stopMs * nsPerMs})
}

func (b *builder) phase(name string, atMs int64) {
	b.events = append(b.events, Event{Proc: -1, Type: Phase, F: name, TNs: atMs * nsPerMs})
}

func (b *builder) effect(task string, claim uint32, atMs int64, accepted *bool) {
	b.events = append(b.events, Event{Proc: -1, Type: Effect, Task: task, Claim: u32(claim), Accepted: accepted, TNs: atMs * nsPerMs})
}

// view starts a task's final view: the payload its enqueue sent.
func (b *builder) view(taskID, state string) *wire.TaskView {
	var tid task.ID
	if err := tid.UnmarshalText([]byte(taskID)); err != nil {
		panic(err)
	}
	v := &wire.TaskView{ID: tid, Queue: "q", Data: []byte("payload-" + taskID), State: state,
		MaxAttempts: b.run.MaxAttempts, Deps: []task.ID{}, Claims: []wire.ClaimView{}, Updates: []wire.UpdateView{}}
	b.views[taskID] = v
	return v
}

// claimView is a claim as a view shows it, times in run ms.
func claimView(idx uint32, startMs, endMs int64) wire.ClaimView {
	return wire.ClaimView{Claim: idx, Start: nodeEpochMs + startMs, End: nodeEpochMs + endMs, Epoch: testEpoch}
}

func completed(c wire.ClaimView, atMs int64) wire.ClaimView {
	at := nodeEpochMs + atMs
	c.Completed, c.End = &at, min(c.End, at)
	return c
}

// onNode gives one replica its own copy of a task's view to change.
func (b *builder) onNode(taskID string, node int) *wire.TaskView {
	if b.perNode[taskID] == nil {
		b.perNode[taskID] = map[int]*wire.TaskView{}
	}
	v := *b.views[taskID]
	v.Claims = slices.Clone(v.Claims)
	v.Updates = slices.Clone(v.Updates)
	v.Failures = slices.Clone(v.Failures)
	b.perNode[taskID][node] = &v
	return &v
}

// input orders the events by time (an op's invoke before its outcome)
// and numbers them, and reads every task on every replica after the end.
func (b *builder) input() *Input {
	evs := slices.Clone(b.events)
	slices.SortStableFunc(evs, func(x, y Event) int { return int((x.TNs - y.TNs) / nsPerMs) })
	var end int64
	for i := range evs {
		evs[i].Index = int64(i)
		end = max(end, evs[i].TNs)
	}
	in := &Input{Run: b.run, Events: evs, Periodic: b.periodic, Shards: b.shards, Listing: b.listing, Upgrade: b.upgrade}
	for p := range b.run.Partitions {
		in.Leaders = append(in.Leaders, Leadership{Node: testLeader, Partition: p, Epoch: testEpoch})
	}
	in.Leaders = append(in.Leaders, b.leaders...)
	ids := slices.Sorted(func(yield func(string) bool) {
		for k := range b.views {
			if !yield(k) {
				return
			}
		}
	})
	ids = append(ids, b.absent...)
	for _, tid := range ids {
		for _, n := range testNodes {
			fr := FinalRead{Task: tid, Node: n, TNs: end + nsPerS}
			v := b.views[tid]
			if o := b.perNode[tid][n]; o != nil {
				v = o
			}
			if v != nil {
				j, err := json.Marshal(v)
				if err != nil {
					panic(err)
				}
				fr.Found, fr.View = true, j
			}
			in.Finals = append(in.Finals, fr)
		}
	}
	if b.corrupt != nil {
		b.corrupt(in)
	}
	return in
}

// Tasks of the clean fixture.
var (
	taskA = id(0xa) // claimed, updated, renewed, completed
	taskB = id(0xb) // depends on A, claimed after A's completion
	taskC = id(0xc) // failed twice: dead
	taskD = id(0xd) // enqueue info, yet completed: recovered
	taskE = id(0xe) // enqueue fail: must not exist
	taskF = id(0xf) // claim expired, redelivered, completed
)

// base is a clean run: every checker passes it.
func base() *builder {
	b := newBuilder()
	b.enqueue(taskA, 0, 10, OK)
	b.claim(taskA, 0, 20, 30, OK)
	b.update(taskA, 0, 0, "a0", 40, 50, OK)
	b.under(FRenew, taskA, 0, 1000, 1010, OK)
	b.effect(taskA, 0, 1400, yes())
	b.under(FComplete, taskA, 0, 1500, 1510, OK)
	a := b.view(taskA, finalCompleted)
	a.Claims = []wire.ClaimView{completed(claimView(0, 25, 3005), 1505)}
	a.Updates = []wire.UpdateView{{Claim: 0, Seq: 0, Data: []byte("a0")}}

	b.enqueue(taskB, 5, 15, OK, taskA)
	b.claim(taskB, 0, 1600, 1610, OK)
	b.under(FComplete, taskB, 0, 1700, 1710, OK)
	bv := b.view(taskB, finalCompleted)
	bv.Deps = []task.ID{a.ID}
	bv.Claims = []wire.ClaimView{completed(claimView(0, 1605, 3605), 1705)}

	b.enqueue(taskC, 6, 16, OK)
	b.claim(taskC, 0, 100, 110, OK)
	b.under(FFail, taskC, 0, 200, 210, OK)
	b.claim(taskC, 1, 300, 310, OK)
	b.under(FFail, taskC, 1, 400, 410, OK)
	c := b.view(taskC, finalDead)
	c.Claims = []wire.ClaimView{claimView(0, 105, 205), claimView(1, 305, 405)}
	c.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 205}, {Claim: 1, At: nodeEpochMs + 405}}
	c.Attempts = 2

	b.enqueue(taskD, 7, 17, Info)
	b.claim(taskD, 0, 500, 510, OK)
	b.under(FComplete, taskD, 0, 600, 610, OK)
	b.view(taskD, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 505, 2505), 605)}

	b.enqueue(taskE, 8, 18, Fail)
	b.absent = append(b.absent, taskE)

	b.enqueue(taskF, 9, 19, OK)
	b.claim(taskF, 0, 2000, 2010, OK)
	b.claim(taskF, 1, 4300, 4310, OK)
	b.under(FComplete, taskF, 1, 4400, 4410, OK)
	f := b.view(taskF, finalCompleted)
	f.Claims = []wire.ClaimView{claimView(0, 2005, 4005), completed(claimView(1, 4305, 6305), 4405)}
	f.Attempts = 1

	b.claim("", 0, 5100, 5110, OK) // nothing to claim
	b.op(FGet, 5200, 5210, OK, Event{Task: taskA}, Event{})
	b.nemesis("kill", 3000, 3500, 2)
	b.phase("faults", 0)
	b.phase(phaseHeal, 5000)
	b.phase(phaseConverged, 5500)
	return b
}

// findCheck returns the check whose name starts with prefix.
func findCheck(t *testing.T, r *Report, prefix string) *Check {
	t.Helper()
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q", prefix)
	return nil
}

func findAnomaly(t *testing.T, c *Check, kind string) *Anomaly {
	t.Helper()
	for _, a := range c.Anomalies {
		if a.Kind == kind {
			return a
		}
	}
	t.Fatalf("check %q has no anomaly kind %q", c.Name, kind)
	return nil
}

func countOf(t *testing.T, c *Check, name string) int64 {
	t.Helper()
	for _, n := range c.Counts {
		if n.Name == name {
			return n.Value
		}
	}
	t.Fatalf("check %q has no count %q", c.Name, name)
	return 0
}

// dump renders a report for a failing test's log.
func dump(r *Report) string {
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		return err.Error()
	}
	return buf.String()
}

// TestBaseIsClean: the fixture passes every checker, so each injected
// anomaly below is the only one in its history.
func TestBaseIsClean(t *testing.T) {
	r := Analyze(base().input())
	if !r.OK() {
		t.Fatalf("base run flagged:\n%s", dump(r))
	}
	for _, c := range r.Checks {
		for _, a := range c.Anomalies {
			if a.Count+a.BeyondBounds != 0 {
				t.Errorf("%s: %s: %d within, %d beyond; want none", c.Name, a.Kind, a.Count, a.BeyondBounds)
			}
		}
	}
	q := findCheck(t, r, "total-queue (dequeue = acknowledged complete)")
	for name, want := range map[string]int64{"attempted": 6, "acknowledged": 4, "ok": 4, "recovered": 1, "dead (max_attempts)": 1,
		"redeliveries": 2, "redeliveries after fail or snooze": 1, "redeliveries after expiry": 1} {
		if got := countOf(t, q, name); got != want {
			t.Errorf("total-queue %s = %d; want %d", name, got, want)
		}
	}
}

// flagCase injects one anomaly into the base run and says which check and
// kind must report it, how many times within the bounds and beyond.
type flagCase struct {
	name   string
	inject func(b *builder)
	check  string
	kind   string
	want   int
	beyond int
}

// runFlagCases runs each case; a case with want 0 must leave the whole
// report passing, and one with want > 0 must fail it. While collecting is
// set (TestCheckerMutations), it only gathers the cases.
func runFlagCases(t *testing.T, cases []flagCase) {
	t.Helper()
	if collecting != nil {
		*collecting = append(*collecting, cases...)
		return
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if problems := tc.judge(); len(problems) > 0 {
				t.Error(strings.Join(problems, "\n"))
			}
		})
	}
}

// judge runs the case and says what it expected and did not get.
func (tc flagCase) judge() []string {
	b := base()
	tc.inject(b)
	r := Analyze(b.input())
	var c *Check
	for _, x := range r.Checks {
		if strings.HasPrefix(x.Name, tc.check) {
			c = x
			break
		}
	}
	if c == nil {
		return []string{fmt.Sprintf("no check %q", tc.check)}
	}
	i := slices.IndexFunc(c.Anomalies, func(a *Anomaly) bool { return a.Kind == tc.kind })
	if i < 0 {
		return []string{fmt.Sprintf("check %q has no anomaly kind %q", c.Name, tc.kind)}
	}
	a := c.Anomalies[i]
	var out []string
	if a.Count != tc.want || a.BeyondBounds != tc.beyond {
		out = append(out, fmt.Sprintf("%s: %d within bounds, %d beyond; want %d, %d\n%s", tc.kind, a.Count, a.BeyondBounds, tc.want, tc.beyond, dump(r)))
	}
	if r.OK() != (tc.want == 0) {
		out = append(out, fmt.Sprintf("OK() = %v with %d anomalies within bounds\n%s", r.OK(), tc.want, dump(r)))
	}
	if tc.want > 0 && len(a.Examples) == 0 {
		out = append(out, fmt.Sprintf("%s: no example", tc.kind))
	}
	if len(a.Excused) != a.BeyondBounds || slices.ContainsFunc(a.Excused, func(ex Example) bool { return ex.Excused == "" }) {
		out = append(out, fmt.Sprintf("%s: %d beyond the bounds, %d listed excused, each must name its excuse: %+v", tc.kind, a.BeyondBounds, len(a.Excused), a.Excused))
	}
	return out
}

// collecting, while not nil, gathers the cases runFlagCases is given
// instead of running them.
var collecting *[]flagCase

// flagTests are the tests whose tables TestCheckerMutations runs.
var flagTests = []func(*testing.T){
	TestHistoryDefects, TestUndecodableView, TestTotalQueueByComplete, TestTotalQueueByClaim, TestKnownTasks,
	TestClaimOverlap, TestClaimIDs, TestFencing, TestCompletionThenClaim,
	TestUpdates, TestDependencyOrder, TestAttempts, TestConvergence, TestIdempotentEnqueue,
	TestRefused, TestCancels, TestGroupCancels, TestUniqueKeys, TestRetiredKeys, TestPlacedEnqueues, TestHarness, TestAnswers,
	TestPeriodic, TestShards, TestListing, TestUpgradeCheck,
	TestWipeExcusesLoss, TestWipeExcusesOtherAnomalies, TestWipeExcusesBlockedDependents,
}

// TestCheckerMutations disables each anomaly kind's branch in turn (its
// instances dropped: mutedKind) and requires that some case of the tables
// then fails: no checker branch goes untested, and no table case passes
// whatever the checker does. It mutes kinds, not branches, so a kind
// flagged from several places has a case for each that only it flags
// (stale ops by grant, cancel and final record; epochs falling in the
// grants and in the views; the fields wellFormed requires; the releases
// of fails and of snoozes; each total-queue check's unexpected).
func TestCheckerMutations(t *testing.T) {
	var cases []flagCase
	collecting = &cases
	for _, f := range flagTests {
		f(t)
	}
	collecting = nil
	var kinds []string
	for _, c := range Analyze(base().input()).Checks {
		for _, a := range c.Anomalies {
			kinds = append(kinds, a.Kind)
		}
	}
	defer func() { mutedKind = "" }()
	for _, k := range kinds {
		mutedKind = k
		caught := slices.ContainsFunc(cases, func(tc flagCase) bool { return len(tc.judge()) > 0 })
		if !caught {
			t.Errorf("with %q disabled every one of %d table cases still passes: no test covers that branch", k, len(cases))
		}
	}
}

func TestHistoryDefects(t *testing.T) {
	runFlagCases(t, []flagCase{
		{name: "outcome without invoke", check: "history", kind: kindUnmatched, want: 1, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: 99, Type: OK, F: FClaim, TNs: 100 * nsPerMs})
		}},
		{name: "outcome of another f", check: "history", kind: kindUnmatched, want: 1, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: 98, Type: Invoke, F: FClaim, TNs: 100 * nsPerMs},
				Event{Proc: 98, Type: OK, F: FComplete, TNs: 101 * nsPerMs})
		}},
		{name: "complete without claim id", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FComplete, 100, 110, Fail, Event{Task: taskA}, Event{})
		}},
		// Each field wellFormed requires is its own branch: a case each.
		{name: "fail without task", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FFail, 100, 110, Fail, Event{Claim: u32(0)}, Event{})
		}},
		{name: "update without seq", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FUpdate, 100, 110, Fail, Event{Task: taskA, Claim: u32(0), Value: "x"}, Event{})
		}},
		{name: "enqueue without task", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FEnqueue, 100, 110, Fail, Event{Value: "x", Queue: "q"}, Event{})
		}},
		{name: "cancel without task", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FCancel, 100, 110, Fail, Event{Value: "why"}, Event{})
		}},
		{name: "claim ok naming a task without claim id", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FClaim, 100, 110, OK, Event{Queue: "q", TTLMs: 2000}, Event{Task: taskX, Epoch: testEpoch})
		}},
		{name: "invoke while the proc has an op in flight", check: "history", kind: kindOverlapping, want: 1, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: 97, Type: Invoke, F: FClaim, TNs: 100 * nsPerMs},
				Event{Proc: 97, Type: Invoke, F: FClaim, TNs: 101 * nsPerMs})
		}},
		{name: "unknown event type", check: "history", kind: kindUnknownType, want: 1, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: 1, Type: "done", TNs: 100 * nsPerMs})
		}},
		{name: "nemesis stop without start", check: "history", kind: kindUnpairedStop, want: 1, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: -1, Type: Nemesis, F: "stop", Nemesis: "pause", TNs: 100 * nsPerMs})
		}},
		{name: "nemesis note is neither start nor stop", check: "history", kind: kindUnpairedStop, inject: func(b *builder) {
			b.events = append(b.events, Event{Proc: -1, Type: Nemesis, F: "info", Nemesis: "pause", TNs: 100 * nsPerMs})
		}},
		{name: "effect without accepted", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.effect(taskA, 0, 100, nil)
		}},
		{name: "unanswered op is info, not a defect", check: "history", kind: kindUnmatched, inject: func(b *builder) {
			b.op(FEnqueue, 100, 0, "", Event{Task: id(0x77), Value: "x"}, Event{})
		}},
	})
}

// TestUndecodableView corrupts final reads' JSON directly.
func TestUndecodableView(t *testing.T) {
	runFlagCases(t, []flagCase{
		{name: "not a view", check: "history", kind: kindUnreadable, want: 1, inject: func(b *builder) {
			b.corrupt = func(in *Input) { in.Finals[0].View = json.RawMessage(`{"id": 5}`) }
		}},
		{name: "another task's view", check: "history", kind: kindUnreadable, want: 1, inject: func(b *builder) {
			b.corrupt = func(in *Input) { in.Finals[0].View = in.Finals[len(testNodes)].View }
		}},
	})
}
