package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// The metadata raft log lives under kindRaft. The store keeps the raft
// records as opaque bytes (raftgroup marshals them): the on-disk format of
// a raft entry is raft's own, and store must not import raft.
//
//	0x20 0x01              hard state (marshaled raftpb.HardState)
//	0x20 0x02              latest snapshot (marshaled raftpb.Snapshot)
//	0x20 0x03 index(u64)   log entry (marshaled raftpb.Entry)
//
// The index is big-endian, so entries iterate in log order. There is one
// metadata group per node, so no group id is part of the key.
//
// Invariant: the stored entries are contiguous. SaveRaft keeps it so by
// deleting the suffix an append overwrites and the prefix a snapshot
// covers; LoadRaft checks it on every read.
const (
	raftHardState byte = 0x01
	raftSnapshot  byte = 0x02
	raftEntry     byte = 0x03
)

// raftEntryKeyLen is kind, sub-kind and the 8-byte index.
const raftEntryKeyLen = 2 + 8

// RaftEntry is one raft log entry as the store sees it.
type RaftEntry struct {
	// Index is the entry's raft log index; it is the entry's key.
	Index uint64
	// Data is the marshaled raftpb.Entry, stored as is.
	Data []byte
}

// RaftState is everything persisted for the metadata raft group.
type RaftState struct {
	// HardState is the marshaled raftpb.HardState, nil if none was saved.
	HardState []byte
	// Snapshot is the marshaled raftpb.Snapshot, nil if none was saved.
	Snapshot []byte
	// Entries are the stored entries in index order, contiguous.
	Entries []RaftEntry
}

func raftKey(sub byte) []byte { return []byte{kindRaft, sub} }

func raftEntryKey(index uint64) []byte {
	k := make([]byte, raftEntryKeyLen)
	k[0] = kindRaft
	k[1] = raftEntry
	binary.BigEndian.PutUint64(k[2:], index)
	return k
}

// raftEntriesEnd is the smallest key after every entry key.
func raftEntriesEnd() []byte { return prefixEnd(raftKey(raftEntry)) }

// raftEntriesThrough is the end key of the range of entries with index <=
// upTo (the range is [raftEntryKey(0), raftEntriesThrough(upTo))).
func raftEntriesThrough(upTo uint64) []byte {
	if upTo == math.MaxUint64 {
		return raftEntriesEnd()
	}
	return raftEntryKey(upTo + 1)
}

// LoadRaft reads the persisted raft state. A node that never saved any has
// an empty RaftState (all fields nil). It reads through one iterator, so
// the result is a point-in-time view.
func (s *Store) LoadRaft() (RaftState, error) {
	prefix := []byte{kindRaft}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return RaftState{}, fmt.Errorf("store: load raft: %w", err)
	}
	st, err := readRaft(it)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: load raft: %w", cerr)
	}
	if err != nil {
		return RaftState{}, err
	}
	return st, nil
}

func readRaft(it *pebble.Iterator) (RaftState, error) {
	var st RaftState
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return RaftState{}, fmt.Errorf("store: load raft: %w", err)
		}
		val := append([]byte{}, v...) // non-nil even when empty: "was saved"
		switch {
		case len(k) == 2 && k[1] == raftHardState:
			st.HardState = val
		case len(k) == 2 && k[1] == raftSnapshot:
			st.Snapshot = val
		case len(k) == raftEntryKeyLen && k[1] == raftEntry:
			idx := binary.BigEndian.Uint64(k[2:])
			if n := len(st.Entries); n > 0 && st.Entries[n-1].Index+1 != idx {
				return RaftState{}, fmt.Errorf("%w: raft log gap: entry %d follows %d",
					ErrCorrupt, idx, st.Entries[n-1].Index)
			}
			st.Entries = append(st.Entries, RaftEntry{Index: idx, Data: val})
		default:
			return RaftState{}, fmt.Errorf("%w: unknown raft key %x", ErrCorrupt, k)
		}
	}
	if err := it.Error(); err != nil {
		return RaftState{}, fmt.Errorf("store: load raft: %w", err)
	}
	return st, nil
}

// SaveRaft persists one raft Ready in a single batch committed with Sync,
// so a crash leaves either all of it or none:
//
//   - snap, if non-nil, replaces the stored snapshot, and every stored
//     entry with index <= snapIndex is deleted (the snapshot covers them);
//   - entries are written after deleting every stored entry with index >=
//     entries[0].Index, because raft may overwrite a log suffix and a stale
//     tail must not survive behind the new one;
//   - hs, if non-nil, replaces the stored hard state.
//
// entries must be contiguous and ascending. SaveRaft, CompactRaft and
// LoadRaft are called by one goroutine, the one that owns the raft group;
// they are not meant to race each other.
func (s *Store) SaveRaft(hs []byte, entries []RaftEntry, snap []byte, snapIndex uint64) error {
	for i := 1; i < len(entries); i++ {
		if entries[i].Index != entries[i-1].Index+1 {
			return fmt.Errorf("store: save raft: entries not contiguous: %d after %d",
				entries[i].Index, entries[i-1].Index)
		}
	}
	if snap != nil && len(entries) > 0 && entries[0].Index <= snapIndex {
		return fmt.Errorf("store: save raft: entry %d not after snapshot %d",
			entries[0].Index, snapIndex)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.fillRaftBatch(b, hs, entries, snap, snapIndex); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: save raft: commit: %w", err)
	}
	return nil
}

func (s *Store) fillRaftBatch(b *pebble.Batch, hs []byte, entries []RaftEntry, snap []byte, snapIndex uint64) error {
	if snap != nil {
		if err := b.DeleteRange(raftEntryKey(0), raftEntriesThrough(snapIndex), nil); err != nil {
			return fmt.Errorf("store: save raft: %w", err)
		}
		if err := b.Set(raftKey(raftSnapshot), snap, nil); err != nil {
			return fmt.Errorf("store: save raft: %w", err)
		}
	}
	if len(entries) > 0 {
		// A range tombstone per Ready would pile up; most appends extend the
		// log and have nothing to overwrite, so look before deleting.
		first := raftEntryKey(entries[0].Index)
		tail, err := s.anyKeyIn(first, raftEntriesEnd())
		if err != nil {
			return err
		}
		if tail {
			if err := b.DeleteRange(first, raftEntriesEnd(), nil); err != nil {
				return fmt.Errorf("store: save raft: %w", err)
			}
		}
		for _, e := range entries {
			if err := b.Set(raftEntryKey(e.Index), e.Data, nil); err != nil {
				return fmt.Errorf("store: save raft: %w", err)
			}
		}
	}
	if hs != nil {
		if err := b.Set(raftKey(raftHardState), hs, nil); err != nil {
			return fmt.Errorf("store: save raft: %w", err)
		}
	}
	return nil
}

// anyKeyIn reports whether any key exists in [lo, hi).
func (s *Store) anyKeyIn(lo, hi []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, fmt.Errorf("store: raft log seek: %w", err)
	}
	found := it.First()
	err = errors.Join(it.Error(), it.Close())
	if err != nil {
		return false, fmt.Errorf("store: raft log seek: %w", err)
	}
	return found, nil
}

// CompactRaft deletes every stored entry with index <= upTo, synced. The
// hard state and snapshot are untouched; the caller must hold a snapshot
// at or after upTo, or the log would lose committed entries.
func (s *Store) CompactRaft(upTo uint64) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(raftEntryKey(0), raftEntriesThrough(upTo), nil); err != nil {
		return fmt.Errorf("store: compact raft to %d: %w", upTo, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: compact raft to %d: %w", upTo, err)
	}
	return nil
}
