package store_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// gcTask writes task id of part with a state completed at done (0: open),
// an update and a reverse edge.
func gcTask(t *testing.T, s *store.Store, part uint16, id task.ID, done int64, deps ...task.ID) {
	t.Helper()
	sp := &task.Spec{ID: id, Queue: "q", Deps: deps, Data: []byte("payload")}
	st := task.State{Claims: []task.Claim{{Index: 0, Start: 1, End: 2, Epoch: 1}}}
	if done != 0 {
		st.Completion = &task.Completion{Claim: 0, Seq: 1, At: done}
	}
	commit(t, s, func(b *store.Batch) error {
		if err := b.PutSpec(part, sp); err != nil {
			return err
		}
		if err := b.PutState(part, id, &st); err != nil {
			return err
		}
		if err := b.PutUpdate(part, id, 0, 0, []byte("u")); err != nil {
			return err
		}
		return b.PutEdge(part, id, task.MakeID(9, 9, 9))
	})
}

// TestCollectTask: a collected task reads as not found, whole, and leaves
// a tombstone; its neighbours (adjacent ids, the same id in another
// partition) are untouched.
func TestCollectTask(t *testing.T) {
	s := newTasksStore(t)
	a, b, c := task.MakeID(10, 1, 0), task.MakeID(10, 1, 1), task.MakeID(10, 1, 2)
	for _, id := range []task.ID{a, b, c} {
		gcTask(t, s, 3, id, 100)
	}
	gcTask(t, s, 4, b, 100)
	commit(t, s, func(bt *store.Batch) error { return bt.CollectTask(3, b, "q", 777) })

	if _, err := s.Spec(3, b); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("spec of collected task: %v; want not found", err)
	}
	if _, err := s.FullSpec(3, b); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("full spec of collected task: %v; want not found", err)
	}
	if _, err := s.Data(3, b); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("data of collected task: %v; want not found", err)
	}
	if _, found, err := s.State(3, b); err != nil || found {
		t.Errorf("state of collected task: found %v, %v", found, err)
	}
	if _, err := s.Update(3, b, 0, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of collected task: %v; want not found", err)
	}
	n := 0
	if err := s.Dependents(3, b, func(task.ID) bool { n++; return true }); err != nil || n != 0 {
		t.Errorf("dependents of collected task: %d, %v", n, err)
	}
	if at, found, err := s.Tomb(3, b); err != nil || !found || at != 777 {
		t.Errorf("tomb: %d %v %v; want 777", at, found, err)
	}
	if _, found, _ := s.Tomb(3, a); found {
		t.Errorf("tomb of a task not collected")
	}
	var ids []task.ID
	if err := s.ExportPartition(3, task.ID{}, func(te store.TaskExport) (bool, error) {
		ids = append(ids, te.Spec.ID)
		if len(te.Updates) != 1 || len(te.Dependents) != 1 {
			t.Errorf("task %s: %d updates, %d dependents; want 1, 1", te.Spec.ID, len(te.Updates), len(te.Dependents))
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []task.ID{a, c}) {
		t.Errorf("export after collect: %v; want %v", ids, []task.ID{a, c})
	}
	if _, err := s.FullSpec(4, b); err != nil {
		t.Errorf("same id in another partition: %v", err)
	}

	snap := s.NewSnapshot()
	if at, found, err := snap.Tomb(3, b); err != nil || !found || at != 777 {
		t.Errorf("snapshot tomb: %d %v %v", at, found, err)
	}
	if err := snap.Close(); err != nil {
		t.Fatal(err)
	}

	commit(t, s, func(bt *store.Batch) error { return bt.DeleteTomb(3, b) })
	if _, found, err := s.Tomb(3, b); err != nil || found {
		t.Errorf("tomb after delete: found %v, %v", found, err)
	}
}

// TestTombsAndDrop: Tombs scans one partition in id order from a start;
// DropPartition drops the tombstones too.
func TestTombsAndDrop(t *testing.T) {
	s := newTasksStore(t)
	ids := []task.ID{task.MakeID(1, 1, 0), task.MakeID(2, 1, 0), task.MakeID(3, 1, 0)}
	commit(t, s, func(b *store.Batch) error {
		for i, id := range ids {
			if err := b.PutTomb(5, id, int64(100*(i+1))); err != nil {
				return err
			}
		}
		return b.PutTomb(6, ids[0], 1)
	})
	type tomb struct {
		id task.ID
		at int64
	}
	scan := func(part uint16, from task.ID) []tomb {
		var got []tomb
		if err := s.Tombs(part, from, func(id task.ID, at int64) (bool, error) {
			got = append(got, tomb{id, at})
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	tests := []struct {
		name string
		part uint16
		from task.ID
		want []tomb
	}{
		{"all", 5, task.ID{}, []tomb{{ids[0], 100}, {ids[1], 200}, {ids[2], 300}}},
		{"from the second", 5, ids[1], []tomb{{ids[1], 200}, {ids[2], 300}}},
		{"other partition", 6, task.ID{}, []tomb{{ids[0], 1}}},
		{"empty partition", 7, task.ID{}, nil},
	}
	for _, tc := range tests {
		if got := scan(tc.part, tc.from); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
	if err := s.DropPartition(5); err != nil {
		t.Fatal(err)
	}
	if got := scan(5, task.ID{}); got != nil {
		t.Errorf("after drop: %v", got)
	}
	if got := scan(6, task.ID{}); len(got) != 1 {
		t.Errorf("drop of 5 touched 6: %v", got)
	}
}

// TestCompletedBefore: completed tasks older than the cutoff, in id order,
// with their deps and dependents; open and recent ones are skipped.
func TestCompletedBefore(t *testing.T) {
	s := newTasksStore(t)
	dep := task.MakeID(1, 2, 3)
	old1, open, recent, old2 := task.MakeID(10, 1, 0), task.MakeID(10, 1, 1), task.MakeID(10, 1, 2), task.MakeID(10, 1, 3)
	gcTask(t, s, 2, old1, 100, dep)
	gcTask(t, s, 2, open, 0)
	gcTask(t, s, 2, recent, 900)
	gcTask(t, s, 2, old2, 400)
	gcTask(t, s, 3, task.MakeID(10, 1, 4), 100) // another partition
	// A task never claimed has no state record: not completed.
	commit(t, s, func(b *store.Batch) error { return b.PutSpec(2, &task.Spec{ID: task.MakeID(10, 1, 5), Queue: "q"}) })

	scan := func(from task.ID, limit int) []store.Completed {
		var got []store.Completed
		if _, _, err := s.CompletedBefore(2, from, 500, 0, func(c store.Completed) (bool, error) {
			got = append(got, c)
			return len(got) < limit, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := scan(task.ID{}, 10)
	if len(got) != 2 || got[0].ID != old1 || got[1].ID != old2 {
		t.Fatalf("completed before 500: %+v; want %s, %s", got, old1, old2)
	}
	edge := []task.ID{task.MakeID(9, 9, 9)}
	if c := got[0]; c.CompletedAt != 100 || c.Queue != "q" || !slices.Equal(c.Deps, []task.ID{dep}) || !slices.Equal(c.Dependents, edge) {
		t.Errorf("candidate %+v", c)
	}
	if got := scan(task.ID{}, 1); len(got) != 1 || got[0].ID != old1 {
		t.Errorf("limit 1: %+v", got)
	}
	if got := scan(open, 10); len(got) != 1 || got[0].ID != old2 {
		t.Errorf("resumed after %s: %+v", old1, got)
	}
	// A scan bound stops after that many states, candidates or not, and
	// says where to resume; a refused candidate is offered again.
	var seen []task.ID
	next, more, err := s.CompletedBefore(2, task.ID{}, 500, 2, func(c store.Completed) (bool, error) {
		seen = append(seen, c.ID)
		return true, nil
	})
	if err != nil || !more || next != recent || !slices.Equal(seen, []task.ID{old1}) {
		t.Errorf("scan of 2 states: saw %v, next %s more=%v err=%v; want [%s], next %s", seen, next, more, err, old1, recent)
	}
	next, more, err = s.CompletedBefore(2, task.ID{}, 500, 0, func(c store.Completed) (bool, error) { return false, nil })
	if err != nil || !more || next != old1 {
		t.Errorf("refused first candidate: next %s more=%v err=%v; want %s", next, more, err, old1)
	}
	if _, more, err := s.CompletedBefore(2, task.ID{}, 500, 0, func(store.Completed) (bool, error) { return true, nil }); more || err != nil {
		t.Errorf("whole scan: more=%v err=%v", more, err)
	}
}

// TestNodeMarks: the up mark and the id reservation read back what was
// last written, and nothing on a new store; neither is task data.
func TestNodeMarks(t *testing.T) {
	s := newTasksStore(t)
	for name, get := range map[string]func() (int64, bool, error){"alive": s.Alive, "id reservation": s.IDReservation} {
		if v, found, err := get(); found || err != nil {
			t.Errorf("%s on a new store: %d, %v, %v; want none", name, v, found, err)
		}
	}
	for _, v := range []int64{1_700_000_000_000, 1_700_000_002_000} {
		if err := s.PutAlive(v); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIDReservation(v + 1); err != nil {
			t.Fatal(err)
		}
		if got, found, err := s.Alive(); !found || err != nil || got != v {
			t.Errorf("alive: %d, %v, %v; want %d", got, found, err, v)
		}
		if got, found, err := s.IDReservation(); !found || err != nil || got != v+1 {
			t.Errorf("id reservation: %d, %v, %v; want %d", got, found, err, v+1)
		}
	}
	for p := range uint16(4) {
		if has, err := s.HasTasks(p); has || err != nil {
			t.Errorf("partition %d holds tasks after the marks: %v, %v", p, has, err)
		}
	}
}
