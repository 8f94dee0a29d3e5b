package store_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// TestHints: hints survive a reopen, list in id order, and are gone once
// deleted; they touch no task record.
func TestHints(t *testing.T) {
	fs := vfs.NewMem()
	s := openTasksStore(t, fs)
	a := &task.Spec{ID: task.MakeID(1000, 1, 2), Queue: "q", Data: []byte("a"), Key: "k"}
	b := &task.Spec{ID: task.MakeID(1000, 1, 1), Queue: "q", Data: []byte("b")}
	if err := s.PutHints([]store.Hint{{Spec: a, W: 2, At: 5}, {Spec: b, At: 6}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTasksStore(t, fs)
	defer s.Close()
	list := func() []store.Hint {
		var out []store.Hint
		if err := s.Hints(func(h store.Hint) bool { out = append(out, h); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	hs := list()
	if len(hs) != 2 || hs[0].Spec.ID != b.ID || hs[1].Spec.ID != a.ID || hs[1].W != 2 || hs[1].At != 5 ||
		string(hs[1].Spec.Data) != "a" || hs[1].Spec.Key != "k" {
		t.Fatalf("hints after a reopen: %+v", hs)
	}
	if _, err := s.Spec(0, a.ID); err == nil {
		t.Fatal("a hint wrote a task record")
	}
	if err := s.DeleteHints([]task.ID{b.ID}); err != nil {
		t.Fatal(err)
	}
	if hs := list(); len(hs) != 1 || hs[0].Spec.ID != a.ID {
		t.Fatalf("hints after a delete: %+v", hs)
	}
	if err := s.PutHints([]store.Hint{{}}); err == nil {
		t.Fatal("a hint without a task was stored")
	}
}
