package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is the filesystem a store writes through (Config.FS): an alias, so
// that packages above the store can hand one in without importing Pebble.
type FS = vfs.FS

// CrashFS is a filesystem on disk that can forget what was not synced: a
// power cut for one process, which kill -9 is not (the page cache keeps
// every write a killed process made). The fault suite's test build runs
// nodes on it and crashes them through it. The store's log zeroing
// (walfile.go) sits above it and writes through it, so the log it crashes
// is the one production writes: zeros written and synced ahead of the
// log's end through a second handle of the file, the log written over
// them through the first.
//
// It wraps another FS (the OS's) and keeps one record per path for every
// file written through it, shared by every handle open on that path, as
// Linux keeps one page cache per file: a sync through any handle makes
// the whole file durable, whichever handle wrote. The record is the
// file's length and the bytes it held, at its last completed sync, of
// every range written since (a reused log file is overwritten in place,
// and a log is written over zeros synced ahead of it). A sync makes
// durable what was written before it began; what is written while it
// runs is taken as not durable until a later sync. Crash cuts the power:
// it halts every further write, sync and change of metadata (they never
// return; see Crash) and puts each file back as its last completed sync
// left it: ranges written since restored, anything past its length then
// cut off (a hole a write past the end left included). Metadata
// (creation, rename, removal) is taken as durable at once: the model is
// a filesystem that orders metadata before data, like ext4's default,
// and what it tests is that nothing is acknowledged before the sync of
// its data.
//
// Sync, SyncData and SyncTo all sync the whole file (SyncTo reports a
// full sync): durable at least as much as the store asked for.
//
// Limits: a file is known by its path, so hard links (Link) are not
// modelled; and Crash restores files through the os package, so the
// wrapped FS must be the OS's.
type CrashFS struct {
	FS
	mu    sync.Mutex
	files map[string]*crashState // by path, every file opened for writing and not removed since
	// crashed is set by Crash under cut's write lock, before it restores
	// the files; read under a file's crashState.mu by every write and
	// sync, so that none lands after the file's restore, and under cut's
	// read lock by every change of metadata, so that none lands after the
	// cut. Once it is set, they halt (halt).
	crashed atomic.Bool
	cut     sync.RWMutex
	// refused is closed by RefuseAfterCrash: the operations the crash
	// halted, waiting on it, then fail.
	refused    chan struct{}
	refuseOnce sync.Once
	halted     atomic.Int64 // operations halted by the cut, for tests
}

// crashState is what CrashFS knows of one file, shared by every handle
// open on its path. Under mu, every write through any handle, so size and
// the images are exact.
type crashState struct {
	mu   sync.Mutex
	size int64 // the file's length now
	// durable is the file as its last completed sync (or its opening)
	// left it; durableSeq is that sync's number.
	durable    crashImage
	durableSeq uint64
	// syncs are the syncs in progress, each with the file as it was when
	// it began: what it makes durable if it succeeds.
	syncs   []*pendingSync
	nextSeq uint64 // the number of the next sync; they begin at 1
}

// pendingSync is a sync in progress through one handle of the file.
type pendingSync struct {
	seq uint64
	img crashImage
}

// crashImage is a file's content at some point, kept as its difference
// from the content now: the length it had then, and the bytes it held then
// of every range below that length written since. Each range is read
// before its first write after that point, so it holds the content then.
type crashImage struct {
	size  int64
	saved []savedRange // sorted by offset, disjoint
}

// savedRange is the content of a file at off, as a crashImage keeps it.
type savedRange struct {
	off int64
	b   []byte
}

func (r savedRange) end() int64 { return r.off + int64(len(r.b)) }

// NewCrashFS returns a CrashFS over base; nil is the disk.
func NewCrashFS(base FS) *CrashFS {
	if base == nil {
		base = vfs.Default
	}
	return &CrashFS{FS: base, files: make(map[string]*crashState), refused: make(chan struct{})}
}

// errCrashed fails every write, sync and change of metadata after Crash,
// once RefuseAfterCrash has been called.
var errCrashed = errors.New("store: crash filesystem: crashed")

// Create creates a file whose synced length is 0: until it is synced, a
// crash leaves it empty. A file that was at name is replaced (a new
// inode): handles still open on it keep the old record, no longer the
// path's.
func (fs *CrashFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.begin(); err != nil {
		return nil, err
	}
	defer fs.cut.RUnlock()
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return nil, err
	}
	st := newCrashState(0)
	fs.mu.Lock()
	fs.files[name] = st
	fs.mu.Unlock()
	return &crashFile{File: f, fs: fs, st: st}, nil
}

// OpenReadWrite opens a file for writing. A file already written through
// fs shares its record with the handles open on it (the log zeroing's
// second handle of a log); any other counts as synced as it is now.
func (fs *CrashFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.begin(); err != nil {
		return nil, err
	}
	defer fs.cut.RUnlock()
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	st, ok := fs.files[name]
	fs.mu.Unlock()
	if ok {
		return &crashFile{File: f, fs: fs, st: st}, nil
	}
	return fs.trackExisting(name, f)
}

// ReuseForWrite renames an old file for reuse (a recycled log). Its
// record moves with it; a file not written through fs counts as synced as
// it is, so overwriting it keeps the ranges it held.
func (fs *CrashFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.begin(); err != nil {
		return nil, err
	}
	defer fs.cut.RUnlock()
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		// The rename may have happened before the open failed.
		if _, serr := fs.FS.Stat(oldname); errors.Is(serr, os.ErrNotExist) {
			fs.moved(oldname, newname)
		}
		return nil, err
	}
	if st := fs.moved(oldname, newname); st != nil {
		return &crashFile{File: f, fs: fs, st: st}, nil
	}
	return fs.trackExisting(newname, f)
}

// Rename moves the file's record with it; a file it replaces is gone.
func (fs *CrashFS) Rename(oldname, newname string) error {
	if err := fs.begin(); err != nil {
		return err
	}
	defer fs.cut.RUnlock()
	if err := fs.FS.Rename(oldname, newname); err != nil {
		return err
	}
	fs.moved(oldname, newname)
	return nil
}

// moved records that oldname was renamed to newname and returns the
// file's record, nil if it had none.
func (fs *CrashFS) moved(oldname, newname string) *crashState {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	st, ok := fs.files[oldname]
	delete(fs.files, oldname)
	if !ok {
		delete(fs.files, newname)
		return nil
	}
	fs.files[newname] = st
	return st
}

// Remove forgets the file. Handles still open on it write to a file no
// longer on disk, which a crash has nothing to restore of.
func (fs *CrashFS) Remove(name string) error {
	if err := fs.begin(); err != nil {
		return err
	}
	defer fs.cut.RUnlock()
	fs.mu.Lock()
	st := fs.files[name]
	fs.mu.Unlock()
	if err := fs.FS.Remove(name); err != nil {
		return err
	}
	fs.mu.Lock()
	if fs.files[name] == st { // not created again meanwhile
		delete(fs.files, name)
	}
	fs.mu.Unlock()
	return nil
}

// RemoveAll forgets every file under dir.
func (fs *CrashFS) RemoveAll(dir string) error {
	if err := fs.begin(); err != nil {
		return err
	}
	defer fs.cut.RUnlock()
	fs.mu.Lock()
	for name := range fs.files {
		if name == dir || len(name) > len(dir) && name[:len(dir)] == dir && name[len(dir)] == os.PathSeparator {
			delete(fs.files, name)
		}
	}
	fs.mu.Unlock()
	return fs.FS.RemoveAll(dir)
}

// MkdirAll creates a directory (metadata: durable at once).
func (fs *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.begin(); err != nil {
		return err
	}
	defer fs.cut.RUnlock()
	return fs.FS.MkdirAll(dir, perm)
}

// Link links a file; links are not modelled (see CrashFS), but none is
// made after the cut.
func (fs *CrashFS) Link(oldname, newname string) error {
	if err := fs.begin(); err != nil {
		return err
	}
	defer fs.cut.RUnlock()
	return fs.FS.Link(oldname, newname)
}

// Unwrap returns the wrapped FS.
func (fs *CrashFS) Unwrap() vfs.FS { return fs.FS }

// Crash cuts the power: it puts every file it tracks back as its last
// completed sync left it, and from the cut on, every write, sync and
// change of metadata through fs halts: it never returns (until
// RefuseAfterCrash, which a crashed process never calls). A change of
// metadata in progress ends before the cut, a write in progress before
// its file's restore; a sync in progress halts when it ends, its file
// restored as if it had not run. The caller then exits at once, as a
// machine that lost power would stop: the store is not closed.
//
// Invariant: after the cut, nothing the process does through fs returns,
// so nothing changes the files or sees its writes fail. A refused write
// would be an error Pebble takes as fatal (pebbleLogger.Fatalf exits 70,
// and a failed log write panics), and the crashed process would exit on
// its own, with its own status, before the crash hook's exit 137: a power
// cut makes no progress after it, errors included. Reads are not halted:
// a store reads only files it synced before it used them (tables, blob
// files), which the restore leaves as they are.
func (fs *CrashFS) Crash() error {
	fs.cut.Lock() // no change of metadata in progress
	fs.crashed.Store(true)
	fs.cut.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var errs []error
	for name, st := range fs.files {
		if err := st.restore(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RefuseAfterCrash makes the operations a crash halts fail instead: those
// halted return errCrashed, and after a Crash every later one fails at
// once. It is for tests that crash a store in process and must then close
// it (a close writes and syncs) to open the image again; Pebble may take
// such a failure as fatal and end the process (see Crash), so the store
// must do nothing between the crash and its close. The crash hook never
// calls it.
func (fs *CrashFS) RefuseAfterCrash() {
	fs.refuseOnce.Do(func() { close(fs.refused) })
}

// halt is what an operation meets once the power is cut: it waits for
// RefuseAfterCrash, forever in a crashed process, and then fails. It must
// not be called holding a lock Crash takes (a file's crashState.mu, mu,
// cut).
func (fs *CrashFS) halt() error {
	fs.halted.Add(1)
	<-fs.refused
	return errCrashed
}

// haltIfCrashed halts a caller after the cut (pebbleLogger.Fatalf) and
// returns at once before it.
func (fs *CrashFS) haltIfCrashed() {
	if fs.crashed.Load() {
		_ = fs.halt()
	}
}

// begin starts a change of metadata: it holds cut's read lock, to be
// released by the caller, or halts after the cut.
func (fs *CrashFS) begin() error {
	fs.cut.RLock()
	if fs.crashed.Load() {
		fs.cut.RUnlock()
		return fs.halt()
	}
	return nil
}

func (fs *CrashFS) trackExisting(name string, f vfs.File) (vfs.File, error) {
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: crash filesystem: stat %s: %w", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	st, ok := fs.files[name]
	if !ok { // else another handle was opened meanwhile: share its record
		st = newCrashState(fi.Size())
		fs.files[name] = st
	}
	return &crashFile{File: f, fs: fs, st: st}, nil
}

// newCrashState returns the record of a file of size bytes, all synced.
func newCrashState(size int64) *crashState {
	return &crashState{size: size, durable: crashImage{size: size}, nextSeq: 1}
}

// restore writes back what the file held at its last completed sync and
// truncates it to its length then. Called under fs.mu, once crashed is
// set: no write or sync starts on the file after it takes st.mu.
func (st *crashState) restore(name string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: crash filesystem: restore %s: %w", name, err)
	}
	defer f.Close()
	for _, r := range st.durable.saved {
		if _, err := f.WriteAt(r.b, r.off); err != nil {
			return fmt.Errorf("store: crash filesystem: restore %s at %d: %w", name, r.off, err)
		}
	}
	if err := f.Truncate(st.durable.size); err != nil {
		return fmt.Errorf("store: crash filesystem: truncate %s to %d: %w", name, st.durable.size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: crash filesystem: sync restored %s: %w", name, err)
	}
	return nil
}

// keep saves, from r (the file now), the bytes of [off, end) below the
// image's length that it has not saved yet: the ranges a write is about
// to change for the first time since the image's point, which still hold
// the content then.
func (im *crashImage) keep(r io.ReaderAt, off, end int64) error {
	end = min(end, im.size)
	// From the first saved range that ends past off: the ones before it
	// are all below off.
	i := sort.Search(len(im.saved), func(i int) bool { return im.saved[i].end() > off })
	for o := off; o < end; {
		if i < len(im.saved) && im.saved[i].off <= o {
			o = im.saved[i].end()
			i++
			continue
		}
		stop := end
		if i < len(im.saved) {
			stop = min(stop, im.saved[i].off)
		}
		b := make([]byte, stop-o)
		if n, err := r.ReadAt(b, o); n < len(b) {
			return fmt.Errorf("store: crash filesystem: keep %d bytes at %d: read %d: %w", len(b), o, n, err)
		}
		im.saved = slices.Insert(im.saved, i, savedRange{off: o, b: b})
		i++
		o = stop
	}
	return nil
}

// crashFile is a handle of a file written through CrashFS.
type crashFile struct {
	vfs.File
	fs  *CrashFS
	st  *crashState
	pos int64 // the offset of the next Write (each handle has its own)
}

func (f *crashFile) Write(p []byte) (int, error) {
	n, err := f.write(f.pos, len(p), func() (int, error) { return f.File.Write(p) })
	f.pos += int64(n)
	return n, err
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	return f.write(off, len(p), func() (int, error) { return f.File.WriteAt(p, off) })
}

// write runs do, which writes n bytes at off, under the file's record's
// lock, after every image the file has (its last sync's, and each sync's
// in progress) kept what the write changes. Past the file's end (a step's
// zeros a gap past the log's end) nothing is kept: a crash cuts off what
// lies past the length an image had, the hole with it.
func (f *crashFile) write(off int64, n int, do func() (int, error)) (int, error) {
	st := f.st
	st.mu.Lock()
	if f.fs.crashed.Load() {
		st.mu.Unlock() // the file's restore takes it
		return 0, f.fs.halt()
	}
	defer st.mu.Unlock()
	end := off + int64(n)
	if err := st.durable.keep(f.File, off, end); err != nil {
		return 0, err
	}
	for _, s := range st.syncs {
		if s.seq < st.durableSeq {
			continue // began before the last completed sync: it can only fall behind it
		}
		if err := s.img.keep(f.File, off, end); err != nil {
			return 0, err
		}
	}
	written, err := do()
	st.size = max(st.size, off+int64(written))
	return written, err
}

func (f *crashFile) Sync() error { return f.sync(f.File.Sync) }

func (f *crashFile) SyncData() error { return f.sync(f.File.SyncData) }

// SyncTo syncs the whole file (see CrashFS).
func (f *crashFile) SyncTo(int64) (bool, error) {
	if err := f.Sync(); err != nil {
		return false, err
	}
	return true, nil
}

// sync runs do, a sync of the file through this handle. If it succeeds,
// the file as it was when do began is durable, whichever handle wrote it,
// unless a later sync already completed.
func (f *crashFile) sync(do func() error) error {
	st := f.st
	st.mu.Lock()
	if f.fs.crashed.Load() {
		st.mu.Unlock()
		return f.fs.halt()
	}
	ps := &pendingSync{seq: st.nextSeq, img: crashImage{size: st.size}}
	st.nextSeq++
	st.syncs = append(st.syncs, ps)
	st.mu.Unlock()

	err := do()

	st.mu.Lock()
	st.syncs = slices.DeleteFunc(st.syncs, func(s *pendingSync) bool { return s == ps })
	if f.fs.crashed.Load() {
		// The power went before the sync ended: it made nothing durable,
		// and it never ends, whatever do returned.
		st.mu.Unlock()
		return f.fs.halt()
	}
	defer st.mu.Unlock()
	if err != nil {
		return err
	}
	if ps.seq > st.durableSeq {
		st.durable, st.durableSeq = ps.img, ps.seq
	}
	return nil
}

// Preallocate reserves room for the file, halted after the cut like
// every other change.
func (f *crashFile) Preallocate(off, length int64) error {
	if f.fs.crashed.Load() {
		return f.fs.halt()
	}
	return f.File.Preallocate(off, length)
}
