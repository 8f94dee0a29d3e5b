package store

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/internal/buildinfo"
	"github.com/skuldd/skuldd/task"
)

// Task specs and their payloads (see the package doc for the keyspace).
//
// A spec whose payload is at most inlinePayloadMax bytes is one record,
// payload included, under the spec key: an enqueue writes one key per task
// and replica, and a claim or a get reads one. A larger payload would make
// every index rebuild and list read it, so such a spec is stored twice: the
// spec without its payload under the spec key, marked apart, and the whole
// spec under the data key. The mark is the value's first byte, so a reader
// always knows whether to look under the data key; which layout a spec was
// written with is the writer's choice alone.
//
// Layout 1, written by earlier builds, kept every spec twice (spec key
// without payload, data key with it) and marked nothing. Open rewrites such
// a database to layout 2 before anything reads it (upgradeLayout).
//
// Layout 3 is layout 2 whose task states may carry the epoch stamp of
// the leader that wrote them (task.State.Stamp, map key 6), which builds
// of layout 2 cannot decode: the version bump makes them refuse the data
// dir with a clear message instead. A layout 2 database is a layout 3 one
// as it is (its states have no stamp); the upgrade only marks it.

// inlinePayloadMax is the largest payload stored with its spec under the
// spec key. It bounds what an index rebuild reads per task beyond the
// spec's own fields.
const inlinePayloadMax = 1024

// Spec value marks: the first byte of a spec key's value.
const (
	// specWhole: the spec with its payload (which may be empty); the
	// same version byte every other value starts with.
	specWhole = formatVersion
	// specApart: the spec without its payload; the whole spec is under
	// the data key. Not a small number, so that it can never be taken
	// for a later format version.
	specApart byte = 0x82
)

// Layout 4 adds the queue index (queueindex.go); Open builds it for a
// database of an earlier layout. Builds of layout 3 refuse a layout 4
// database: one they wrote to would lose index keys.

// layoutVersion is the keyspace layout this build writes and reads.
const layoutVersion byte = 4

var layoutKey = []byte{kindMeta, 'l', 'a', 'y', 'o', 'u', 't'}

// layoutByKey names the build that last wrote the layout record: a build
// too old for the data dir says which build it needs.
var layoutByKey = []byte{kindMeta, 'l', 'a', 'y', 'o', 'u', 't', '-', 'b', 'y'}

// upgradeBatchTasks bounds the tasks one batch of the layout upgrade
// rewrites, so the upgrade of a large database holds bounded memory.
const upgradeBatchTasks = 1024

// encodeSpecApart returns sp without its payload, marked apart.
func encodeSpecApart(sp *task.Spec) []byte {
	meta := *sp
	meta.Data = nil
	return meta.AppendCBOR(append(make([]byte, 0, specEncodedSize(&meta)), specApart))
}

// decodeSpec decodes a spec key's value into sp and reports whether the
// payload is apart, under the data key (sp.Data is then empty).
func decodeSpec(v []byte, sp *task.Spec) (apart bool, err error) {
	if len(v) > 0 && v[0] == specApart {
		if err := decMode.Unmarshal(v[1:], sp); err != nil {
			return false, fmt.Errorf("%w: decode spec: %v", ErrCorrupt, err)
		}
		if len(sp.Data) > 0 {
			return false, fmt.Errorf("%w: spec of %s marked apart holds a payload", ErrCorrupt, sp.ID)
		}
		return true, nil
	}
	return false, decode(v, sp)
}

// decodeApart decodes v, the data record of a spec marked apart (found:
// whether the record exists), into the whole spec.
func decodeApart(v []byte, found bool) (*task.Spec, error) {
	if !found {
		return nil, fmt.Errorf("%w: spec marked apart, no payload record", ErrCorrupt)
	}
	sp := new(task.Spec)
	if err := decode(v, sp); err != nil {
		return nil, err
	}
	return sp, nil
}

// upgradeLayout brings the database to layoutVersion: it marks a new
// database, rewrites one of layout 1 (see above), and refuses one written
// by a newer build. It runs in Open, before any other reader or writer.
// A crash halfway leaves layout 1 records and layout 2 records side by
// side, with no layout key; the next Open finishes the job, since each
// step reads only the data key and is idempotent.
func (s *Store) upgradeLayout() error {
	v, err := s.get(layoutKey)
	switch {
	case err == nil:
		if len(v) != 1 {
			return fmt.Errorf("%w: layout record of %d bytes", ErrCorrupt, len(v))
		}
		if v[0] > layoutVersion {
			by := "a newer skuldd"
			if b, err := s.get(layoutByKey); err == nil && len(b) > 0 {
				by = "skuldd " + string(b)
			}
			return fmt.Errorf("store: the data dir has layout %d, written by %s; this build (%s) reads layout %d and older: run that build or a newer one",
				v[0], by, buildinfo.Read(), layoutVersion)
		}
		if v[0] == layoutVersion {
			return nil
		}
	case !errors.Is(err, ErrNotFound):
		return err
	}
	n, orphans, err := s.rewriteLayout1()
	if err != nil {
		return fmt.Errorf("store: upgrade to layout %d: %w", layoutVersion, err)
	}
	indexed, err := s.buildQueueIndex()
	if err != nil {
		return fmt.Errorf("store: upgrade to layout %d: queue index: %w", layoutVersion, err)
	}
	// Synced: it makes the rewrite's unsynced batches durable first.
	mark := s.db.NewBatch()
	defer func() { _ = mark.Close() }()
	if err := mark.Set(layoutByKey, []byte(buildinfo.Read().String()), nil); err != nil {
		return fmt.Errorf("store: upgrade to layout %d: %w", layoutVersion, err)
	}
	if err := mark.Set(layoutKey, []byte{layoutVersion}, nil); err != nil {
		return fmt.Errorf("store: upgrade to layout %d: %w", layoutVersion, err)
	}
	if err := mark.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: upgrade to layout %d: %w", layoutVersion, err)
	}
	if n > 0 || orphans > 0 || indexed > 0 {
		s.logger.Info("store layout upgraded", "layout", layoutVersion, "tasks", n, "orphan_payloads_deleted", orphans, "queue_index", indexed)
	}
	return nil
}

// rewriteLayout1 rewrites every task that still has a data key written by
// layout 1: a small payload moves into the spec key and the data key goes;
// a large one stays, and the spec key is marked apart. A data key without a
// spec key (which layout 1 never wrote: it wrote and deleted both
// together) is deleted rather than brought back as a task. It returns how
// many tasks it rewrote and how many such orphans it deleted.
func (s *Store) rewriteLayout1() (tasks, orphans int, err error) {
	lo, hi := []byte{kindData}, []byte{kindData + 1}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	u := s.newUpgradeBatches()
	defer u.close()
	b := u.batch
	if it.First() {
		s.logger.Info("store layout upgrade: rewriting the task records of an earlier build", "layout", layoutVersion)
	}
	for ; it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 3+task.IDLen {
			return tasks, orphans, fmt.Errorf("%w: data key of %d bytes", ErrCorrupt, len(k))
		}
		specKey := append([]byte{kindSpec}, k[1:]...)
		switch _, closer, err := s.db.Get(specKey); {
		case errors.Is(err, pebble.ErrNotFound):
			if err := b().Delete(k, nil); err != nil {
				return tasks, orphans, err
			}
			orphans++
			if err := u.done(); err != nil {
				return tasks, orphans, err
			}
			continue
		case err != nil:
			return tasks, orphans, err
		default:
			if err := closer.Close(); err != nil {
				return tasks, orphans, err
			}
		}
		sp := new(task.Spec)
		if err := decode(it.Value(), sp); err != nil {
			return tasks, orphans, fmt.Errorf("task %x: %w", k[3:], err)
		}
		if len(sp.Data) <= inlinePayloadMax {
			v, err := encode(sp)
			if err == nil {
				err = b().Set(specKey, v, nil)
			}
			if err == nil {
				err = b().Delete(k, nil)
			}
			if err != nil {
				return tasks, orphans, err
			}
		} else if err := b().Set(specKey, encodeSpecApart(sp), nil); err != nil {
			return tasks, orphans, err
		}
		tasks++
		if err := u.done(); err != nil {
			return tasks, orphans, err
		}
	}
	return tasks, orphans, u.flush()
}

// upgradeBatches holds an upgrade's writes, committed unsynced a batch of
// upgradeBatchTasks tasks at a time: an upgrade of a large database holds
// bounded memory, and the synced layout mark written after the last batch
// makes them all durable (a crash before it leaves the layout as it was,
// to be upgraded again).
type upgradeBatches struct {
	db *pebble.DB
	b  *pebble.Batch
	n  int
}

func (s *Store) newUpgradeBatches() *upgradeBatches {
	return &upgradeBatches{db: s.db, b: s.db.NewBatch()}
}

// batch is the batch to write a task's keys in now.
func (u *upgradeBatches) batch() *pebble.Batch { return u.b }

// done counts one task written, and commits the batch once it holds
// upgradeBatchTasks of them (then runs upgradeBatchHook).
func (u *upgradeBatches) done() error {
	if u.n++; u.n < upgradeBatchTasks {
		return nil
	}
	if err := u.flush(); err != nil {
		return err
	}
	if upgradeBatchHook != nil {
		return upgradeBatchHook()
	}
	return nil
}

// flush commits what the batch holds and starts the next.
func (u *upgradeBatches) flush() error {
	if u.n == 0 {
		return nil
	}
	err := u.b.Commit(pebble.NoSync)
	_ = u.b.Close()
	u.b, u.n = u.db.NewBatch(), 0
	return err
}

func (u *upgradeBatches) close() { _ = u.b.Close() }

// upgradeBatchHook, set by tests only, runs after each full batch an
// upgrade commits (a crash there is the crash test's).
var upgradeBatchHook func() error
