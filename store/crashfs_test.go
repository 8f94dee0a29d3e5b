package store_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// TestCrashFSForgetsUnsynced: after Crash, every file holds what its last
// sync left: appends after it are cut off, synced bytes overwritten since
// are restored, a file never synced is empty, and writes fail once
// refused (TestCrashFSHaltsAfterCrash: until then they halt).
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
	fs.RefuseAfterCrash()
	if _, err := a.Write([]byte("after")); err == nil {
		t.Error("a write after the crash succeeded")
	}
	if _, err := fs.Create(path("d"), vfs.WriteCategoryUnspecified); err == nil {
		t.Error("a create after the crash succeeded")
	}
}

// TestCrashFSHaltsAfterCrash: after Crash, every write, sync and change
// of metadata halts, a power cut: none returns, with an error or without
// (an error is what made Pebble exit 70, or panic, before the crash
// hook's exit 137), and none changes the disk; a sync in progress at the
// cut halts when it ends and makes nothing durable. RefuseAfterCrash then
// fails them all. In a synctest bubble, so that synctest.Wait proves each
// one durably blocked, not merely slow.
func TestCrashFSHaltsAfterCrash(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	synctest.Test(t, func(t *testing.T) {
		base := &heldSyncFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
		fs := store.NewCrashFS(base)
		a, err := fs.Create(path("a"), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		mustWrite(t, a, "synced")
		mustSync(t, a)
		mustWrite(t, a, "-lost")
		a2, err := fs.OpenReadWrite(path("a"), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Close()
		if err := fs.MkdirAll(path("sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		// b's sync is in progress at the cut.
		b, err := fs.Create(path("b"), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		mustWrite(t, b, "written before its sync began")
		type result struct {
			op  string
			err error
		}
		returned := make(chan result, 20)
		run := func(op string, f func() error) {
			go func() { returned <- result{op, f()} }()
		}
		base.hold.Store(true)
		run("a sync in progress at the cut", b.Sync)
		<-base.entered

		if err := fs.Crash(); err != nil {
			t.Fatal(err)
		}
		base.release <- struct{}{} // the sync under it ends, after the cut
		ops := map[string]func() error{
			"Write":         func() error { _, err := a.Write([]byte("x")); return err },
			"WriteAt":       func() error { _, err := a2.WriteAt([]byte("y"), 0); return err },
			"Sync":          a.Sync,
			"SyncData":      a2.SyncData,
			"SyncTo":        func() error { _, err := a.SyncTo(1); return err },
			"Preallocate":   func() error { return a.Preallocate(0, 1<<20) },
			"Create":        func() error { _, err := fs.Create(path("new"), vfs.WriteCategoryUnspecified); return err },
			"OpenReadWrite": func() error { _, err := fs.OpenReadWrite(path("a"), vfs.WriteCategoryUnspecified); return err },
			"ReuseForWrite": func() error {
				_, err := fs.ReuseForWrite(path("a"), path("reused"), vfs.WriteCategoryUnspecified)
				return err
			},
			"Rename":    func() error { return fs.Rename(path("a"), path("renamed")) },
			"Remove":    func() error { return fs.Remove(path("a")) },
			"RemoveAll": func() error { return fs.RemoveAll(path("sub")) },
			"MkdirAll":  func() error { return fs.MkdirAll(path("newdir"), 0o755) },
			"Link":      func() error { return fs.Link(path("a"), path("linked")) },
		}
		for op, f := range ops {
			run(op, f)
		}
		synctest.Wait() // every goroutine of the bubble but this one durably blocked
		var early []string
		for len(returned) > 0 {
			r := <-returned
			early = append(early, r.op+" ("+errString(r.err)+")")
		}
		if len(early) > 0 {
			slices.Sort(early)
			t.Errorf("returned after the crash, where a power cut makes no progress: %s", strings.Join(early, ", "))
		}
		checkDisk := func(when string) {
			t.Helper()
			for name, want := range map[string]string{"a": "synced", "b": ""} {
				got, err := os.ReadFile(path(name))
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if string(got) != want {
					t.Errorf("%s: %s holds %q; want %q", when, name, got, want)
				}
			}
			for _, name := range []string{"new", "reused", "renamed", "linked", "newdir"} {
				if _, err := os.Stat(path(name)); err == nil {
					t.Errorf("%s: %s exists, made after the cut", when, name)
				}
			}
			if _, err := os.Stat(path("sub")); err != nil {
				t.Errorf("%s: sub, made before the cut: %v", when, err)
			}
		}
		checkDisk("while halted")

		fs.RefuseAfterCrash()
		for range len(ops) + 1 - len(early) {
			if r := <-returned; r.err == nil {
				t.Errorf("%s succeeded once refused", r.op)
			}
		}
		checkDisk("once refused")
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
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
	// The store did nothing since its last wait: refused, its writes fail
	// rather than halt, so that it closes.
	fs.RefuseAfterCrash()
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

// TestCrashFSSharesFileAcrossHandles: every handle open on a path shares
// one record of what is synced, as Linux keeps one page cache per file. It
// is what the log zeroing (walfile.go) does on the fault suite's nodes: a
// log written through one handle, zeros written and synced ahead of it
// through another.
func TestCrashFSSharesFileAcrossHandles(t *testing.T) {
	const zeros = 16 // bytes of zeros a step writes, a gap past the log
	zero := strings.Repeat("\x00", zeros)
	for _, tc := range []struct {
		name string
		// run writes through fs in dir, log being the log's handle of
		// dir/log and step a second handle of the same file.
		run  func(t *testing.T, fs *store.CrashFS, dir string, log, step vfs.File)
		want string // the log file after the crash
	}{
		{
			name: "synced through the other handle",
			run: func(t *testing.T, _ *store.CrashFS, _ string, log, step vfs.File) {
				mustWrite(t, log, "acked")
				mustSync(t, step)
				mustWrite(t, log, "-lost")
			},
			want: "acked",
		},
		{
			name: "zeros synced ahead past a hole",
			run: func(t *testing.T, _ *store.CrashFS, _ string, log, step vfs.File) {
				mustWrite(t, log, "log")
				mustWriteAt(t, step, zero, 8) // a hole at 3..8
				mustSync(t, step)
			},
			want: "log\x00\x00\x00\x00\x00" + zero,
		},
		{
			name: "unsynced log over synced zeros reverts to zeros",
			run: func(t *testing.T, _ *store.CrashFS, _ string, log, step vfs.File) {
				mustWriteAt(t, step, zero, 0)
				mustSync(t, step)
				mustWrite(t, log, "acked")
				mustSync(t, log)
				mustWrite(t, log, "-lost-lost") // over the zeros, unsynced
			},
			want: "acked" + zero[5:],
		},
		{
			name: "unsynced log into a synced hole reverts to zeros",
			run: func(t *testing.T, _ *store.CrashFS, _ string, log, step vfs.File) {
				mustWrite(t, log, "ab")
				mustWriteAt(t, step, zero, 8)
				mustSync(t, step)
				mustWrite(t, log, "cdefgh") // 2..8: the hole
				mustWriteAt(t, step, "zz", 30)
			},
			want: "ab\x00\x00\x00\x00\x00\x00" + zero,
		},
		{
			name: "log synced over zeros synced ahead",
			run: func(t *testing.T, _ *store.CrashFS, _ string, log, step vfs.File) {
				mustWriteAt(t, step, zero, 0)
				mustSync(t, step)
				mustWrite(t, log, "acked")
				mustSync(t, step) // the step's sync flushes the log's write
				mustWrite(t, log, "xx")
			},
			want: "acked" + zero[5:],
		},
		{
			name: "renamed while open",
			run: func(t *testing.T, fs *store.CrashFS, dir string, log, step vfs.File) {
				mustWrite(t, log, "before")
				if err := fs.Rename(filepath.Join(dir, "log"), filepath.Join(dir, "moved")); err != nil {
					t.Fatal(err)
				}
				mustWrite(t, log, "-after")
				third, err := fs.OpenReadWrite(filepath.Join(dir, "moved"), vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				defer third.Close()
				mustSync(t, third)
				mustWrite(t, log, "-lost")
				if err := fs.Rename(filepath.Join(dir, "moved"), filepath.Join(dir, "log")); err != nil {
					t.Fatal(err)
				}
			},
			want: "before-after",
		},
		{
			name: "reused while open",
			run: func(t *testing.T, fs *store.CrashFS, dir string, log, step vfs.File) {
				mustWrite(t, log, "old-log-")
				mustSync(t, log)
				mustWrite(t, log, "lost")
				reused, err := fs.ReuseForWrite(filepath.Join(dir, "log"), filepath.Join(dir, "new"), vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				defer reused.Close()
				mustWrite(t, reused, "NEW") // over synced bytes: reverts
				if err := fs.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "log")); err != nil {
					t.Fatal(err)
				}
			},
			want: "old-log-",
		},
		{
			name: "removed and created again",
			run: func(t *testing.T, fs *store.CrashFS, dir string, log, step vfs.File) {
				mustWrite(t, log, "gone")
				mustSync(t, step)
				if err := fs.Remove(filepath.Join(dir, "log")); err != nil {
					t.Fatal(err)
				}
				again, err := fs.Create(filepath.Join(dir, "log"), vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				defer again.Close()
				mustWrite(t, again, "new")
				mustSync(t, again)
				mustWrite(t, log, "to the removed file, not restored over the new one")
			},
			want: "new",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := store.NewCrashFS(vfs.Default)
			log, err := fs.Create(filepath.Join(dir, "log"), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			step, err := fs.OpenReadWrite(filepath.Join(dir, "log"), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			defer step.Close()
			tc.run(t, fs, dir, log, step)
			if err := fs.Crash(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "log"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("after the crash: %q; want %q", got, tc.want)
			}
			fs.RefuseAfterCrash()
			if err := step.Sync(); err == nil {
				t.Error("a sync after the crash succeeded")
			}
		})
	}
}

// TestCrashFSWriteDuringSync: a sync makes durable what was written before
// it began, not what another handle writes while it runs (Linux makes no
// promise for those).
func TestCrashFSWriteDuringSync(t *testing.T) {
	dir := t.TempDir()
	base := &heldSyncFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	fs := store.NewCrashFS(base)
	path := filepath.Join(dir, "log")
	log, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	step, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	mustWriteAt(t, step, "0000000000", 0)
	mustSync(t, step) // zeros synced ahead
	mustWrite(t, log, "abc")
	base.hold.Store(true)
	done := make(chan error)
	go func() { done <- step.Sync() }()
	<-base.entered                         // the sync has begun...
	mustWrite(t, log, "def")               // ...and the log writes over more zeros meanwhile
	mustWriteAt(t, step, "0000000000", 10) // and the step past the end
	base.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "abc0000000"; string(got) != want {
		t.Errorf("after the crash: %q; want %q", got, want)
	}
}

// heldSyncFS is the OS filesystem whose next sync, once hold is set, is
// held: it signals entered and waits for release before it syncs.
type heldSyncFS struct {
	vfs.FS
	hold             atomic.Bool
	entered, release chan struct{}
}

func (fs *heldSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return &heldSyncFile{File: f, fs: fs}, err
}

func (fs *heldSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return &heldSyncFile{File: f, fs: fs}, err
}

type heldSyncFile struct {
	vfs.File
	fs *heldSyncFS
}

func (f *heldSyncFile) Sync() error {
	if f.fs.hold.CompareAndSwap(true, false) {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
	return f.File.Sync()
}

func mustWriteAt(t *testing.T, f vfs.File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func mustSync(t *testing.T, f vfs.File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
