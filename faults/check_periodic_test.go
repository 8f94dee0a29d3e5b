package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The periodic fixture: two schedules set early in the base run, read
// back at its end. tick (every second, catch-up all) has handled 5
// occurrences, all enqueued, and has a sixth enqueued but not yet
// recorded (in flight); tock (every 2 s, catch-up skip) has handled 2.
const (
	tickVersion = 7
	tockVersion = 8
	tickStart   = nodeEpochMs + 100
	tockStart   = nodeEpochMs + 150
)

const checkPeriodicName = "periodic tasks"

// withPeriodic gives the run a clean periodic record and returns it.
func (b *builder) withPeriodic() *PeriodicRecord {
	tick := wire.ScheduleView{Name: "tick", Queue: PeriodicQueue, EveryMs: 1000, CatchUp: "all", Version: tickVersion,
		Start: tickStart, Done: tickStart + 5000, Enqueued: 5}
	tock := wire.ScheduleView{Name: "tock", Queue: PeriodicQueue, EveryMs: 2000, CatchUp: "skip", Version: tockVersion,
		Start: tockStart, Done: tockStart + 4000, Enqueued: 2}
	p := &PeriodicRecord{Queue: PeriodicQueue}
	for _, v := range []wire.ScheduleView{tick, tock} {
		ans := v
		ans.Done, ans.Enqueued, ans.Skipped = v.Start, 0, 0
		p.Sets = append(p.Sets, ScheduleSet{
			Request: wire.ScheduleSetRequest{Name: v.Name, Queue: v.Queue, EveryMs: v.EveryMs, CatchUp: v.CatchUp},
			Answer:  &ans, Node: 1, TNs: (v.Start - nodeEpochMs) * nsPerMs})
	}
	p.Schedules = PeriodicSchedules{PeriodicRead: PeriodicRead{OK: true, Node: 2, TNs: 5600 * nsPerMs, Attempts: 1},
		Views: []wire.ScheduleView{tick, tock}}
	p.Tasks.PeriodicRead = PeriodicRead{OK: true, Node: 3, TNs: 5700 * nsPerMs, Attempts: 1}
	p.Tasks.Tasks = []PeriodicTask{}
	for k := range int64(6) {
		p.addTask("tick", tickVersion, tickStart+(k+1)*1000)
	}
	for k := range int64(2) {
		p.addTask("tock", tockVersion, tockStart+(k+1)*2000)
	}
	b.periodic = p
	return p
}

// addTask lists a live task of an occurrence, enqueued 20 ms after it.
func (p *PeriodicRecord) addTask(name string, version uint64, at int64) *PeriodicTask {
	n := len(p.Tasks.Tasks)
	p.Tasks.Tasks = append(p.Tasks.Tasks, PeriodicTask{ID: id(0x100 + n), Queue: PeriodicQueue,
		Key: wire.OccurrenceKey(name, version, at), State: "ready", EnqueuedAt: at + 20})
	return &p.Tasks.Tasks[n]
}

// dropTask removes the listed tasks of an occurrence.
func (p *PeriodicRecord) dropTask(name string, version uint64, at int64) {
	key := wire.OccurrenceKey(name, version, at)
	p.Tasks.Tasks = slices.DeleteFunc(p.Tasks.Tasks, func(t PeriodicTask) bool { return t.Key == key })
}

// view returns the final read's view of a schedule.
func (p *PeriodicRecord) view(name string) *wire.ScheduleView {
	i := slices.IndexFunc(p.Schedules.Views, func(v wire.ScheduleView) bool { return v.Name == name })
	return &p.Schedules.Views[i]
}

func TestPeriodic(t *testing.T) {
	const check = checkPeriodicName
	runFlagCases(t, []flagCase{
		{name: "a clean record", check: check, kind: kindOccurrenceTwice, inject: func(b *builder) { b.withPeriodic() }},
		{name: "no periodic record (a run from before schedules): a note", check: check, kind: kindPeriodicUnread, inject: func(b *builder) {}},

		// Duplicates.
		{name: "an occurrence with two live tasks", check: check, kind: kindOccurrenceTwice, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+3000)
		}},
		{name: "... one of them retired (two leaders took the key)", check: check, kind: kindOccurrenceTwice, inject: func(b *builder) {
			p := b.withPeriodic()
			t := p.addTask("tick", tickVersion, tickStart+3000)
			t.State, t.Cancelled, t.CancelReason = "cancelled", true, wire.RetiredKeyReason+p.Tasks.Tasks[2].ID
		}},
		{name: "... one of them cancelled for another reason: live", check: check, kind: kindOccurrenceTwice, want: 1, inject: func(b *builder) {
			t := b.withPeriodic().addTask("tick", tickVersion, tickStart+3000)
			t.State, t.Cancelled, t.CancelReason = "cancelled", true, "by hand"
		}},
		{name: "an occurrence after done with two live tasks", check: check, kind: kindOccurrenceTwice, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+6000)
		}},
		{name: "two live tasks, a majority of the key's partition wiped", check: check, kind: kindOccurrenceTwice, beyond: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+3000)
			b.wipe(NemWipeMajority, 4000, 4500, nil, 1, 2)
		}},

		// The listing's order.
		{name: "a clean listing, in id order", check: check, kind: kindListOrder, inject: func(b *builder) { b.withPeriodic() }},
		{name: "a listing out of id order", check: check, kind: kindListOrder, want: 1, inject: func(b *builder) {
			ts := b.withPeriodic().Tasks.Tasks
			ts[0], ts[1] = ts[1], ts[0]
		}},
		{name: "a task listed twice (a page repeated)", check: check, kind: kindListOrder, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Tasks.Tasks = slices.Insert(p.Tasks.Tasks, 2, p.Tasks.Tasks[1])
		}},

		// Losses.
		{name: "an occurrence up to done without a task", check: check, kind: kindOccurrenceLost, want: 1, inject: func(b *builder) {
			b.withPeriodic().dropTask("tick", tickVersion, tickStart+2000)
		}},
		{name: "... its task retired, no other", check: check, kind: kindOccurrenceLost, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			i := slices.IndexFunc(p.Tasks.Tasks, func(t PeriodicTask) bool {
				return t.Key == wire.OccurrenceKey("tick", tickVersion, tickStart+2000)
			})
			p.Tasks.Tasks[i].Cancelled, p.Tasks.Tasks[i].CancelReason = true, wire.RetiredKeyReason+id(0x999)
		}},
		{name: "an occurrence without a task, counted skipped", check: check, kind: kindOccurrenceLost, inject: func(b *builder) {
			p := b.withPeriodic()
			p.dropTask("tock", tockVersion, tockStart+2000)
			p.view("tock").Enqueued, p.view("tock").Skipped = 1, 1
		}},
		{name: "more occurrences without a task than skipped", check: check, kind: kindOccurrenceLost, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.dropTask("tock", tockVersion, tockStart+2000)
			p.dropTask("tock", tockVersion, tockStart+4000)
			p.view("tock").Enqueued, p.view("tock").Skipped = 1, 1
		}},
		{name: "enqueued, its answer lost, then skipped: a task and a skip", check: check, kind: kindOccurrenceLost, inject: func(b *builder) {
			p := b.withPeriodic()
			p.view("tock").Enqueued, p.view("tock").Skipped = 1, 1
		}},
		{name: "an occurrence after done without a task: not handled yet", check: check, kind: kindOccurrenceLost, inject: func(b *builder) {
			b.withPeriodic().dropTask("tick", tickVersion, tickStart+6000)
		}},
		{name: "a lost occurrence, a majority of its key's partition wiped after it", check: check, kind: kindOccurrenceLost, beyond: 1, inject: func(b *builder) {
			b.withPeriodic().dropTask("tick", tickVersion, tickStart+2000)
			b.wipe(NemWipeMajority, 3000, 3500, nil, 1, 2)
		}},
		{name: "... wiped before the occurrence: not excused", check: check, kind: kindOccurrenceLost, want: 1, inject: func(b *builder) {
			b.withPeriodic().dropTask("tick", tickVersion, tickStart+3000)
			b.wipe(NemWipeMajority, 1000, 1500, nil, 1, 2)
		}},

		// Off the grid.
		{name: "a task between two occurrences", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+1500)
		}},
		{name: "a task at the start itself (k = 0)", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart)
		}},
		{name: "a task of a schedule the run did not set", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("other", tickVersion, tickStart+1000)
		}},
		{name: "a task of a version the run did not set", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion+10, tickStart+1000)
		}},
		{name: "a task without an occurrence key", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+9000).Key = "order-1"
		}},
		{name: "a task of another queue", check: check, kind: kindOffGrid, want: 1, inject: func(b *builder) {
			b.withPeriodic().addTask("tick", tickVersion, tickStart+7000).Queue = "faults"
		}},

		// Progress.
		{name: "enqueued counts one more than the occurrences up to done", check: check, kind: kindProgressMiscount, want: 1, inject: func(b *builder) {
			b.withPeriodic().view("tick").Enqueued = 6
		}},
		{name: "done off the grid", check: check, kind: kindProgressMiscount, want: 1, inject: func(b *builder) {
			b.withPeriodic().view("tick").Done = tickStart + 5500
		}},
		{name: "done before the start", check: check, kind: kindProgressMiscount, want: 2, inject: func(b *builder) {
			b.withPeriodic().view("tock").Done = tockStart - 2000
		}},

		// The schedules read back.
		{name: "an acknowledged schedule gone from the final read", check: check, kind: kindScheduleChanged, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Schedules.Views = p.Schedules.Views[:1]
		}},
		{name: "... the metadata group's majority wiped", check: check, kind: kindScheduleChanged, beyond: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Schedules.Views = p.Schedules.Views[:1]
			b.wipe(NemWipeMajority, 1000, 1500, nil, 1, 2)
		}},
		{name: "read back at another version", check: check, kind: kindScheduleChanged, want: 1, inject: func(b *builder) {
			v := b.withPeriodic().view("tock")
			v.Version, v.Done, v.Enqueued = tockVersion+1, v.Start, 0
		}},
		{name: "read back with another start", check: check, kind: kindScheduleChanged, want: 1, inject: func(b *builder) {
			b.withPeriodic().Sets[0].Answer.Start = tickStart - 1000
		}},
		{name: "answered another spec than was sent", check: check, kind: kindScheduleChanged, want: 1, inject: func(b *builder) {
			b.withPeriodic().Sets[1].Answer.CatchUp = "all"
		}},

		// An incomplete record.
		{name: "a set never acknowledged", check: check, kind: kindPeriodicUnread, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Sets[1].Answer, p.Sets[1].Errors = nil, []string{"node 1: timeout", "node 2: unavailable no quorum"}
		}},
		{name: "no schedule set", check: check, kind: kindPeriodicUnread, want: 1, inject: func(b *builder) {
			b.withPeriodic().Sets = nil
		}},
		{name: "the schedules' final read never answered", check: check, kind: kindPeriodicUnread, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Schedules = PeriodicSchedules{PeriodicRead: PeriodicRead{Attempts: 3, Errors: []string{"node 1: timeout", "node 2: timeout", "node 3: timeout"}}}
		}},
		{name: "the listing never answered", check: check, kind: kindPeriodicUnread, want: 1, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Tasks = PeriodicTasks{PeriodicRead: PeriodicRead{Attempts: 1, Errors: []string{"node 1: listing failed after 3 tasks: unavailable"}}}
		}},
		{name: "the final reads never sent", check: check, kind: kindPeriodicUnread, want: 2, inject: func(b *builder) {
			p := b.withPeriodic()
			p.Schedules, p.Tasks = PeriodicSchedules{}, PeriodicTasks{}
		}},
	})
}

// The figures of the clean record, and what a listing without the
// schedules' read still checks.
func TestPeriodicFigures(t *testing.T) {
	b := base()
	p := b.withPeriodic()
	t0 := p.addTask("tick", tickVersion, tickStart+3000)
	t0.Cancelled, t0.CancelReason = true, wire.RetiredKeyReason+p.Tasks.Tasks[2].ID
	r := Analyze(b.input())
	if !r.OK() {
		t.Fatalf("flagged:\n%s", dump(r))
	}
	c := findCheck(t, r, checkPeriodicName)
	want := map[string]int64{countSchedules: 2, countHandled: 7, countEnqueued: 7, countSkipped: 0, countWithTask: 7, countInFlight: 1,
		countListed: 9, countRetired: 1, countTwice: 0, countLatestMs: 20}
	for name, w := range want {
		if got := countOf(t, c, name); got != w {
			t.Errorf("%s = %d; want %d", name, got, w)
		}
	}
	var names []string
	for _, n := range c.Counts {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, periodicCounts) {
		t.Errorf("figures %v; want %v", names, periodicCounts)
	}
	if len(c.Notes) != 0 {
		t.Errorf("notes %v; want none", c.Notes)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "pass\t"+checkPeriodicName) && !strings.Contains(buf.String(), "pass  "+checkPeriodicName) {
		t.Errorf("report does not show the periodic check passing:\n%s", buf.String())
	}
}

// A run without periodic.json passes the check with a note saying it
// checked nothing.
func TestPeriodicMissing(t *testing.T) {
	r := Analyze(base().input())
	c := findCheck(t, r, checkPeriodicName)
	if !c.OK() || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], PeriodicFile) {
		t.Errorf("ok %v, notes %q; want a pass with a note naming %s", c.OK(), c.Notes, PeriodicFile)
	}
}

// ReadRun reads periodic.json when there is one, and refuses a broken one.
func TestReadRunPeriodic(t *testing.T) {
	b := base()
	want := b.withPeriodic()
	dir := t.TempDir()
	if err := writeRun(dir, b.input()); err != nil {
		t.Fatal(err)
	}
	in, err := ReadRun(dir)
	if err != nil || in.Periodic != nil {
		t.Fatalf("without %s: periodic %v, err %v; want nil, nil", PeriodicFile, in.Periodic, err)
	}
	if err := WriteJSONFile(filepath.Join(dir, PeriodicFile), want); err != nil {
		t.Fatal(err)
	}
	if in, err = ReadRun(dir); err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(in.Periodic)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("read back\n%s\nwant\n%s", gj, wj)
	}
	if r := Analyze(in); !r.OK() {
		t.Errorf("flagged:\n%s", dump(r))
	}
	if err := os.WriteFile(filepath.Join(dir, PeriodicFile), []byte(`{"queue": "periodic", "sets": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRun(dir); err == nil || !strings.Contains(err.Error(), PeriodicFile) {
		t.Errorf("ReadRun of a truncated %s = %v; want an error naming it", PeriodicFile, err)
	}
}

func TestParseTaskList(t *testing.T) {
	var tid task.ID
	tid[0] = 0xab
	v := wire.TaskView{ID: tid, Queue: PeriodicQueue, State: "cancelled", Key: wire.OccurrenceKey("tick", 3, 5000), EnqueuedAt: 5010,
		Cancelled: &wire.CancelView{At: 6000, Reason: wire.RetiredKeyReason + "x"}}
	line, _ := json.Marshal(&v)
	two := append(append(slices.Clone(line), '\n'), line...)
	two = append(two, '\n')
	got, err := parseTaskList(two)
	if err != nil || len(got) != 2 {
		t.Fatalf("parse = %v, %v; want 2 tasks", got, err)
	}
	want := PeriodicTask{ID: tid.String(), Queue: PeriodicQueue, State: "cancelled", Key: v.Key, EnqueuedAt: 5010, Cancelled: true,
		CancelReason: wire.RetiredKeyReason + "x"}
	if got[0] != want || !got[0].Retired() {
		t.Errorf("task %+v; want %+v, retired", got[0], want)
	}
	if got, err := parseTaskList(nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty listing = %v, %v; want no tasks, no error", got, err)
	}
	for name, body := range map[string][]byte{
		"an error line":  append(slices.Clone(two), []byte(`{"error":"list at 10.77.0.2:13000: timeout","code":"unavailable","code_num":7}`+"\n")...),
		"a cut line":     append(slices.Clone(two), line[:len(line)/2]...),
		"over the bound": bytes.Repeat([]byte(" "), maxResponse),
	} {
		if got, err := parseTaskList(body); err == nil {
			t.Errorf("%s: %d tasks, no error; want an error", name, len(got))
		}
	}
}

// fakeSchedules is a node's schedule API and task listing for the harness:
// it refuses the first failFirst requests with 503.
type fakeSchedules struct {
	mu        sync.Mutex
	failFirst int
	requests  int
	sets      map[string]wire.ScheduleView
	list      string // the listing's body
}

func (f *fakeSchedules) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.requests <= f.failFirst {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"no quorum","code":"unavailable"}`)
		return
	}
	switch {
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/schedules/"):
		var req wire.ScheduleSetRequest
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		v := wire.ScheduleView{Name: req.Name, Queue: req.Queue, EveryMs: req.EveryMs, CatchUp: req.CatchUp, Version: uint64(len(f.sets) + 1),
			Start: 1000, Done: 1000}
		f.sets[req.Name] = v
		_ = json.NewEncoder(w).Encode(&v)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/schedules":
		var resp wire.ScheduleListResponse
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for k := range f.sets {
				if !yield(k) {
					return
				}
			}
		}) {
			resp.Schedules = append(resp.Schedules, f.sets[n])
		}
		_ = json.NewEncoder(w).Encode(&resp)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/tasks" && r.URL.Query().Get("queue") == PeriodicQueue:
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprint(w, f.list)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// The harness sets the schedules through the nodes in turn until one
// answers, reads them back and lists their queue, retrying a listing an
// error line ends on the next node, and writes it all to periodic.json.
func TestPeriodicHarness(t *testing.T) {
	bad := &fakeSchedules{failFirst: 1 << 30}
	good := &fakeSchedules{sets: map[string]wire.ScheduleView{}}
	sb, sg := httptest.NewServer(bad), httptest.NewServer(good)
	defer sb.Close()
	defer sg.Close()
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	cfg := QuickConfig()
	cfg.Out, cfg.ReqTimeout = t.TempDir(), time.Second
	r := &Run{cfg: cfg, log: slog.New(slog.DiscardHandler), tl: NewTimeline(),
		api: NewAPI([]string{addr(sb), addr(sg)}, "", nil, netip.Addr{})}
	defer r.api.Close()
	ctx := context.Background()
	if err := r.setSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	for i, st := range r.periodic.Sets {
		if st.Answer == nil || st.Node != 2 || st.Answer.Name != periodicSchedules[i].Name {
			t.Fatalf("set %d: %+v; want answered by node 2", i, st)
		}
	}
	if len(r.periodic.Sets[0].Errors) != 1 || !strings.Contains(r.periodic.Sets[0].Errors[0], "node 1: unavailable") {
		t.Errorf("first set's errors %q; want node 1's refusal", r.periodic.Sets[0].Errors)
	}
	// A listing the good node ends with an error line: tried again
	// through each node until the bound, never answered.
	var tid task.ID
	tid[19] = 1
	tv := wire.TaskView{ID: tid, Queue: PeriodicQueue, State: "ready", Key: wire.OccurrenceKey("fault-tick", 1, 2000)}
	line, _ := json.Marshal(&tv)
	good.list = string(line) + "\n" + `{"error":"list at peer: timeout","code":"unavailable"}` + "\n"
	pr := r.periodicRead(ctx, time.Second, time.Second, func(ctx context.Context, node int) error {
		res := r.api.Do(ctx, node, http.MethodGet, "/v1/tasks?queue="+PeriodicQueue, nil, nil)
		if res.Type != OK {
			return fmt.Errorf("%s %s", res.Code, res.Err)
		}
		_, err := parseTaskList(res.Body)
		return err
	})
	if pr.OK || pr.Attempts < 2 {
		t.Errorf("read of a broken listing: %+v; want failed attempts on both nodes", pr)
	}
	good.list = string(line) + "\n"
	if err := r.periodicReads(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.Out, PeriodicFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec PeriodicRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.Schedules.OK || rec.Schedules.Node != 2 || len(rec.Schedules.Views) != len(periodicSchedules) {
		t.Errorf("schedules read %+v; want both, from node 2", rec.Schedules)
	}
	if !rec.Tasks.OK || len(rec.Tasks.Tasks) != 1 || rec.Tasks.Tasks[0].Key != tv.Key {
		t.Errorf("listing %+v; want the one task", rec.Tasks)
	}
	if s := r.periodicSummary(); s.Set != 2 || s.Sent != 2 || !s.Read || s.Tasks != 1 || s.Schedules != 2 {
		t.Errorf("summary %+v", s)
	}
}
