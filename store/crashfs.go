package store

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is the filesystem a store writes through (Config.FS): an alias, so
// that packages above the store can hand one in without importing Pebble.
type FS = vfs.FS

// CrashFS is a filesystem on disk that can forget what was not synced: a
// power cut for one process, which kill -9 is not (the page cache keeps
// every write a killed process made). The fault suite's test build runs
// nodes on it and crashes them through it.
//
// It wraps another FS (the OS's) and tracks, for each file written
// through it, the length it had at its last sync and the original bytes
// of every synced region overwritten since (a reused log file is
// overwritten in place). Crash stops every further write and puts each
// file back as its last sync left it: overwritten regions restored,
// anything past the synced length cut off. Metadata (creation, rename,
// removal) is taken as durable at once: the model is a filesystem that
// orders metadata before data, like ext4's default, and what it tests is
// that nothing is acknowledged before the sync of its data.
//
// Sync, SyncData and SyncTo all sync the whole file (SyncTo reports a
// full sync): durable at least as much as the store asked for.
type CrashFS struct {
	FS
	mu      sync.Mutex
	files   map[string]*crashState // by path, while written or not yet synced
	crashed bool
}

// crashState is what CrashFS remembers of one file.
type crashState struct {
	mu     sync.Mutex
	synced int64 // the file's length at its last sync (or when first opened)
	// shadow holds the original bytes of regions below synced that were
	// overwritten since the last sync, by offset; only the first write of
	// a region since the sync is kept, so restoring them in any order
	// gives back the synced content.
	shadow map[int64][]byte
}

// NewCrashFS returns a CrashFS over base; nil is the disk.
func NewCrashFS(base FS) *CrashFS {
	if base == nil {
		base = vfs.Default
	}
	return &CrashFS{FS: base, files: make(map[string]*crashState)}
}

// errCrashed fails every write after Crash.
var errCrashed = errors.New("store: crash filesystem: crashed")

// Create creates a file whose synced length is 0: until it is synced, a
// crash leaves it empty.
func (fs *CrashFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return nil, err
	}
	return fs.track(name, f, 0), nil
}

// OpenReadWrite opens a file for writing; what it holds now counts as
// synced.
func (fs *CrashFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return nil, err
	}
	return fs.trackExisting(name, f)
}

// ReuseForWrite renames an old file for reuse (a recycled log): its old
// content counts as synced, so overwriting it keeps shadows.
func (fs *CrashFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	fs.forget(oldname)
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	return fs.trackExisting(newname, f)
}

// Rename moves the file's tracking with it.
func (fs *CrashFS) Rename(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	if err := fs.FS.Rename(oldname, newname); err != nil {
		return err
	}
	fs.mu.Lock()
	if st, ok := fs.files[oldname]; ok {
		delete(fs.files, oldname)
		fs.files[newname] = st
	} else {
		delete(fs.files, newname)
	}
	fs.mu.Unlock()
	return nil
}

// Remove forgets the file.
func (fs *CrashFS) Remove(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	fs.forget(name)
	return fs.FS.Remove(name)
}

// RemoveAll forgets every file under dir.
func (fs *CrashFS) RemoveAll(dir string) error {
	if err := fs.check(); err != nil {
		return err
	}
	fs.mu.Lock()
	for name := range fs.files {
		if name == dir || len(name) > len(dir) && name[:len(dir)] == dir && name[len(dir)] == os.PathSeparator {
			delete(fs.files, name)
		}
	}
	fs.mu.Unlock()
	return fs.FS.RemoveAll(dir)
}

// Unwrap returns the wrapped FS.
func (fs *CrashFS) Unwrap() vfs.FS { return fs.FS }

// Crash makes every later write through fs fail and puts every file it
// tracks back as its last sync left it. The caller then exits at once, as
// a machine that lost power would stop: the store is not closed.
func (fs *CrashFS) Crash() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashed = true
	var errs []error
	for name, st := range fs.files {
		if err := st.restore(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (fs *CrashFS) check() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.crashed {
		return errCrashed
	}
	return nil
}

func (fs *CrashFS) forget(name string) {
	fs.mu.Lock()
	delete(fs.files, name)
	fs.mu.Unlock()
}

func (fs *CrashFS) trackExisting(name string, f vfs.File) (vfs.File, error) {
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: crash filesystem: stat %s: %w", name, err)
	}
	return fs.track(name, f, fi.Size()), nil
}

func (fs *CrashFS) track(name string, f vfs.File, synced int64) vfs.File {
	st := &crashState{synced: synced}
	fs.mu.Lock()
	fs.files[name] = st
	fs.mu.Unlock()
	return &crashFile{File: f, fs: fs, st: st}
}

// restore writes the shadows back and truncates the file to its synced
// length. Called under fs.mu, with every write refused.
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
	for off, b := range st.shadow {
		if _, err := f.WriteAt(b, off); err != nil {
			return fmt.Errorf("store: crash filesystem: restore %s at %d: %w", name, off, err)
		}
	}
	if err := f.Truncate(st.synced); err != nil {
		return fmt.Errorf("store: crash filesystem: truncate %s to %d: %w", name, st.synced, err)
	}
	return f.Sync()
}

// crashFile is a file written through CrashFS.
type crashFile struct {
	vfs.File
	fs  *CrashFS
	st  *crashState
	pos int64 // the offset of the next Write
}

func (f *crashFile) Write(p []byte) (int, error) {
	if err := f.before(p, f.pos); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	f.pos += int64(n)
	return n, err
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.before(p, off); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

// before keeps the original bytes of the synced region p is about to
// overwrite at off, unless a write since the last sync already did.
func (f *crashFile) before(p []byte, off int64) error {
	if err := f.fs.check(); err != nil {
		return err
	}
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	end := min(off+int64(len(p)), st.synced)
	if off >= end {
		return nil // all past the synced length: a crash truncates it away
	}
	if st.shadow == nil {
		st.shadow = make(map[int64][]byte)
	}
	// Keep byte ranges not yet shadowed. Writes of one file are sequential
	// and mostly append, so a region is at most split by earlier writes.
	for o := off; o < end; {
		if covered, next := st.coveredLocked(o, end); covered {
			o = next
			continue
		}
		stop := end
		for so := range st.shadow {
			if so > o && so < stop {
				stop = so
			}
		}
		buf := make([]byte, stop-o)
		if _, err := f.File.ReadAt(buf, o); err != nil {
			return fmt.Errorf("store: crash filesystem: keep %d bytes at %d: %w", len(buf), o, err)
		}
		st.shadow[o] = buf
		o = stop
	}
	return nil
}

// coveredLocked reports whether offset o is inside a shadowed region, and
// where that region ends (capped at end).
func (st *crashState) coveredLocked(o, end int64) (bool, int64) {
	for so, b := range st.shadow {
		if o >= so && o < so+int64(len(b)) {
			return true, min(so+int64(len(b)), end)
		}
	}
	return false, 0
}

func (f *crashFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.synced()
	return nil
}

func (f *crashFile) SyncData() error {
	if err := f.File.SyncData(); err != nil {
		return err
	}
	f.synced()
	return nil
}

// SyncTo syncs the whole file (see CrashFS).
func (f *crashFile) SyncTo(int64) (bool, error) {
	if err := f.Sync(); err != nil {
		return false, err
	}
	return true, nil
}

// synced records a completed sync: the file's content now is durable.
func (f *crashFile) synced() {
	fi, err := f.File.Stat()
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		st.synced = fi.Size()
	}
	st.shadow = nil
}
