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
// a WAL's written blocks ahead of its end: each log file, new or reused,
// gets zeros written and synced past the log's end, a step at a time,
// off the commit path, so the log's own syncs only ever flush data.
//
// A crash leaves zeros after the log's last record. Pebble reads a zeroed
// chunk as the end of the log (record.ErrZeroedChunk, the same end a
// preallocated or recycled file has), so recovery is unchanged.

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
// zeros are still being written). Pebble preallocates a log's blocks
// (fallocate, 110% of the memtable size), so a step fills space the file
// already holds.
const (
	walZeroStep     = 512 << 10
	walZeroLowWater = 512 << 10
	walZeroBuf      = 128 << 10
)

// zeroAheadFS wraps the FS Pebble writes through; log files it creates or
// reuses zero ahead of their end. Files without an OS descriptor (an
// in-memory FS) are left as they are: a step writes and syncs through
// the file from its own goroutine, alongside Pebble's writes and syncs,
// which an OS file allows (positioned writes; fdatasync).
type zeroAheadFS struct {
	vfs.FS
	step, lowWater int64
	logger         *slog.Logger
	// beforeStep, when set (tests), runs in a step's goroutine before it
	// writes.
	beforeStep func()
}

func newZeroAheadFS(fs vfs.FS, logger *slog.Logger) *zeroAheadFS {
	return &zeroAheadFS{FS: fs, step: walZeroStep, lowWater: walZeroLowWater, logger: logger}
}

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

func (fs *zeroAheadFS) wrap(f vfs.File, name string, size int64) vfs.File {
	if f.Fd() == vfs.InvalidFd {
		return f
	}
	z := &zeroAheadFile{File: f, name: name, step: fs.step, lowWater: fs.lowWater, logger: fs.logger, beforeStep: fs.beforeStep, zeroed: size}
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
	name       string
	step       int64
	lowWater   int64
	logger     *slog.Logger
	beforeStep func()

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
		from := max(f.zeroed, next)
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
	err := f.writeZeros(from, to)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = false
	if err != nil {
		if !f.stopped {
			// The log still works: its syncs commit the blocks it grows into,
			// as they would without zeroing.
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
		n, err := f.File.WriteAt(zeroes[:min(int64(len(zeroes)), to-off)], off)
		if err != nil {
			return fmt.Errorf("zero %s at %d: %w", f.name, off, err)
		}
		off += int64(n)
	}
	if err := f.File.SyncData(); err != nil {
		return fmt.Errorf("sync zeros of %s: %w", f.name, err)
	}
	return nil
}

// Close waits for a step in progress (it writes through the descriptor
// Close releases) and closes the file.
func (f *zeroAheadFile) Close() error {
	f.mu.Lock()
	f.stopped = true
	for f.busy {
		f.idle.Wait()
	}
	f.mu.Unlock()
	return f.File.Close()
}
