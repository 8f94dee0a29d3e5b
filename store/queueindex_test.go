package store

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/task"
)

// TestQueueIndex: a listing of one queue's tasks through the index is the
// partition's scan filtered by queue, forward and backward, from any
// cursor; a deleted task leaves it, a dropped partition empties it, and a
// database of layout 3 (no index) gets it at Open. Every spec has exactly
// one index key.
func TestQueueIndex(t *testing.T) {
	fs := vfs.NewMem()
	s := openLayoutStore(t, fs)
	queues := []string{"a", "b", "a-longer-name", ""}
	var ids []task.ID
	b := s.NewBatch()
	for i := range 600 {
		sp := layoutSpec(task.MakeID(1_700_000_000_000+int64(i), 1, 1), 10)
		if i%97 == 0 {
			sp.Data = make([]byte, inlinePayloadMax+5) // apart
		}
		sp.Queue = queues[i%len(queues)]
		if err := b.PutSpec(uint16(i%3), sp); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := b.PutSpec(uint16(i%3), sp); err != nil { // a rewrite
				t.Fatal(err)
			}
		}
		ids = append(ids, sp.ID)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// Delete some: they leave the index.
	b = s.NewBatch()
	for i := 0; i < len(ids); i += 11 {
		if err := b.DeleteTask(uint16(i%3), ids[i], queues[i%len(queues)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	check := func(stage string) {
		t.Helper()
		specs, index := countKeys(t, s, kindSpec), countKeys(t, s, kindQueue)
		if specs != index {
			t.Fatalf("%s: %d specs, %d index keys; want one each", stage, specs, index)
		}
		for part := range uint16(3) {
			for _, q := range queues {
				var want []task.ID
				if err := s.ScanPartition(part, task.ID{}, func(r TaskRecord) (bool, error) {
					if r.Spec.Queue == q {
						want = append(want, r.Spec.ID)
					}
					return true, nil
				}); err != nil {
					t.Fatal(err)
				}
				scan := func(after task.ID, desc bool) []task.ID {
					var got []task.ID
					if err := s.ScanQueue(part, q, after, desc, func(r TaskRecord) (bool, error) {
						if r.Spec.Queue != q || r.PayloadApart && len(r.Spec.Data) != 0 {
							t.Fatalf("%s: task %s of queue %q in queue %q's index", stage, r.Spec.ID, r.Spec.Queue, q)
						}
						got = append(got, r.Spec.ID)
						return true, nil
					}); err != nil {
						t.Fatal(err)
					}
					return got
				}
				if got := scan(task.ID{}, false); !slices.Equal(got, want) {
					t.Fatalf("%s: part %d queue %q: %d tasks through the index, %d in the scan", stage, part, q, len(got), len(want))
				}
				if len(want) < 3 {
					continue
				}
				mid := want[len(want)/2]
				if got := scan(mid, false); !slices.Equal(got, want[len(want)/2+1:]) {
					t.Fatalf("%s: part %d queue %q after the cursor: %d tasks", stage, part, q, len(got))
				}
				rev := slices.Clone(want[:len(want)/2])
				slices.Reverse(rev)
				if got := scan(mid, true); !slices.Equal(got, rev) {
					t.Fatalf("%s: part %d queue %q before the cursor, descending: %d tasks", stage, part, q, len(got))
				}
			}
		}
	}
	check("written")

	// A layout 3 database: no index. Open builds it.
	toLayout3(t, s)
	s = openLayoutStore(t, fs)
	defer s.Close()
	if v := rawValue(t, s, layoutKey); len(v) != 1 || v[0] != layoutVersion || layoutVersion != 4 {
		t.Fatalf("layout %v after Open; want [4]", v)
	}
	check("upgraded from layout 3")

	if err := s.DropPartition(1); err != nil {
		t.Fatal(err)
	}
	check("partition 1 dropped")
	if n := countRange(t, s, queuePrefix(1, "a")); n != 0 {
		t.Fatalf("%d index keys of a dropped partition", n)
	}
}

// toLayout3 makes s a database of layout 3, as a build from before the
// queue index left it (no index, its layout mark), and closes it.
func toLayout3(t *testing.T, s *Store) {
	t.Helper()
	if err := s.db.DeleteRange([]byte{kindQueue}, []byte{kindQueue + 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(layoutKey, []byte{3}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// countKeys counts the keys of kind.
func countKeys(t *testing.T, s *Store, kind byte) int {
	return countRange(t, s, []byte{kind})
}

// countRange counts the keys with prefix p.
func countRange(t *testing.T, s *Store, p []byte) int {
	t.Helper()
	n := 0
	if err := s.scan(p, prefixEnd(p), func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQueueIndexUpgradeCrash: a power cut in the middle of the index's
// build (after one or two of its unsynced batches) leaves the data dir at
// layout 3, as it was; the next Open builds the whole index. The layout
// mark is written synced after the last batch, so the index is durable
// before the mark says it is there.
func TestQueueIndexUpgradeCrash(t *testing.T) {
	const tasks = 3*upgradeBatchTasks + 7
	for _, cutAfter := range []int{1, 2} {
		dir := t.TempDir()
		s, err := Open(Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		b := s.NewBatch()
		for i := range tasks {
			sp := layoutSpec(task.MakeID(1_700_000_000_000+int64(i), 1, 1), 10)
			sp.Queue = []string{"a", "b"}[i%2]
			if err := b.PutSpec(uint16(i%4), sp); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		toLayout3(t, s)

		fs := NewCrashFS(vfs.Default)
		batches := 0
		upgradeBatchHook = func() error {
			if batches++; batches < cutAfter {
				return nil
			}
			if err := fs.Crash(); err != nil {
				return err
			}
			fs.RefuseAfterCrash()
			return errors.New("power cut")
		}
		_, err = Open(Config{Dir: dir, FS: fs, Logger: slog.New(slog.DiscardHandler)})
		upgradeBatchHook = nil
		if err == nil || batches != cutAfter {
			t.Fatalf("cut after batch %d: Open %v after %d batches; want the cut", cutAfter, err, batches)
		}

		// The reopen finds layout 3 (the cut kept nothing of the build
		// marked) and builds the whole index again.
		rebuilt := 0
		upgradeBatchHook = func() error { rebuilt++; return nil }
		s, err = Open(Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		upgradeBatchHook = nil
		if err != nil {
			t.Fatalf("cut after batch %d: reopen: %v", cutAfter, err)
		}
		if rebuilt != tasks/upgradeBatchTasks {
			t.Fatalf("cut after batch %d: the reopen built %d batches; want the whole index, %d", cutAfter, rebuilt, tasks/upgradeBatchTasks)
		}
		if v := rawValue(t, s, layoutKey); len(v) != 1 || v[0] != layoutVersion {
			t.Fatalf("cut after batch %d: layout %v after the reopen; want [%d]", cutAfter, v, layoutVersion)
		}
		if specs, index := countKeys(t, s, kindSpec), countKeys(t, s, kindQueue); specs != tasks || index != tasks {
			t.Fatalf("cut after batch %d: %d specs, %d index keys; want %d each", cutAfter, specs, index, tasks)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
