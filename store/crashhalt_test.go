package store

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/task"
)

// Reference: crashfs.go (Crash: nothing returns after the cut) and
// store.go (pebbleLogger.Fatalf).

// TestPebbleFatalfHaltsAfterCrash: on a CrashFS whose power was cut,
// Pebble's Fatalf never gets to its exit (70), which would end a crashed
// node with a status of its own before the crash hook's 137; before the
// cut it exits, and once refused (a test closing its crashed store) it
// exits again.
func TestPebbleFatalfHaltsAfterCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exited := make(chan int, 1)
		defer func(exit func(int)) { fatalExit = exit }(fatalExit)
		fatalExit = func(code int) { exited <- code }
		fs := NewCrashFS(vfs.Default)
		p := newPebbleLogger(slog.New(slog.DiscardHandler), fs)
		if p.crash != fs {
			t.Fatal("the logger of a store on a CrashFS does not know it")
		}

		p.Fatalf("before the cut: %s", "exits")
		if code := <-exited; code != 70 {
			t.Fatalf("before the cut: exit %d; want 70", code)
		}

		if err := fs.Crash(); err != nil {
			t.Fatal(err)
		}
		returned := make(chan struct{})
		go func() {
			p.Fatalf("MANIFEST sync failed: %v", errCrashed)
			close(returned)
		}()
		synctest.Wait() // the Fatalf goroutine durably blocked, or done
		select {
		case code := <-exited:
			t.Fatalf("after the cut, Fatalf exited %d: the crash would fall back", code)
		default:
		}

		fs.RefuseAfterCrash()
		<-returned
		if code := <-exited; code != 70 {
			t.Fatalf("once refused: exit %d; want 70", code)
		}
	})
}

// crashChildEnv names the data dir of TestCrashUnderLoadExits137's child.
const crashChildEnv = "SKULDD_STORE_CRASH_CHILD_DIR"

// TestCrashUnderLoadExits137 crashes a store under write load, in a child
// process, as the fault suite's crash hook does (Crash, then exit 137): the
// child exits 137, not with Pebble's fatal error (70) or a panic over a
// write the crashed disk failed. The child exits once Pebble has met the
// cut (an operation halted). On a CrashFS that fails what comes after the
// cut, as it once did, the child nearly always exits first on its own:
// Pebble panics on its next log write (exit 2) or calls Fatalf on a failed
// MANIFEST write (70); TestCrashFSHaltsAfterCrash and
// TestPebbleFatalfHaltsAfterCrash are the deterministic checks.
func TestCrashUnderLoadExits137(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashUnderLoadExits137$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 137 {
		t.Fatalf("the crashed child exited %d (%v), not the crash's 137:\n%s", code, err, out)
	}
}

// crashChild runs the store, crashes it under load, and exits 137 once
// Pebble has met the cut. It never returns.
func crashChild(dir string) {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "crash child: "+format+"\n", args...)
		os.Exit(3)
	}
	fs := NewCrashFS(vfs.Default)
	s, err := Open(Config{Dir: dir, FS: fs, MemTableBytes: 256 << 10, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fail("open: %v", err)
	}
	const writers, before = 4, 100 // batches each writer waits on before the cut
	ready := make(chan struct{}, writers)
	for w := range writers {
		go func() {
			for i := 0; ; i++ {
				if i == before {
					ready <- struct{}{}
				}
				b := s.NewBatch()
				sp := &task.Spec{ID: task.MakeID(1_700_000_000_000+int64(i), uint64(w), 1), Queue: "q", Data: make([]byte, 2000)}
				if err := b.PutSpec(0, sp); err != nil {
					fail("put: %v", err)
				}
				// A failed batch is answered with an error and the node
				// serves on, as a node does.
				if p, err := b.Apply(); err == nil {
					_ = p.Wait()
				}
			}
		}()
	}
	for range writers {
		<-ready
	}
	if err := fs.Crash(); err != nil { // the writers write on
		fail("crash: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); fs.halted.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fail("nothing halted 30s after the cut")
		}
	}
	os.Exit(137)
}
