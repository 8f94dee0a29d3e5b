package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"github.com/skuldd/skuldd/internal/invariant"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// run is the raft goroutine: the one owner of g.node's Ready stream, of
// the MemoryStorage writes and of the live state machine. It exits when
// Close closes stopc.
func (g *Group) run() {
	defer close(g.donec)
	defer g.leader.Store(0)
	defer g.node.Stop()
	// Only Campaign takes ctx; raft's goroutine serves it until Stop, which
	// happens after the loop, so this never blocks for long.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticker := time.NewTicker(g.cfg.TickInterval)
	defer ticker.Stop()

	g.maybeCampaign(ctx)
	for {
		select {
		case <-ticker.C:
			g.node.Tick()
		case rd := <-g.node.Ready():
			g.handleReady(ctx, &rd)
		case <-g.stopc:
			return
		}
	}
}

// handleReady follows raft's doc.go Usage, steps 1-4:
//
//  1. persist snapshot, entries and hard state (one synced batch), and
//     make them visible to raft through the MemoryStorage;
//  2. send the messages, which may depend on what step 1 persisted;
//  3. apply the snapshot and the committed entries;
//  4. Advance;
//
// then it campaigns if this node became the only voter.
//
// A failed persist is fatal: the Ready is consumed and raft believes it
// durable, so the only safe way on is to crash and recover from disk.
func (g *Group) handleReady(ctx context.Context, rd *raft.Ready) {
	if rd.SoftState != nil {
		g.setLeader(rd.SoftState.Lead)
	}
	if err := g.persist(rd); err != nil {
		g.fatal("persist ready", err)
	}
	hasSnap := !raft.IsEmptySnap(rd.Snapshot)
	if hasSnap {
		if err := g.storage.ApplySnapshot(rd.Snapshot); err != nil {
			g.fatal("install snapshot in memory storage", err)
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := g.storage.SetHardState(rd.HardState); err != nil {
			g.fatal("set hard state", err)
		}
	}
	if err := g.storage.Append(rd.Entries); err != nil {
		g.fatal("append entries to memory storage", err)
	}
	g.send(rd.Messages)

	changed := false
	if hasSnap {
		g.installSnapshot(rd.Snapshot)
		changed = true
	}
	deliveries, entriesChanged := g.applyCommitted(rd.CommittedEntries)
	if hasSnap || len(rd.CommittedEntries) > 0 {
		g.publish(changed || entriesChanged, deliveries)
	}
	if g.removed.Load() {
		// After publish: Remove of this node gets its result first.
		g.removedOnce.Do(func() { close(g.removedc) })
	}
	g.maybeSnapshot()
	g.node.Advance()
	// After Advance: raft refuses to campaign while a committed conf
	// change is not yet acknowledged as applied, and Advance is that
	// acknowledgement (raft's goroutine handles it before the campaign).
	g.maybeCampaign(ctx)
}

// send marshals and hands the messages to the transport. A MsgSnap is
// reported as delivered as soon as it is handed over: the transport cannot
// tell, and a snapshot that was in fact lost is noticed when the follower
// rejects the next append, after which raft sends the snapshot again.
// Without that report the follower would stay paused for good.
func (g *Group) send(msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	out := make([]Outbound, 0, len(msgs))
	var snapTo []uint64
	for _, m := range msgs {
		to := m.GetTo()
		if to == g.cfg.NodeID || to == 0 {
			panic(fmt.Sprintf("raftgroup: node %d: raft addressed %v to node %d", g.cfg.NodeID, m.GetType(), to))
		}
		data, err := proto.Marshal(m)
		if err != nil {
			g.fatal("marshal message", err)
		}
		out = append(out, Outbound{To: to, Data: data})
		if m.GetType() == pb.MsgSnap {
			snapTo = append(snapTo, to)
		}
	}
	if g.cfg.Transport == nil {
		// Validate allows no transport only for a lone voter, which raft
		// never makes send; a conf change that added a peer breaks that.
		g.dropUnsendable(out)
		for _, to := range snapTo {
			g.node.ReportSnapshot(to, raft.SnapshotFailure)
		}
		return
	}
	g.cfg.Transport.Send(out)
	for _, to := range snapTo {
		g.node.ReportSnapshot(to, raft.SnapshotFinish)
	}
}

func (g *Group) dropUnsendable(out []Outbound) {
	g.dropped += len(out)
	if now := time.Now(); now.Sub(g.lastDrop) >= dropLogInterval {
		g.log.Error("raft messages dropped: no transport configured", "dropped", g.dropped, "to", out[0].To)
		g.dropped, g.lastDrop = 0, now
	}
}

// delivery is a result for a local proposer, handed over after publish.
type delivery struct {
	seq uint64
	res result
}

// applyCommitted applies entries in order and reports the results for
// this instance's proposers and whether Meta's content changed.
func (g *Group) applyCommitted(ents []*pb.Entry) ([]delivery, bool) {
	if len(ents) == 0 {
		return nil, false
	}
	if first := ents[0].GetIndex(); first > g.state.Applied+1 {
		panic(fmt.Sprintf("raftgroup: node %d: first committed entry %d is past applied %d + 1",
			g.cfg.NodeID, first, g.state.Applied))
	}
	var out []delivery
	changed := false
	for _, e := range ents {
		idx := e.GetIndex()
		if idx <= g.state.Applied {
			continue // already in the state (restored from a snapshot)
		}
		switch e.GetType() {
		case pb.EntryNormal:
			d, ok, ch := g.applyNormal(idx, e.GetData())
			changed = changed || ch
			if ok {
				out = append(out, d)
			}
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			d, ok, ch := g.applyConfChange(e)
			changed = changed || ch
			if ok {
				out = append(out, d)
			}
		default:
			panic(fmt.Sprintf("raftgroup: node %d: entry %d of unknown type %v", g.cfg.NodeID, idx, e.GetType()))
		}
		g.state.Applied = idx
	}
	return out, changed
}

// applyNormal applies one command entry. It returns the delivery for a
// local proposer (ok) and whether the state changed.
func (g *Group) applyNormal(idx uint64, data []byte) (d delivery, ok, changed bool) {
	if len(data) == 0 {
		return delivery{}, false, false // a new leader's empty entry
	}
	cmd, err := decodeCommand(data)
	if err := invariant.Check(err == nil, g.log, "every committed entry decodes", "index", idx, "err", err); err != nil {
		// Skip it: every replica fails the same way on the same bytes, so
		// skipping keeps them equal; crashing would crash every replica
		// forever.
		return delivery{}, false, false
	}
	res, changed := applyCommand(&g.state, &cmd)
	if res.err != nil {
		g.log.Debug("command refused", "index", idx, "op", cmd.Op, "proposer", cmd.Proposer, "err", res.err)
	}
	if cmd.Proposer != g.cfg.NodeID || cmd.Boot != g.boot {
		return delivery{}, false, changed
	}
	return delivery{seq: cmd.Seq, res: res}, true, changed
}

// applyConfChange applies one conf-change entry, or refuses it as every
// replica does (decideConfChange): a change whose precondition no longer
// holds, or one raft's ApplyConfChange would panic on (removing the last
// voter, say; raft checks neither when the change is proposed). A refused
// change is not handed to raft at all, so raft's configuration and
// confState stay equal on every replica. It returns the delivery for a
// local proposer (ok) and whether the configuration changed.
func (g *Group) applyConfChange(e *pb.Entry) (d delivery, ok, changed bool) {
	dec := decideConfChange(g.confState, e)
	if dec.err != nil {
		g.log.Warn("conf change refused", "index", e.GetIndex(), "err", dec.err)
	} else {
		wasMember := confRoleOf(g.confState, g.cfg.NodeID) != roleAbsent
		g.confState = g.node.ApplyConfChange(dec.cc)
		changed = true
		g.log.Info("conf change applied", "index", e.GetIndex(), "change", describeConfChange(dec.cc),
			"voters", g.confState.GetVoters(), "learners", g.confState.GetLearners())
		if wasMember && confRoleOf(g.confState, g.cfg.NodeID) == roleAbsent {
			g.removed.Store(true)
			g.log.Warn("this node was removed from the raft group; it no longer proposes or campaigns")
		}
	}
	req := dec.req
	if req == nil || req.Proposer != g.cfg.NodeID || req.Boot != g.boot {
		return delivery{}, false, changed
	}
	return delivery{seq: req.Seq, res: result{err: dec.err}}, true, changed
}

func decodeConfChange(e *pb.Entry) (pb.ConfChangeI, error) {
	if e.GetType() == pb.EntryConfChange {
		c := &pb.ConfChange{}
		return c, proto.Unmarshal(e.GetData(), c)
	}
	c := &pb.ConfChangeV2{}
	return c, proto.Unmarshal(e.GetData(), c)
}

// installSnapshot replaces the state machine with a snapshot the leader
// sent (raftexample publishSnapshot).
func (g *Group) installSnapshot(snap *pb.Snapshot) {
	idx := snap.GetMetadata().GetIndex()
	if idx <= g.state.Applied {
		panic(fmt.Sprintf("raftgroup: node %d: snapshot index %d not past applied %d", g.cfg.NodeID, idx, g.state.Applied))
	}
	m, err := decodeSnapshot(snap.GetData())
	if err != nil {
		g.fatal(fmt.Sprintf("decode snapshot %d from the leader", idx), err)
	}
	if m.Applied != idx {
		g.fatal("install snapshot", fmt.Errorf("snapshot at index %d holds the state at %d", idx, m.Applied))
	}
	g.state = m
	g.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	g.snapIndex = idx
	g.snapConf = g.confState
	g.snapshotsInstalled.Add(1)
	g.log.Info("installed snapshot from leader", "index", idx)
}

// publish makes the state visible to callers, wakes Changed waiters, then
// hands results to local proposers. Publishing first means a proposer that
// returns sees its own command in Meta.
func (g *Group) publish(changed bool, deliveries []delivery) {
	m := g.state.Clone()
	conf := cloneConfState(g.confState)
	type handoff struct {
		ch  chan result
		res result
	}
	var hand []handoff
	g.mu.Lock()
	g.mu.meta = m
	g.mu.conf = conf
	if changed {
		close(g.mu.changed)
		g.mu.changed = make(chan struct{})
	}
	for _, d := range deliveries {
		if ch, ok := g.mu.waiters[d.seq]; ok {
			delete(g.mu.waiters, d.seq)
			hand = append(hand, handoff{ch, d.res})
		}
	}
	g.mu.Unlock()
	for _, h := range hand {
		h.ch <- h.res // capacity 1 and this is its only send: never blocks
	}
}

// maybeSnapshot takes a snapshot once SnapshotEntries entries were applied
// since the last one, persists it (the store drops the entries it covers),
// and compacts the in-memory log, keeping SnapshotCatchUpEntries entries
// for followers that are a little behind.
//
// It also takes one as soon as a member was added that the latest
// snapshot does not name: raft refuses a snapshot whose ConfState lacks
// the recipient, so once the log before it is compacted, a new learner
// could not catch up until SnapshotEntries more entries were applied.
// Before the first snapshot the log is whole and nothing is needed.
func (g *Group) maybeSnapshot() {
	applied := g.state.Applied
	due := applied-g.snapIndex >= g.cfg.SnapshotEntries
	if !due && g.snapIndex > 0 && applied > g.snapIndex && !confCovers(g.snapConf, g.confState) {
		due = true
	}
	if !due {
		return
	}
	if len(g.confState.GetVoters()) == 0 {
		panic(fmt.Sprintf("raftgroup: node %d: snapshot at %d without voters", g.cfg.NodeID, applied))
	}
	data, err := encodeSnapshot(&g.state)
	if err != nil {
		g.fatal("encode snapshot", err)
	}
	snap, err := g.storage.CreateSnapshot(applied, g.confState, data)
	if err != nil {
		g.fatal("create snapshot", err)
	}
	b, err := proto.Marshal(snap)
	if err != nil {
		g.fatal("marshal snapshot", err)
	}
	if err := g.cfg.Store.SaveRaft(nil, nil, b, applied); err != nil {
		g.fatal("persist snapshot", err)
	}
	g.snapIndex = applied
	g.snapConf = snap.GetMetadata().GetConfState()
	if keep := g.cfg.SnapshotCatchUpEntries; applied > keep {
		err := g.storage.Compact(applied - keep)
		if err != nil && !errors.Is(err, raft.ErrCompacted) {
			g.fatal("compact memory log", err)
		}
	}
	g.log.Debug("snapshot taken", "index", applied, "bytes", len(b))
}

// maybeCampaign starts an election at once when this node is the only
// voter: nobody else can win, so waiting out an election timeout only
// delays the first proposal. It checks the ConfState this goroutine
// applied, which is the one raft itself holds, so raft is ready to
// campaign when the check passes.
func (g *Group) maybeCampaign(ctx context.Context) {
	if g.leader.Load() != 0 || g.node.Status().RaftState != raft.StateFollower {
		return
	}
	cs := g.confState
	if len(cs.GetVoters()) != 1 || cs.GetVoters()[0] != g.cfg.NodeID || len(cs.GetVotersOutgoing()) != 0 {
		return
	}
	// raft may refuse (a committed conf change not yet applied): this
	// runs again after the next Ready. Only a follower campaigns: a
	// campaign restarts any election under way, and a lone voter's own
	// election needs a few Readies (its vote to itself) to finish.
	if err := g.node.Campaign(ctx); err != nil {
		g.log.Warn("campaign failed; waiting for the election timeout", "err", err)
	}
}

// fatal crashes the node: see handleReady.
func (g *Group) fatal(what string, err error) {
	g.log.Error("fatal raft group error", "op", what, "err", err)
	panic(fmt.Sprintf("raftgroup: node %d: %s: %v", g.cfg.NodeID, what, err))
}
