package faults

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// RunSummary is summary.json: what the harness saw of its own run, for
// people (the checkers judge the history).
type RunSummary struct {
	Seed     int64       `json:"seed"`
	Started  string      `json:"started"`
	ElapsedS float64     `json:"elapsed_s"`
	Phases   []PhaseTime `json:"phases"`
	// Error is the harness's own failure that ended the run early
	// (Execute's error); the summary is written all the same.
	Error string `json:"error,omitempty"`
	// HarnessFaults are the history's notes that fail the run
	// (HarnessFaultNotes), in order.
	HarnessFaults []HarnessFault `json:"harness_faults"`
	// ConnectChecks counts the partitions' connect checks run
	// (checkPartition); Leaders the records written to leaders.jsonl.
	ConnectChecks int `json:"connect_checks"`
	Leaders       int `json:"leaders"`
	// Ops counts each operation's events by type (invoke, ok, fail,
	// info); Codes the fail and info codes per operation.
	Ops   map[string]map[string]int `json:"ops"`
	Codes map[string]map[string]int `json:"codes"`
	// Effects counts the fenced sink's answers.
	Effects map[string]int `json:"effects"`
	// Windows counts outcomes inside each nemesis window, and Healthy
	// outside every window (during the faults phase).
	Windows []WindowCounts `json:"windows"`
	Healthy WindowCounts   `json:"healthy"`
	Steps   []StepReport   `json:"steps"`

	Converge ConvergeReport `json:"converge"`
	Drain    DrainReport    `json:"drain"`
	Final    FinalReport    `json:"final"`
	// Periodic counts the schedules set and what their final reads
	// found (periodic.json holds them).
	Periodic PeriodicSummary `json:"periodic"`
	// Shards counts the worker-shard members' requests and holds
	// (shards.json holds them).
	Shards ShardsSummary `json:"shards"`
	// Delays is the harness's own scheduler delay (sleep overshoot)
	// over the run.
	Delays DelayStats `json:"sched_delay"`
	Relay  RelayStats `json:"relay"`
	// NodeExits lists exits of nodes the harness did not cause; NodeLogs
	// what the nodes' logs hold.
	NodeExits map[int][]string `json:"node_exits,omitempty"`
	NodeLogs  map[int]LogScan  `json:"node_logs"`
	Notes     []string         `json:"notes,omitempty"`
}

// HarnessFault is one note of HarnessFaultNotes in the history.
type HarnessFault struct {
	Note    string          `json:"note"`
	TS      float64         `json:"t_s"`
	Targets []int           `json:"targets,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// PhaseTime is when a phase began (s since the run began).
type PhaseTime struct {
	Phase string  `json:"phase"`
	TS    float64 `json:"t_s"`
}

// StepReport is one schedule step as it ran.
type StepReport struct {
	Step    int      `json:"step"`
	Faults  []string `json:"faults"`
	Targets [][]int  `json:"targets"`
	Start   float64  `json:"start_s"`
	Healed  float64  `json:"healed_s"`
	// Recovered: every node served with every partition led within
	// RecoverTimeout of the heal; RecoverS is how long that took.
	Recovered  bool    `json:"recovered"`
	RecoverS   float64 `json:"recover_s"`
	RecoverErr string  `json:"recover_error,omitempty"`
	// RepairedS, after a wipe, is how long after the heal every
	// partition had its replicas again and every metadata voter was
	// alive (Run.waitRepaired); RepairErr says why not, if the bound
	// passed first.
	RepairedS *float64   `json:"repaired_s,omitempty"`
	RepairErr string     `json:"repair_error,omitempty"`
	Errors    []string   `json:"errors,omitempty"`
	Delays    DelayStats `json:"sched_delay"`
}

// WindowCounts counts the outcomes (ok, fail, info) of each operation
// completed within a window.
type WindowCounts struct {
	Nemesis string                    `json:"nemesis"`
	Targets []int                     `json:"targets,omitempty"`
	StartS  float64                   `json:"start_s"`
	StopS   float64                   `json:"stop_s"`
	Ops     map[string]map[string]int `json:"ops"`
}

func (w *WindowCounts) add(e Event) {
	if w.Ops == nil {
		w.Ops = map[string]map[string]int{}
	}
	if w.Ops[e.F] == nil {
		w.Ops[e.F] = map[string]int{}
	}
	w.Ops[e.F][e.Type]++
}

// total sums an outcome type over the operations.
func (w *WindowCounts) total(typ string) int {
	n := 0
	for _, m := range w.Ops {
		n += m[typ]
	}
	return n
}

// Count fills the Ops, Codes, Effects, Windows and Healthy parts of s
// from a history.
func (s *RunSummary) Count(events []Event) {
	s.Ops, s.Codes, s.Effects = map[string]map[string]int{}, map[string]map[string]int{}, map[string]int{}
	bump := func(m map[string]map[string]int, k1, k2 string) {
		if m[k1] == nil {
			m[k1] = map[string]int{}
		}
		m[k1][k2]++
	}
	var faultStart, faultEnd int64 = -1, -1
	open := map[string][]int{} // nemesis kind -> indexes into s.Windows still open
	s.Windows, s.HarnessFaults = nil, []HarnessFault{}
	for _, e := range events {
		switch e.Type {
		case Invoke, OK, Fail, Info:
			bump(s.Ops, e.F, e.Type)
			if e.Type == Fail || e.Type == Info {
				bump(s.Codes, e.F, e.Type+":"+e.Code)
			}
		case Effect:
			if e.Accepted != nil && *e.Accepted {
				s.Effects["accepted"]++
			} else {
				s.Effects["rejected"]++
			}
		case Phase:
			switch e.F {
			case PhaseFaults:
				faultStart = e.TNs
			case PhaseHeal:
				faultEnd = e.TNs
			}
		case Nemesis:
			if e.F == "note" && IsHarnessFault(e.Nemesis) {
				s.HarnessFaults = append(s.HarnessFaults, HarnessFault{Note: e.Nemesis, TS: secs(e.TNs), Targets: e.Targets, Detail: e.Detail})
			}
			if e.F == "start" {
				open[e.Nemesis] = append(open[e.Nemesis], len(s.Windows))
				s.Windows = append(s.Windows, WindowCounts{Nemesis: e.Nemesis, Targets: e.Targets, StartS: secs(e.TNs), StopS: -1})
			} else if idx := open[e.Nemesis]; e.F == "stop" && len(idx) > 0 {
				s.Windows[idx[0]].StopS = secs(e.TNs)
				open[e.Nemesis] = idx[1:]
			}
		}
	}
	s.Healthy = WindowCounts{Nemesis: "none", StartS: secs(faultStart), StopS: secs(faultEnd)}
	for _, e := range events {
		if e.Type != OK && e.Type != Fail && e.Type != Info {
			continue
		}
		t, in := secs(e.TNs), false
		for i := range s.Windows {
			w := &s.Windows[i]
			if t >= w.StartS && (w.StopS < 0 || t <= w.StopS) {
				w.add(e)
				in = true
			}
		}
		if !in && faultStart >= 0 && e.TNs >= faultStart && (faultEnd < 0 || e.TNs <= faultEnd) {
			s.Healthy.add(e)
		}
	}
}

// Print writes the counts for a person.
func (s *RunSummary) Print(w io.Writer) {
	ops := opNames
	fmt.Fprintf(w, "\nOperations (whole run):\n  %-9s %8s %8s %8s %8s\n", "op", "invoke", "ok", "fail", "info")
	for _, op := range ops {
		if m := s.Ops[op]; m != nil {
			fmt.Fprintf(w, "  %-9s %8d %8d %8d %8d\n", op, m[Invoke], m[OK], m[Fail], m[Info])
		}
	}
	fmt.Fprintf(w, "  fenced sink: %d accepted, %d rejected\n", s.Effects["accepted"], s.Effects["rejected"])
	fmt.Fprintf(w, "Fail and info codes:\n")
	for _, op := range ops {
		if m := s.Codes[op]; m != nil {
			keys := slices.SortedFunc(mapKeys(m), func(a, b string) int { return cmp.Compare(m[b], m[a]) })
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = fmt.Sprintf("%s=%d", k, m[k])
			}
			fmt.Fprintf(w, "  %-9s %s\n", op, strings.Join(parts, " "))
		}
	}
	fmt.Fprintf(w, "Per nemesis window (ok/fail/info of operations completed in it):\n")
	fmt.Fprintf(w, "  %-19s %-11s %15s  %-14s %-14s %-14s %-14s\n", "nemesis", "targets", "window s", "enqueue", "claim", "complete", "all")
	row := func(wc *WindowCounts) {
		cell := func(op string) string {
			m := wc.Ops[op]
			return fmt.Sprintf("%d/%d/%d", m[OK], m[Fail], m[Info])
		}
		all := fmt.Sprintf("%d/%d/%d", wc.total(OK), wc.total(Fail), wc.total(Info))
		fmt.Fprintf(w, "  %-19s %-11s %7.1f-%-7.1f  %-14s %-14s %-14s %-14s\n", wc.Nemesis, fmt.Sprint(wc.Targets), wc.StartS, wc.StopS,
			cell(FEnqueue), cell(FClaim), cell(FComplete), all)
	}
	for i := range s.Windows {
		row(&s.Windows[i])
	}
	row(&s.Healthy)
	fmt.Fprintf(w, "Steps:\n")
	for _, st := range s.Steps {
		rec := fmt.Sprintf("recovered in %.1fs", st.RecoverS)
		if !st.Recovered {
			rec = "NOT recovered: " + st.RecoverErr
		}
		fmt.Fprintf(w, "  %2d %s (t=%.1f-%.1fs): %s; sched delay max %.1fms\n", st.Step, strings.Join(st.Faults, " + "), st.Start, st.Healed, rec, st.Delays.MaxMs)
		for _, e := range st.Errors {
			fmt.Fprintf(w, "     error: %s\n", e)
		}
	}
	c := s.Converge
	switch {
	case c.Skipped != "":
		fmt.Fprintf(w, "Convergence: not measured (%s)\n", c.Skipped)
	case c.Converged:
		fmt.Fprintf(w, "Convergence: converged %d ms after heal (%d polls)\n", c.AfterHealMs, c.Polls)
	default:
		fmt.Fprintf(w, "Convergence: NOT converged %d ms after heal: %v\n", c.AfterHealMs, c.Partitions)
	}
	fmt.Fprintf(w, "Drain: claimed %d, completed %d, %d requests, %.1fs, finished %v\n", s.Drain.Claimed, s.Drain.Completed, s.Drain.Requests, s.Drain.Seconds, s.Drain.Done)
	fmt.Fprintf(w, "Final reads: %d tasks, %d reads: %d found, %d not found, %d errors, %d not sent (%.1fs)\n", s.Final.Tasks, s.Final.Reads, s.Final.Found, s.Final.NotFound, s.Final.Errors, s.Final.Skipped, s.Final.Seconds)
	pr := s.Periodic
	fmt.Fprintf(w, "Periodic: %d of %d schedules set; final reads %s: %d schedules, %d tasks of queue %s; %d failed attempts\n",
		pr.Set, pr.Sent, map[bool]string{true: "answered", false: "NOT answered"}[pr.Read], pr.Schedules, pr.Tasks, PeriodicQueue, pr.Errors)
	sh := s.Shards
	fmt.Fprintf(w, "Shards: %d members, %d joins, %d leaves, %d expiries, %d holds, %d failed requests; final read: %s\n",
		sh.Members, sh.Joins, sh.Leaves, sh.Expiries, sh.Holds, sh.Errors, sh.Final)
	fmt.Fprintf(w, "Harness scheduler delay (sleep overshoot): p50 %.2fms p99 %.2fms max %.1fms over %d samples\n", s.Delays.P50Ms, s.Delays.P99Ms, s.Delays.MaxMs, s.Delays.Samples)
	fmt.Fprintf(w, "Relay: %+v\n", s.Relay)
	for i := 1; i <= len(s.NodeLogs); i++ {
		l := s.NodeLogs[i]
		fmt.Fprintf(w, "Node %d log: %d lines, %d warn, %d error, %d panic; starts %d\n", i, l.Lines, l.Warn, l.Error, l.Panic, l.Starts)
		for _, m := range l.TopErrors {
			fmt.Fprintf(w, "     %s\n", m)
		}
	}
	for i, ex := range s.NodeExits {
		fmt.Fprintf(w, "Node %d exited on its own: %v\n", i, ex)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	fmt.Fprintf(w, "Partition connect checks: %d; leaderships read from the node logs: %d\n", s.ConnectChecks, s.Leaders)
	if len(s.HarnessFaults) == 0 {
		fmt.Fprintf(w, "Harness faults: none recorded\n")
	} else {
		fmt.Fprintf(w, "Harness faults (each fails the run): %d\n", len(s.HarnessFaults))
		for _, h := range s.HarnessFaults {
			fmt.Fprintf(w, "  %-18s t=%.1fs nodes %v %s\n", h.Note, h.TS, h.Targets, truncateLine(string(h.Detail), printDetailMax))
		}
	}
	if s.Error != "" {
		fmt.Fprintf(w, "RUN FAILED: %s\n", s.Error)
	}
	phases := make([]string, len(s.Phases))
	for i, p := range s.Phases {
		phases[i] = fmt.Sprintf("%s@%.1fs", p.Phase, p.TS)
	}
	fmt.Fprintf(w, "Phases: %s\nElapsed: %.1fs\n", strings.Join(phases, " "), s.ElapsedS)
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// printDetailMax bounds a harness fault's detail in the printout (the
// whole of it is in summary.json and the history).
const printDetailMax = 400

// panicLineMax bounds the panic line a NotePanic carries.
const panicLineMax = 300

func truncateLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// scanNodeLogs scans every node's log (once all have exited, so the logs
// are whole) into the summary, and records a NotePanic for each node
// whose log holds a panic or a Go fatal error.
func (r *Run) scanNodeLogs() {
	r.sum.NodeLogs = map[int]LogScan{}
	for _, n := range r.nodes {
		ls := ScanLog(n.LogPath)
		r.sum.NodeLogs[n.Index] = ls
		if ls.Panic > 0 && r.rec != nil {
			r.note(NotePanic, []int{n.Index}, map[string]any{"first": ls.FirstPanic, "panics": ls.Panic, "log": n.LogPath})
		}
	}
}

// summarize reads the history back, writes leaders.jsonl from the node
// logs, writes summary.json and prints it. What it cannot read or write
// is in the summary's notes and its error; summary.json is written
// whenever the output directory takes it.
func (r *Run) summarize() (*RunSummary, error) {
	s := &r.sum
	events, err := ReadHistory(filepath.Join(r.cfg.Out, HistoryFile))
	if err != nil {
		s.Notes = append(s.Notes, "summary: "+oneLine(err))
	}
	s.Count(events)
	s.NodeExits = map[int][]string{}
	for _, n := range r.nodes {
		if ex := n.Unexpected(); len(ex) > 0 {
			s.NodeExits[n.Index] = ex
		}
	}
	n, lerr := r.writeLeaders()
	s.Leaders = n
	if lerr != nil {
		s.Notes = append(s.Notes, oneLine(lerr))
	}
	werr := WriteJSONFile(filepath.Join(r.cfg.Out, SummaryFile), s)
	s.Print(r.cfg.Print)
	return s, errors.Join(werr, lerr)
}

// LogScan is what a node's log holds: its warnings, errors and panics.
type LogScan struct {
	Lines  int `json:"lines"`
	Warn   int `json:"warn"`
	Error  int `json:"error"`
	Panic  int `json:"panic"`
	Starts int `json:"starts"`
	// FirstPanic is the first panic line (panicLine), truncated.
	FirstPanic string `json:"first_panic,omitempty"`
	// TopErrors are the most frequent error messages, with counts.
	TopErrors []string `json:"top_errors,omitempty"`
}

// topErrors is how many distinct error messages a scan keeps.
const topErrors = 6

var logMsg = regexp.MustCompile(`msg="((?:[^"\\]|\\.)*)"|msg=(\S+)`)

// panicLine reports whether a log line is the start of a panic: the Go
// runtime's "panic: " or "fatal error: " at the start of a line (an
// unrecovered panic, a fatal runtime error such as a concurrent map
// write), or net/http's "http: panic serving" (a handler's panic it
// recovered, printed by the log package, since skuldd's HTTP server has no
// ErrorLog), or a panic skuldd's own wire server recovered and logged
// (recoveredPanics): the node lives on, but a panic on input is a bug
// all the same. Other slog lines (they start with time=) are never
// panics, at level=ERROR included.
func panicLine(line string) bool {
	if strings.HasPrefix(line, "time=") {
		return slices.ContainsFunc(recoveredPanics, func(m string) bool { return strings.Contains(line, m) })
	}
	return strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") ||
		strings.Contains(line, "http: panic serving")
}

// recoveredPanics are the messages of skuldd's log lines for panics it
// recovered from (wire/server.go).
var recoveredPanics = []string{`msg="wire: handler panicked"`, `msg="wire: stream reader panicked"`}

// ScanLog scans a node's text log.
func ScanLog(path string) LogScan {
	var ls LogScan
	f, err := os.Open(path)
	if err != nil {
		return ls
	}
	defer f.Close()
	msgs := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, lineBufSize), maxLine)
	for sc.Scan() {
		line := sc.Text()
		ls.Lines++
		switch {
		case panicLine(line):
			ls.Panic++
			msgs[line]++
			if ls.FirstPanic == "" {
				ls.FirstPanic = truncateLine(line, panicLineMax)
			}
		case strings.HasPrefix(line, "=== faults: start"):
			ls.Starts++
		case strings.Contains(line, "level=WARN"):
			ls.Warn++
		case strings.Contains(line, "level=ERROR"):
			ls.Error++
			if m := logMsg.FindStringSubmatch(line); m != nil {
				msgs[m[1]+m[2]]++
			}
		}
	}
	keys := slices.SortedFunc(mapKeys(msgs), func(a, b string) int { return cmp.Compare(msgs[b], msgs[a]) })
	for _, k := range keys[:min(len(keys), topErrors)] {
		ls.TopErrors = append(ls.TopErrors, fmt.Sprintf("%dx %s", msgs[k], k))
	}
	return ls
}

// DelayStats summarises the harness's sleep overshoot.
type DelayStats struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// delayMonitor measures the harness's scheduler delay: it sleeps
// delayTick over and over and keeps how much longer each sleep took
// (TESTING.md section 5, "Budget": latency the harness caused is not
// skuldd's).
type delayMonitor struct {
	mu struct {
		sync.Mutex
		all   []time.Duration
		since int // start of the current window in all
	}
	done chan struct{}
	quit chan struct{}
}

const (
	delayTick = 10 * time.Millisecond
	// maxDelaySamples bounds the samples kept: over 2.7 hours of ticks.
	maxDelaySamples = 1 << 20
)

func startDelayMonitor() *delayMonitor {
	m := &delayMonitor{done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			t0 := time.Now()
			select {
			case <-m.quit:
				return
			case <-time.After(delayTick):
			}
			over := time.Since(t0) - delayTick
			m.mu.Lock()
			if len(m.mu.all) < maxDelaySamples {
				m.mu.all = append(m.mu.all, over)
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// window returns the stats since the last window call.
func (m *delayMonitor) window() DelayStats {
	if m == nil {
		return DelayStats{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := delayStats(m.mu.all[m.mu.since:])
	m.mu.since = len(m.mu.all)
	return st
}

// stop ends the monitor and returns the stats of the whole run.
func (m *delayMonitor) stop() DelayStats {
	if m == nil {
		return DelayStats{}
	}
	close(m.quit)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return delayStats(m.mu.all)
}

func delayStats(d []time.Duration) DelayStats {
	if len(d) == 0 {
		return DelayStats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1e3 }
	return DelayStats{
		Samples: len(s),
		P50Ms:   ms(s[len(s)/2]),
		P99Ms:   ms(s[len(s)*99/100]),
		MaxMs:   ms(s[len(s)-1]),
	}
}
