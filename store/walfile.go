package store

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Why the WAL is written ahead with zeros.
//
// Every acknowledged write waits for an fdatasync of the write-ahead log.
// An fdatasync of a file that grew since the last one must also commit the
// file's new size and its newly used blocks: on ext4 that is a journal
// commit, one more device write and flush on top of the data. Over blocks
// the file already holds, written and synced, it flushes the data alone.
// On the development machine's virtual disk the first kind cost 100-160 µs
// of CPU and 220-290 µs of wall time per 4 KiB append, the second 63-87 µs
// and 120-180 µs.
//
// Pebble reuses the files of old logs once their memtables are flushed,
// and then writes over blocks that are already there. But a fresh data dir
// has none to reuse, and neither has a node until its first memtables are
// flushed (64 MiB each; Pebble's preallocation keeps the file's size and
// leaves its blocks unwritten, so it does not help). So zeroAheadFS keeps
// a log's written blocks ahead of its end: each log file, new or reused,
// gets zeros written and synced past the log's end, a step at a time,
// off the commit path. Nearly all of the log's own syncs then flush data
// alone; the exceptions are the first walZeroGap bytes of a new file and
// a sync that comes between a step's writes and the step's own sync.
//
// Recovery. A crash leaves zeros (and perhaps a hole) after the newest
// log's last record. Pebble reads the zeroed chunk as invalid, reads ahead
// for a later valid chunk, finds none, and ends the log there as an
// unclean end (record.ErrUnexpectedEOF), which it tolerates in the newest
// log, as it does a torn append. An older log always ends with the EOF
// trailer Pebble writes when it closes it, before any zeros, so its zeros
// are never read. The crash filesystems (CrashFS, MemFS) run this log too,
// and walcrash_test.go crashes it, a step held included.

// walWriteCategory is the category Pebble creates and reuses log files
// with (vfs.DiskWriteCategory); zeroAheadFS leaves every other file alone.
const walWriteCategory vfs.DiskWriteCategory = "pebble-wal"

// Zeroing steps. A step starts when the log's end comes within
// walZeroLowWater of the zeroed end and zeroes walZeroStep past it. Steps
// are small because a log's own fdatasync flushes every dirty page of its
// file: one that comes while a step's zeros are still being written back
// waits for them too. At 512 KiB a step is 128 blocks, a few milliseconds
// of the disk; at 3-5 MiB of log a second under full load it is about ten
// steps a second, each one fdatasync (a node syncs its log about a
// thousand times a second). The low water gives a step about a tenth of a
// second to finish before the log reaches its blocks; if the log gets
// there first, its writer waits for the step (it must not write where
// zeros are still being written). A new file's first step starts
// walZeroGap past the log's end, so the log's first writes do not wait
// for it. Zeros take no space a log would not: Pebble reserves 110% of
// the memtable size for each log (fallocate), and the log writes over the
// zeros.
const (
	walZeroStep     = 512 << 10
	walZeroLowWater = 512 << 10
	walZeroGap      = 64 << 10
	walZeroBuf      = 128 << 10
)

// zeroAheadFS wraps the filesystem the store is given, whatever it is (the
// OS's, the test build's CrashFS, the simulation's MemFS), so that every
// build runs the same log; log files it creates or reuses zero ahead of
// their end.
//
// A step writes and syncs the file through a handle of its own, opened
// through the wrapped FS (OpenReadWrite, which neither truncates nor
// moves the log's handle), from its own goroutine, alongside the log's
// writes and syncs through the log's handle. The wrapped FS must allow
// that: two handles of one file, each one Write or Sync at a time (the
// vfs.File contract), writing disjoint ranges, and a sync through either
// making the whole file durable. Open files on Linux do, and so do
// CrashFS (one record of what is synced, shared by every handle of a
// path) and MemFS (every handle of a file shares its node, data and
// synced data).
type zeroAheadFS struct {
	vfs.FS
	step, lowWater, gap int64
	logger              *slog.Logger
	// beforeStep, when set (tests), runs in a step's goroutine before it
	// writes.
	beforeStep func()
	// failStep, when set (tests), is returned by every step instead of
	// writing.
	failStep error
}

func newZeroAheadFS(fs vfs.FS, logger *slog.Logger) *zeroAheadFS {
	return &zeroAheadFS{FS: fs, step: walZeroStep, lowWater: walZeroLowWater, gap: walZeroGap, logger: logger}
}

// Unwrap returns the wrapped FS (vfs.Root walks through it).
func (fs *zeroAheadFS) Unwrap() vfs.FS { return fs.FS }

func (fs *zeroAheadFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || category != walWriteCategory {
		return f, err
	}
	return fs.wrap(f, name, 0), nil
}

func (fs *zeroAheadFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || category != walWriteCategory {
		return f, err
	}
	// A reused log is written from its start over what the old log wrote:
	// its size is the blocks already there.
	st, err := f.Stat()
	if err != nil {
		return f, nil // no zeroing; the log works as Pebble made it
	}
	return fs.wrap(f, newname, st.Size()), nil
}

// wrap returns f zeroing ahead, or f itself if the file cannot be opened
// a second time for the steps.
func (fs *zeroAheadFS) wrap(f vfs.File, name string, size int64) vfs.File {
	// The steps write and sync through their own open file, never through
	// the log's. A step's fsync writes back the log's dirty pages too,
	// and Linux reports a failed write-back once to each open file: had the
	// step taken the report on the log's descriptor, Pebble's next sync of
	// the log would succeed and acknowledge writes that never reached the
	// disk. With its own descriptor, the log's sync still gets the error.
	// On the OS filesystem OpenReadWrite is open(2) with O_RDWR|O_CREATE
	// (no O_TRUNC, no O_APPEND): a new open file of the same inode, which
	// the log's handle just created or reused, its offset its own.
	zf, err := fs.FS.OpenReadWrite(name, walWriteCategory)
	if err != nil {
		fs.logger.Warn("WAL zeroing off for this log; its syncs may cost more", "file", name, "err", err)
		return f
	}
	z := &zeroAheadFile{
		File: f, zf: zf, name: name,
		step: fs.step, lowWater: fs.lowWater, gap: fs.gap,
		logger: fs.logger, beforeStep: fs.beforeStep, failStep: fs.failStep,
		zeroed: size,
	}
	z.idle = sync.NewCond(&z.mu)
	return z
}

// zeroAheadFile is a log file that writes zeros ahead of its end.
//
// Invariants, under mu: a step in progress zeroes [from, to) with
// from >= end + the length of the Write that started it, so a step never
// covers bytes the log wrote; a Write that would reach from waits for the
// step to end first. Every block below zeroed has been written, by the
// log or by a step, and the file's size covers it; the zeros a step wrote
// are synced before zeroed moves past them.
type zeroAheadFile struct {
	vfs.File
	zf                  vfs.File // the steps' own handle of the file
	name                string
	step, lowWater, gap int64
	logger              *slog.Logger
	beforeStep          func()
	failStep            error

	mu       sync.Mutex
	idle     *sync.Cond // signalled when a step ends
	end      int64      // the log's end: the bytes written by Write
	zeroed   int64
	busy     bool  // a step is in progress
	from     int64 // the step's start
	stopped  bool  // a step failed or the file is closing: no more steps
	stepsRun int   // steps finished, for tests
}

// zeroes is the source of every zeroing write; never written to.
var zeroes = make([]byte, walZeroBuf)

// Write writes p at the log's end (Pebble writes a log sequentially, one
// Write or Sync at a time).
func (f *zeroAheadFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	next := f.end + int64(len(p))
	for f.busy && f.from < next {
		f.idle.Wait()
	}
	if !f.busy && !f.stopped && f.zeroed-next < f.lowWater {
		// Ahead of what is zeroed, or, where the log has reached that (a
		// new file), a gap ahead of the log, for it to write in meanwhile.
		from := max(f.zeroed, next+f.gap)
		f.busy, f.from = true, from
		go f.zero(from, from+f.step)
	}
	f.mu.Unlock()

	n, err := f.File.Write(p)
	f.mu.Lock()
	f.end += int64(n)
	f.mu.Unlock()
	return n, err
}

// zero writes zeros over [from, to) and syncs them.
func (f *zeroAheadFile) zero(from, to int64) {
	if f.beforeStep != nil {
		f.beforeStep()
	}
	err := f.failStep
	if err == nil {
		err = f.writeZeros(from, to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = false
	if err != nil {
		if !f.stopped {
			// The log still works: its syncs commit the blocks it grows into,
			// as they would without zeroing, and report any error of their own.
			f.logger.Warn("WAL zeroing stopped; log syncs may cost more", "file", f.name, "err", err)
		}
		f.stopped = true
	} else {
		f.zeroed = max(f.zeroed, to)
		f.stepsRun++
	}
	f.idle.Broadcast()
}

func (f *zeroAheadFile) writeZeros(from, to int64) error {
	for off := from; off < to; {
		n, err := f.zf.WriteAt(zeroes[:min(int64(len(zeroes)), to-off)], off)
		if err != nil {
			return fmt.Errorf("zero %s at %d: %w", f.name, off, err)
		}
		off += int64(n)
	}
	if err := f.zf.Sync(); err != nil {
		return fmt.Errorf("sync zeros of %s: %w", f.name, err)
	}
	return nil
}

// Close waits for a step in progress, then closes the steps' descriptor
// and the file.
func (f *zeroAheadFile) Close() error {
	f.mu.Lock()
	f.stopped = true
	for f.busy {
		f.idle.Wait()
	}
	f.mu.Unlock()
	_ = f.zf.Close() // only zeros went through it, each step synced
	return f.File.Close()
}
