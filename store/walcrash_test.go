package store

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
)

// Reference: walfile.go ("Recovery") and crashfs.go: the crash
// filesystems run the zero-ahead log, and a crash of it loses no write
// that was waited on.

// Log zeroing in the crash tests: steps small enough that a test's few
// MiB of log run dozens of them, and memtables small enough that logs
// rotate and Pebble reuses their files.
const (
	crashTestStep     = 16 << 10
	crashTestLowWater = 16 << 10
	crashTestGap      = 4 << 10
	crashTestMemTable = 256 << 10
	// crashTestMaxBatches bounds a run waiting for a step to crash in.
	crashTestMaxBatches = 4000
	// crashTestUnwaited is one in how many batches is applied and never
	// waited on: what a crash may lose.
	crashTestUnwaited = 5
	// crashTestGroup is the most batches applied before they are waited
	// on, so that waits share syncs as a node's do.
	crashTestGroup = 4
)

// crashDisk is a disk a store runs on and then loses power.
type crashDisk struct {
	dir string
	fs  vfs.FS // what the store writes through
	// crash cuts the power and returns the FS to open the data dir on
	// again, as the machine's next boot finds it.
	crash func() (vfs.FS, error)
	// refuses is whether the disk refuses writes after the cut (CrashFS,
	// refused at once: CrashFS.RefuseAfterCrash, as the test closes the
	// store in process; the crash hook's CrashFS halts them instead).
	// Pebble then exits when a batch fills a log block, a log rotates, or
	// a flush or compaction writes its MANIFEST: nothing may be applied
	// after the cut, and no flush may run across it.
	refuses bool
}

// onDisk is a CrashFS over a directory on disk; a crash is reopened with
// the plain OS filesystem.
func onDisk(t *testing.T) crashDisk {
	fs := NewCrashFS(vfs.Default)
	return crashDisk{dir: t.TempDir(), fs: fs, crash: func() (vfs.FS, error) {
		err := fs.Crash()
		fs.RefuseAfterCrash() // else a wait on a sync the cut halted never returns
		return vfs.Default, err
	}, refuses: true}
}

// inMemory is a MemFS, as the simulation's nodes have; a crash is its
// CrashImage with unsyncedPercent of the unsynced writes.
func inMemory(unsyncedPercent int, seed uint64) crashDisk {
	fs := NewMemFS()
	return crashDisk{dir: "/db", fs: fs, crash: func() (vfs.FS, error) {
		var rng *rand.Rand
		if unsyncedPercent > 0 {
			rng = rand.New(rand.NewPCG(seed, seed))
		}
		return CrashImage(fs, unsyncedPercent, rng), nil
	}}
}

// crashPayload is batch i's task payload: of varied length, so that log
// records straddle zeroing steps at varied offsets.
func crashPayload(i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 3))
	p := make([]byte, 100+rng.IntN(3000))
	for j := range p {
		p[j] = byte(1 + rng.IntN(255))
	}
	return p
}

func crashTaskID(i int) task.ID { return task.MakeID(1_700_000_000_000+int64(i), 1, 1) }

// TestZeroAheadCrashKeepsWaited runs a store with the log zeroing on, in
// small steps, on each crash filesystem, applies batches and waits on most
// of them, cuts the power at some point (between batches, or while a step
// is held before it writes: the log writes on in the gap, and a log write
// that reaches the step waits in it), and reopens the data dir: every
// batch waited on before the cut is there. On MemFS the cut keeps none,
// half or all of what was not synced (the simulation's crash).
func TestZeroAheadCrashKeepsWaited(t *testing.T) {
	type crashCase struct {
		name string
		disk func(t *testing.T) crashDisk
		// crashAfter cuts the power after that many batches; crashInStep,
		// when not 0, instead cuts it in that step (counted from 1),
		// before it writes.
		crashAfter, crashInStep int
		// flushEvery, when not 0, flushes the memtable every that many
		// batches.
		flushEvery int
		memTable   uint64
		seed       uint64
	}
	// On disk (crashDisk.refuses), the memtables are Pebble's default,
	// never full in these runs, and the test flushes them itself (three
	// times at most: no compaction starts) to rotate the log and, from
	// the third log on, reuse an old one's file.
	cases := []crashCase{
		{name: "disk/early", disk: onDisk, crashAfter: 30, seed: 1},
		{name: "disk/rotated", disk: onDisk, crashAfter: 400, flushEvery: 250, seed: 2},
		{name: "disk/reused", disk: onDisk, crashAfter: 900, flushEvery: 250, seed: 3},
		// The cut comes from the step's goroutine while the log writes
		// on, and holds the test's applies. Step 1 starts with Open's own
		// write (the layout's mark). Both cuts come before Pebble's first
		// memtable (256 KiB, whatever the configured size) is full: its
		// rotation closes the old log, which waits for the held step,
		// while the applies are held.
		{name: "disk/in step 3", disk: onDisk, crashInStep: 3, seed: 4},
		{name: "disk/in step 10", disk: onDisk, crashInStep: 10, seed: 5},
	}
	// In memory, a cut leaves the old MemFS working, and the store writes
	// on through it: small memtables, so that flushes and compactions run
	// on their own as logs rotate (and reused logs, no larger than the
	// file they reuse, run no steps); or Pebble's default ones, whose
	// first memtables double in size, so each new log runs steps.
	for _, pct := range []int{0, 50, 100} {
		for seed := uint64(1); seed <= 2; seed++ {
			disk := func(*testing.T) crashDisk { return inMemory(pct, seed) }
			name := fmt.Sprintf("mem/%d%% unsynced/seed %d", pct, seed)
			cases = append(cases,
				crashCase{name: name + "/reused logs", disk: disk, crashAfter: 250 + 500*int(seed), memTable: crashTestMemTable, seed: seed},
				crashCase{name: name + "/growing logs", disk: disk, crashAfter: 150 + 300*int(seed), seed: seed},
				crashCase{name: name + "/in step", disk: disk, crashInStep: 3 + 30*int(seed), seed: seed},
			)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			disk := tc.disk(t)
			var (
				steps    atomic.Int64
				crashing atomic.Bool // set before the cut begins
				// applying is held while batches are applied, and by a cut
				// in a step on a disk that refuses writes after it: no
				// batch is applied after that cut.
				applying sync.Mutex
				reopenFS vfs.FS
				crashErr error
				crashed  = make(chan struct{})
			)
			cut := func() {
				crashing.Store(true)
				reopenFS, crashErr = disk.crash()
				close(crashed)
			}
			cfg := Config{
				Dir: disk.dir, FS: disk.fs, MemTableBytes: tc.memTable,
				// Errors only: the crashed store's are expected, and shown
				// only if the test fails (or Pebble exits the test).
				Logger: testkit.LoggerAt(t, slog.LevelError),
				tuneZeroAhead: func(z *zeroAheadFS) {
					z.step, z.lowWater, z.gap = crashTestStep, crashTestLowWater, crashTestGap
					z.beforeStep = func() {
						if n := steps.Add(1); n == int64(tc.crashInStep) {
							// The step holds here, its zeros not written,
							// while the log writes on in front of it.
							if disk.refuses {
								applying.Lock()
								defer applying.Unlock()
							}
							cut()
						}
					}
				},
			}
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(tc.seed, 2))
			var waited []int
			applied, flushes := 0, 0
		batches:
			for applied < crashTestMaxBatches {
				type pending struct {
					i int
					p *Pending
				}
				var group []pending
				applying.Lock()
				if crashing.Load() {
					applying.Unlock()
					break
				}
				for range 1 + rng.IntN(crashTestGroup) {
					b := s.NewBatch()
					if err := b.PutSpec(1, &task.Spec{ID: crashTaskID(applied), Queue: "q", Data: crashPayload(applied)}); err != nil {
						t.Fatal(err)
					}
					p, err := b.Apply()
					if err != nil {
						t.Fatalf("apply batch %d: %v", applied, err)
					}
					group = append(group, pending{applied, p})
					applied++
				}
				applying.Unlock()
				for _, g := range group {
					if rng.IntN(crashTestUnwaited) == 0 {
						continue
					}
					if err := g.p.Wait(); err != nil {
						if crashing.Load() {
							break batches // the cut fails the log's syncs (CrashFS)
						}
						t.Fatalf("wait for batch %d: %v", g.i, err)
					}
					// Waited on before the cut began: its sync was done
					// before it, so it must survive. After, it may not.
					if !crashing.Load() {
						waited = append(waited, g.i)
					}
				}
				if tc.flushEvery > 0 && applied/tc.flushEvery > flushes {
					if err := s.db.Flush(); err != nil {
						t.Fatal(err)
					}
					flushes++
				}
				if tc.crashInStep == 0 && applied >= tc.crashAfter {
					cut()
				}
			}
			if !crashing.Load() {
				_ = s.Close()
				t.Fatalf("%d batches ran %d steps: step %d never came", applied, steps.Load(), tc.crashInStep)
			}
			<-crashed
			ranSteps := steps.Load()
			_ = s.Close() // on CrashFS it fails, every write refused; it releases the lock
			if crashErr != nil {
				t.Fatalf("crash: %v", crashErr)
			}
			if ranSteps == 0 {
				t.Fatalf("no zeroing step ran in %d batches: the crash filesystem's log was not the zero-ahead log", applied)
			}

			s, err = Open(Config{Dir: disk.dir, FS: reopenFS, Logger: testkit.LoggerAt(t, slog.LevelError)})
			if err != nil {
				t.Fatalf("reopen after a crash after %d batches (%d waited on, %d steps): %v", applied, len(waited), ranSteps, err)
			}
			defer s.Close()
			for _, i := range waited {
				sp, err := s.FullSpec(1, crashTaskID(i))
				if err != nil {
					t.Fatalf("batch %d of %d, waited on before the crash: %v", i, applied, err)
				}
				if !bytes.Equal(sp.Data, crashPayload(i)) {
					t.Fatalf("batch %d: payload changed", i)
				}
			}
			// The recovered log is written on: a new write is durable.
			b := s.NewBatch()
			if err := b.PutSpec(1, &task.Spec{ID: crashTaskID(crashTestMaxBatches), Queue: "q"}); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatalf("write after recovery: %v", err)
			}
			t.Logf("%d batches, %d waited on, %d steps before the crash", applied, len(waited), ranSteps)
		})
	}
}
