package store_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// putAAETasks writes n tasks in each of parts: a payload each, a state on
// every other, updates on every third and reverse edges on every fourth.
// It returns the ids per partition, in id order.
func putAAETasks(t *testing.T, s *store.Store, parts []uint16, n int) map[uint16][]task.ID {
	t.Helper()
	ids := map[uint16][]task.ID{}
	commit(t, s, func(b *store.Batch) error {
		for _, part := range parts {
			for i := range n {
				id := task.MakeID(int64(1000+i), uint64(part), uint32(i))
				ids[part] = append(ids[part], id)
				if err := b.PutSpec(part, &task.Spec{ID: id, Queue: "q", MaxAttempts: 1, Data: []byte{byte(i)}}); err != nil {
					return err
				}
				if i%2 == 0 {
					if err := b.PutState(part, id, &task.State{RequeueBase: uint32(i)}); err != nil {
						return err
					}
				}
				if i%3 == 0 {
					if err := b.PutUpdate(part, id, 0, uint64(i), []byte("u")); err != nil {
						return err
					}
				}
				if i%4 == 0 {
					if err := b.PutEdge(part, id, task.MakeID(5, 5, uint32(i))); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	return ids
}

// TestSnapshotTaskIDs: TaskIDs lists a partition's ids in order, nothing
// of its neighbours, and stops when fn says so.
func TestSnapshotTaskIDs(t *testing.T) {
	s := newTasksStore(t)
	ids := putAAETasks(t, s, []uint16{0, 1, 65535}, 10)
	snap := s.NewSnapshot()
	defer snap.Close()
	for _, part := range []uint16{0, 1, 2, 65535} {
		var got []task.ID
		if err := snap.TaskIDs(part, func(id task.ID) (bool, error) { got = append(got, id); return true, nil }); err != nil {
			t.Fatalf("TaskIDs(%d): %v", part, err)
		}
		if !slices.Equal(got, ids[part]) {
			t.Errorf("TaskIDs(%d) = %v; want %v", part, got, ids[part])
		}
	}
	n := 0
	if err := snap.TaskIDs(1, func(task.ID) (bool, error) { n++; return n < 3, nil }); err != nil || n != 3 {
		t.Errorf("early stop: %d calls, %v; want 3", n, err)
	}
}

// TestSnapshotExportTasks: ExportTasks returns the same whole records as
// ExportPartition for the ids asked, skips ids not held, refuses ids out
// of order, and sees nothing written after the snapshot.
func TestSnapshotExportTasks(t *testing.T) {
	s := newTasksStore(t)
	ids := putAAETasks(t, s, []uint16{0, 1}, 12)
	all := exportAll(t, s, 1, task.ID{})
	snap := s.NewSnapshot()
	defer snap.Close()

	// Written after the snapshot: a new task, a new update, a new state.
	late := task.MakeID(999, 1, 0) // sorts before every other id of part 1
	commit(t, s, func(b *store.Batch) error {
		if err := b.PutSpec(1, &task.Spec{ID: late, Queue: "q", MaxAttempts: 1}); err != nil {
			return err
		}
		if err := b.PutUpdate(1, ids[1][1], 9, 9, []byte("late")); err != nil {
			return err
		}
		return b.PutState(1, ids[1][1], &task.State{RequeueBase: 99})
	})

	var ask []task.ID
	var want []store.TaskExport
	ask = append(ask, late)
	for i := 0; i < len(ids[1]); i += 2 {
		ask = append(ask, ids[1][i])
		want = append(want, all[i])
		// An id between two held ones, held by no partition.
		ask = append(ask, task.MakeID(int64(1000+i), 1, 1<<20))
	}
	ask = append(ask, ids[0][0]) // held by partition 0, not 1
	slices.SortFunc(ask, task.ID.Compare)
	var got []store.TaskExport
	if err := snap.ExportTasks(1, ask, func(rec store.TaskExport) (bool, error) { got = append(got, rec); return true, nil }); err != nil {
		t.Fatalf("ExportTasks: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ExportTasks = %+v\nwant %+v", got, want)
	}
	// Asking for the task with late writes: the snapshot's version.
	got = nil
	if err := snap.ExportTasks(1, []task.ID{ids[1][1]}, func(rec store.TaskExport) (bool, error) { got = append(got, rec); return true, nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], all[1]) {
		t.Errorf("ExportTasks of a task written after the snapshot = %+v; want %+v", got, all[1])
	}

	if err := snap.ExportTasks(1, []task.ID{ids[1][2], ids[1][1]}, func(store.TaskExport) (bool, error) { return true, nil }); err == nil {
		t.Errorf("ExportTasks of ids out of order succeeded")
	}
	if err := snap.ExportTasks(1, []task.ID{ids[1][1], ids[1][1]}, func(store.TaskExport) (bool, error) { return true, nil }); err == nil {
		t.Errorf("ExportTasks of a repeated id succeeded")
	}
	n := 0
	if err := snap.ExportTasks(1, ids[1], func(store.TaskExport) (bool, error) { n++; return n < 2, nil }); err != nil || n != 2 {
		t.Errorf("early stop: %d calls, %v; want 2", n, err)
	}
}

func TestHasEdge(t *testing.T) {
	s := newTasksStore(t)
	dep, a, b := task.MakeID(1, 1, 1), task.MakeID(2, 2, 2), task.MakeID(3, 3, 3)
	commit(t, s, func(bt *store.Batch) error { return bt.PutEdge(7, dep, a) })
	tests := []struct {
		part           uint16
		dep, dependent task.ID
		want           bool
	}{
		{7, dep, a, true},
		{7, dep, b, false},
		{7, a, dep, false}, // the reverse edge
		{8, dep, a, false}, // another partition
	}
	for _, tc := range tests {
		got, err := s.HasEdge(tc.part, tc.dep, tc.dependent)
		if err != nil || got != tc.want {
			t.Errorf("HasEdge(%d, %v, %v) = %v, %v; want %v", tc.part, tc.dep, tc.dependent, got, err, tc.want)
		}
	}
}
