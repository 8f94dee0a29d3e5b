package store_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// TestCrashFSForgetsUnsynced: after Crash, every file holds what its last
// sync left: appends after it are cut off, synced bytes overwritten since
// are restored, a file never synced is empty, and writes fail.
func TestCrashFSForgetsUnsynced(t *testing.T) {
	dir := t.TempDir()
	fs := store.NewCrashFS(vfs.Default)
	path := func(n string) string { return filepath.Join(dir, n) }

	a, err := fs.Create(path("a"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, a, "synced-")
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, a, "lost")

	// A reused file: its old content is synced; overwrite part of it and
	// append past it.
	if err := os.WriteFile(path("old"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReuseForWrite(path("old"), path("b"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, b, "abc")
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, b, "DEFGHIJKLMNOP") // over 3456789 and past the end
	if _, err := b.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}

	c, err := fs.Create(path("c"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, c, "never synced")

	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "synced-", "b": "abc3456789", "c": ""} {
		got, err := os.ReadFile(path(name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s after crash: %q; want %q", name, got, want)
		}
	}
	if _, err := a.Write([]byte("after")); err == nil {
		t.Error("a write after the crash succeeded")
	}
	if _, err := fs.Create(path("d"), vfs.WriteCategoryUnspecified); err == nil {
		t.Error("a create after the crash succeeded")
	}
}

func mustWrite(t *testing.T, f vfs.File, s string) {
	t.Helper()
	if _, err := f.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// TestCrashFSStoreKeepsAcknowledged: a store on a CrashFS that crashes
// keeps every write whose sync was waited on (what a node acknowledges),
// whatever was still unsynced.
func TestCrashFSStoreKeepsAcknowledged(t *testing.T) {
	dir := t.TempDir()
	fs := store.NewCrashFS(vfs.Default)
	s, err := store.Open(store.Config{Dir: dir, FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var acked []task.ID
	for i := range 200 {
		sp := &task.Spec{ID: task.ID{byte(i), byte(i >> 8), 1}, Queue: "q", MaxAttempts: 1, Data: []byte("payload")}
		b := s.NewBatch()
		if err := b.PutSpec(0, sp); err != nil {
			t.Fatal(err)
		}
		p, err := b.Apply()
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			continue // applied, never waited on: may be lost
		}
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, sp.ID)
	}
	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // fails: writes are refused; it releases the lock
	s, err = store.Open(store.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer s.Close()
	for _, id := range acked {
		if _, err := s.FullSpec(0, id); err != nil {
			t.Fatalf("acknowledged task %s after the crash: %v", id, err)
		}
	}
}
