package partition_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Storage": the node checks a task's dependency
// component (GCInfo) before it collects it, and Collect refuses a task
// that gained a dependent since; a dependent added after the collection
// finds the tombstone; Export copies tombstones with the tasks.

func gcInfos(t *testing.T, r *partition.Replica, ids ...task.ID) []partition.GCInfo {
	t.Helper()
	infos, err := r.GCInfo(ids)
	if err != nil {
		t.Fatalf("gc info %v: %v", ids, err)
	}
	if len(infos) != len(ids) {
		t.Fatalf("gc info of %d ids: %d answers", len(ids), len(infos))
	}
	return infos
}

// wantGCInfo checks one answer of GCInfo; Dependents are compared as a
// set.
func wantGCInfo(t *testing.T, what string, got, want partition.GCInfo) {
	t.Helper()
	if got.ID != want.ID || got.Status != want.Status || got.CompletedAt != want.CompletedAt ||
		!slices.Equal(got.Deps, want.Deps) || !slices.Equal(sortedIDs(got.Dependents), sortedIDs(want.Dependents)) {
		t.Errorf("%s: gc info %+v; want %+v", what, got, want)
	}
}

func mustCollected(t *testing.T, r *partition.Replica, id task.ID) bool {
	t.Helper()
	c, err := r.Collected(id)
	if err != nil {
		t.Fatalf("collected %s: %v", id, err)
	}
	return c
}

// wantUncollected checks that nothing of a refused Collect was written:
// gcA and gcC of gcLeader are still held, completed, with their edges,
// and the tree is the one before.
func wantUncollected(t *testing.T, l *partition.Replica, sl *store.Store, root antientropy.Digest) {
	t.Helper()
	if l.TreeSnapshot().Root() != root {
		t.Errorf("refused collect changed the tree root")
	}
	infos := gcInfos(t, l, gcA, gcC)
	wantGCInfo(t, "gcA", infos[0], partition.GCInfo{ID: gcA, Status: partition.GCCompleted, CompletedAt: t0})
	wantGCInfo(t, "gcC", infos[1], partition.GCInfo{ID: gcC, Status: partition.GCCompleted, CompletedAt: t0, Dependents: []task.ID{gcDep}})
	for _, id := range []task.ID{gcA, gcC} {
		if mustCollected(t, l, id) {
			t.Errorf("%s: collected after a refused collect", id)
		}
		if _, found, err := sl.Tomb(0, id); found || err != nil {
			t.Errorf("%s: tombstone found=%v err=%v after a refused collect", id, found, err)
		}
		if _, err := sl.FullSpec(0, id); err != nil {
			t.Errorf("%s: spec after a refused collect: %v", id, err)
		}
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Completed: 2, task.Ready: 1})
	checkTree(t, "after a refused collect", l, sl)
}

// TestCollectEdges: with edge counts, Collect collects only tasks whose
// dependents are the ones counted; any other count, or an id not counted,
// fails the whole call and writes nothing. nil counts check nothing.
func TestCollectEdges(t *testing.T) {
	refusals := []struct {
		name  string
		ids   []task.ID
		edges map[task.ID]int
	}{
		{"id not in the map", []task.ID{gcC}, map[task.ID]int{gcA: 0}},
		{"empty map", []task.ID{gcA}, map[task.ID]int{}},
		{"fewer dependents counted", []task.ID{gcC}, map[task.ID]int{gcC: 0}},
		{"more dependents counted", []task.ID{gcC}, map[task.ID]int{gcC: 2}},
		{"right count first, wrong second", []task.ID{gcA, gcC}, map[task.ID]int{gcA: 0, gcC: 0}},
		{"wrong count first, right second", []task.ID{gcC, gcA}, map[task.ID]int{gcA: 0, gcC: 5}},
		{"right count first, second not counted", []task.ID{gcA, gcC}, map[task.ID]int{gcA: 0}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			l, sl, _, _ := gcLeader(t)
			root := l.TreeSnapshot().Root()
			if _, err := l.Collect(tc.ids, tc.edges, t0+10); !errors.Is(err, partition.ErrEdgesChanged) {
				t.Fatalf("collect %v with edges %v: %v; want %v", tc.ids, tc.edges, err, partition.ErrEdgesChanged)
			}
			wantUncollected(t, l, sl, root)
		})
	}

	t.Run("checked, a dependent arrives, checked again", func(t *testing.T) {
		l, sl, _, _ := gcLeader(t)
		edges := map[task.ID]int{}
		for _, in := range gcInfos(t, l, gcA, gcC) {
			edges[in.ID] = len(in.Dependents)
		}
		if edges[gcA] != 0 || edges[gcC] != 1 {
			t.Fatalf("edges from gc info: %v", edges)
		}
		late := task.MakeID(t0, 2, 8)
		done, d, err := l.AddDependents(gcC, []task.ID{late})
		if err != nil || !done || d.Wait() != nil {
			t.Fatalf("add dependents to a completed task: %v, %v; want true, nil", done, err)
		}
		root := l.TreeSnapshot().Root()
		if _, err := l.Collect([]task.ID{gcA, gcC}, edges, t0+10); !errors.Is(err, partition.ErrEdgesChanged) {
			t.Fatalf("collect after a new dependent: %v; want %v", err, partition.ErrEdgesChanged)
		}
		if l.TreeSnapshot().Root() != root || mustCollected(t, l, gcA) || mustCollected(t, l, gcC) {
			t.Fatal("refused collect wrote something")
		}
		in := gcInfos(t, l, gcC)[0]
		wantGCInfo(t, "gcC", in, partition.GCInfo{ID: gcC, Status: partition.GCCompleted, CompletedAt: t0, Dependents: []task.ID{gcDep, late}})
		edges[gcC] = len(in.Dependents)

		d, err = l.Collect([]task.ID{gcA, gcC}, edges, t0+10)
		if err != nil {
			t.Fatalf("collect with the right counts: %v", err)
		}
		if err := d.Wait(); err != nil {
			t.Fatal(err)
		}
		wantCollected(t, sl, gcA, t0+10)
		wantCollected(t, sl, gcC, t0+10)
		checkTree(t, "after collect with edges", l, sl)
		wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1})

		// A retry with any counts: collected ids are skipped, unchecked.
		root = l.TreeSnapshot().Root()
		d, err = l.Collect([]task.ID{gcA, gcC}, map[task.ID]int{}, t0+11)
		if err != nil || d.Wait() != nil {
			t.Fatalf("retried collect: %v", err)
		}
		if l.TreeSnapshot().Root() != root {
			t.Error("retried collect changed the tree")
		}
		wantCollected(t, sl, gcC, t0+10)
	})

	t.Run("nil: no check", func(t *testing.T) {
		l, sl, _, _ := gcLeader(t)
		if _, _, err := l.AddDependents(gcC, []task.ID{task.MakeID(t0, 2, 9)}); err != nil {
			t.Fatal(err)
		}
		collect(t, l, t0+10, gcC, gcA)
		wantCollected(t, sl, gcA, t0+10)
		wantCollected(t, sl, gcC, t0+10)
		checkTree(t, "after collect without edges", l, sl)
	})

	t.Run("open task with counts", func(t *testing.T) {
		l, sl, _, _ := gcLeader(t)
		root := l.TreeSnapshot().Root()
		if _, err := l.Collect([]task.ID{gcA, gcB}, map[task.ID]int{gcA: 0, gcB: 0}, t0+10); !errors.Is(err, partition.ErrNotCollectable) {
			t.Fatalf("collect of an open task with counts: %v; want %v", err, partition.ErrNotCollectable)
		}
		wantUncollected(t, l, sl, root)
	})
}

// TestGCInfo: per id, in the order asked: unknown, open (with its spec's
// deps), completed (when, and its reverse edges) or collected.
func TestGCInfo(t *testing.T) {
	l, sl, f, _ := gcLeader(t)
	if infos, err := l.GCInfo(nil); err != nil || len(infos) != 0 {
		t.Errorf("gc info of nothing: %v, %v", infos, err)
	}
	var (
		blocked   = task.MakeID(t0, 1, 3) // waits on gcA and a task elsewhere
		later     = task.MakeID(t0, 1, 4) // completed at t0+42
		elsewhere = task.MakeID(t0, 3, 0)
		unknown   = task.MakeID(t0, 1, 99)
		waiterA   = task.MakeID(t0, 2, 1)
	)
	sp := spec(blocked, "q", 50, 3)
	sp.Deps = []task.ID{gcA, elsewhere}
	enqueue(t, l, t0+40, sp, spec(later, "q", 20, 3))
	if _, d, err := l.AddDependents(gcA, []task.ID{blocked, waiterA}); err != nil || d.Wait() != nil {
		t.Fatalf("add dependents: %v", err)
	}
	g := mustClaim(t, l, "q", t0+41)
	if g.Spec.ID != later {
		t.Fatalf("claimed %s; want %s", g.Spec.ID, later)
	}
	if _, err := l.Complete(later, g.Claim.Index, nil, t0+42); err != nil {
		t.Fatal(err)
	}

	ids := []task.ID{gcC, unknown, blocked, gcB, later, gcA, gcC}
	want := []partition.GCInfo{
		{ID: gcC, Status: partition.GCCompleted, CompletedAt: t0, Dependents: []task.ID{gcDep}},
		{ID: unknown, Status: partition.GCUnknown},
		{ID: blocked, Status: partition.GCOpen, Deps: []task.ID{gcA, elsewhere}},
		{ID: gcB, Status: partition.GCOpen},
		{ID: later, Status: partition.GCCompleted, CompletedAt: t0 + 42},
		{ID: gcA, Status: partition.GCCompleted, CompletedAt: t0, Dependents: []task.ID{blocked, waiterA}},
		{ID: gcC, Status: partition.GCCompleted, CompletedAt: t0, Dependents: []task.ID{gcDep}},
	}
	for i, in := range gcInfos(t, l, ids...) {
		wantGCInfo(t, fmt.Sprintf("before collect, %d", i), in, want[i])
	}
	// The follower merged gcLeader's records, edges included.
	wantGCInfo(t, "follower", gcInfos(t, f, gcC)[0], want[0])

	collect(t, l, t0+50, gcC, later)
	for _, i := range []int{0, 4, 6} {
		want[i] = partition.GCInfo{ID: ids[i], Status: partition.GCCollected}
	}
	for i, in := range gcInfos(t, l, ids...) {
		wantGCInfo(t, fmt.Sprintf("after collect, %d", i), in, want[i])
	}
	// A reload reads the same.
	r := loaded(t, config(sl), t0+60)
	for i, in := range gcInfos(t, r, ids...) {
		wantGCInfo(t, fmt.Sprintf("after reload, %d", i), in, want[i])
	}
	// A tombstone merged: collected there too.
	merge(t, f, 1, t0+60, task.Record{ID: gcC, Tomb: t0 + 50})
	wantGCInfo(t, "follower after the tombstone", gcInfos(t, f, gcC)[0], want[0])
}

// TestCollectedStatus: Collected holds exactly for the ids with a
// tombstone here.
func TestCollectedStatus(t *testing.T) {
	l, sl, f, _ := gcLeader(t)
	unknown := task.MakeID(t0, 1, 99)
	want := func(what string, r *partition.Replica, m map[task.ID]bool) {
		t.Helper()
		for id, w := range m {
			if got := mustCollected(t, r, id); got != w {
				t.Errorf("%s: collected(%s) = %v; want %v", what, id, got, w)
			}
		}
	}
	want("before", l, map[task.ID]bool{gcA: false, gcB: false, gcC: false, unknown: false})
	collect(t, l, t0+100, gcA)
	want("after collect", l, map[task.ID]bool{gcA: true, gcB: false, gcC: false, unknown: false})
	want("reloaded", loaded(t, config(sl), t0+101), map[task.ID]bool{gcA: true, gcC: false})

	want("follower before the tombstone", f, map[task.ID]bool{gcA: false})
	merge(t, f, 1, t0+101, task.Record{ID: gcA, Tomb: t0 + 100}, task.Record{ID: unknown, Tomb: t0 + 100})
	want("follower after the tombstones", f, map[task.ID]bool{gcA: true, unknown: true, gcC: false})

	if n, err := l.ExpireTombs(t0 + 101); err != nil || n != 1 {
		t.Fatalf("expire: %d, %v", n, err)
	}
	want("after expiry", l, map[task.ID]bool{gcA: false})
}

// TestAddDependentsCollected: a dependent added to a collected task is
// told it is completed, with ErrCollected, and no edge is written.
func TestAddDependentsCollected(t *testing.T) {
	l, sl, f, sf := gcLeader(t)
	collect(t, l, t0+5, gcC)
	waiter := task.MakeID(t0, 2, 20)

	check := func(what string, r *partition.Replica, s *store.Store, dep task.ID, at int64) {
		t.Helper()
		root := r.TreeSnapshot().Root()
		for _, dependents := range [][]task.ID{{waiter}, {gcDep}, {waiter, gcDep}} {
			done, _, err := r.AddDependents(dep, dependents)
			if !done || !errors.Is(err, partition.ErrCollected) {
				t.Errorf("%s: add dependents %v to collected %s: %v, %v; want true, %v", what, dependents, dep, done, err, partition.ErrCollected)
			}
		}
		if r.TreeSnapshot().Root() != root {
			t.Errorf("%s: refused edges changed the tree", what)
		}
		n := 0
		if err := s.Dependents(0, dep, func(task.ID) bool { n++; return true }); err != nil || n != 0 {
			t.Errorf("%s: %d edges stored under the collected task (%v)", what, n, err)
		}
		if got, found, err := s.Tomb(0, dep); err != nil || !found || got != at {
			t.Errorf("%s: tombstone %d found=%v err=%v; want at %d", what, got, found, err, at)
		}
		checkTree(t, what, r, s)
	}
	check("collector", l, sl, gcC, t0+5)
	check("reloaded", loaded(t, config(sl), t0+6), sl, gcC, t0+5)

	// A replica that held the task and merged its tombstone, and a fresh
	// one that only ever got the tombstone.
	merge(t, f, 1, t0+6, task.Record{ID: gcC, Tomb: t0 + 5})
	check("follower", f, sf, gcC, t0+5)
	sn := newStore(t)
	fresh := follower(t, sn)
	merge(t, fresh, 1, t0+6, task.Record{ID: gcC, Tomb: t0 + 5})
	check("fresh replica", fresh, sn, gcC, t0+5)

	// An unknown dep is still not found, not collected.
	if _, _, err := l.AddDependents(task.MakeID(t0, 1, 99), []task.ID{waiter}); !errors.Is(err, task.ErrNotFound) || errors.Is(err, partition.ErrCollected) {
		t.Errorf("add dependents to an unknown task: %v; want not found", err)
	}
	// A task not collected still takes edges.
	if done, d, err := l.AddDependents(gcA, []task.ID{waiter}); err != nil || !done || d.Wait() != nil {
		t.Errorf("add dependents to a completed task: %v, %v", done, err)
	}
	checkTree(t, "after an edge on a held task", l, sl)
}

// exported is one record Export must emit: a task (tomb 0) or a
// tombstone at tomb.
type exported struct {
	id   task.ID
	tomb int64
}

// exportID is the i-th id of an export test: even counters only, so the
// odd counter below each is an id between two held ones.
func exportID(i int) task.ID { return task.MakeID(t0, 1, uint32(2*i+2)) }

// exportSegment is n consecutive ids: a task every taskEvery-th (0: all
// tombstones; 1: all tasks).
type exportSegment struct{ n, taskEvery int }

// exportSource returns a leader holding the layout segs (tasks enqueued,
// tombstones merged) and what its export must emit, in id order. The
// tasks at the indexes collect (claimed first: the highest priority) are
// completed and collected at t0+500.
func exportSource(t *testing.T, collect []int, segs ...exportSegment) (*partition.Replica, *store.Store, []exported) {
	t.Helper()
	s := newStore(t)
	l := leader(t, s)
	var specs []*task.Spec
	var tombs []task.Record
	var want []exported
	i := 0
	for _, seg := range segs {
		for j := range seg.n {
			id := exportID(i)
			if seg.taskEvery > 0 && j%seg.taskEvery == 0 {
				prio := int32(i % 5)
				if slices.Contains(collect, i) {
					prio = 100 // claimed before the others
				}
				specs = append(specs, spec(id, "q", prio, 3))
				want = append(want, exported{id: id})
			} else {
				at := t0 + 1 + int64(i%977)
				tombs = append(tombs, task.Record{ID: id, Tomb: at})
				want = append(want, exported{id: id, tomb: at})
			}
			i++
		}
	}
	if len(specs) > 0 {
		enqueue(t, l, t0, specs...)
	}
	for c := range slices.Chunk(tombs, 4096) {
		merge(t, l, 1, t0, c...)
	}
	if len(collect) == 0 {
		return l, s, want
	}
	var ids []task.ID
	for _, k := range collect {
		if k >= len(want) || want[k].tomb != 0 {
			t.Fatalf("layout: record %d is not a task", k)
		}
		ids = append(ids, want[k].id)
		want[k].tomb = t0 + 500
	}
	for range ids {
		g := mustClaim(t, l, "q", t0+400)
		if !slices.Contains(ids, g.Spec.ID) {
			t.Fatalf("claimed %s, not one to collect", g.Spec.ID)
		}
		if _, err := l.Complete(g.Spec.ID, g.Claim.Index, nil, t0+400); err != nil {
			t.Fatal(err)
		}
	}
	d, err := l.Collect(ids, nil, t0+500)
	if err != nil || d.Wait() != nil {
		t.Fatalf("collect %v: %v", ids, err)
	}
	checkTree(t, "export source", l, s)
	return l, s, want
}

// exportFrom runs r.Export from from and returns every record, checking
// that ids strictly increase and each record is whole or a bare
// tombstone.
func exportFrom(t *testing.T, r *partition.Replica, from task.ID) []task.Record {
	t.Helper()
	var out []task.Record
	err := r.Export(from, func(rec task.Record) (bool, error) {
		out = append(out, rec)
		return true, nil
	})
	if err != nil {
		t.Fatalf("export from %s: %v", from, err)
	}
	for i, rec := range out {
		if i > 0 && out[i-1].ID.Compare(rec.ID) >= 0 {
			t.Fatalf("export from %s: record %d (%s) after %s", from, i, rec.ID, out[i-1].ID)
		}
		if rec.ID.Compare(from) < 0 {
			t.Fatalf("export from %s returned %s", from, rec.ID)
		}
		if rec.Tomb != 0 {
			if rec.Spec != nil || rec.State != nil || rec.Updates != nil || rec.Dependents != nil {
				t.Fatalf("tombstone record %s carries task data: %+v", rec.ID, rec)
			}
		} else if rec.Spec == nil || rec.Spec.ID != rec.ID || rec.Spec.Data == nil || rec.State == nil {
			t.Fatalf("task record %s is not whole: %+v", rec.ID, rec)
		}
	}
	return out
}

// wantExport checks got against want, record by record.
func wantExport(t *testing.T, what string, got []task.Record, want []exported) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records; want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i].ID != want[i].id || got[i].Tomb != want[i].tomb {
			t.Fatalf("%s: record %d is %s tomb %d; want %s tomb %d", what, i, got[i].ID, got[i].Tomb, want[i].id, want[i].tomb)
		}
	}
}

// exportPrefix exports from from and stops after k records.
func exportPrefix(t *testing.T, r *partition.Replica, from task.ID, k int) []task.Record {
	t.Helper()
	var out []task.Record
	err := r.Export(from, func(rec task.Record) (bool, error) {
		out = append(out, rec)
		return len(out) < k, nil
	})
	if err != nil {
		t.Fatalf("export from %s: %v", from, err)
	}
	return out
}

// before returns the id just below exportID(i): held by nobody.
func before(i int) task.ID { return task.MakeID(t0, 1, uint32(2*i+1)) }

// TestExportTombstones: tasks (some collected by Collect, some tombstones
// merged) come out of Export once each, in id order, from any id, and an
// export stops when told to.
func TestExportTombstones(t *testing.T) {
	l, _, want := exportSource(t, []int{3, 12, 36, 37, 41},
		exportSegment{3, 0}, exportSegment{30, 3}, exportSegment{4, 1}, exportSegment{6, 2}, exportSegment{2, 0})

	got := exportFrom(t, l, task.ID{})
	wantExport(t, "whole export", got, want)
	if tombs, tasks := countKinds(got); tombs < 20 || tasks < 10 {
		t.Fatalf("layout: %d tombstones, %d tasks", tombs, tasks)
	}

	// From any id: at a task, at a tombstone, or between two ids.
	for k := range want {
		wantExport(t, fmt.Sprintf("from record %d", k), exportFrom(t, l, want[k].id), want[k:])
		wantExport(t, fmt.Sprintf("from below record %d", k), exportFrom(t, l, before(k)), want[k:])
	}
	wantExport(t, "from past the end", exportFrom(t, l, before(len(want))), nil)

	// Stopped after k records.
	for k := 1; k <= len(want); k++ {
		wantExport(t, fmt.Sprintf("stopped after %d", k), exportPrefix(t, l, task.ID{}, k), want[:k])
	}
	wantExport(t, "from 5, stopped after 3", exportPrefix(t, l, want[5].id, 3), want[5:8])

	// An error stops the export and is returned.
	boom := errors.New("boom")
	calls := 0
	err := l.Export(task.ID{}, func(task.Record) (bool, error) { calls++; return true, boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("export with a failing fn: %v after %d calls; want %v after 1", err, calls, boom)
	}
}

// lookup returns the record of want with id id.
func lookup(want []exported, id task.ID) (exported, bool) {
	i, ok := slices.BinarySearchFunc(want, id, func(w exported, id task.ID) int { return w.id.Compare(id) })
	if !ok {
		return exported{}, false
	}
	return want[i], true
}

func countKinds(recs []task.Record) (tombs, tasks int) {
	for _, r := range recs {
		if r.Tomb != 0 {
			tombs++
		} else {
			tasks++
		}
	}
	return tombs, tasks
}

// TestExportTombstoneChunks: layouts that cross the export's chunk
// bounds (exportChunkRecords = 256 tasks, exportChunkTombs = 4096
// tombstones), alone, together and exactly: every record comes once, in
// id order, from any id; merged into an empty replica, the export makes
// the same tree, tombstones included.
func TestExportTombstoneChunks(t *testing.T) {
	const taskChunk, tombChunk = 256, 4096
	tests := []struct {
		name    string
		collect []int
		segs    []exportSegment
	}{
		{"tasks, a run of tombstones over a chunk, mixed runs", []int{0, 299, 5302},
			[]exportSegment{{300, 1}, {5000, 0}, {600, 2}, {4200, 0}, {2100, 21}, {10, 1}}},
		{"tombstones denser than a task chunk holds", []int{21},
			[]exportSegment{{6300, 21}}},
		{"exact bounds", nil,
			[]exportSegment{{taskChunk, 1}, {tombChunk, 0}, {taskChunk, 1}, {tombChunk, 0}}},
		{"tombstones only, one over a chunk", nil,
			[]exportSegment{{tombChunk + 1, 0}}},
		{"tombstones after the tasks", nil,
			[]exportSegment{{taskChunk + 1, 1}, {2*tombChunk + 1, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, sl, want := exportSource(t, tc.collect, tc.segs...)
			got := exportFrom(t, l, task.ID{})
			wantExport(t, "whole export", got, want)

			// Resumed and stopped around the bounds.
			for _, k := range []int{1, taskChunk - 1, taskChunk, taskChunk + 1, tombChunk - 1, tombChunk, tombChunk + 1,
				taskChunk + tombChunk, taskChunk + tombChunk + 1, len(want) / 2, len(want) - 1} {
				if k <= 0 || k >= len(want) {
					continue
				}
				wantExport(t, fmt.Sprintf("from record %d", k), exportFrom(t, l, want[k].id), want[k:])
				wantExport(t, fmt.Sprintf("from below record %d", k), exportFrom(t, l, before(k)), want[k:])
				wantExport(t, fmt.Sprintf("stopped after %d", k), exportPrefix(t, l, task.ID{}, k), want[:k])
			}

			// Into an empty replica, in pieces as a new member gets it.
			sf := newStore(t)
			f := follower(t, sf)
			for c := range slices.Chunk(got, 1000) {
				merge(t, f, 1, t0+600, c...)
			}
			converged(t, "export merged", l, sl, f, sf)
			if lr, fr := l.TreeSnapshot().Root(), f.TreeSnapshot().Root(); lr != fr {
				t.Fatalf("roots %v and %v", lr, fr)
			}
			for _, w := range want {
				if c := mustCollected(t, f, w.id); c != (w.tomb != 0) {
					t.Fatalf("%s: collected = %v on the copy; want %v", w.id, c, w.tomb != 0)
				}
			}
			var sample []task.ID
			for _, w := range want[:min(len(want), 64)] {
				sample = append(sample, w.id)
			}
			for _, k := range tc.collect {
				sample = append(sample, want[k].id)
			}
			for i, in := range gcInfos(t, f, sample...) {
				st := partition.GCOpen
				if w, _ := lookup(want, in.ID); w.tomb != 0 {
					st = partition.GCCollected
				}
				if in.Status != st {
					t.Fatalf("sample %d: %s is %v on the copy; want %v", i, in.ID, in.Status, st)
				}
			}
			// The copy exports the same.
			wantExport(t, "export of the copy", exportFrom(t, f, task.ID{}), want)
		})
	}
}
