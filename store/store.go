package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/internal/cbormode"
	"github.com/skuldd/skuldd/task"
)

// Key kinds. See the package doc for the layout of each.
const (
	kindMeta    byte = 0x01
	kindSpec    byte = 0x10
	kindData    byte = 0x11
	kindState   byte = 0x12
	kindUpdate  byte = 0x13
	kindEdge    byte = 0x14
	kindPromise byte = 0x15
	kindTomb    byte = 0x16
	kindHint    byte = 0x17
	kindQueue   byte = 0x18
	kindRaft    byte = 0x20
)

// formatVersion is the version byte in front of every CBOR value. A reader
// refuses a value with another version rather than misreading it.
const formatVersion byte = 1

// ErrNotFound is returned by reads of a key that does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrCorrupt is returned when a stored value cannot be decoded.
var ErrCorrupt = errors.New("store: corrupt record")

// Config configures a Store. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Dir is the database directory; created if missing.
	Dir string
	// FS is the filesystem; default vfs.Default. Tests pass vfs.NewMem or a
	// crashable filesystem (CrashFS, MemFS). Unless NoWALZeroAhead, the
	// log's zeroing (walfile.go) sits above it and writes through it.
	FS vfs.FS
	// CacheBytes is the block cache's room for blocks (filters, indexes,
	// data). Pebble charges its memtables to the same cache, so Open sizes
	// the cache at CacheBytes plus the most memtable memory Pebble may hold
	// (memTableStopWrites * MemTableBytes); without that headroom the
	// memtables reserve the whole cache and every read goes to the file.
	CacheBytes int64
	// MemTableBytes is the size of one memtable. Larger memtables mean fewer
	// flushes under enqueue load.
	MemTableBytes uint64
	// WALMinSyncInterval is the hold of the write-ahead log's syncs the
	// store starts with (SetWALHold changes it later): after a sync cycle
	// that carried busySyncCommits commits or more, the next sync waits
	// this long from the end of the previous one, so that more commits
	// share it (syncpace.go): fewer syncs and less CPU where syncs are
	// dear (virtual disks), for up to the hold of latency on the writes
	// held. 0 (the default) starts every sync as soon as the previous one
	// ends and a commit waits. Commits are never acknowledged before
	// their sync, whatever the hold.
	WALMinSyncInterval time.Duration
	// NoWALZeroAhead turns off writing zeros ahead of the log's end
	// (walfile.go). The zeros spare each sync a metadata commit on
	// filesystems that update blocks in place (ext4, xfs); on
	// copy-on-write ones (btrfs, zfs) they save nothing and only add
	// writes.
	NoWALZeroAhead bool
	// Logger receives Pebble's log lines.
	Logger *slog.Logger

	// tuneZeroAhead, when set (tests), adjusts the log zeroing before Open
	// hands it to Pebble: smaller steps, the hooks of a step.
	tuneZeroAhead func(*zeroAheadFS)
}

// Default sizes. The block cache is small because the hot data (indexes)
// is in node memory; Pebble reads are mostly payloads of claimed tasks,
// read in id order, plus the filter and index blocks every lookup needs.
// 32 MiB holds those with a 98% hit rate under the bench's claim load.
const (
	defaultCacheBytes    = 32 << 20
	defaultMemTableBytes = 64 << 20
	bloomBitsPerKey      = 10
	// memTableStopWrites is Pebble's MemTableStopWritesThreshold: writes
	// stall while this many memtables wait to flush. Set explicitly because
	// the cache headroom above depends on it.
	memTableStopWrites = 2
)

// DefaultConfig returns the defaults for dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:           dir,
		FS:            vfs.Default,
		CacheBytes:    defaultCacheBytes,
		MemTableBytes: defaultMemTableBytes,
		Logger:        slog.Default(),
	}
}

func (c *Config) fill() {
	d := DefaultConfig(c.Dir)
	if c.FS == nil {
		c.FS = d.FS
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = d.CacheBytes
	}
	if c.MemTableBytes == 0 {
		c.MemTableBytes = d.MemTableBytes
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
}

// Store is one node's database. Safe for concurrent use.
type Store struct {
	db     *pebble.DB
	cache  interface{ Unref() }
	logger *slog.Logger
	// lookups counts point reads (get): each costs a search of every
	// memtable and of the tables whose filters admit the key, the main
	// cost of a read path, so the node exports it and tests count it.
	lookups atomic.Uint64
	// scanned counts the tasks partition scans visited (ScanPartition,
	// ScanPartitionDesc): what a listing that reads every task costs.
	scanned atomic.Uint64
	// pacer holds syncs back while the log is busy (syncpace.go).
	pacer *syncPacer
}

// Lookups returns the number of point reads since Open.
func (s *Store) Lookups() uint64 { return s.lookups.Load() }

// Scanned returns the number of tasks partition scans visited since Open.
func (s *Store) Scanned() uint64 { return s.scanned.Load() }

// Open opens (creating if needed) the database in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	cfg.fill()
	if cfg.WALMinSyncInterval < 0 {
		return nil, fmt.Errorf("store: WAL min sync interval %v is negative", cfg.WALMinSyncInterval)
	}
	if cfg.Dir == "" {
		return nil, errors.New("store: no directory")
	}
	if cfg.FS == vfs.Default {
		if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("store: create %s: %w", cfg.Dir, err)
		}
	}
	cache := pebble.NewCache(cacheSize(cfg))
	opts := &pebble.Options{
		FS:                          cfg.FS,
		Cache:                       cache,
		MemTableSize:                cfg.MemTableBytes,
		MemTableStopWritesThreshold: memTableStopWrites,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      newPebbleLogger(cfg.Logger.With("component", "pebble"), cfg.FS),
	}
	if !cfg.NoWALZeroAhead {
		// Over any FS, the crash filesystems of tests included: they then
		// crash the log that production runs (walfile.go).
		zfs := newZeroAheadFS(cfg.FS, cfg.Logger.With("component", "store"))
		if cfg.tuneZeroAhead != nil {
			cfg.tuneZeroAhead(zfs)
		}
		opts.FS = zfs
	}
	// Always installed, so that syncs are counted even without a hold.
	pacer := &syncPacer{}
	pacer.hold.Store(int64(cfg.WALMinSyncInterval))
	opts.WALMinSyncInterval = pacer.next
	// Bloom filters on every level (Pebble's default has none): claims and
	// gets are point lookups of one task, and without a filter each one
	// searches the index of every overlapping table. 10 bits per key give
	// about 1% false positives.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("store: open %s: %w", cfg.Dir, err)
	}
	s := &Store{db: db, cache: cache, logger: cfg.Logger, pacer: pacer}
	if err := s.upgradeLayout(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// cacheSize is the size to create Pebble's cache with: the room for blocks
// plus the memtable memory Pebble reserves from the same cache.
func cacheSize(cfg Config) int64 {
	return cfg.CacheBytes + memTableStopWrites*int64(cfg.MemTableBytes)
}

// Close closes the database. No method may be called after Close.
func (s *Store) Close() error {
	err := s.db.Close()
	s.cache.Unref()
	if err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// pebbleLogger adapts slog to pebble's Logger. Fatalf logs and exits:
// Pebble calls it on unrecoverable corruption and on a failed write or
// sync of its log or MANIFEST, where carrying on would risk acknowledged
// data.
//
// On a CrashFS whose power was cut, Fatalf halts instead, silently, as
// every write and sync through it does (CrashFS.Crash): the process
// then ends by the crash's own exit, never by this one, whatever Pebble
// made of the cut (the halted writes already leave it nothing to fail
// on; this also covers what it might read in the meantime).
type pebbleLogger struct {
	l     *slog.Logger
	crash *CrashFS // nil unless the store runs on one
}

func newPebbleLogger(l *slog.Logger, fs vfs.FS) pebbleLogger {
	c, _ := fs.(*CrashFS)
	return pebbleLogger{l: l, crash: c}
}

// fatalExit ends the process on Pebble's fatal error; a variable so that
// a test can see whether Fatalf gets to it.
var fatalExit = os.Exit

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Info(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	if p.crash != nil {
		p.crash.haltIfCrashed()
	}
	p.l.Error("fatal storage error", "err", fmt.Sprintf(format, args...))
	fatalExit(70)
}

var (
	encMode = cbormode.Enc
	// Stored records were written by this code, but a damaged file must
	// still not exhaust memory: bound what decoding may allocate.
	decMode = cbormode.MustDec(cbormode.Limits{Nested: 16, Array: 1 << 20, MapPairs: 1 << 16})
)

// encode returns the version byte followed by v's CBOR.
func encode(v any) ([]byte, error) {
	// The two values every write stores encode by hand, to the same bytes
	// (task.AppendCBOR).
	switch v := v.(type) {
	case *task.Spec:
		return v.AppendCBOR(append(make([]byte, 0, specEncodedSize(v)), formatVersion)), nil
	case *task.State:
		return v.AppendCBOR(append(make([]byte, 0, 64), formatVersion)), nil
	}
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("store: encode %T: %w", v, err)
	}
	out := make([]byte, 0, 1+len(b))
	out = append(out, formatVersion)
	return append(out, b...), nil
}

// specEncodedSize is a capacity that holds sp's encoding, payload
// included, in most cases: the fixed fields take under 100 bytes.
func specEncodedSize(sp *task.Spec) int {
	return 128 + len(sp.Queue) + len(sp.Group) + len(sp.Kind) + len(sp.Subtopic) + len(sp.Key) + len(sp.Description) + len(sp.Data) + len(sp.Deps)*(task.IDLen+2)
}

// decode checks the version byte and decodes the rest into v.
func decode(b []byte, v any) error {
	if len(b) == 0 || b[0] != formatVersion {
		return fmt.Errorf("%w: unknown format version", ErrCorrupt)
	}
	if err := decMode.Unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("%w: decode %T: %v", ErrCorrupt, v, err)
	}
	return nil
}

// partKey returns kind | part | rest...
func partKey(kind byte, part uint16, extra int) []byte {
	k := make([]byte, 3, 3+extra)
	k[0] = kind
	binary.BigEndian.PutUint16(k[1:3], part)
	return k
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// get reads key, returning a copy of its value or ErrNotFound.
func (s *Store) get(key []byte) ([]byte, error) {
	s.lookups.Add(1)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	return out, nil
}
