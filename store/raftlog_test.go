package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func openRaftTestStore(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "/db", FS: fs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// ents returns entries lo..hi whose data is tag/index.
func ents(lo, hi uint64, tag string) []RaftEntry {
	var out []RaftEntry
	for i := lo; i <= hi; i++ {
		out = append(out, RaftEntry{Index: i, Data: fmt.Appendf(nil, "%s/%d", tag, i)})
	}
	return out
}

func checkRaftState(t *testing.T, got RaftState, hs, snap []byte, want []RaftEntry) {
	t.Helper()
	if !bytes.Equal(got.HardState, hs) || (got.HardState == nil) != (hs == nil) {
		t.Errorf("hard state: got %q; want %q", got.HardState, hs)
	}
	if !bytes.Equal(got.Snapshot, snap) || (got.Snapshot == nil) != (snap == nil) {
		t.Errorf("snapshot: got %q; want %q", got.Snapshot, snap)
	}
	if len(got.Entries) != len(want) {
		t.Fatalf("entries: got %d (%v); want %d", len(got.Entries), got.Entries, len(want))
	}
	for i := range want {
		if got.Entries[i].Index != want[i].Index || !bytes.Equal(got.Entries[i].Data, want[i].Data) {
			t.Errorf("entry %d: got %d %q; want %d %q", i,
				got.Entries[i].Index, got.Entries[i].Data, want[i].Index, want[i].Data)
		}
	}
}

func mustLoad(t *testing.T, s *Store) RaftState {
	t.Helper()
	st, err := s.LoadRaft()
	if err != nil {
		t.Fatalf("load raft: %v", err)
	}
	return st
}

func mustSave(t *testing.T, s *Store, hs []byte, e []RaftEntry, snap []byte, snapIndex uint64) {
	t.Helper()
	if err := s.SaveRaft(hs, e, snap, snapIndex); err != nil {
		t.Fatalf("save raft: %v", err)
	}
}

func TestRaftLogEmpty(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	checkRaftState(t, mustLoad(t, s), nil, nil, nil)
	// Saving nothing is a no-op, not an error.
	mustSave(t, s, nil, nil, nil, 0)
	checkRaftState(t, mustLoad(t, s), nil, nil, nil)
}

func TestRaftLogSaveLoad(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	mustSave(t, s, []byte("hs1"), ents(1, 5, "a"), nil, 0)
	checkRaftState(t, mustLoad(t, s), []byte("hs1"), nil, ents(1, 5, "a"))

	// Appending extends; a nil hard state leaves the stored one.
	mustSave(t, s, nil, ents(6, 7, "a"), nil, 0)
	checkRaftState(t, mustLoad(t, s), []byte("hs1"), nil, ents(1, 7, "a"))

	// An empty but non-nil hard state is saved and read back as saved.
	mustSave(t, s, []byte{}, nil, nil, 0)
	checkRaftState(t, mustLoad(t, s), []byte{}, nil, ents(1, 7, "a"))
}

// Raft doc.go, Usage step 1: "when writing an Entry with Index i, any
// previously-persisted entries with Index >= i must be discarded".
func TestRaftLogOverwriteSuffix(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	mustSave(t, s, []byte("hs1"), ents(1, 10, "old"), nil, 0)
	mustSave(t, s, []byte("hs2"), ents(4, 5, "new"), nil, 0)
	want := append(ents(1, 3, "old"), ents(4, 5, "new")...)
	checkRaftState(t, mustLoad(t, s), []byte("hs2"), nil, want)
}

func TestRaftLogSnapshot(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	mustSave(t, s, []byte("hs1"), ents(1, 10, "a"), nil, 0)

	// A snapshot deletes the entries it covers and keeps the rest.
	mustSave(t, s, nil, nil, []byte("snap6"), 6)
	checkRaftState(t, mustLoad(t, s), []byte("hs1"), []byte("snap6"), ents(7, 10, "a"))

	// Snapshot, entries and hard state in one call, as for a follower that
	// receives a snapshot from the leader: entries after the snapshot
	// replace the stored tail.
	mustSave(t, s, []byte("hs2"), ents(13, 14, "b"), []byte("snap12"), 12)
	checkRaftState(t, mustLoad(t, s), []byte("hs2"), []byte("snap12"), ents(13, 14, "b"))
}

func TestRaftLogCompact(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	mustSave(t, s, []byte("hs"), ents(1, 10, "a"), nil, 0)
	if err := s.CompactRaft(4); err != nil {
		t.Fatalf("compact: %v", err)
	}
	checkRaftState(t, mustLoad(t, s), []byte("hs"), nil, ents(5, 10, "a"))
	if err := s.CompactRaft(2); err != nil { // already gone: no-op
		t.Fatalf("compact: %v", err)
	}
	checkRaftState(t, mustLoad(t, s), []byte("hs"), nil, ents(5, 10, "a"))
	if err := s.CompactRaft(^uint64(0)); err != nil {
		t.Fatalf("compact all: %v", err)
	}
	checkRaftState(t, mustLoad(t, s), []byte("hs"), nil, nil)
}

func TestRaftLogRejectsBadInput(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	gap := []RaftEntry{{Index: 1, Data: []byte("x")}, {Index: 3, Data: []byte("y")}}
	if err := s.SaveRaft(nil, gap, nil, 0); err == nil {
		t.Errorf("save with a gap: got nil error; want one")
	}
	if err := s.SaveRaft(nil, ents(3, 4, "a"), []byte("snap"), 5); err == nil {
		t.Errorf("save entries covered by the snapshot: got nil error; want one")
	}
	checkRaftState(t, mustLoad(t, s), nil, nil, nil)
}

// Pair assertion: what the writer keeps contiguous, the reader checks.
func TestRaftLogLoadDetectsGap(t *testing.T) {
	s := openRaftTestStore(t, vfs.NewMem())
	defer s.Close()
	mustSave(t, s, nil, ents(1, 5, "a"), nil, 0)
	if err := s.db.Delete(raftEntryKey(3), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadRaft(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("load with a gap: got %v; want ErrCorrupt", err)
	}
}

func TestRaftLogSurvivesReopen(t *testing.T) {
	fs := vfs.NewMem()
	s := openRaftTestStore(t, fs)
	mustSave(t, s, []byte("hs"), ents(1, 8, "a"), nil, 0)
	mustSave(t, s, nil, nil, []byte("snap3"), 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openRaftTestStore(t, fs)
	defer s.Close()
	checkRaftState(t, mustLoad(t, s), []byte("hs"), []byte("snap3"), ents(4, 8, "a"))
}

// The raft keys stay inside their kind, whatever the index.
func TestRaftLogKeysInKind(t *testing.T) {
	for _, idx := range []uint64{0, 1, 1 << 40, ^uint64(0)} {
		k := raftEntryKey(idx)
		if k[0] != kindRaft || bytes.Compare(k, raftEntriesEnd()) >= 0 {
			t.Errorf("entry key %x for %d outside the raft entry range", k, idx)
		}
	}
	if bytes.Compare(raftEntriesThrough(^uint64(0)), raftEntriesEnd()) != 0 {
		t.Errorf("raftEntriesThrough(max) = %x; want %x", raftEntriesThrough(^uint64(0)), raftEntriesEnd())
	}
}
