package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/skuldd/skuldd/wire"
)

// Report is the checkers' verdict on a run, with the figures a person
// needs to judge it.
type Report struct {
	Run     RunInfo `json:"run"`
	Summary Summary `json:"summary"`
	// Ops counts the client operations by name, then all together.
	Ops []OpStats `json:"ops"`
	// Windows are the nemesis faults in the order they started.
	Windows []WindowStats `json:"windows"`
	Checks  []*Check      `json:"checks"`
}

// Summary sizes the run.
type Summary struct {
	Events     int   `json:"events"`
	Ops        int   `json:"ops"`
	DurationNs int64 `json:"duration_ns"`
	FinalReads int   `json:"final_reads"`
	// Tasks are the ids enqueued; TasksRead the ids with a final read.
	Tasks     int `json:"tasks"`
	TasksRead int `json:"tasks_read"`
}

// OpStats counts operations by outcome. Attempted counts invokes; an
// operation the history ended before answering counts as info.
type OpStats struct {
	F         string `json:"f"`
	Attempted int    `json:"attempted"`
	OK        int    `json:"ok"`
	Fail      int    `json:"fail"`
	Info      int    `json:"info"`
}

func (s *OpStats) add(o *op) {
	s.Attempted++
	switch o.typ {
	case OK:
		s.OK++
	case Fail:
		s.Fail++
	default:
		s.Info++
	}
}

// Availability is ok ÷ attempted, or nil when nothing was attempted.
func (s OpStats) Availability() *float64 {
	if s.Attempted == 0 {
		return nil
	}
	a := float64(s.OK) / float64(s.Attempted)
	return &a
}

// afterHealNs is the span after a fault's heal whose availability is
// reported: long enough to see failover and catch-up, short enough to
// end before the next fault of a 10 s flip-flop schedule.
const afterHealNs = 10 * nsPerS

// WindowStats is what happened during one nemesis fault and right after.
type WindowStats struct {
	Nemesis string          `json:"nemesis"`
	Targets []int           `json:"targets,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
	StartNs int64           `json:"start_ns"`
	StopNs  int64           `json:"stop_ns"`
	// Open: no stop was recorded; StopNs is the heal phase or the end.
	Open         bool `json:"open,omitempty"`
	BeyondBounds bool `json:"beyond_bounds,omitempty"`
	// During counts the ops invoked in [start, stop); After those invoked
	// in the 10 s after the stop.
	During OpStats `json:"during"`
	After  OpStats `json:"after"`
	// Enqueue and Placed count, of During, the enqueues sent to a node
	// that no fault held stopped when they were invoked (one a client
	// can reach: stoppedNodes), whether this window's fault or another
	// one at the same time: those with an id (client-chosen, or fixed by
	// a key), and those without one, which the node places where it can
	// write them (Mix.Placed). An enqueue the node refused as the answer
	// to the request itself (answersRequest) is counted in neither: the
	// node served it; EnqueueRefused counts it instead.
	Enqueue OpStats `json:"enqueue"`
	Placed  OpStats `json:"placed"`
	// Hinted counts, of the same enqueues (with an id or without), those
	// that asked for a hint (Mix.Hinted, Event.Hint) and can have one
	// (hintable: no deps); nothing in a history from before the invoke
	// recorded it. It leaves out the
	// refusals that answer the request as Enqueue and Placed do.
	Hinted OpStats `json:"hinted"`
	// PlacedCut counts the enqueues without id that asked for no hint and
	// were sent to a node that the partitions and the stopped nodes of
	// this or other faults at the same time left exchanging packets with
	// fewer live nodes than a write of the run's w needs besides its own
	// replica (cutOff): no cohort can take
	// them there, and the node fails them, as placement promises only
	// where some cohort can (a hint is what keeps an enqueue there). They
	// are left out of Placed and counted here; nil when none.
	PlacedCut *OpStats `json:"placed_cut,omitempty"`
	// EnqueueRefused counts the enqueues Enqueue, Placed and Hinted leave
	// out as answered by a refusal of the request itself; nil when none.
	EnqueueRefused *Refused `json:"enqueue_refused,omitempty"`
	// PlacedNotOK and HintedNotOK say why the enqueues of Placed and
	// Hinted that did not come back ok did not; nil when all did.
	PlacedNotOK *NotOK `json:"placed_not_ok,omitempty"`
	HintedNotOK *NotOK `json:"hinted_not_ok,omitempty"`
	// RecoverClaimMs and RecoverEnqueueMs are the time from the stop to
	// the first ok claim that got a task and the first ok enqueue answered
	// after it; nil if none came.
	RecoverClaimMs   *int64 `json:"recover_claim_ms,omitempty"`
	RecoverEnqueueMs *int64 `json:"recover_enqueue_ms,omitempty"`
	// ServedMs is, for a fault that restarted nodes, the time from the
	// stop until the last of them served again (stoppedNodes; 0 when all
	// served before the stop was recorded); nil when the fault restarted
	// none or no serving note says when.
	ServedMs *int64 `json:"served_ms,omitempty"`
	// Anomalies counts the anomaly instances (within and beyond bounds)
	// dated from the start to 10 s after the stop.
	Anomalies int `json:"anomalies"`
}

// Refused counts the enqueues of a window that a node refused as the
// answer to the request itself (answersRequest), by the column they are
// left out of (with an id, without one, hinted: one enqueue can be both
// of the last two) and by code.
type Refused struct {
	Enqueue int            `json:"enqueue"`
	Placed  int            `json:"placed"`
	Hinted  int            `json:"hinted"`
	Codes   map[string]int `json:"codes"`
}

// add counts o into r, and returns r (made on the first o).
func (r *Refused) add(o *op) *Refused {
	if r == nil {
		r = &Refused{Codes: map[string]int{}}
	}
	if o.inv.Placed {
		r.Placed++
	} else {
		r.Enqueue++
	}
	if hintable(o) {
		r.Hinted++
	}
	r.Codes[o.out.Code]++
	return r
}

// requestCodes are the codes of a definite refusal (fail, a 4xx) that
// answers an enqueue itself: the request is malformed or over a limit
// (invalid, too_large), names a dependency that does not exist
// (dep_not_found, or not_found), or contradicts what is already written
// (conflict: an id or key taken by other content, a dependency that was
// cancelled and will never complete), or is sent with a credential whose
// role may not enqueue (forbidden: the workload's Mix.Forbidden). A node
// that answers so served the
// request; sent again, it gets the same answer. The codes of a node that
// could not serve it (unavailable, timeout, shutting_down, overloaded,
// internal, a transport failure: conn_refused, conn_error, ...) are not
// among them, nor those an enqueue should never get (a claim's, an
// update's): those stay counted as not ok.
var requestCodes = []string{
	wire.CodeInvalid.Name(), wire.CodeNotFound.Name(), wire.CodeDepNotFound.Name(), wire.CodeTooLarge.Name(),
	wire.CodeConflict.Name(), wire.CodeForbidden.Name(),
}

// answersRequest is whether o came back a refusal of the request itself
// (requestCodes): an answer, not unavailability.
func answersRequest(o *op) bool {
	return o.typ == Fail && o.out != nil && slices.Contains(requestCodes, o.out.Code)
}

// NotOK breaks down enqueues that did not come back ok (fail, info, or
// no answer before the history ended): by their outcome's code
// (codeNoAnswer for none), and how many of them the node refused because
// it was starting (its error says errStarting).
type NotOK struct {
	Codes    map[string]int `json:"codes"`
	Starting int            `json:"starting,omitempty"`
}

// codeNoAnswer is NotOK's code for an enqueue the history ended before
// answering; codeNone for an outcome without a code.
const (
	codeNoAnswer = "no_answer"
	codeNone     = "none"
)

// errStarting is what a node's error says while it has not loaded its
// partitions or its membership yet (node.errStarting and its kin).
const errStarting = "node is starting"

// add counts o into n when o did not come back ok, and returns n (made
// on the first such o).
func (n *NotOK) add(o *op) *NotOK {
	if o.ok() {
		return n
	}
	if n == nil {
		n = &NotOK{Codes: map[string]int{}}
	}
	code := codeNoAnswer
	if o.out != nil {
		if code = o.out.Code; code == "" {
			code = codeNone
		}
		if strings.Contains(o.out.Err, errStarting) {
			n.Starting++
		}
	}
	n.Codes[code]++
	return n
}

// String renders n on one line: the codes, most frequent first, then
// how many of them were refused as starting.
func (n *NotOK) String() string {
	if n == nil {
		return "-"
	}
	codes := make([]string, 0, len(n.Codes))
	for c := range n.Codes {
		codes = append(codes, c)
	}
	slices.SortFunc(codes, func(a, b string) int {
		if d := n.Codes[b] - n.Codes[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %d", c, n.Codes[c])
	}
	out := strings.Join(parts, ", ")
	if n.Starting > 0 {
		out += fmt.Sprintf(" (starting %d)", n.Starting)
	}
	return out
}

// The goal the windows' id-less and hinted enqueues are held to: at
// least availabilityGoalPerMille ok per 1000 sent to nodes no fault held
// stopped and not refused as the answer to the request itself. The
// report says why of each window that misses it.
const (
	availabilityGoalPerMille = 999
	perMille                 = 1000
)

// belowGoal is whether s attempted something and missed the goal.
func belowGoal(s OpStats) bool {
	return s.Attempted > 0 && s.OK*perMille < s.Attempted*availabilityGoalPerMille
}

// stopsNodes are the nemeses that stop their targets (kill, pause,
// crash, stop): a client's requests to those nodes fail whatever the
// cluster does, so the enqueue availability of every window leaves them
// out while the fault holds (stoppedNodes), the window's own fault or
// another.
var stopsNodes = []string{NemKillMinority, NemKillCohort, NemKillAll, NemPauseLeader, NemPauseRaftLeader,
	NemCrashUnsynced, NemTermRestart, NemWipe, NemWipeMajority, NemDecommission}

// opStats counts ops by name, in a fixed order, and in total.
func opStats(ops []*op) []OpStats {
	byF := map[string]*OpStats{}
	var names []string
	total := OpStats{F: "total"}
	for _, o := range ops {
		s := byF[o.f]
		if s == nil {
			s = &OpStats{F: o.f}
			byF[o.f] = s
			names = append(names, o.f)
		}
		s.add(o)
		total.add(o)
	}
	slices.SortStableFunc(names, func(a, b string) int { return rank(opNames, a) - rank(opNames, b) })
	out := make([]OpStats, 0, len(names)+2)
	for _, n := range names {
		out = append(out, *byF[n])
		if n == FEnqueue {
			for _, sub := range []OpStats{placedStats(ops), hintedStats(ops)} {
				if sub.Attempted > 0 {
					out = append(out, sub)
				}
			}
		}
	}
	return append(out, total)
}

// fPlacedEnqueue names the enqueues sent without id in the tables: a
// part of the enqueue row, not an op of its own.
const fPlacedEnqueue = "  of which placed"

// placedStats counts the enqueues of ops sent without id.
func placedStats(ops []*op) OpStats {
	s := OpStats{F: fPlacedEnqueue}
	for _, o := range ops {
		if o.f == FEnqueue && o.inv.Placed {
			s.add(o)
		}
	}
	return s
}

// fHintedEnqueue names the enqueues that asked for a hint in the
// tables, with an id or without: a part of the enqueue row too.
const fHintedEnqueue = "  of which hinted"

// hintable reports whether enqueue o asked for a hint and can have one:
// a task with deps is never hinted (its leader records which deps were
// done in its first state), so a dependent that asked waits for its
// leader like any other, and its outcome says nothing of hints.
func hintable(o *op) bool { return o.inv.Hint && len(o.inv.Deps) == 0 }

// hintedStats counts the enqueues of ops that asked for a hint and can
// have one (hintable).
func hintedStats(ops []*op) OpStats {
	s := OpStats{F: fHintedEnqueue}
	for _, o := range ops {
		if o.f == FEnqueue && hintable(o) {
			s.add(o)
		}
	}
	return s
}

// rank is a name's place in order, unknown names last.
func rank(order []string, name string) int {
	if i := slices.Index(order, name); i >= 0 {
		return i
	}
	return len(order)
}

// stopped holds, per node, the spans [start, end) of the windows whose
// fault stopped it (stopsNodes).
type stopped map[int][][2]int64

// stoppedNodes is when each node was stopped by a fault: from a window's
// start, for each target of a nemesis of stopsNodes, until the node
// serves again. A killed, crashed, wiped or SIGTERMed node is started
// again by its fault's heal, and a paused one resumed, before the stop
// event is recorded; a started one serves once the harness's NoteServing
// for it says so (serving: the notes' times per node), which may come
// after the stop: the span runs to the first such note after the
// window's start if it comes within servingWatchBound of the stop, else
// to the stop (a node that never served again counts from then). A
// window never stopped lasts until the heal phase or the end
// (buildWindows), as it does for the window's own counts. A node that
// exited on its own (NoteExit) is not a fault's: it stays counted.
func stoppedNodes(windows []window, serving map[int][]int64) stopped {
	s := stopped{}
	for _, w := range windows {
		if !slices.Contains(stopsNodes, w.nemesis) {
			continue
		}
		for _, n := range w.targets {
			s[n] = append(s[n], [2]int64{w.start, servedAt(w, serving[n])})
		}
	}
	return s
}

// servedAt is when a target of w, stopped and started again by it, served
// again: the first of its serving notes (times, in order) after w's
// start, if it is later than w's stop but within servingWatchBound of it;
// else w's stop.
func servedAt(w window, times []int64) int64 {
	k, _ := slices.BinarySearch(times, w.start+1)
	if k < len(times) && times[k] > w.stop && times[k] <= w.stop+servingWatchBound.Nanoseconds() {
		return times[k]
	}
	return w.stop
}

// at reports whether some fault held node stopped at t.
func (s stopped) at(node int, t int64) bool {
	return slices.ContainsFunc(s[node], func(sp [2]int64) bool { return t >= sp[0] && t < sp[1] })
}

// cutOff says when a node was cut off from every cohort: the partitions
// in force (their grudges) and the nodes faults held stopped left it
// exchanging packets with fewer live nodes than a write of the run's w
// needs besides its own replica (need-1; need is a majority for w=0).
// Whether two nodes share a cohort is not looked at: with a few nodes and
// many partitions every pair does, and a node that reaches enough others
// but shares no cohort with them would only make Placed look worse.
type cutOff struct {
	nodes, need int
	cuts        []window // the windows with a grudge
	down        stopped
}

// cutOffNodes returns the cutOff of a run's windows, down being when
// faults held nodes stopped.
func cutOffNodes(windows []window, run RunInfo, down stopped) cutOff {
	need := run.W
	if need == 0 {
		need = majority(max(run.Replicas, 1))
	}
	c := cutOff{nodes: run.Nodes, need: need, down: down}
	for _, w := range windows {
		if w.grudge != nil {
			c.cuts = append(c.cuts, w)
		}
	}
	return c
}

// at reports whether node n was cut off from every cohort at t.
func (c cutOff) at(n int, t int64) bool {
	if c.need <= 1 {
		return false // its own replica is enough
	}
	partners := 0
	for m := 1; m <= c.nodes; m++ {
		if m == n || c.down.at(m, t) {
			continue
		}
		cut := slices.ContainsFunc(c.cuts, func(w window) bool {
			return t >= w.start && t < w.stop && !w.grudge.Exchanges(n, m)
		})
		if !cut {
			partners++
		}
	}
	return partners < c.need-1
}

func windowStats(h *history, checks []*Check) []WindowStats {
	out := make([]WindowStats, 0, len(h.windows))
	down := stoppedNodes(h.windows, h.serving) // no client reaches these nodes then
	cut := cutOffNodes(h.windows, h.in.Run, down)
	for _, w := range h.windows {
		s := WindowStats{Nemesis: w.nemesis, Targets: w.targets, Detail: w.detail, StartNs: w.start, StopNs: w.stop,
			Open: w.open, BeyondBounds: w.beyond, During: OpStats{F: "all"}, After: OpStats{F: "all"},
			Enqueue: OpStats{F: FEnqueue}, Placed: OpStats{F: fPlacedEnqueue}, Hinted: OpStats{F: fHintedEnqueue}}
		firstClaim, firstEnqueue := tNever, tNever
		for _, o := range h.ops {
			switch {
			case o.ti >= w.start && o.ti < w.stop:
				s.During.add(o)
				if o.f == FEnqueue && !down.at(o.inv.Node, o.ti) {
					s.addEnqueue(o, cut.at(o.inv.Node, o.ti))
				}
			case o.ti >= w.stop && o.ti < w.stop+afterHealNs:
				s.After.add(o)
			}
			if !o.ok() || o.tc < w.stop {
				continue
			}
			if o.f == FClaim && o.task != "" {
				firstClaim = min(firstClaim, o.tc)
			}
			if o.f == FEnqueue {
				firstEnqueue = min(firstEnqueue, o.tc)
			}
		}
		s.RecoverClaimMs, s.RecoverEnqueueMs = sinceMs(w.stop, firstClaim), sinceMs(w.stop, firstEnqueue)
		s.ServedMs = servedMs(w, h.serving)
		for _, c := range checks {
			for _, a := range c.Anomalies {
				for _, at := range a.at {
					if at >= w.start && at < w.stop+afterHealNs {
						s.Anomalies++
					}
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// addEnqueue counts an enqueue of the window sent to a node no fault
// held stopped: under Enqueue or Placed, and Hinted if it asked for a
// hint; or, if the node refused it as the answer to the request itself,
// under EnqueueRefused only; or, one without id nor hint sent to a node
// cut off from every cohort (cut), under PlacedCut only.
func (s *WindowStats) addEnqueue(o *op, cut bool) {
	if answersRequest(o) {
		s.EnqueueRefused = s.EnqueueRefused.add(o)
		return
	}
	if o.inv.Placed && cut && !hintable(o) {
		if s.PlacedCut == nil {
			s.PlacedCut = &OpStats{F: fPlacedEnqueue}
		}
		s.PlacedCut.add(o)
		return
	}
	if o.inv.Placed {
		s.Placed.add(o)
		s.PlacedNotOK = s.PlacedNotOK.add(o)
	} else {
		s.Enqueue.add(o)
	}
	if hintable(o) {
		s.Hinted.add(o)
		s.HintedNotOK = s.HintedNotOK.add(o)
	}
}

// servedMs is WindowStats.ServedMs for w.
func servedMs(w window, serving map[int][]int64) *int64 {
	if !slices.Contains(stopsNodes, w.nemesis) {
		return nil
	}
	var out *int64
	for _, n := range w.targets {
		times := serving[n]
		k, _ := slices.BinarySearch(times, w.start+1)
		if k == len(times) || times[k] > w.stop+servingWatchBound.Nanoseconds() {
			continue // no note for this restart (or a paused node)
		}
		ms := max(servedAt(w, times)-w.stop, 0) / nsPerMs
		if out == nil || ms > *out {
			out = &ms
		}
	}
	return out
}

// sinceMs is the ms from stop to t, or nil if t is tNever.
func sinceMs(stop, t int64) *int64 {
	if t == tNever {
		return nil
	}
	ms := (t - stop) / nsPerMs
	return &ms
}

// OK reports whether every check passed: no anomaly within the design's
// bounds (those beyond them are reported, not failed).
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK() {
			return false
		}
	}
	return true
}

// Verdict is the report's one-line conclusion.
func (r *Report) Verdict() string {
	var failed []string
	beyond := 0
	for _, c := range r.Checks {
		if !c.OK() {
			failed = append(failed, c.Name)
		}
		for _, a := range c.Anomalies {
			beyond += a.BeyondBounds
		}
	}
	v := "PASS"
	if len(failed) > 0 {
		v = "FAIL: " + strings.Join(failed, "; ")
	}
	if beyond > 0 {
		v += fmt.Sprintf(" (%d anomalies beyond the bounds, reported not failed)", beyond)
	}
	return fmt.Sprintf("%s: scenario %s, seed %d", v, r.Run.Scenario, r.Run.Seed)
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(struct {
		OK      bool   `json:"ok"`
		Verdict string `json:"verdict"`
		*Report
	}{r.OK(), r.Verdict(), r}); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteText writes the report for people: the run, the operations, a table
// of the nemesis windows, a table of the checks, the anomalies with their
// examples, every excused anomaly with its excuse, and the verdict.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := &printer{w: tw}
	r.writeHeader(p)
	r.writeOps(p)
	r.writeWindows(p)
	r.writeChecks(p)
	r.writeAnomalies(p)
	p.printf("\nVERDICT %s\n", r.Verdict())
	if p.err != nil {
		return fmt.Errorf("write report: %w", p.err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// printer keeps the first write error, so the writers above stay linear.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (r *Report) writeHeader(p *printer) {
	ri := r.Run
	p.printf("skuldd fault run: scenario %s, seed %d, started %s\n", ri.Scenario, ri.Seed, ri.Started)
	p.printf("cluster: %d nodes, P=%d N=%d W=%d; skew bound %d ms, max drift %d ms, aae %d ms; ttl %d ms, max_attempts %d\n",
		ri.Nodes, ri.Partitions, ri.Replicas, ri.W, ri.SkewBoundMs, ri.MaxDriftMs, ri.AAEIntervalMs, ri.TTLMs, ri.MaxAttempts)
	if len(ri.BeyondBounds) > 0 {
		p.printf("beyond the bounds: %s\n", strings.Join(ri.BeyondBounds, ", "))
	}
	if ri.Command != "" {
		p.printf("rerun: %s\n", ri.Command)
	}
	s := r.Summary
	p.printf("history: %d events, %d ops over %s; %d tasks enqueued; %d final reads of %d tasks\n",
		s.Events, s.Ops, fmtSec(s.DurationNs), s.Tasks, s.FinalReads, s.TasksRead)
}

func (r *Report) writeOps(p *printer) {
	p.printf("\nOperations\nf\tattempted\tok\tfail\tinfo\tavailability\t\n")
	for _, s := range r.Ops {
		p.printf("%s\t%d\t%d\t%d\t%d\t%s\t\n", s.F, s.Attempted, s.OK, s.Fail, s.Info, fmtRatio(s.Availability()))
	}
}

func (r *Report) writeWindows(p *printer) {
	if len(r.Windows) == 0 {
		p.printf("\nNemesis windows: none\n")
		return
	}
	p.printf("\nNemesis windows (ops by invoke time; after = the 10 s after the stop; enqueue, placed = the availability of enqueues sent with and without an id, leaving out those sent to a node that this or any other fault had stopped (killed, crashed, SIGTERMed, paused) until it served again after its restart (report.json: served_ms after the stop), or its resume; hinted = of those, with an id or without, the ones that asked for a hint and have no deps (a dependent is never hinted); placed also leaves out those without a hint sent to a node that partitions and stopped nodes left cut off from every cohort, which no cohort can take (the table after counts them); all three leave out refusals that answer the request itself, an answer and not an outage (invalid, conflict, a missing dependency, forbidden, ...: report.json's enqueue_refused))\n")
	p.printf("#\tnemesis\ttargets\tstart\tstop\tattempted\tok\tfail\tinfo\tavailability\tafter\tenqueue\tplaced\thinted\trecover claim\trecover enqueue\tanomalies\t\n")
	for i, s := range r.Windows {
		name := s.Nemesis
		if s.BeyondBounds {
			name += " (beyond bounds)"
		}
		stop := fmtSec(s.StopNs)
		if s.Open {
			stop += " (open)"
		}
		p.printf("%d\t%s\t%v\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", i+1, name, s.Targets, fmtSec(s.StartNs), stop,
			s.During.Attempted, s.During.OK, s.During.Fail, s.During.Info, fmtRatio(s.During.Availability()),
			fmtRatio(s.After.Availability()), fmtRatio(s.Enqueue.Availability()), fmtRatio(s.Placed.Availability()),
			fmtRatio(s.Hinted.Availability()), fmtMsPtr(s.RecoverClaimMs), fmtMsPtr(s.RecoverEnqueueMs), s.Anomalies)
	}
	r.writeNotOK(p)
}

// writeNotOK writes, for each window whose placed or hinted enqueues
// missed the availability goal, why they were not ok: a table of its own
// after the windows', so both stay aligned.
func (r *Report) writeNotOK(p *printer) {
	header := false
	for i, s := range r.Windows {
		if !belowGoal(s.Placed) && !belowGoal(s.Hinted) && s.PlacedCut == nil {
			continue
		}
		if !header {
			p.printf("\nPlaced and hinted enqueues below %.1f%% ok (the windows' placed and hinted columns), and placed ones without a hint sent to a node cut off from every cohort (cut off: no cohort can take them there; not in placed): those not ok by code; starting = refused as %q\n",
				float64(availabilityGoalPerMille)/perMille*percent, errStarting)
			p.printf("#\tnemesis\tplaced\tnot ok\thinted\tnot ok\tcut off\t\n")
			header = true
		}
		cut := "-"
		if s.PlacedCut != nil {
			cut = fmtGoal(*s.PlacedCut)
		}
		p.printf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", i+1, s.Nemesis, fmtGoal(s.Placed), s.PlacedNotOK, fmtGoal(s.Hinted), s.HintedNotOK, cut)
	}
}

// fmtGoal renders s's availability finely enough to judge the goal by,
// with its count: "99.86% of 1400".
func fmtGoal(s OpStats) string {
	a := s.Availability()
	if a == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f%% of %d", *a*percent, s.Attempted)
}

// writeChecks writes a block per check: its verdict and name, the count of
// each anomaly kind (with those beyond the bounds when there are any),
// and its figures.
func (r *Report) writeChecks(p *printer) {
	p.printf("\nChecks\n")
	for _, c := range r.Checks {
		verdict := "pass"
		if !c.OK() {
			verdict = "FAIL"
		}
		p.printf("%s\t%s\n", verdict, c.Name)
		var an, figs []string
		for _, a := range c.Anomalies {
			s := fmt.Sprintf("%s %d", a.Kind, a.Count)
			if a.BeyondBounds > 0 {
				s += fmt.Sprintf(" (+%d beyond bounds)", a.BeyondBounds)
			}
			an = append(an, s)
		}
		for _, n := range c.Counts {
			figs = append(figs, fmt.Sprintf("%s %d", n.Name, n.Value))
		}
		p.printf("\t  anomalies: %s\n", strings.Join(an, ", "))
		if len(figs) > 0 {
			p.printf("\t  figures: %s\n", strings.Join(figs, ", "))
		}
	}
}

// writeAnomalies writes the checks' notes, then the anomalies that fail
// the run, up to maxExamples examples of each kind and the count of the
// rest, then every anomaly a fault beyond the bounds excuses, each with
// that fault.
func (r *Report) writeAnomalies(p *printer) {
	header := false
	for _, c := range r.Checks {
		for _, n := range c.Notes {
			p.printf("\nnote (%s): %s\n", c.Name, n)
		}
		for _, a := range c.Anomalies {
			if a.Count == 0 {
				continue
			}
			if !header {
				p.printf("\nAnomalies (examples; times are seconds since the run began)\n")
				header = true
			}
			p.printf("%s: %s: %d within bounds", c.Name, a.Kind, a.Count)
			if a.BeyondBounds > 0 {
				p.printf(", %d beyond (under Excused anomalies)", a.BeyondBounds)
			}
			p.printf("\n")
			for _, ex := range a.Examples {
				p.printf("  %s\n", ex.String())
			}
			if rest := a.Count - len(a.Examples); rest > 0 {
				p.printf("  ... and %d more\n", rest)
			}
		}
	}
	header = false
	for _, c := range r.Checks {
		for _, a := range c.Anomalies {
			if len(a.Excused) == 0 {
				continue
			}
			if !header {
				p.printf("\nExcused anomalies (every one, with the fault beyond the bounds that excuses it; reported, not failed)\n")
				header = true
			}
			p.printf("%s: %s: %d beyond bounds\n", c.Name, a.Kind, a.BeyondBounds)
			for _, ex := range a.Excused {
				p.printf("  %s\n", ex.String())
			}
		}
	}
}

// String renders an example on one line.
func (ex Example) String() string {
	var b strings.Builder
	if ex.Beyond {
		b.WriteString("[beyond bounds] ")
	}
	if ex.Task != "" {
		fmt.Fprintf(&b, "task %s ", ex.Task)
	}
	if len(ex.Claims) > 0 {
		fmt.Fprintf(&b, "claims %v ", ex.Claims)
	}
	if len(ex.Nodes) > 0 {
		fmt.Fprintf(&b, "nodes %v ", ex.Nodes)
	}
	if len(ex.TNs) > 0 {
		ts := make([]string, len(ex.TNs))
		for i, t := range ex.TNs {
			ts[i] = fmtSec(t)
		}
		fmt.Fprintf(&b, "at %s ", strings.Join(ts, " "))
	}
	if len(ex.Events) > 0 {
		fmt.Fprintf(&b, "events %v ", ex.Events)
	}
	b.WriteString(ex.Detail)
	if ex.Excused != "" {
		fmt.Fprintf(&b, " (excused by %s)", ex.Excused)
	}
	return strings.TrimSpace(b.String())
}

func fmtSec(ns int64) string {
	if ns == tNever {
		return "never"
	}
	return fmt.Sprintf("%.3fs", float64(ns)/float64(nsPerS))
}

func fmtMs(ns int64) string { return fmt.Sprintf("%.1f ms", float64(ns)/float64(nsPerMs)) }

func fmtMsPtr(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return fmt.Sprintf("%d ms", *ms)
}

// percent turns a ratio into a percentage.
const percent = 100

func fmtRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *r*percent)
}
