package store_test

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: store/doc.go, "Keyspace" and "Durability".

func openTasksStore(t *testing.T, fs vfs.FS) *store.Store {
	t.Helper()
	s, err := store.Open(store.Config{Dir: "/db", FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func newTasksStore(t *testing.T) *store.Store {
	t.Helper()
	s := openTasksStore(t, vfs.NewMem())
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// commit runs fill on a fresh batch and commits it.
func commit(t *testing.T, s *store.Store, fill func(b *store.Batch) error) {
	t.Helper()
	b := s.NewBatch()
	if err := fill(b); err != nil {
		b.Close()
		t.Fatalf("fill batch: %v", err)
	}
	if err := b.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func fullSpec(id task.ID) *task.Spec {
	return &task.Spec{
		ID:          id,
		Queue:       "emails",
		Priority:    -7,
		Deps:        []task.ID{task.MakeID(1, 1, 1), task.MakeID(2, 1, 1)},
		NotBefore:   1_700_000_000_500,
		Group:       "team-a",
		Description: "send the report",
		MaxAttempts: 5,
		EnqueuedAt:  1_700_000_000_000,
		Data:        []byte("payload \x00\xff bytes"),
	}
}

func TestSpecRoundTrip(t *testing.T) {
	s := newTasksStore(t)
	id := task.MakeID(1_700_000_000_000, 3, 9)
	sp := fullSpec(id)
	orig := *sp
	commit(t, s, func(b *store.Batch) error { return b.PutSpec(4, sp) })
	if !reflect.DeepEqual(*sp, orig) {
		t.Error("PutSpec changed its argument")
	}

	got, err := s.Spec(4, id)
	if err != nil {
		t.Fatalf("Spec: %v", err)
	}
	want := orig
	want.Data = nil
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("Spec = %+v; want %+v (without data)", *got, want)
	}
	data, err := s.Data(4, id)
	if err != nil || string(data) != string(orig.Data) {
		t.Errorf("Data = %q, %v; want %q", data, err, orig.Data)
	}

	// A minimal spec round-trips too, and an empty payload reads as empty.
	id2 := task.MakeID(1_700_000_000_001, 3, 0)
	commit(t, s, func(b *store.Batch) error { return b.PutSpec(4, &task.Spec{ID: id2, Queue: "q"}) })
	got, err = s.Spec(4, id2)
	if err != nil || !reflect.DeepEqual(*got, task.Spec{ID: id2, Queue: "q"}) {
		t.Errorf("minimal Spec = %+v, %v", got, err)
	}
	if data, err := s.Data(4, id2); err != nil || len(data) != 0 {
		t.Errorf("empty Data = %q, %v", data, err)
	}

	// Missing: another id, or the same id in another partition.
	for _, c := range []struct {
		part uint16
		id   task.ID
	}{{4, task.MakeID(5, 5, 5)}, {5, id}} {
		if _, err := s.Spec(c.part, c.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Spec(%d, %v) = %v; want ErrNotFound", c.part, c.id, err)
		}
		if _, err := s.Data(c.part, c.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Data(%d, %v) = %v; want ErrNotFound", c.part, c.id, err)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	s := newTasksStore(t)
	id := task.MakeID(10, 1, 0)
	st, found, err := s.State(0, id)
	if err != nil || found || !reflect.DeepEqual(st, task.State{}) {
		t.Fatalf("missing State = %+v, %v, %v; want zero, false, nil", st, found, err)
	}
	want := task.State{
		Claims:      []task.Claim{{Index: 0, Start: 1, End: 2, Epoch: 3}, {Index: 1, Start: 4, End: 5}},
		Releases:    []task.Release{{Claim: 0, At: 2, Snooze: true, Until: 9, Reason: "later"}},
		Completion:  &task.Completion{Claim: 1, Seq: 4, At: 5},
		DepsDone:    []task.ID{task.MakeID(1, 1, 1)},
		RequeueBase: 1,
	}
	commit(t, s, func(b *store.Batch) error { return b.PutState(0, id, &want) })
	st, found, err = s.State(0, id)
	if err != nil || !found || !reflect.DeepEqual(st, want) {
		t.Errorf("State = %+v, %v, %v; want %+v", st, found, err, want)
	}
	if _, found, _ := s.State(1, id); found {
		t.Error("state visible in another partition")
	}
}

func TestUpdatesAndNextSeq(t *testing.T) {
	s := newTasksStore(t)
	id := task.MakeID(10, 1, 0)
	other := task.MakeID(11, 1, 0)
	type u struct {
		claim uint32
		seq   uint64
	}
	// Written out of order; 256 and 1<<40 check that seq sorts numerically.
	writes := []u{{1, 3}, {0, 0}, {1, 0}, {2, 256}, {1, 1}, {2, 1 << 40}, {2, 2}}
	commit(t, s, func(b *store.Batch) error {
		for _, w := range writes {
			if err := b.PutUpdate(7, id, w.claim, w.seq, fmt.Appendf(nil, "%d/%d", w.claim, w.seq)); err != nil {
				return err
			}
		}
		// Neighbours that must not show up.
		if err := b.PutUpdate(7, other, 0, 0, []byte("other")); err != nil {
			return err
		}
		return b.PutUpdate(8, id, 0, 1, []byte("other part"))
	})

	var got []u
	err := s.Updates(7, id, func(up task.Update) bool {
		if want := fmt.Sprintf("%d/%d", up.Claim, up.Seq); string(up.Data) != want {
			t.Errorf("update %d/%d data %q; want %q", up.Claim, up.Seq, up.Data, want)
		}
		got = append(got, u{up.Claim, up.Seq})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []u{{0, 0}, {1, 0}, {1, 1}, {1, 3}, {2, 2}, {2, 256}, {2, 1 << 40}}
	if !slices.Equal(got, want) {
		t.Errorf("Updates order = %v; want %v", got, want)
	}

	// fn returning false stops the walk.
	n := 0
	if err := s.Updates(7, id, func(task.Update) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Errorf("early stop: %d calls, %v; want 2", n, err)
	}

	for _, c := range []struct {
		part  uint16
		id    task.ID
		claim uint32
		want  uint64
	}{
		{7, id, 0, 1},
		{7, id, 1, 2}, // 0, 1, 3: the gap at 2 ends the visible history
		{7, id, 2, 0}, // no seq 0
		{7, id, 3, 0},
		{7, other, 0, 1},
		{8, id, 0, 0},
	} {
		if got, err := s.NextSeq(c.part, c.id, c.claim); err != nil || got != c.want {
			t.Errorf("NextSeq(%d, %v, %d) = %d, %v; want %d", c.part, c.id, c.claim, got, err, c.want)
		}
	}

	if v, err := s.Update(7, id, 1, 3); err != nil || string(v) != "1/3" {
		t.Errorf("Update(1, 3) = %q, %v", v, err)
	}
	if _, err := s.Update(7, id, 1, 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update(1, 2) = %v; want ErrNotFound", err)
	}

	// Filling the gap makes the history contiguous.
	commit(t, s, func(b *store.Batch) error { return b.PutUpdate(7, id, 1, 2, []byte("1/2")) })
	if got, err := s.NextSeq(7, id, 1); err != nil || got != 4 {
		t.Errorf("NextSeq after filling the gap = %d, %v; want 4", got, err)
	}
}

func TestDependents(t *testing.T) {
	s := newTasksStore(t)
	depA, depB := task.MakeID(1, 1, 0), task.MakeID(2, 1, 0)
	x, y, z := task.MakeID(10, 1, 0), task.MakeID(11, 1, 0), task.MakeID(12, 1, 0)
	commit(t, s, func(b *store.Batch) error {
		for _, e := range []struct {
			part           uint16
			dep, dependent task.ID
		}{{3, depA, y}, {3, depA, x}, {3, depB, z}, {4, depA, z}} {
			if err := b.PutEdge(e.part, e.dep, e.dependent); err != nil {
				return err
			}
		}
		return nil
	})
	list := func(part uint16, dep task.ID) []task.ID {
		var ids []task.ID
		if err := s.Dependents(part, dep, func(id task.ID) bool { ids = append(ids, id); return true }); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := list(3, depA); !slices.Equal(got, []task.ID{x, y}) {
		t.Errorf("Dependents(3, A) = %v; want [x y]", got)
	}
	if got := list(3, depB); !slices.Equal(got, []task.ID{z}) {
		t.Errorf("Dependents(3, B) = %v; want [z]", got)
	}
	if got := list(4, depA); !slices.Equal(got, []task.ID{z}) {
		t.Errorf("Dependents(4, A) = %v; want [z]", got)
	}
	if got := list(5, depA); len(got) != 0 {
		t.Errorf("Dependents(5, A) = %v; want none", got)
	}
}

func TestPromise(t *testing.T) {
	s := newTasksStore(t)
	if ep, cand, err := s.Promise(2); err != nil || ep != 0 || cand != 0 {
		t.Fatalf("no promise = %d, %d, %v; want 0, 0", ep, cand, err)
	}
	commit(t, s, func(b *store.Batch) error { return b.PutPromise(2, 5, 9) })
	if ep, cand, err := s.Promise(2); err != nil || ep != 5 || cand != 9 {
		t.Errorf("Promise = %d, %d, %v; want 5, 9", ep, cand, err)
	}
	commit(t, s, func(b *store.Batch) error { return b.PutPromise(2, 1<<63, 1) })
	if ep, cand, err := s.Promise(2); err != nil || ep != 1<<63 || cand != 1 {
		t.Errorf("Promise = %d, %d, %v; want 1<<63, 1", ep, cand, err)
	}
	if ep, cand, err := s.Promise(3); err != nil || ep != 0 || cand != 0 {
		t.Errorf("other partition Promise = %d, %d, %v; want 0, 0", ep, cand, err)
	}
}

type scanned struct {
	id    task.ID
	queue string
	state task.State
}

func scanAll(t *testing.T, s *store.Store, part uint16, from task.ID) []scanned {
	t.Helper()
	var out []scanned
	err := s.ScanPartition(part, from, func(rec store.TaskRecord) (bool, error) {
		if rec.PayloadApart {
			t.Errorf("scan of %v: a small payload reported apart", rec.Spec.ID)
		}
		out = append(out, scanned{rec.Spec.ID, rec.Spec.Queue, rec.State})
		return true, nil
	})
	if err != nil {
		t.Fatalf("ScanPartition(%d): %v", part, err)
	}
	return out
}

// scanDesc is scanAll backwards, below before.
func scanDesc(t *testing.T, s *store.Store, part uint16, before task.ID) []scanned {
	t.Helper()
	var out []scanned
	err := s.ScanPartitionDesc(part, before, func(rec store.TaskRecord) (bool, error) {
		out = append(out, scanned{rec.Spec.ID, rec.Spec.Queue, rec.State})
		return true, nil
	})
	if err != nil {
		t.Fatalf("ScanPartitionDesc(%d): %v", part, err)
	}
	return out
}

func TestScanPartition(t *testing.T) {
	s := newTasksStore(t)
	parts := []uint16{0, 1, 65535}
	want := map[uint16][]scanned{}
	commit(t, s, func(b *store.Batch) error {
		for _, part := range parts {
			// Ids written in reverse order; every other task has a state.
			for i := 9; i >= 0; i-- {
				id := task.MakeID(int64(1000+i), uint64(part), uint32(i))
				q := fmt.Sprintf("q%d", part)
				if err := b.PutSpec(part, &task.Spec{ID: id, Queue: q, Data: []byte("payload")}); err != nil {
					return err
				}
				var st task.State
				if i%2 == 0 {
					st = task.State{Claims: []task.Claim{{Index: 0, Start: int64(i), End: int64(i + 100)}}, RequeueBase: uint32(part)}
					if err := b.PutState(part, id, &st); err != nil {
						return err
					}
				}
				want[part] = append([]scanned{{id, q, st}}, want[part]...)
			}
		}
		// A state without a spec is skipped, not reported.
		orphan := task.MakeID(1003, 1, 99)
		return b.PutState(1, orphan, &task.State{RequeueBase: 77})
	})
	for _, part := range parts {
		got := scanAll(t, s, part, task.ID{})
		if !reflect.DeepEqual(got, want[part]) {
			t.Errorf("part %d: scan = %+v\nwant %+v", part, got, want[part])
		}
		// from is inclusive.
		from := want[part][4].id
		if got := scanAll(t, s, part, from); !reflect.DeepEqual(got, want[part][4:]) {
			t.Errorf("part %d from %v: scan = %+v\nwant %+v", part, from, got, want[part][4:])
		}
		// from between ids.
		between := task.MakeID(1004, uint64(part), 5)
		if got := scanAll(t, s, part, between); !reflect.DeepEqual(got, want[part][5:]) {
			t.Errorf("part %d from %v: got %d tasks; want %d", part, between, len(got), len(want[part][5:]))
		}
		// from past the last id.
		if got := scanAll(t, s, part, task.MakeID(1<<62, 0, 0)); len(got) != 0 {
			t.Errorf("part %d from the end: %d tasks; want none", part, len(got))
		}
	}
	for _, part := range []uint16{2, 65534} {
		if got := scanAll(t, s, part, task.ID{}); len(got) != 0 {
			t.Errorf("empty part %d: scan found %d tasks", part, len(got))
		}
		if got := scanDesc(t, s, part, task.ID{}); len(got) != 0 {
			t.Errorf("empty part %d: scan backwards found %d tasks", part, len(got))
		}
	}
	// Backwards: every task, newest first; before is exclusive.
	for _, part := range parts {
		rev := slices.Clone(want[part])
		slices.Reverse(rev)
		if got := scanDesc(t, s, part, task.ID{}); !reflect.DeepEqual(got, rev) {
			t.Errorf("part %d: scan backwards = %+v\nwant %+v", part, got, rev)
		}
		before := want[part][4].id
		if got := scanDesc(t, s, part, before); !reflect.DeepEqual(got, rev[6:]) {
			t.Errorf("part %d before %v: scan backwards = %+v\nwant %+v", part, before, got, rev[6:])
		}
		if got := scanDesc(t, s, part, task.MakeID(1, 0, 0)); len(got) != 0 {
			t.Errorf("part %d before the first id: %d tasks; want none", part, len(got))
		}
	}

	// fn returning false stops; an error from fn is returned.
	n := 0
	err := s.ScanPartition(0, task.ID{}, func(store.TaskRecord) (bool, error) { n++; return n < 3, nil })
	if err != nil || n != 3 {
		t.Errorf("early stop: %d calls, %v; want 3", n, err)
	}
	boom := errors.New("boom")
	err = s.ScanPartition(65535, task.ID{}, func(store.TaskRecord) (bool, error) { return true, boom })
	if !errors.Is(err, boom) {
		t.Errorf("ScanPartition with failing fn = %v; want boom", err)
	}
}

func TestApplyWaitVisibility(t *testing.T) {
	s := newTasksStore(t)
	id := task.MakeID(10, 1, 0)

	b := s.NewBatch()
	if !b.Empty() {
		t.Error("new batch not empty")
	}
	if err := b.PutSpec(0, &task.Spec{ID: id, Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if b.Empty() {
		t.Error("batch with a spec is empty")
	}
	// Not visible before Apply.
	if _, err := s.Spec(0, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Spec before Apply = %v; want ErrNotFound", err)
	}
	p, err := b.Apply()
	if err != nil {
		t.Fatal(err)
	}
	// Visible after Apply, before Wait.
	if _, err := s.Spec(0, id); err != nil {
		t.Errorf("Spec after Apply, before Wait: %v", err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}

	// A closed batch writes nothing.
	id2 := task.MakeID(11, 1, 0)
	b = s.NewBatch()
	if err := b.PutSpec(0, &task.Spec{ID: id2, Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := s.Spec(0, id2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Spec of a closed batch = %v; want ErrNotFound", err)
	}

	// Many concurrent Apply/Wait pairs: each write is visible after its
	// Apply and all are durable.
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id := task.MakeID(100+int64(i), 1, 0)
			b := s.NewBatch()
			if err := b.PutState(0, id, &task.State{RequeueBase: uint32(i)}); err != nil {
				b.Close()
				errs <- err
				return
			}
			p, err := b.Apply()
			if err != nil {
				errs <- err
				return
			}
			if st, found, err := s.State(0, id); err != nil || !found || st.RequeueBase != uint32(i) {
				errs <- fmt.Errorf("state %d after apply: %+v, %v, %v", i, st, found, err)
				_ = p.Wait()
				return
			}
			errs <- p.Wait()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestNodeMeta(t *testing.T) {
	s := newTasksStore(t)
	if _, err := s.NodeMeta(); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("NodeMeta on a new store = %v; want ErrNotFound", err)
	}
	want := store.NodeMeta{NodeID: 42, ClusterID: "c-1", CreatedAt: 1_700_000_000_000, ResetKey: []byte{1, 2, 3}}
	if err := s.PutNodeMeta(want); err != nil {
		t.Fatal(err)
	}
	if got, err := s.NodeMeta(); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("NodeMeta = %+v, %v; want %+v", got, err, want)
	}
}

// TestReopenKeepsData: everything a committed batch wrote is there after a
// close and reopen (docs/design.md, "What a user gets": restart-safe).
func TestReopenKeepsData(t *testing.T) {
	fs := vfs.NewMem()
	s := openTasksStore(t, fs)
	id := task.MakeID(10, 1, 0)
	sp := fullSpec(id)
	st := task.State{Claims: []task.Claim{{Index: 0, Start: 1, End: 2}}}
	commit(t, s, func(b *store.Batch) error {
		if err := b.PutSpec(9, sp); err != nil {
			return err
		}
		if err := b.PutState(9, id, &st); err != nil {
			return err
		}
		if err := b.PutUpdate(9, id, 0, 0, []byte("u")); err != nil {
			return err
		}
		return b.PutPromise(9, 3, 1)
	})
	if err := s.PutNodeMeta(store.NodeMeta{NodeID: 7}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTasksStore(t, fs)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	if got := scanAll(t, s, 9, task.ID{}); len(got) != 1 || got[0].id != id || !reflect.DeepEqual(got[0].state, st) {
		t.Errorf("after reopen: scan = %+v", got)
	}
	if d, err := s.Data(9, id); err != nil || string(d) != string(sp.Data) {
		t.Errorf("after reopen: Data = %q, %v", d, err)
	}
	if n, err := s.NextSeq(9, id, 0); err != nil || n != 1 {
		t.Errorf("after reopen: NextSeq = %d, %v; want 1", n, err)
	}
	if ep, cand, err := s.Promise(9); err != nil || ep != 3 || cand != 1 {
		t.Errorf("after reopen: Promise = %d, %d, %v", ep, cand, err)
	}
	if m, err := s.NodeMeta(); err != nil || m.NodeID != 7 {
		t.Errorf("after reopen: NodeMeta = %+v, %v", m, err)
	}
}

// TestWALHold: with a hold set, a lone writer's syncs are never held (a
// sync cycle of one commit gathers nothing to share the next sync with),
// while writers that commit together are: after a cycle of several
// commits the next sync waits the hold from the end of the one before.
// SetWALHold(0) turns holds off, and a negative interval is refused at
// Open.
func TestWALHold(t *testing.T) {
	const hold, writers = 40 * time.Millisecond, 8
	s, err := store.Open(store.Config{Dir: "/db", FS: vfs.NewMem(), WALMinSyncInterval: hold, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()

	for i := range 5 {
		commit(t, s, func(b *store.Batch) error { return b.PutPromise(0, uint64(i+1), 1) })
	}
	if syncs, held := s.WALSyncs(); syncs < 5 || held != 0 {
		t.Fatalf("5 commits one after another: %d syncs, %d held; want 5 or more, none held", syncs, held)
	}

	// together applies writers batches before waiting for any, as
	// concurrent requests do.
	together := func(round int) {
		t.Helper()
		pending := make([]*store.Pending, writers)
		for w := range writers {
			b := s.NewBatch()
			if err := b.PutPromise(uint16(w), uint64(100*round+w), 1); err != nil {
				t.Fatalf("put: %v", err)
			}
			p, err := b.Apply()
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			pending[w] = p
		}
		for _, p := range pending {
			if err := p.Wait(); err != nil {
				t.Fatalf("wait: %v", err)
			}
		}
	}
	// The log's flush goroutine may sync after each apply, so the first
	// rounds may see cycles of one commit; applies outpace it soon.
	for round := 1; ; round++ {
		_, heldBefore := s.WALSyncs()
		began := time.Now()
		together(round)
		if _, held := s.WALSyncs(); held > heldBefore {
			// A sync of this round was held: the next round's sync comes
			// the hold after it, so after began (a lower bound: the timer
			// cannot fire early).
			together(1000 + round)
			if took := time.Since(began); took < hold {
				t.Errorf("two rounds around a held sync took %v; want at least the hold, %v", took, hold)
			}
			break
		}
		if round == 50 {
			t.Fatalf("50 rounds of %d batches applied together: no sync held", writers)
		}
	}

	s.SetWALHold(0)
	together(2000) // a held sync may still be pending from the rounds above
	_, heldBefore := s.WALSyncs()
	for round := range 10 {
		together(3000 + round)
	}
	if _, held := s.WALSyncs(); held != heldBefore {
		t.Errorf("with the hold off, %d syncs were held", held-heldBefore)
	}

	if _, err := store.Open(store.Config{Dir: "/db2", FS: vfs.NewMem(), WALMinSyncInterval: -time.Millisecond}); err == nil {
		t.Error("a negative WAL min sync interval was accepted")
	}
}
