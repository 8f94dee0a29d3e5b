package store_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

func exportAll(t *testing.T, s *store.Store, part uint16, from task.ID) []store.TaskExport {
	t.Helper()
	var out []store.TaskExport
	err := s.ExportPartition(part, from, func(rec store.TaskExport) (bool, error) {
		out = append(out, rec)
		return true, nil
	})
	if err != nil {
		t.Fatalf("ExportPartition(%d): %v", part, err)
	}
	return out
}

// TestExportPartition: an export returns each task of one partition whole
// (spec with payload, state, updates, reverse edges), in id order, and nothing of the
// neighbouring partitions or of records without a spec.
func TestExportPartition(t *testing.T) {
	s := newTasksStore(t)
	parts := []uint16{0, 1, 65535}
	want := map[uint16][]store.TaskExport{}
	commit(t, s, func(b *store.Batch) error {
		for _, part := range parts {
			// Written in reverse id order; every other task has a state,
			// every third has updates (two claims, out of order).
			for i := 9; i >= 0; i-- {
				id := task.MakeID(int64(1000+i), uint64(part), uint32(i))
				rec := store.TaskExport{Spec: &task.Spec{
					ID: id, Queue: fmt.Sprintf("q%d", part), MaxAttempts: 3,
					Data: []byte(fmt.Sprintf("payload %d/%d", part, i)),
				}}
				if err := b.PutSpec(part, rec.Spec); err != nil {
					return err
				}
				if i%2 == 0 {
					rec.State = task.State{Claims: []task.Claim{{Index: 0, Start: int64(i), End: int64(i + 100)}}, RequeueBase: uint32(part)}
					if err := b.PutState(part, id, &rec.State); err != nil {
						return err
					}
				}
				if i%3 == 0 {
					rec.Updates = []task.Update{
						{Claim: 0, Seq: 0, Data: []byte("a")},
						{Claim: 0, Seq: 1}, // an empty payload
						{Claim: 1, Seq: 7, Data: []byte("gap")},
					}
					for j := len(rec.Updates) - 1; j >= 0; j-- {
						u := rec.Updates[j]
						if err := b.PutUpdate(part, id, u.Claim, u.Seq, u.Data); err != nil {
							return err
						}
					}
				}
				if i%4 == 1 {
					// Reverse edges: dependents in id order, written out of it.
					rec.Dependents = []task.ID{task.MakeID(5, 5, 1), task.MakeID(5, 5, 2)}
					for j := len(rec.Dependents) - 1; j >= 0; j-- {
						if err := b.PutEdge(part, id, rec.Dependents[j]); err != nil {
							return err
						}
					}
				}
				want[part] = append([]store.TaskExport{rec}, want[part]...)
			}
		}
		// A state and updates without a spec are skipped, not reported,
		// and do not attach to the next task.
		orphan := task.MakeID(1003, 1, 99)
		if err := b.PutState(1, orphan, &task.State{RequeueBase: 77}); err != nil {
			return err
		}
		if err := b.PutEdge(1, orphan, task.MakeID(5, 5, 3)); err != nil {
			return err
		}
		return b.PutUpdate(1, orphan, 0, 0, []byte("orphan"))
	})
	for _, part := range parts {
		got := exportAll(t, s, part, task.ID{})
		if !reflect.DeepEqual(got, want[part]) {
			t.Errorf("part %d: export = %+v\nwant %+v", part, got, want[part])
		}
		// from is inclusive.
		from := want[part][4].Spec.ID
		if got := exportAll(t, s, part, from); !reflect.DeepEqual(got, want[part][4:]) {
			t.Errorf("part %d from %v: export = %+v\nwant %+v", part, from, got, want[part][4:])
		}
		// from between ids.
		between := task.MakeID(1004, uint64(part), 5)
		if got := exportAll(t, s, part, between); !reflect.DeepEqual(got, want[part][5:]) {
			t.Errorf("part %d from %v: got %d tasks; want %d", part, between, len(got), len(want[part][5:]))
		}
		if got := exportAll(t, s, part, task.MakeID(1<<62, 0, 0)); len(got) != 0 {
			t.Errorf("part %d from the end: %d tasks; want none", part, len(got))
		}
	}
	for _, part := range []uint16{2, 65534} {
		if got := exportAll(t, s, part, task.ID{}); len(got) != 0 {
			t.Errorf("empty part %d: export found %d tasks", part, len(got))
		}
	}

	// fn returning false stops; an error from fn is returned.
	n := 0
	err := s.ExportPartition(0, task.ID{}, func(store.TaskExport) (bool, error) { n++; return n < 3, nil })
	if err != nil || n != 3 {
		t.Errorf("early stop: %d calls, %v; want 3", n, err)
	}
	boom := errors.New("boom")
	err = s.ExportPartition(65535, task.ID{}, func(store.TaskExport) (bool, error) { return true, boom })
	if !errors.Is(err, boom) {
		t.Errorf("ExportPartition with failing fn = %v; want boom", err)
	}
}

// TestExportSnapshot: an export reads one snapshot, so writes made while
// it runs (here, by fn itself) are not seen half-way.
func TestExportSnapshot(t *testing.T) {
	s := newTasksStore(t)
	a, b := task.MakeID(1, 1, 1), task.MakeID(2, 1, 1)
	commit(t, s, func(bt *store.Batch) error {
		for _, id := range []task.ID{a, b} {
			if err := bt.PutSpec(0, &task.Spec{ID: id, Queue: "q"}); err != nil {
				return err
			}
		}
		return nil
	})
	late := task.MakeID(3, 1, 1)
	var got []task.ID
	err := s.ExportPartition(0, task.ID{}, func(rec store.TaskExport) (bool, error) {
		got = append(got, rec.Spec.ID)
		if rec.Spec.ID == a {
			commit(t, s, func(bt *store.Batch) error {
				if err := bt.PutState(0, b, &task.State{RequeueBase: 9}); err != nil {
					return err
				}
				if err := bt.PutUpdate(0, b, 0, 0, []byte("x")); err != nil {
					return err
				}
				return bt.PutSpec(0, &task.Spec{ID: late, Queue: "q"})
			})
		}
		if rec.Spec.ID == b && (rec.State.RequeueBase != 0 || len(rec.Updates) != 0) {
			t.Errorf("export saw a write made after it started: %+v", rec)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []task.ID{a, b}) {
		t.Errorf("exported %v; want %v", got, []task.ID{a, b})
	}
	if got := exportAll(t, s, 0, task.ID{}); len(got) != 3 || got[1].State.RequeueBase != 9 || len(got[1].Updates) != 1 {
		t.Errorf("export after the writes = %+v", got)
	}
}

// TestDropPartition: dropping a partition removes its tasks whole and
// nothing of its neighbours, and keeps its promise.
func TestDropPartition(t *testing.T) {
	s := newTasksStore(t)
	ids := map[uint16]task.ID{}
	commit(t, s, func(b *store.Batch) error {
		for _, part := range []uint16{6, 7, 8} {
			id := task.MakeID(1, uint64(part), 1)
			ids[part] = id
			if err := b.PutSpec(part, &task.Spec{ID: id, Queue: "q", MaxAttempts: 1, Data: []byte("x")}); err != nil {
				return err
			}
			if err := b.PutState(part, id, &task.State{RequeueBase: 1}); err != nil {
				return err
			}
			if err := b.PutUpdate(part, id, 0, 0, []byte("u")); err != nil {
				return err
			}
			if err := b.PutEdge(part, id, task.MakeID(2, 2, 2)); err != nil {
				return err
			}
			if err := b.PutPromise(part, 9, 3); err != nil {
				return err
			}
		}
		return nil
	})
	if has, err := s.HasTasks(7); err != nil || !has {
		t.Fatalf("HasTasks(7) = %v, %v; want true", has, err)
	}
	if err := s.DropPartition(7); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasTasks(7); err != nil || has {
		t.Errorf("after drop, HasTasks(7) = %v, %v; want false", has, err)
	}
	if got := exportAll(t, s, 7, task.ID{}); len(got) != 0 {
		t.Errorf("after drop, partition 7 exports %d tasks", len(got))
	}
	if ep, cand, err := s.Promise(7); err != nil || ep != 9 || cand != 3 {
		t.Errorf("after drop, promise = %d, %d, %v; want 9, 3", ep, cand, err)
	}
	for _, part := range []uint16{6, 8} {
		got := exportAll(t, s, part, task.ID{})
		if len(got) != 1 || got[0].Spec.ID != ids[part] || len(got[0].Updates) != 1 || len(got[0].Dependents) != 1 {
			t.Errorf("neighbour %d after drop: %+v", part, got)
		}
	}
}
