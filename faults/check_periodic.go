package faults

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/wire"
)

// Periodic tasks (periodic.go): the run sets schedules, and reads back at
// the end every schedule (its version, start, done, enqueued, skipped)
// and then every task of their queue. The occurrences of an
// every-schedule's version are start + k·every_ms, k ≥ 1; the metadata
// group's leader enqueues each with the key
// wire.OccurrenceKey(name, version, at) and then advances done past it.
// So, of the occurrences up to done, each has one live task or is one of
// those counted skipped (missed under catch-up skip, or a day late);
// enqueued and skipped add up to them. An enqueue whose answer was lost
// may be retried after the occurrence turned too late and be skipped with
// its task there: so what holds is that the occurrences up to done
// without a live task are at most the skipped count. No occurrence, up to
// done or after, has two live tasks: a duplicate two leaders took during
// a split is retired (cancelled with wire.RetiredKeyReason), not live.
// Every task of the queue is an occurrence of a version the run set.

// Kinds of periodic-task anomalies.
const (
	kindOccurrenceTwice  = "occurrence with more than one live task"
	kindOccurrenceLost   = "occurrence lost"
	kindOffGrid          = "task off its schedule's grid"
	kindProgressMiscount = "schedule progress miscounted"
	kindScheduleChanged  = "acknowledged schedule not read back"
	kindPeriodicUnread   = "periodic record incomplete"
	kindListOrder        = "listing out of id order or repeating a task"
)

// schedGrid is one version of a schedule, as a set's answer or the final
// read showed it.
type schedGrid struct {
	queue   string
	everyMs int64
	cron    string
	startMs int64
}

// on reports whether atMs is an occurrence of an every-grid.
func (g *schedGrid) on(atMs int64) bool {
	return g.everyMs > 0 && atMs > g.startMs && (atMs-g.startMs)%g.everyMs == 0
}

// occurrence names one occurrence of one version of a schedule.
type occurrence struct {
	name    string
	version uint64
	at      int64
}

func checkPeriodic(h *history) *Check {
	c := newCheck("periodic tasks",
		"every schedule set is read back as set; of each schedule's occurrences up to its done, those without a live task are at most its skipped count, and enqueued + skipped is their number; no occurrence has two live tasks (a retired duplicate is not live); every task of the schedules' queue is an occurrence of a version set in the run; the queue's listing, paged with a cursor, is in id order with no task twice; every final read answered",
		kindOccurrenceTwice, kindOccurrenceLost, kindOffGrid, kindProgressMiscount, kindScheduleChanged, kindPeriodicUnread, kindListOrder)
	p := h.in.Periodic
	if p == nil {
		c.Notes = append(c.Notes, "no "+PeriodicFile+": the run set no schedules (a run from before them, or the simulation); nothing checked")
		return c
	}
	for _, name := range periodicCounts {
		c.count(name, 0) // in this order, whatever sets them
	}
	pc := &periodicCheck{h: h, c: c, p: p, grids: map[string]map[uint64]*schedGrid{}}
	pc.incomplete()
	pc.learn()
	pc.readBack()
	pc.listOrder()
	live := pc.tasks()
	pc.duplicates(live)
	pc.progress(live)
	return c
}

// Figures of the periodic check, in the report's order.
const (
	countSchedules = "schedules"
	countHandled   = "occurrences handled (up to done)"
	countEnqueued  = "enqueued"
	countSkipped   = "skipped"
	countWithTask  = "occurrences up to done with a live task"
	countInFlight  = "occurrences in flight (after done, with a live task)"
	countListed    = "tasks listed"
	countRetired   = "retired duplicates"
	countTwice     = "occurrences with more than one live task"
	countLatestMs  = "latest enqueue after its occurrence (ms, leader clocks)"
)

var periodicCounts = []string{countSchedules, countHandled, countEnqueued, countSkipped, countWithTask, countInFlight,
	countListed, countRetired, countTwice, countLatestMs}

type periodicCheck struct {
	h *history
	c *Check
	p *PeriodicRecord
	// grids are the versions the run set, by name and version.
	grids map[string]map[uint64]*schedGrid
}

// runNs places a node's Unix ms on the run's timeline (within [0, end]).
func (pc *periodicCheck) runNs(ms int64) int64 {
	return min(max(ms*nsPerMs-pc.h.in.Run.StartUnixNs, 0), pc.h.tEnd)
}

// incomplete flags what the record lacks: a set never acknowledged, a
// final read that never answered. Without them the checks below see
// less than the run did, or nothing: a blind check must not pass.
func (pc *periodicCheck) incomplete() {
	c, p, end := pc.c, pc.p, pc.h.tEnd
	if len(p.Sets) == 0 {
		c.flag(kindPeriodicUnread, "", 0, Example{Detail: "no schedule was set"})
	}
	for _, s := range p.Sets {
		if s.Answer == nil {
			c.flag(kindPeriodicUnread, "", 0, Example{Detail: fmt.Sprintf("set of schedule %s never acknowledged (%s)", s.Request.Name, attempts(s.Errors))})
		}
	}
	for _, r := range []struct {
		what string
		read PeriodicRead
	}{{"of the schedules", p.Schedules.PeriodicRead}, {"listing of queue " + p.Queue, p.Tasks.PeriodicRead}} {
		switch {
		case r.read.OK:
		case r.read.Attempts == 0:
			c.flag(kindPeriodicUnread, "", end, Example{Detail: fmt.Sprintf("final read %s never sent (the run ended first)", r.what)})
		default:
			c.flag(kindPeriodicUnread, "", end, Example{Detail: fmt.Sprintf("final read %s never answered (%s)", r.what, attempts(r.read.Errors))})
		}
	}
}

// attempts sums up failed attempts: how many, and the last one's error.
func attempts(errs []string) string {
	if len(errs) == 0 {
		return "no attempt"
	}
	return fmt.Sprintf("%d failed attempt(s), the last: %s", len(errs), truncate(errs[len(errs)-1]))
}

// learn gathers the versions the run set: from the sets' answers, and
// from the final read (a set whose answer was lost may have committed).
func (pc *periodicCheck) learn() {
	add := func(v *wire.ScheduleView) {
		if pc.grids[v.Name] == nil {
			pc.grids[v.Name] = map[uint64]*schedGrid{}
		}
		if pc.grids[v.Name][v.Version] == nil {
			pc.grids[v.Name][v.Version] = &schedGrid{queue: v.Queue, everyMs: v.EveryMs, cron: v.Cron, startMs: v.Start}
		}
	}
	for _, s := range pc.p.Sets {
		if s.Answer != nil {
			add(s.Answer)
		}
	}
	if pc.p.Schedules.OK {
		for i := range pc.p.Schedules.Views {
			add(&pc.p.Schedules.Views[i])
		}
	}
}

// readBack flags a set answered other than as sent, and an acknowledged
// set the final read shows gone, at another version, or with another
// spec or start (the harness sets each schedule once, with one spec).
func (pc *periodicCheck) readBack() {
	h, c, p := pc.h, pc.c, pc.p
	for _, s := range p.Sets {
		a := s.Answer
		if a == nil {
			continue
		}
		ex := Example{TNs: []int64{s.TNs}, Nodes: []int{s.Node}}
		req := s.Request
		catchUp := cmp.Or(req.CatchUp, "skip")
		if a.Name != req.Name || a.Queue != req.Queue || a.EveryMs != req.EveryMs || a.Cron != req.Cron || a.CatchUp != catchUp {
			ex.Detail = fmt.Sprintf("set of %s answered %s", specOf(req.Name, req.Queue, req.EveryMs, req.Cron, catchUp), viewSpec(a))
			c.flag(kindScheduleChanged, "", s.TNs, ex)
			continue
		}
		if !p.Schedules.OK {
			continue // flagged as incomplete
		}
		i := slices.IndexFunc(p.Schedules.Views, func(v wire.ScheduleView) bool { return v.Name == a.Name })
		why := h.beyond("", s.TNs, h.tEnd) // the metadata group's majority lost
		switch {
		case i < 0:
			ex.Detail = fmt.Sprintf("%s, set at version %d, is not in the final read", a.Name, a.Version)
		case viewSpec(&p.Schedules.Views[i]) != viewSpec(a) || p.Schedules.Views[i].Version != a.Version || p.Schedules.Views[i].Start != a.Start:
			v := &p.Schedules.Views[i]
			ex.Detail = fmt.Sprintf("set as %s at version %d from %d; read back as %s at version %d from %d", viewSpec(a), a.Version, a.Start,
				viewSpec(v), v.Version, v.Start)
		default:
			continue
		}
		c.flag(kindScheduleChanged, why, s.TNs, ex)
	}
}

func specOf(name, queue string, everyMs int64, cron, catchUp string) string {
	grid := fmt.Sprintf("every %d ms", everyMs)
	if cron != "" {
		grid = fmt.Sprintf("cron %q", cron)
	}
	return fmt.Sprintf("%s (queue %s, %s, catch-up %s)", name, queue, grid, catchUp)
}

func viewSpec(v *wire.ScheduleView) string {
	return specOf(v.Name, v.Queue, v.EveryMs, v.Cron, v.CatchUp)
}

// tasks flags the listed tasks that are no occurrence of a version set in
// the run, counts the retired duplicates, and returns the live tasks of
// each occurrence.
// listOrder holds the final listing to its order: ids strictly
// increasing across the pages, so no task twice and none out of place.
func (pc *periodicCheck) listOrder() {
	p := pc.p
	for i := 1; i < len(p.Tasks.Tasks); i++ {
		prev, t := p.Tasks.Tasks[i-1].ID, p.Tasks.Tasks[i].ID
		if t <= prev { // 40 lowercase hex characters: the strings sort as the ids
			pc.c.flag(kindListOrder, "", p.Tasks.TNs, Example{Task: t, TNs: []int64{p.Tasks.TNs}, Nodes: []int{p.Tasks.Node},
				Detail: fmt.Sprintf("listed at %d, after %s", i, prev)})
		}
	}
}

func (pc *periodicCheck) tasks() map[occurrence][]*PeriodicTask {
	c, p := pc.c, pc.p
	live := map[occurrence][]*PeriodicTask{}
	var retired, cronTasks int64
	for i := range p.Tasks.Tasks {
		t := &p.Tasks.Tasks[i]
		if t.Retired() {
			retired++
		}
		name, version, at, ok := wire.ParseOccurrenceKey(t.Key)
		g := pc.grids[name][version]
		var off string
		switch {
		case !ok:
			off = fmt.Sprintf("key %q is no occurrence's", t.Key)
		case pc.grids[name] == nil:
			off = fmt.Sprintf("key %q: schedule %s was not set in the run", t.Key, name)
		case g == nil:
			off = fmt.Sprintf("key %q: schedule %s was not set at version %d in the run (versions %v)", t.Key, name, version,
				slices.Sorted(maps.Keys(pc.grids[name])))
		case t.Queue != g.queue:
			off = fmt.Sprintf("key %q: in queue %s; the schedule's is %s", t.Key, t.Queue, g.queue)
		case g.cron != "":
			cronTasks++ // no cron parser here: its times are not checked
		case !g.on(at):
			off = fmt.Sprintf("key %q: %d is not on the grid %d + k·%d ms, k ≥ 1", t.Key, at, g.startMs, g.everyMs)
		}
		if off != "" {
			c.flag(kindOffGrid, "", p.Tasks.TNs, Example{Task: t.ID, TNs: []int64{p.Tasks.TNs}, Nodes: []int{p.Tasks.Node}, Detail: off})
			continue
		}
		if !t.Retired() {
			o := occurrence{name, version, at}
			live[o] = append(live[o], t)
		}
	}
	c.count(countListed, int64(len(p.Tasks.Tasks)))
	c.count(countRetired, retired)
	if cronTasks > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d task(s) of cron schedules: their times are not checked against the grid", cronTasks))
	}
	return live
}

// duplicates flags every occurrence with more than one live task.
func (pc *periodicCheck) duplicates(live map[occurrence][]*PeriodicTask) {
	var twice int64
	for _, o := range sortedOccurrences(live) {
		ts := live[o]
		if len(ts) < 2 {
			continue
		}
		twice++
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.ID
		}
		slices.Sort(ids)
		at := pc.runNs(o.at)
		pc.c.flag(kindOccurrenceTwice, pc.h.beyond(ids[1], at, pc.h.tEnd), at, Example{Task: ids[1], TNs: []int64{at},
			Detail: fmt.Sprintf("occurrence %d of schedule %s version %d has %d live tasks: %s", o.at, o.name, o.version, len(ts), strings.Join(ids, ", "))})
	}
	pc.c.count(countTwice, twice)
}

func sortedOccurrences(m map[occurrence][]*PeriodicTask) []occurrence {
	return slices.SortedFunc(maps.Keys(m), func(a, b occurrence) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.version, b.version), cmp.Compare(a.at, b.at))
	})
}

// progress holds each schedule's final progress to its occurrences: done
// on the grid, enqueued + skipped the occurrences up to it, and those
// without a live task at most the skipped ones.
func (pc *periodicCheck) progress(live map[occurrence][]*PeriodicTask) {
	h, c, p := pc.h, pc.c, pc.p
	if !p.Schedules.OK || !p.Tasks.OK {
		return // flagged as incomplete: nothing to count against
	}
	var handled, enqueued, skipped, withTask, inFlight, latest int64
	views := slices.Clone(p.Schedules.Views)
	slices.SortFunc(views, func(a, b wire.ScheduleView) int { return cmp.Compare(a.Name, b.Name) })
	for i := range views {
		v := &views[i]
		enqueued += int64(v.Enqueued)
		skipped += int64(v.Skipped)
		if v.Cron != "" {
			c.Notes = append(c.Notes, fmt.Sprintf("schedule %s is a cron schedule: its occurrences are not counted", v.Name))
			continue
		}
		g := &schedGrid{queue: v.Queue, everyMs: v.EveryMs, startMs: v.Start}
		ex := Example{TNs: []int64{p.Schedules.TNs}, Nodes: []int{p.Schedules.Node}}
		var total int64
		if v.Done > v.Start && g.everyMs > 0 {
			total = (v.Done - v.Start) / g.everyMs
		}
		if v.Done < v.Start || v.Done > v.Start && !g.on(v.Done) {
			ex.Detail = fmt.Sprintf("schedule %s version %d: done %d is not on its grid %d + k·%d ms, k ≥ 0", v.Name, v.Version, v.Done, v.Start, g.everyMs)
			c.flag(kindProgressMiscount, "", p.Schedules.TNs, ex)
		}
		if int64(v.Enqueued+v.Skipped) != total {
			ex.Detail = fmt.Sprintf("schedule %s version %d: enqueued %d + skipped %d, but %d occurrence(s) up to done %d", v.Name, v.Version,
				v.Enqueued, v.Skipped, total, v.Done)
			c.flag(kindProgressMiscount, "", p.Schedules.TNs, ex)
		}
		handled += total
		var none []int64
		for k := int64(1); k <= total; k++ {
			at := v.Start + k*g.everyMs
			if len(live[occurrence{v.Name, v.Version, at}]) == 0 {
				none = append(none, at)
			} else {
				withTask++
			}
		}
		for _, o := range sortedOccurrences(live) {
			if o.name != v.Name || o.version != v.Version {
				continue
			}
			if o.at > v.Done {
				inFlight++
			}
			latest = max(latest, live[o][0].EnqueuedAt-o.at)
		}
		lost := int64(len(none)) - int64(v.Skipped)
		if lost <= 0 {
			continue
		}
		// Which of them were skipped the record cannot tell: the first
		// ones stand for the lost.
		for _, at := range none[:lost] {
			key := wire.OccurrenceKey(v.Name, v.Version, at)
			part := -1
			if n := h.in.Run.Partitions; n > 0 {
				part = int(ring.KeyPartition(g.queue, key, n))
			}
			t := pc.runNs(at)
			why := h.explainedIn(part, true, t, h.tEnd, h.wipeLossNeed())
			c.flag(kindOccurrenceLost, why, t, Example{TNs: []int64{t, p.Tasks.TNs}, Nodes: []int{p.Tasks.Node},
				Detail: fmt.Sprintf("occurrence %d of schedule %s version %d (key %s, partition %d) has no live task; %d of its %d occurrences up to done %d have none, %d counted skipped",
					at, v.Name, v.Version, key, part, len(none), total, v.Done, v.Skipped)})
		}
	}
	c.count(countSchedules, int64(len(views)))
	c.count(countHandled, handled)
	c.count(countEnqueued, enqueued)
	c.count(countSkipped, skipped)
	c.count(countWithTask, withTask)
	c.count(countInFlight, inFlight)
	c.count(countLatestMs, latest)
}
