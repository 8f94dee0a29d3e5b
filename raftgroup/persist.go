package raftgroup

import (
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/skuldd/skuldd/store"
)

// restored is what Start rebuilds from the store: raft's MemoryStorage
// filled like raftexample's WAL replay (snapshot, then hard state, then
// entries), and the state machine as of the snapshot. Entries after the
// snapshot are applied again through raft, as on any node.
type restored struct {
	storage   *raft.MemoryStorage
	meta      Meta
	confState *pb.ConfState // nil without a snapshot
	snapIndex uint64
	// hasLog is false for a store that never saved raft state: only then
	// may the group bootstrap from Config.Peers.
	hasLog bool
}

// restore checks what it reads: the store checked the entries are
// contiguous; here each entry must carry the index it is stored under,
// the log must start right after the snapshot, and the commit index must
// lie within the log (raft would panic on it otherwise).
func restore(rs store.RaftState) (restored, error) {
	r := restored{
		storage: raft.NewMemoryStorage(),
		meta:    Meta{Members: map[uint64]Member{}},
		hasLog:  rs.Snapshot != nil || rs.HardState != nil || len(rs.Entries) > 0,
	}
	if rs.Snapshot != nil {
		if err := r.restoreSnapshot(rs.Snapshot); err != nil {
			return restored{}, err
		}
	}
	ents := make([]*pb.Entry, 0, len(rs.Entries))
	for i, se := range rs.Entries {
		e := &pb.Entry{}
		if err := proto.Unmarshal(se.Data, e); err != nil {
			return restored{}, fmt.Errorf("entry %d: %w", se.Index, err)
		}
		if e.GetIndex() != se.Index {
			return restored{}, fmt.Errorf("entry stored at %d has index %d", se.Index, e.GetIndex())
		}
		if i == 0 && se.Index != r.snapIndex+1 {
			return restored{}, fmt.Errorf("log starts at %d, snapshot is at %d", se.Index, r.snapIndex)
		}
		ents = append(ents, e)
	}
	if err := r.storage.Append(ents); err != nil {
		return restored{}, fmt.Errorf("append entries: %w", err)
	}
	if rs.HardState != nil {
		hs := &pb.HardState{}
		if err := proto.Unmarshal(rs.HardState, hs); err != nil {
			return restored{}, fmt.Errorf("hard state: %w", err)
		}
		last, _ := r.storage.LastIndex() // MemoryStorage never fails
		if hs.GetCommit() < r.snapIndex || hs.GetCommit() > last {
			return restored{}, fmt.Errorf("commit index %d outside the log [%d, %d]", hs.GetCommit(), r.snapIndex, last)
		}
		if err := r.storage.SetHardState(hs); err != nil {
			return restored{}, fmt.Errorf("hard state: %w", err)
		}
	}
	return r, nil
}

func (r *restored) restoreSnapshot(b []byte) error {
	snap := &pb.Snapshot{}
	if err := proto.Unmarshal(b, snap); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if raft.IsEmptySnap(snap) {
		return fmt.Errorf("snapshot: stored snapshot is empty")
	}
	m, err := decodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	idx := snap.GetMetadata().GetIndex()
	if m.Applied != idx {
		return fmt.Errorf("snapshot at index %d holds the state at %d", idx, m.Applied)
	}
	if err := r.storage.ApplySnapshot(snap); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	r.meta = m
	r.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	r.snapIndex = idx
	return nil
}

// persist writes a Ready's snapshot, entries and hard state in one synced
// batch: after a crash either all of them are on disk or none is, so raft
// never restarts with a hard state that commits entries it lacks.
func (g *Group) persist(rd *raft.Ready) error {
	var hs, snap []byte
	var snapIndex uint64
	var err error
	if !raft.IsEmptyHardState(rd.HardState) {
		if hs, err = proto.Marshal(rd.HardState); err != nil {
			return fmt.Errorf("marshal hard state: %w", err)
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if snap, err = proto.Marshal(rd.Snapshot); err != nil {
			return fmt.Errorf("marshal snapshot: %w", err)
		}
		snapIndex = rd.Snapshot.GetMetadata().GetIndex()
	}
	ents := make([]store.RaftEntry, 0, len(rd.Entries))
	for _, e := range rd.Entries {
		b, err := proto.Marshal(e)
		if err != nil {
			return fmt.Errorf("marshal entry %d: %w", e.GetIndex(), err)
		}
		ents = append(ents, store.RaftEntry{Index: e.GetIndex(), Data: b})
	}
	if hs == nil && snap == nil && len(ents) == 0 {
		return nil
	}
	return g.cfg.Store.SaveRaft(hs, ents, snap, snapIndex)
}
