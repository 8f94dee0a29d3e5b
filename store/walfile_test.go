package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
)

// Reference: walfile.go, "Why the WAL is written ahead with zeros".

// testZeroFS is a zeroAheadFS on the real filesystem with steps small
// enough for a test to run many.
func testZeroFS(step, lowWater int64) *zeroAheadFS {
	fs := newZeroAheadFS(vfs.Default, slog.New(slog.DiscardHandler))
	fs.step, fs.lowWater, fs.gap = step, lowWater, 4<<10
	return fs
}

// writeLog writes n random bytes to f in writes of random sizes, syncing
// now and then as Pebble does, and returns what it wrote.
func writeLog(t *testing.T, f vfs.File, rng *rand.Rand, n int) []byte {
	t.Helper()
	want := make([]byte, 0, n)
	for len(want) < n {
		p := make([]byte, min(1+rng.IntN(9000), n-len(want)))
		for i := range p {
			p[i] = byte(1 + rng.IntN(255)) // never zero: a zeroed byte shows
		}
		want = append(want, p...)
		if _, err := f.Write(p); err != nil {
			t.Fatalf("write: %v", err)
		}
		if rng.IntN(4) == 0 {
			if err := f.Sync(); err != nil {
				t.Fatalf("sync: %v", err)
			}
		}
	}
	return want
}

// checkLog checks that the file at path holds want, then only zeros, and
// returns the file's size.
func checkLog(t *testing.T, path string, want []byte) int64 {
	t.Helper()
	got := readLog(t, path, want)
	if i := bytes.IndexFunc(got[len(want):], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d past the log's end is not zero", len(want)+i)
	}
	return int64(len(got))
}

// readLog checks that the file at path starts with want and returns it.
func readLog(t *testing.T, path string, want []byte) []byte {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(want) {
		t.Fatalf("file has %d bytes, the log wrote %d", len(got), len(want))
	}
	if i := firstDiff(got[:len(want)], want); i >= 0 {
		t.Fatalf("log byte %d is %#x, wrote %#x: a zeroing step wrote over the log", i, got[i], want[i])
	}
	return got
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func zf(t *testing.T, f vfs.File) *zeroAheadFile {
	t.Helper()
	z, ok := f.(*zeroAheadFile)
	if !ok {
		t.Fatalf("a log file on the OS filesystem is a %T, want *zeroAheadFile", f)
	}
	return z
}

// TestZeroAheadKeepsTheLog writes logs through files that zero ahead in
// small steps, new and reused, and checks that every byte the log wrote is
// there, that zeros and nothing else follow it, and that steps ran.
func TestZeroAheadKeepsTheLog(t *testing.T) {
	for _, tc := range []struct {
		name           string
		step, lowWater int64
		reuse          bool
	}{
		{"new file", 64 << 10, 32 << 10, false},
		{"steps smaller than writes", 4 << 10, 4 << 10, false},
		{"reused file", 64 << 10, 32 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := testZeroFS(tc.step, tc.lowWater)
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(uint64(tc.step), 7))
			path := filepath.Join(dir, "000002.log")
			f, err := fs.Create(path, walWriteCategory)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reuse {
				// An old log, longer than the new one will reach at first.
				writeLog(t, f, rng, 300<<10)
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				old := path
				path = filepath.Join(dir, "000009.log")
				if f, err = fs.ReuseForWrite(old, path, walWriteCategory); err != nil {
					t.Fatal(err)
				}
				if st, _ := f.Stat(); zf(t, f).zeroed != st.Size() {
					t.Fatalf("a reused log starts with %d bytes zeroed, want its size %d", zf(t, f).zeroed, st.Size())
				}
			}
			z := zf(t, f)
			want := writeLog(t, f, rng, 1<<20)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if z.stepsRun == 0 {
				t.Fatal("no zeroing step ran")
			}
			if !tc.reuse {
				// A reused file's old tail is the old log's bytes, not zeros.
				size := checkLog(t, path, want)
				if size < int64(len(want))+1 {
					t.Errorf("file size %d: no zeros ahead of a %d-byte log", size, len(want))
				}
			} else {
				readLog(t, path, want)
			}
		})
	}
}

// TestZeroAheadWriteWaitsForStep holds a step before it writes and checks
// that a Write short of the step's range goes ahead while one reaching it
// waits until the step is done.
func TestZeroAheadWriteWaitsForStep(t *testing.T) {
	fs := testZeroFS(64<<10, 64<<10)
	release, started := make(chan struct{}), make(chan struct{}, 1)
	fs.beforeStep = func() {
		started <- struct{}{}
		<-release
	}
	path := filepath.Join(t.TempDir(), "000002.log")
	f, err := fs.Create(path, walWriteCategory)
	if err != nil {
		t.Fatal(err)
	}
	z := zf(t, f)
	// The first write of a new file starts a step a gap past its end.
	want := bytes.Repeat([]byte{0xab}, 1000)
	if _, err := f.Write(bytes.Clone(want)); err != nil {
		t.Fatal(err)
	}
	<-started
	z.mu.Lock()
	from := z.from
	z.mu.Unlock()
	if from != 1000+fs.gap {
		t.Fatalf("the step starts at %d, want the log's end 1000 plus the gap %d", from, fs.gap)
	}
	// The log writes on in the gap while the step runs...
	short := bytes.Repeat([]byte{0xbc}, int(fs.gap))
	if _, err := f.Write(bytes.Clone(short)); err != nil {
		t.Fatal(err)
	}
	want = append(want, short...)
	// ...and a write into the step's range waits for it.
	next := bytes.Repeat([]byte{0xcd}, 5000)
	done := make(chan error)
	go func() {
		_, err := f.Write(bytes.Clone(next))
		done <- err
	}()
	select {
	case <-done:
		t.Fatal("a write into a step's range did not wait for the step")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want = append(want, next...)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	checkLog(t, path, want)
}

// TestZeroAheadOwnDescriptor checks that steps write and sync through an
// open file of their own: a failed write-back is reported once per open
// file, and a step's sync must not take the report the log's sync needs.
func TestZeroAheadOwnDescriptor(t *testing.T) {
	fs := testZeroFS(64<<10, 64<<10)
	path := filepath.Join(t.TempDir(), "000002.log")
	f, err := fs.Create(path, walWriteCategory)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zf(t, f)
	if z.zf.Fd() == f.Fd() {
		t.Fatal("steps use the log's descriptor")
	}
	var a, b syscall.Stat_t
	if err := syscall.Fstat(int(z.zf.Fd()), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(path, &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		t.Fatal("the steps' descriptor is not of the log's file")
	}
}

// TestZeroAheadStepFails checks that a failing step stops the zeroing and
// leaves the log working.
func TestZeroAheadStepFails(t *testing.T) {
	fs := testZeroFS(4<<10, 4<<10)
	fs.failStep = errors.New("injected")
	path := filepath.Join(t.TempDir(), "000002.log")
	f, err := fs.Create(path, walWriteCategory)
	if err != nil {
		t.Fatal(err)
	}
	z := zf(t, f)
	want := writeLog(t, f, rand.New(rand.NewPCG(3, 4)), 200<<10)
	if err := f.Sync(); err != nil {
		t.Fatalf("the log's sync after a failed step: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !z.stopped || z.stepsRun != 0 {
		t.Fatalf("after failing steps: stopped %v, steps run %d", z.stopped, z.stepsRun)
	}
	if size := checkLog(t, path, want); size != int64(len(want)) {
		t.Fatalf("file size %d, the log wrote %d: something was zeroed", size, len(want))
	}
}

// TestZeroAheadLeavesOtherFiles checks that only log files are wrapped.
func TestZeroAheadLeavesOtherFiles(t *testing.T) {
	fs := testZeroFS(walZeroStep, walZeroLowWater)
	dir := t.TempDir()
	f, err := fs.Create(filepath.Join(dir, "000005.sst"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*zeroAheadFile); ok {
		t.Error("a table file zeroes ahead")
	}
	_ = f.Close()
}

// TestStoreLogZeroedAndReplayed runs a store on the real filesystem with
// memtables small enough that its logs rotate, and Pebble reuses old log
// files, many times. Its logs get zeros ahead (so Pebble still creates
// logs with the category zeroAheadFS looks for); a copy of the data dir
// taken while the store runs, as a crash would leave it, opens with every
// synced write; so does the data dir itself after a clean close.
func TestStoreLogZeroedAndReplayed(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig(dir)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.MemTableBytes = 256 << 10
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const tasks = 4000
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 300) }
	ids := make([]task.ID, tasks)
	for i := range ids {
		ids[i] = task.MakeID(1_700_000_000_000+int64(i), 1, 1)
		b := s.NewBatch()
		if err := b.PutSpec(3, &task.Spec{ID: ids[i], Queue: "q", Data: payload(i)}); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// A step starts with a new log's first write; wait for one to end.
	testkit.WaitEvery(t, 10*time.Second, 10*time.Millisecond, func() error {
		if logName, logSize := newestLog(t, dir); logSize < walZeroStep {
			return fmt.Errorf("the newest log %s has %d bytes: no zeros written ahead of it", logName, logSize)
		}
		return nil
	})

	check := func(what string, s *Store) {
		t.Helper()
		for i, id := range ids {
			sp, err := s.FullSpec(3, id)
			if err != nil {
				t.Fatalf("%s: task %d of %d: %v", what, i, tasks, err)
			}
			if !bytes.Equal(sp.Data, payload(i)) {
				t.Fatalf("%s: task %d: payload changed", what, i)
			}
		}
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ what, dir string }{{"after a crash", crashed}, {"after a clean close", dir}} {
		c := DefaultConfig(d.dir)
		c.Logger, c.MemTableBytes = cfg.Logger, cfg.MemTableBytes
		s2, err := Open(c)
		if err != nil {
			t.Fatalf("open the data dir %s: %v", d.what, err)
		}
		check(d.what, s2)
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func newestLog(t *testing.T, dir string) (string, int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") && e.Name() > name {
			name = e.Name()
		}
	}
	if name == "" {
		t.Fatalf("no log in %s", dir)
	}
	st, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return name, st.Size()
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		_ = src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreNoWALZeroAhead checks that Config.NoWALZeroAhead leaves the
// log as Pebble writes it.
func TestStoreNoWALZeroAhead(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig(dir)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.NoWALZeroAhead = true
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 200 {
		b := s.NewBatch()
		if err := b.PutSpec(1, &task.Spec{ID: task.MakeID(1_700_000_000_000+int64(i), 1, 1), Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // time for a step, were one started
	if name, size := newestLog(t, dir); size >= walZeroGap {
		t.Fatalf("log %s has %d bytes with zeroing off", name, size)
	}
}

// TestZeroAheadThroughCrashFS checks that on CrashFS a step's zeros and
// sync go through CrashFS, on the log's own record: after a crash the file
// holds what the log wrote before the step's sync and the zeros synced
// ahead of it, and a log write over those zeros, not synced since, is
// zeros again.
func TestZeroAheadThroughCrashFS(t *testing.T) {
	cfs := NewCrashFS(vfs.Default)
	fs := newZeroAheadFS(cfs, slog.New(slog.DiscardHandler))
	fs.step, fs.lowWater, fs.gap = 16<<10, 8<<10, 4<<10
	logged := make(chan struct{})
	fs.beforeStep = func() { <-logged } // the step syncs after the first write
	path := filepath.Join(t.TempDir(), "000002.log")
	f, err := fs.Create(path, walWriteCategory)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var release sync.Once
	letStep := func() { release.Do(func() { close(logged) }) }
	defer letStep() // before Close, which waits for the step
	z := zf(t, f)
	first := bytes.Repeat([]byte{0xab}, 1000)
	if _, err := f.Write(bytes.Clone(first)); err != nil { // starts a step a gap past it
		t.Fatal(err)
	}
	letStep()
	z.mu.Lock()
	for z.busy {
		z.idle.Wait()
	}
	steps, zeroed := z.stepsRun, z.zeroed
	z.mu.Unlock()
	if steps != 1 || zeroed != int64(len(first))+fs.gap+fs.step {
		t.Fatalf("after the first step: %d steps, zeroed to %d", steps, zeroed)
	}
	// Over the hole and the zeros, short of the low water: no step.
	if _, err := f.Write(bytes.Repeat([]byte{0xcd}, 2*int(fs.gap))); err != nil {
		t.Fatal(err)
	}
	if err := cfs.Crash(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(first), make([]byte, zeroed-int64(len(first)))...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after the crash: %d bytes, first diff at %d; want the first write then zeros to %d", len(got), firstDiff(got[:min(len(got), len(want))], want), zeroed)
	}
}
