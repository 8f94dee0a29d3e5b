package faults

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/skuldd/skuldd/wire"
)

// The checkers judge a finished run from its record alone: run.json (the
// bounds), history.jsonl (every operation, nemesis action and fenced-sink
// answer) and final.jsonl (every replica's view of every task after heal and
// drain). They are pure functions of that record, so a saved run can be
// judged again, by a newer checker, without the cluster.
//
// Every checker follows the same rule: flag only what is certainly wrong
// given the outcomes' meaning (history.go: ok took effect, fail took effect
// nowhere, info may or may not have). An info never proves an anomaly; it
// only widens what may have happened.
//
// What the checkers need the harness to record (a missing field is
// flagged as a history defect where the checkers cannot do without it):
//   - every client op as an invoke and an outcome with the same Proc and F,
//     a proc never having two in flight; the drain's ops too, and no task
//     op the history does not show (no requeue: it resets attempts);
//   - enqueue invoke: Task, Value (the payload, sent as data's bytes),
//     Queue, Deps, MaxAttempts and TimeLimitMs when set;
//   - claim invoke: TTLMs (else RunInfo.TTLMs is used), one task per
//     claim; claim ok: Task, Claim, and Epoch and Attempts from the view;
//     an ok with no Task is an empty poll;
//   - claim invoke: Tasks, the count asked; claim ok: Tasks, the count
//     the answer held, and End, the granted lease's end;
//   - renew, update, complete, fail, snooze invokes: Task, Claim; renew
//     TTLMs, and End on its ok; update Seq and Value (its data); fail and
//     info outcomes Code (claim_superseded is read); an ok whose answer
//     did not decode, Code CodeBadResponse;
//   - cancel invoke: Task, and Value a reason no other cancel of the run
//     gives (a final view's cancel is traced to its op by it);
//   - Effect: Task, Claim, Accepted, at the sink's answer;
//   - Nemesis start and stop: the same Nemesis name (and Targets) on both;
//     clock faults named with "clock" or "skew"; RunInfo.BeyondBounds
//     naming the nemeses beyond the bounds; a wipe's start: Targets the
//     nodes wiped, Detail "cohorts" every partition's cohort and "voters"
//     the metadata group's voters just before (without the cohorts each
//     wiped node counts as a replica of every partition);
//   - Phase "heal" when faults stop, then "converged" or "not-converged"
//     (Detail saying what differed) when the digests settle or the wait
//     ends;
//   - final.jsonl: one FinalRead per task and node, for every task the
//     history names, with Found false when the replica lacks it;
//   - RunInfo.StartUnixNs (to place node clocks on the timeline) and
//     OKFloor; leaders.jsonl, the node that led each partition's epochs
//     (without it no clock fault excuses a timing anomaly);
//   - the harness's own faults as nemesis notes (HarnessFaultNotes);
//   - periodic.json (optional): the schedules set, as answered, and the
//     final reads of the schedules and then of their queue's tasks, each
//     saying whether it was answered;
//   - shards.json (optional, required when RunInfo.Shards names a set):
//     every request of the shard members with its send and answer times
//     and the answer's generation, index, work and pending; every hold
//     with its start (the answer's arrival) and end (right before the
//     renewal or leave saying it stopped, or the lease's end by the
//     member's clock); the final reads of the set; QuietNs and StopNs.

// Files of a run directory.
const (
	runFile     = "run.json"
	historyFile = "history.jsonl"
	finalFile   = "final.jsonl"
)

// Phase names the checkers read besides those history.go lists: the
// harness records phaseConverged when every replica's digests agreed after
// heal, or phaseNotConverged (with Detail) when its bounded wait ran out.
const (
	phaseHeal         = "heal"
	phaseConverged    = "converged"
	phaseNotConverged = "not-converged"
)

// Error codes (Event.Code) some checkers read.
const codeClaimSuperseded = "claim_superseded"

// Time units. Event times are ns; node clocks and TTLs are ms.
const (
	nsPerUs = int64(1e3)
	nsPerMs = int64(1e6)
	nsPerS  = int64(1e9)
)

// tNever stands for "no outcome": an operation the history ended before
// answering may take effect at any later time.
const tNever = int64(math.MaxInt64)

// maxExamples bounds the examples kept per anomaly kind of the instances
// that fail the run: enough to debug from, short enough to read. The
// instances a fault beyond the bounds excuses are all kept
// (Anomaly.Excused), each with its excuse.
const maxExamples = 10

// Input is a finished run.
type Input struct {
	Run    RunInfo
	Events []Event     // history.jsonl, in order
	Finals []FinalRead // final.jsonl
	// Leaders are leaders.jsonl: which node led each partition at each
	// epoch; nil when the run did not record them.
	Leaders []Leadership
	// Periodic is periodic.json: the run's schedules and the tasks of
	// their queue; nil when the run set none (checkPeriodic notes it).
	Periodic *PeriodicRecord
	// Listing is listing.json: the final listing of the workload's
	// queue; nil when the run made none (a run from before it).
	Listing *QueueListing
	// Shards is shards.json: the run's shard members, their requests
	// and holds; nil when the run ran none (checkShards notes it, or
	// flags it if RunInfo.Shards says it did).
	Shards *ShardRecord
	// Upgrade is upgrade.json: what upgrade mode did; nil in other runs.
	Upgrade *UpgradeRecord
}

// readOptionalJSON reads the run file name in dir into a T: nil if the
// run wrote none; an error if it does not parse whole.
func readOptionalJSON[T any](dir, name string) (*T, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read run: %w", err)
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("read run: %s: %w", name, err)
	}
	return v, nil
}

// ReadRun reads a run directory written by the harness: run.json,
// history.jsonl and final.jsonl, and leaders.jsonl, periodic.json,
// listing.json and shards.json when present. Every file must exist and parse whole: a truncated history
// would make every checker's verdict meaningless.
func ReadRun(dir string) (*Input, error) {
	in := &Input{}
	b, err := os.ReadFile(filepath.Join(dir, runFile))
	if err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	if err := json.Unmarshal(b, &in.Run); err != nil {
		return nil, fmt.Errorf("read run: %s: %w", runFile, err)
	}
	if in.Events, err = readJSONL[Event](filepath.Join(dir, historyFile)); err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	if in.Finals, err = readJSONL[FinalRead](filepath.Join(dir, finalFile)); err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	// Optional: a run without it knows no claim's granting node.
	in.Leaders, err = readJSONL[Leadership](filepath.Join(dir, LeadersFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read run: %w", err)
	}
	// Optional too: a run from before schedules set none, one from
	// before the final listing made none, and one from before worker
	// shards ran no members.
	if in.Periodic, err = readOptionalJSON[PeriodicRecord](dir, PeriodicFile); err != nil {
		return nil, err
	}
	if in.Listing, err = readOptionalJSON[QueueListing](dir, ListingFile); err != nil {
		return nil, err
	}
	if in.Shards, err = readOptionalJSON[ShardRecord](dir, ShardsFile); err != nil {
		return nil, err
	}
	if in.Upgrade, err = readOptionalJSON[UpgradeRecord](dir, UpgradeFile); err != nil {
		return nil, err
	}
	return in, nil
}

// readJSONL decodes a file of JSON objects, one a line. A json.Decoder
// rather than a line scanner, so no line is too long.
func readJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	var out []T
	for {
		var v T
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", filepath.Base(path), len(out)+1, err)
		}
		out = append(out, v)
	}
}

// Analyze runs every checker over a run and gathers the report.
func Analyze(in *Input) *Report {
	h := digest(in)
	r := &Report{Run: in.Run, Summary: h.summary()}
	r.Checks = []*Check{
		h.check,
		checkQueueByComplete(h),
		checkQueueByClaim(h),
		checkOverlap(h),
		checkClaimIDs(h),
		checkFencing(h),
		checkCompletionThenClaim(h),
		checkUpdates(h),
		checkDeps(h),
		checkAttempts(h),
		checkConvergence(h),
		checkIdempotentEnqueue(h),
		checkKeys(h),
		checkPeriodic(h),
		checkListing(h),
		checkShards(h),
		checkUpgrade(h),
		checkRefused(h),
		checkAnswers(h),
		checkHarness(h),
	}
	r.Ops = opStats(h.ops)
	r.Windows = windowStats(h, r.Checks)
	return r
}

// op is one client operation: its invoke paired with its outcome.
type op struct {
	f    string
	proc int
	inv  *Event
	// out is the outcome; nil when the history ended first, which counts
	// as info (it may take effect at any later time).
	out *Event
	typ string // OK, Fail or Info
	// ti is the invoke's time; tc the outcome's, or tNever.
	ti, tc int64
	task   string
	claim  uint32
	// hasClaim is whether the operation names a claim id (the one it acts
	// under, or for a claim the one granted).
	hasClaim bool
}

func (o *op) ok() bool { return o.typ == OK }

// mayHaveApplied is whether the operation took effect or may have.
func (o *op) mayHaveApplied() bool { return o.typ != Fail }

// events lists the idx of the op's invoke and outcome, for examples.
func (o *op) events() []int64 {
	if o.out == nil {
		return []int64{o.inv.Index}
	}
	return []int64{o.inv.Index, o.out.Index}
}

// taskHist is everything the run recorded about one task.
type taskHist struct {
	id       string
	enqueues []*op // every attempt, in invoke order
	// grants are the ok claims, in the order of their outcomes.
	grants []*op
	// renews .. cancels hold every attempt, in invoke order.
	renews, updates, completes, fails, snoozes, cancels []*op
	// keyHolds are the keyed enqueues of other ids acknowledged as
	// duplicates of this task: each proves it exists.
	keyHolds []*op
	reads    []taskRead
	// views are the reads of the replicas that hold the task (decoded).
	views []taskRead
}

// taskRead is one replica's final read of the task; view is nil unless the
// replica found it and its view decoded.
type taskRead struct {
	read *FinalRead
	view *wire.TaskView
}

// found returns the decoded views of the replicas that hold the task.
func (t *taskHist) found() []taskRead { return t.views }

// window is a nemesis fault from its start to its stop.
type window struct {
	// num is the window's number in the report's windows table (1, 2,
	// ... in the order the faults started).
	num     int
	nemesis string
	targets []int
	detail  json.RawMessage
	start   int64
	stop    int64
	// open: no stop was recorded; the window ends at the heal phase or at
	// the history's end.
	open bool
	// beyond: RunInfo.BeyondBounds names this nemesis; clock: it is a
	// clock fault (its name says "clock" or "skew"), which can break only
	// the time-based promises, not durability or fencing.
	beyond bool
	clock  bool
	// wipe: the fault deleted its targets' data dirs (NemWipe,
	// NemWipeMajority); cohorts are every partition's cohort just
	// before (the start event's detail), nil when it did not say.
	wipe    bool
	cohorts map[int][]int
	// grudge is a partition's cuts (the start event's detail); nil for a
	// fault that cuts no link.
	grudge Grudge
	// voters are the metadata group's voters just before a wipe; nil
	// when it did not say.
	voters []int
	// offsetsMs are a clock fault's offsets by target node (the start
	// event's detail "offsets_ms", one per target); nil if it said none.
	offsetsMs map[int]int64
}

// replicasWiped is how many replicas of partition p the wipe w deleted:
// its targets in p's cohort. Without the cohorts (or the partition, p <
// 0), every target counts as one of p's replicas, the most it can have
// taken, capped at the replica count.
func (w *window) replicasWiped(p, replicas int) int {
	cohort, known := w.cohorts[p]
	if w.cohorts == nil || p < 0 || !known {
		return min(len(w.targets), max(replicas, 1))
	}
	n := 0
	for _, t := range w.targets {
		if slices.Contains(cohort, t) {
			n++
		}
	}
	return n
}

// history is a run digested for the checkers.
type history struct {
	in      *Input
	ops     []*op
	tasks   map[string]*taskHist
	ids     []string // task ids, sorted, so reports are deterministic
	windows []window
	// repairs are the times of the harness's NoteRepaired notes, in
	// order: the cluster whole again after wipes.
	repairs []int64
	// serving are the times of the harness's NoteServing notes per
	// node, in order: a node it started answering as started.
	serving map[int][]int64
	phases  []*Event
	effects []*Event
	tEnd    int64
	// leaders maps a partition and epoch to the node that led it
	// (Input.Leaders); conflicts are the records of an epoch that named
	// two nodes.
	leaders   map[partEpoch]int
	conflicts map[partEpoch][]int
	// check collects the history's own defects: a record the checkers
	// cannot interpret makes their verdicts untrustworthy, so it fails.
	check *Check
	// groupCancels are the group cancels, filed under each task of their
	// group as cancels by expandGroupCancels.
	groupCancels []*op
	// duplicates are the keyed enqueues acknowledged as duplicates.
	duplicates []*op
	// payloads maps each payload a claim's ok or a final read showed to
	// the tasks it showed it under: a placed enqueue without an ok is
	// known by its payload (placedTask).
	payloads map[string][]string
}

// Kinds of history defects.
const (
	kindUnmatched    = "outcome without invoke"
	kindOverlapping  = "invoke while another op of the proc is in flight"
	kindMalformed    = "malformed event"
	kindUnknownType  = "unknown event type"
	kindUnreadable   = "final read undecodable"
	kindUnpairedStop = "nemesis stop without start"
)

func digest(in *Input) *history {
	h := &history{in: in, tasks: map[string]*taskHist{}}
	h.check = newCheck("history", "every outcome follows its proc's invoke; events carry the fields their checkers need",
		kindUnmatched, kindOverlapping, kindMalformed, kindUnknownType, kindUnreadable, kindUnpairedStop)
	h.pair()
	h.payloads = h.payloadTasks()
	for _, o := range h.ops {
		h.index(o)
	}
	h.expandGroupCancels()
	h.readFinals()
	for _, t := range h.tasks {
		slices.SortStableFunc(t.grants, func(a, b *op) int { return cmp.Compare(a.tc, b.tc) })
		h.ids = append(h.ids, t.id)
	}
	slices.Sort(h.ids)
	h.buildWindows()
	h.buildLeaders()
	unfinished := int64(0)
	for _, o := range h.ops {
		if o.out == nil {
			unfinished++
		}
	}
	h.check.count("events", int64(len(in.Events)))
	h.check.count("operations", int64(len(h.ops)))
	h.check.count("unfinished operations (counted as info)", unfinished)
	h.noteWipes()
	return h
}

// noteWipes states, in a run with wipes, the rule by which they excuse
// anomalies (beyond), so a reader can tell the boundary the counts
// measure.
func (h *history) noteWipes() {
	var wipes, blind int
	for _, w := range h.windows {
		if w.wipe && w.beyond {
			wipes++
			if w.cohorts == nil {
				blind++
			}
		}
	}
	if wipes == 0 {
		return
	}
	why := fmt.Sprintf("a majority of N=%d", h.in.Run.Replicas)
	if need := h.wipeLossNeed(); need < majority(max(h.in.Run.Replicas, 1)) {
		why = fmt.Sprintf("the run's w=%d, below a majority of N=%d", need, h.in.Run.Replicas)
	}
	note := fmt.Sprintf("%d wipe(s): a task lost counts beyond the bounds only if the wipes from its acknowledgement on "+
		"deleted at least %d replica(s) of the task's partition (%s); another anomaly of a task, if they deleted a majority "+
		"of them from its first event to its last; one of no single task, a majority of some partition or of the metadata voters; "+
		"wipes add up until the cluster is whole again (%d repaired note(s))", wipes, h.wipeLossNeed(), why, len(h.repairs))
	if blind > 0 {
		note += fmt.Sprintf("; %d wipe(s) recorded no cohorts: each of their nodes is counted as a replica of every partition", blind)
	}
	h.check.Notes = append(h.check.Notes, note)
}

// pair matches each outcome with the invoke of its proc, as Jepsen does: a
// proc has at most one operation in flight.
func (h *history) pair() {
	pending := map[int]*op{}
	for i := range h.in.Events {
		e := &h.in.Events[i]
		h.tEnd = max(h.tEnd, e.TNs)
		switch e.Type {
		case Invoke:
			if prev := pending[e.Proc]; prev != nil {
				h.defect(kindOverlapping, e, fmt.Sprintf("proc %d invoked %s while %s (event %d) had no outcome", e.Proc, e.F, prev.f, prev.inv.Index))
			}
			o := &op{f: e.F, proc: e.Proc, inv: e, typ: Info, ti: e.TNs, tc: tNever}
			pending[e.Proc] = o
			h.ops = append(h.ops, o)
		case OK, Fail, Info:
			o := pending[e.Proc]
			if o == nil || o.f != e.F {
				h.defect(kindUnmatched, e, fmt.Sprintf("%s %s of proc %d matches no invoke in flight", e.Type, e.F, e.Proc))
				continue
			}
			delete(pending, e.Proc)
			o.out, o.typ, o.tc = e, e.Type, e.TNs
		case Nemesis:
			// Paired into windows by buildWindows.
		case Effect:
			h.effects = append(h.effects, e)
		case Phase:
			h.phases = append(h.phases, e)
		default:
			h.defect(kindUnknownType, e, fmt.Sprintf("type %q", e.Type))
		}
	}
}

func (h *history) defect(kind string, e *Event, detail string) {
	h.check.flag(kind, "", e.TNs, Example{Events: []int64{e.Index}, TNs: []int64{e.TNs}, Detail: detail})
}

// index resolves an op's task and claim id and files it under its task.
func (h *history) index(o *op) {
	switch {
	case o.f == FClaim:
		// A claim names its task and claim id only in its ok.
		if o.out != nil {
			o.task = o.out.Task
			if c := o.out.Claim; c != nil {
				o.claim, o.hasClaim = *c, true
			}
		}
	case o.f == FEnqueue && o.inv.Placed:
		o.task = h.placedTask(o)
		if o.task == "" && !o.ok() {
			return // in doubt or refused, and never seen: nothing to file
		}
	default:
		o.task = o.inv.Task
		if c := o.inv.Claim; c != nil {
			o.claim, o.hasClaim = *c, true
		}
	}
	if !h.wellFormed(o) {
		return
	}
	if o.f == FGroupCancel {
		h.groupCancels = append(h.groupCancels, o) // filed per task by expandGroupCancels
		return
	}
	if o.task == "" || !slices.Contains(taskOps, o.f) {
		return // an empty claim, a get: nothing a checker reads per task
	}
	t := h.task(o.task)
	switch o.f {
	case FEnqueue:
		if o.ok() && o.out.Holder != "" {
			h.fileDuplicate(t, o)
			return
		}
		t.enqueues = append(t.enqueues, o)
	case FClaim:
		t.grants = append(t.grants, o)
	case FRenew:
		t.renews = append(t.renews, o)
	case FUpdate:
		t.updates = append(t.updates, o)
	case FComplete:
		t.completes = append(t.completes, o)
	case FFail:
		t.fails = append(t.fails, o)
	case FSnooze:
		t.snoozes = append(t.snoozes, o)
	case FCancel:
		t.cancels = append(t.cancels, o)
	}
}

// placedTask returns the task of a placed enqueue (sent without id): the
// one its ok names, else the one a claim or a final read showed its
// payload under (the lowest id, if several: the others then have no
// enqueue, which the checkers flag as unexpected), else "".
func (h *history) placedTask(o *op) string {
	if o.ok() {
		return o.out.Task
	}
	if ids := h.payloads[o.inv.Value]; len(ids) > 0 {
		return slices.Min(ids)
	}
	return ""
}

// payloadTasks maps the payloads that claims' oks and final reads show
// to the tasks they show them under.
func (h *history) payloadTasks() map[string][]string {
	m := map[string][]string{}
	add := func(payload, id string) {
		if payload != "" && id != "" && !slices.Contains(m[payload], id) {
			m[payload] = append(m[payload], id)
		}
	}
	for _, o := range h.ops {
		if o.f == FClaim && o.ok() && o.out.Task != "" {
			add(o.out.Value, o.out.Task)
		}
	}
	for i := range h.in.Finals {
		fr := &h.in.Finals[i]
		var v wire.TaskView
		if fr.Found && json.Unmarshal(fr.View, &v) == nil && v.ID.String() == fr.Task {
			add(string(v.Data), fr.Task)
		}
	}
	return m
}

// fileDuplicate files a keyed enqueue that came back ok as a duplicate:
// its own task (the id it drew) was not created, as if it had been
// refused (a fail copy among the task's enqueues), and the holder it
// named is acknowledged to exist, W replicas holding it (an ok copy among
// the holder's keyHolds). The op itself stays ok in the tables.
func (h *history) fileDuplicate(t *taskHist, o *op) {
	refused := *o
	refused.typ = Fail
	t.enqueues = append(t.enqueues, &refused)
	held := *o
	held.task = o.out.Holder
	ht := h.task(o.out.Holder)
	ht.keyHolds = append(ht.keyHolds, &held)
	h.duplicates = append(h.duplicates, o)
}

// taskOps are the operations filed under their task.
var taskOps = []string{FEnqueue, FClaim, FRenew, FUpdate, FComplete, FFail, FSnooze, FCancel}

// wellFormed flags an op missing what its checkers need: a task on an
// enqueue or a claim-path op, a claim id on an op under a claim or on a
// claim's ok that names a task.
func (h *history) wellFormed(o *op) bool {
	var missing string
	switch o.f {
	case FEnqueue, FCancel:
		switch {
		case o.task == "" && o.inv.Placed:
			missing = "task (a placed enqueue's ok names none)"
		case o.task == "":
			missing = "task"
		case o.out != nil && o.out.Holder != "" && o.inv.Key == "":
			missing = "key (its ok names a holder)"
		}
	case FGroupCancel:
		switch {
		case o.inv.Group == "":
			missing = "group"
		case o.inv.Value == "":
			missing = "reason (value)"
		}
	case FClaim:
		if o.ok() && o.task != "" && !o.hasClaim {
			missing = "claim"
		}
	case FRenew, FUpdate, FComplete, FFail, FSnooze:
		switch {
		case o.task == "":
			missing = "task"
		case !o.hasClaim:
			missing = "claim"
		case o.f == FUpdate && o.inv.Seq == nil:
			missing = "seq"
		}
	}
	if missing == "" {
		return true
	}
	h.defect(kindMalformed, o.inv, fmt.Sprintf("%s (proc %d) without %s", o.f, o.proc, missing))
	return false
}

// expandGroupCancels files each group cancel under every task whose
// enqueue named its group, as a cancel of that task with the group
// cancel's reason, times and events, and an outcome that says what the
// group cancel's outcome means for that task:
//   - a group cancel that came back fail took effect nowhere (fail), and
//     one in doubt may have cancelled any task of the group (info);
//   - an ok one cancelled (ok) each task of the group that was surely
//     open at every leader while it ran: its enqueue acknowledged before
//     the cancel was invoked, by at least a majority of replicas (a task
//     a stale leader acknowledged alone reaches the others only later),
//     and no complete of it sent before the cancel's ok; a task whose
//     enqueues were all invoked after that ok did not exist yet (fail);
//     of any other task it may or may not have (info).
//
// So an ok group cancel makes the per-task checkers require what one ok
// cancel of each of those tasks would: cancelled in every final view, no
// claim or write under an old claim accepted after it.
func (h *history) expandGroupCancels() {
	if len(h.groupCancels) == 0 {
		return
	}
	members := map[string][]*taskHist{}
	for _, id := range slices.Sorted(maps.Keys(h.tasks)) {
		t := h.tasks[id]
		if len(t.enqueues) > 0 && t.enqueues[0].inv.Group != "" {
			members[t.enqueues[0].inv.Group] = append(members[t.enqueues[0].inv.Group], t)
		}
	}
	need := majority(max(h.in.Run.Replicas, 1))
	var sure int64
	for _, g := range h.groupCancels {
		for _, t := range members[g.inv.Group] {
			d := *g
			d.f, d.task, d.typ = FCancel, t.id, h.groupCancelOutcome(g, t, need)
			t.cancels = append(t.cancels, &d)
			if d.ok() {
				sure++
			}
		}
	}
	h.check.count("tasks an acknowledged group cancel surely cancelled", sure)
	for _, t := range h.tasks {
		slices.SortStableFunc(t.cancels, func(a, b *op) int { return cmp.Compare(a.ti, b.ti) })
	}
}

// groupCancelOutcome is what group cancel g's outcome means for task t
// of its group (expandGroupCancels), need the acks that make an enqueue
// held by a majority. Before and after are by the history's order, not
// by time: an invoke recorded after an outcome was sent after it was
// received, where times can tie (the simulation's virtual clock stands
// still while requests run).
func (h *history) groupCancelOutcome(g *op, t *taskHist, need int) string {
	if g.typ != OK {
		return g.typ
	}
	okAt := g.out.Index
	if !slices.ContainsFunc(t.enqueues, func(e *op) bool { return e.inv.Index < okAt }) {
		return Fail
	}
	held := slices.ContainsFunc(t.enqueues, func(e *op) bool { return e.ok() && e.out.Index < g.inv.Index && e.out.Acks >= need })
	completing := slices.ContainsFunc(t.completes, func(c *op) bool { return c.mayHaveApplied() && c.inv.Index < okAt })
	if held && !completing {
		return OK
	}
	return Info
}

func (h *history) task(id string) *taskHist {
	t := h.tasks[id]
	if t == nil {
		t = &taskHist{id: id}
		h.tasks[id] = t
	}
	return t
}

// readFinals files the final reads under their tasks and decodes the views.
func (h *history) readFinals() {
	for i := range h.in.Finals {
		fr := &h.in.Finals[i]
		tr := taskRead{read: fr}
		if fr.Found {
			var v wire.TaskView
			err := json.Unmarshal(fr.View, &v)
			switch {
			case err != nil:
				h.finalDefect(fr, fmt.Sprintf("view: %v", err))
			case v.ID.String() != fr.Task:
				h.finalDefect(fr, fmt.Sprintf("view of task %s", v.ID))
			default:
				tr.view = &v
			}
		}
		t := h.task(fr.Task)
		t.reads = append(t.reads, tr)
		if tr.view != nil {
			t.views = append(t.views, tr)
		}
	}
}

func (h *history) finalDefect(fr *FinalRead, detail string) {
	h.check.flag(kindUnreadable, "", fr.TNs, Example{Task: fr.Task, Nodes: []int{fr.Node}, TNs: []int64{fr.TNs}, Detail: detail})
}

// summary counts what the run recorded.
func (h *history) summary() Summary {
	s := Summary{Events: len(h.in.Events), Ops: len(h.ops), DurationNs: h.tEnd, FinalReads: len(h.in.Finals)}
	for _, t := range h.tasks {
		if len(t.enqueues) > 0 {
			s.Tasks++
		}
		if len(t.reads) > 0 {
			s.TasksRead++
		}
	}
	return s
}

// Check is one checker's result.
type Check struct {
	Name string `json:"name"`
	// Rule states what the checker verifies, in one line.
	Rule string `json:"rule"`
	// Counts are the checker's figures, in a fixed order; they never fail
	// the run by themselves.
	Counts []Count `json:"counts,omitempty"`
	// Anomalies are the kinds of violation the checker looks for, each
	// listed even when none was found.
	Anomalies []*Anomaly `json:"anomalies"`
	Notes     []string   `json:"notes,omitempty"`
}

// Count is a named figure.
type Count struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// Anomaly is one kind of violation and its instances.
type Anomaly struct {
	Kind string `json:"kind"`
	// Count is the instances within the design's bounds: any fails the run.
	Count int `json:"count"`
	// BeyondBounds is the instances a fault beyond the bounds excuses
	// (RunInfo.BeyondBounds): reported as the guarantee's boundary.
	BeyondBounds int `json:"beyond_bounds"`
	// Examples are the first maxExamples instances within the bounds.
	Examples []Example `json:"examples,omitempty"`
	// Excused is every instance beyond the bounds, each naming in
	// Excused the window, nodes and grant or deletion that excuse it:
	// not capped, since each is a place where the run claims the design
	// promised nothing.
	Excused []Example `json:"excused,omitempty"`
	// at holds every instance's time, for the per-window tables.
	at []int64
}

// Example is one instance of an anomaly, with what it takes to find it in
// the history.
type Example struct {
	Task   string   `json:"task,omitempty"`
	Claims []uint32 `json:"claims,omitempty"`
	// TNs are the times of the events involved (ns since the run began).
	TNs []int64 `json:"t_ns,omitempty"`
	// Events are the idx of the events involved.
	Events []int64 `json:"events,omitempty"`
	Nodes  []int   `json:"nodes,omitempty"`
	Beyond bool    `json:"beyond_bounds,omitempty"`
	// Excused says which faults beyond the bounds explain the instance
	// (the window, its nodes, and why they count): set when Beyond is.
	Excused string `json:"excused_by,omitempty"`
	Detail  string `json:"detail"`
}

func newCheck(name, rule string, kinds ...string) *Check {
	c := &Check{Name: name, Rule: rule}
	for _, k := range kinds {
		c.Anomalies = append(c.Anomalies, &Anomaly{Kind: k})
	}
	return c
}

// count sets a figure, adding it at the end the first time.
func (c *Check) count(name string, v int64) {
	for i := range c.Counts {
		if c.Counts[i].Name == name {
			c.Counts[i].Value = v
			return
		}
	}
	c.Counts = append(c.Counts, Count{Name: name, Value: v})
}

// add adds to a figure.
func (c *Check) add(name string, d int64) {
	for i := range c.Counts {
		if c.Counts[i].Name == name {
			c.Counts[i].Value += d
			return
		}
	}
	c.Counts = append(c.Counts, Count{Name: name, Value: d})
}

// flag records an instance of an anomaly kind at time at; why, unless
// empty, says which faults beyond the bounds excuse it.
func (c *Check) flag(kind string, why excuse, at int64, ex Example) {
	if kind == mutedKind {
		return
	}
	a := c.anomaly(kind)
	a.at = append(a.at, at)
	if why != "" {
		ex.Beyond, ex.Excused = true, string(why)
		a.BeyondBounds++
		a.Excused = append(a.Excused, ex)
		return
	}
	a.Count++
	if a.Count <= maxExamples {
		a.Examples = append(a.Examples, ex)
	}
}

func (c *Check) anomaly(kind string) *Anomaly {
	for _, a := range c.Anomalies {
		if a.Kind == kind {
			return a
		}
	}
	a := &Anomaly{Kind: kind}
	c.Anomalies = append(c.Anomalies, a)
	return a
}

// mutedKind is an anomaly kind whose instances flag drops, as if the
// branch of its checker that finds them were disabled: set only by
// TestCheckerMutations, which proves that every kind's branch is one some
// test would miss. Empty otherwise.
var mutedKind string

// OK reports whether the check found no anomaly within the bounds.
func (c *Check) OK() bool {
	for _, a := range c.Anomalies {
		if a.Count > 0 {
			return false
		}
	}
	return true
}

// taskFlags gathers one task's per-replica findings, so that an anomaly
// several replicas show counts once, its example naming every replica
// that shows it (one lost write on three replicas is one anomaly).
type taskFlags struct {
	kinds   []string
	pending map[string]*pendingFlag
}

type pendingFlag struct {
	why excuse
	at  int64
	ex  Example
}

// add records that replica node shows the anomaly; the first replica's
// example stands for all.
func (f *taskFlags) add(kind string, why excuse, at int64, ex Example, node int) {
	if f.pending == nil {
		f.pending = map[string]*pendingFlag{}
	}
	p := f.pending[kind]
	if p == nil {
		ex.Nodes = nil
		p = &pendingFlag{why: why, at: at, ex: ex}
		f.pending[kind] = p
		f.kinds = append(f.kinds, kind)
	}
	p.ex.Nodes = append(p.ex.Nodes, node)
}

// flush flags each gathered anomaly once.
func (f *taskFlags) flush(c *Check) {
	for _, k := range f.kinds {
		p := f.pending[k]
		c.flag(k, p.why, p.at, p.ex)
	}
	f.kinds, f.pending = nil, nil
}
