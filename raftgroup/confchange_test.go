package raftgroup

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/store"
)

func confState(voters, learners []uint64) *pb.ConfState {
	return &pb.ConfState{Voters: voters, Learners: learners}
}

func confEntry(t *testing.T, cc pb.ConfChangeI) *pb.Entry {
	t.Helper()
	typ, data, err := pb.MarshalConfChange(cc)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.Entry{Type: typ.Enum(), Data: data, Index: new(uint64(7)), Term: new(uint64(1))}
}

func single(typ pb.ConfChangeType, id uint64) *pb.ConfChangeSingle {
	return &pb.ConfChangeSingle{Type: typ.Enum(), NodeId: new(id)}
}

// conditional is a conf change as proposeConf builds it.
func conditional(t *testing.T, ch *pb.ConfChangeSingle, expect confRole) *pb.ConfChangeV2 {
	t.Helper()
	b, err := encodeConfContext(&confContext{Proposer: 1, Boot: 2, Seq: 3, Expect: expect})
	if err != nil {
		t.Fatal(err)
	}
	return &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{ch}, Context: b}
}

func TestNextConfChange(t *testing.T) {
	cs := confState([]uint64{1, 2}, []uint64{3})
	lone := confState([]uint64{1}, []uint64{3})
	for _, tc := range []struct {
		cs      *pb.ConfState
		kind    ConfKind
		id      uint64
		want    pb.ConfChangeType
		expect  confRole
		done    bool
		wantErr error
	}{
		{cs: cs, kind: ConfAddLearner, id: 4, want: pb.ConfChangeAddLearnerNode, expect: roleAbsent},
		{cs: nil, kind: ConfAddLearner, id: 4, want: pb.ConfChangeAddLearnerNode, expect: roleAbsent},
		{cs: cs, kind: ConfAddLearner, id: 3, done: true},
		{cs: cs, kind: ConfAddLearner, id: 1, done: true},
		{cs: cs, kind: ConfPromote, id: 3, want: pb.ConfChangeAddNode, expect: roleLearner},
		{cs: cs, kind: ConfPromote, id: 2, done: true},
		{cs: cs, kind: ConfPromote, id: 4, wantErr: ErrNotMember},
		{cs: cs, kind: ConfDemote, id: 2, want: pb.ConfChangeAddLearnerNode, expect: roleVoter},
		{cs: cs, kind: ConfDemote, id: 3, done: true},
		{cs: cs, kind: ConfDemote, id: 4, wantErr: ErrNotMember},
		{cs: lone, kind: ConfDemote, id: 1, wantErr: ErrInvalid},
		{cs: cs, kind: ConfRemove, id: 2, want: pb.ConfChangeRemoveNode, expect: roleVoter},
		{cs: cs, kind: ConfRemove, id: 3, want: pb.ConfChangeRemoveNode, expect: roleLearner},
		{cs: cs, kind: ConfRemove, id: 4, done: true},
		{cs: lone, kind: ConfRemove, id: 1, wantErr: ErrInvalid},
		{cs: lone, kind: ConfRemove, id: 3, want: pb.ConfChangeRemoveNode, expect: roleLearner},
		{cs: cs, kind: ConfKind(99), id: 1, wantErr: ErrInvalid},
	} {
		t.Run(fmt.Sprintf("%v %d in %v", tc.kind, tc.id, tc.cs), func(t *testing.T) {
			ch, expect, done, err := nextConfChange(tc.cs, tc.kind, tc.id)
			switch {
			case tc.wantErr != nil:
				wantErr(t, "error", err, tc.wantErr)
			case err != nil:
				t.Fatalf("got error %v", err)
			case done != tc.done:
				t.Errorf("done: got %v; want %v", done, tc.done)
			case !tc.done && (ch.GetType() != tc.want || ch.GetNodeId() != tc.id || expect != tc.expect):
				t.Errorf("got %v %d expecting %v; want %v %d expecting %v",
					ch.GetType(), ch.GetNodeId(), expect, tc.want, tc.id, tc.expect)
			}
		})
	}
}

// Every replica decides a conf-change entry the same way, and refuses
// (instead of letting raft panic on) what raft cannot apply.
func TestDecideConfChange(t *testing.T) {
	cs := confState([]uint64{1}, []uint64{2})
	garbage := &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: []byte{0xff, 0xff}, Index: new(uint64(7))}
	badCtx := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{single(pb.ConfChangeAddNode, 2)}, Context: []byte{9, 9}}
	double := conditional(t, single(pb.ConfChangeAddNode, 2), roleLearner)
	double.Changes = append(double.Changes, single(pb.ConfChangeAddNode, 3))
	joint := &pb.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{1}, AutoLeave: new(true)}
	for _, tc := range []struct {
		name    string
		cs      *pb.ConfState
		e       *pb.Entry
		wantErr error // nil: applies
		ours    bool  // carries a context
	}{
		{"bootstrap entry on the empty config", nil, confEntry(t, &pb.ConfChange{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(uint64(1))}), nil, false},
		{"promote a learner", cs, confEntry(t, conditional(t, single(pb.ConfChangeAddNode, 2), roleLearner)), nil, true},
		{"add a learner", cs, confEntry(t, conditional(t, single(pb.ConfChangeAddLearnerNode, 3), roleAbsent)), nil, true},
		{"stale precondition", cs, confEntry(t, conditional(t, single(pb.ConfChangeAddLearnerNode, 2), roleAbsent)), errConfStale, true},
		{"duplicate of an applied removal", cs, confEntry(t, conditional(t, single(pb.ConfChangeRemoveNode, 3), roleLearner)), errConfStale, true},
		{"remove the last voter", cs, confEntry(t, conditional(t, single(pb.ConfChangeRemoveNode, 1), roleVoter)), ErrInvalid, true},
		{"unconditional removal of the last voter", cs, confEntry(t, &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{single(pb.ConfChangeRemoveNode, 1)}}), ErrInvalid, false},
		{"demote the last voter", cs, confEntry(t, &pb.ConfChange{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(1))}), ErrInvalid, false},
		{"leave a joint config that is not joint", cs, confEntry(t, &pb.ConfChangeV2{}), ErrInvalid, false},
		{"simple change in a joint config", joint, confEntry(t, &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{single(pb.ConfChangeAddLearnerNode, 4)}}), ErrInvalid, false},
		{"leave the joint config", joint, confEntry(t, &pb.ConfChangeV2{}), nil, false},
		{"two voters at once enter a joint config", cs, confEntry(t, &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{
			single(pb.ConfChangeAddNode, 2), single(pb.ConfChangeAddNode, 3)}}), nil, false},
		{"conditional change of two nodes", cs, confEntry(t, double), ErrInvalid, true},
		{"undecodable entry", cs, garbage, ErrInvalid, false},
		{"undecodable context", cs, confEntry(t, badCtx), ErrInvalid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideConfChange(tc.cs, tc.e)
			if tc.wantErr == nil {
				if d.err != nil || d.cc == nil {
					t.Fatalf("got %v; want the change to apply", d.err)
				}
			} else {
				wantErr(t, "decision", d.err, tc.wantErr)
				if d.cc != nil {
					t.Errorf("a refused change would be handed to raft")
				}
			}
			if (d.req != nil) != tc.ours {
				t.Errorf("context: got %+v; want present=%v", d.req, tc.ours)
			}
		})
	}
}

// waitConfig waits until g's configuration is voters and learners.
func waitConfig(t *testing.T, id uint64, g *Group, voters, learners []uint64) {
	t.Helper()
	testkit.WaitFor(t, testWait, func() error {
		v, l := g.Config()
		if !slices.Equal(v, voters) || !slices.Equal(l, learners) {
			return fmt.Errorf("node %d: config voters %v learners %v; want voters %v learners %v", id, v, l, voters, learners)
		}
		return nil
	})
}

func (c *cluster) waitConfig(voters, learners []uint64) {
	c.t.Helper()
	for id, g := range c.groups {
		waitConfig(c.t, id, g, voters, learners)
	}
}

// The no-ops and refusals of the membership API, on a one-voter group.
func TestConfChangeSingleVoter(t *testing.T) {
	c := newCluster(t, []uint64{1}, nil)
	ctx := testCtx(t)
	g := c.groups[1]
	if err := g.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitConfig([]uint64{1}, nil)

	wantErr(t, "add node 0", g.AddLearner(ctx, 0), ErrInvalid)
	if err := g.AddLearner(ctx, 1); err != nil {
		t.Errorf("add learner of a voter: %v", err)
	}
	ch := g.Changed()
	// Node 9 never runs: adding a learner needs nothing from it.
	if err := g.AddLearner(ctx, 9); err != nil {
		t.Fatalf("add learner: %v", err)
	}
	if !closed(ch) {
		t.Errorf("Changed not closed by a conf change")
	}
	c.waitConfig([]uint64{1}, []uint64{9}) // already true: the change applied here
	if err := g.AddLearner(ctx, 9); err != nil {
		t.Errorf("add learner again: %v", err)
	}
	wantErr(t, "promote a stranger", g.Promote(ctx, 8), ErrNotMember)
	wantErr(t, "demote a stranger", g.Demote(ctx, 8), ErrNotMember)
	if err := g.Remove(ctx, 8); err != nil {
		t.Errorf("remove a stranger: %v", err)
	}
	if err := g.Demote(ctx, 9); err != nil {
		t.Errorf("demote a learner: %v", err)
	}
	if err := g.Promote(ctx, 1); err != nil {
		t.Errorf("promote a voter: %v", err)
	}
	wantErr(t, "demote the last voter", g.Demote(ctx, 1), ErrInvalid)
	wantErr(t, "remove the last voter", g.Remove(ctx, 1), ErrInvalid)
	wantErr(t, "unknown step", g.ApplyConfStep(ctx, ConfStep{Kind: 0, ID: 9}), ErrInvalid)
	c.waitConfig([]uint64{1}, []uint64{9})

	// The configuration is restored from the log after a restart.
	c.restart(1)
	g = c.groups[1]
	c.waitConfig([]uint64{1}, []uint64{9})
	if err := g.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfStep(ctx, ConfStep{ConfRemove, 9}); err != nil {
		t.Fatalf("remove learner: %v", err)
	}
	c.waitConfig([]uint64{1}, nil)
}

// Conf changes raft would panic on, from a buggy or hostile proposer,
// are refused by every replica (apply) or at the door (Step), and the
// group keeps working.
func TestConfChangeRefusesWhatRaftCannotApply(t *testing.T) {
	c := newCluster(t, []uint64{1}, nil)
	ctx := testCtx(t)
	g := c.groups[1]
	if err := g.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	before := g.Meta().Applied
	// Unconditional, as another implementation might propose it; raft
	// checks nothing of it before it commits.
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{single(pb.ConfChangeRemoveNode, 1)}}
	if err := g.node.ProposeConfChange(ctx, cc); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, testWait, func() error {
		if got := g.Meta().Applied; got <= before {
			return fmt.Errorf("applied %d; want past %d", got, before)
		}
		return nil
	})
	c.waitConfig([]uint64{1}, nil)
	if _, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 1}); err != nil {
		t.Fatalf("init after a refused conf change: %v", err)
	}

	prop := func(ents ...*pb.Entry) []byte {
		b, err := proto.Marshal(&pb.Message{Type: pb.MsgProp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Entries: ents})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	garbage := &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: []byte{0xff, 0xff}}
	wantErr(t, "empty proposal", g.Step(ctx, prop()), ErrBadMessage)
	wantErr(t, "undecodable conf change", g.Step(ctx, prop(garbage)), ErrBadMessage)
	if _, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 1}); err != nil {
		t.Fatalf("init after refused messages: %v", err)
	}
}

// A group grows from one voter: two nodes join as learners and catch up
// through a snapshot (the leader compacted its log), both promote
// themselves at once, the leader dies, the other two elect a new one and
// remove it, and a restart keeps the configuration and the state
// (docs/design.md, Topology).
func TestConfChangeLifecycle(t *testing.T) {
	const snapEvery = 10
	c := newCluster(t, []uint64{1},
		func(cfg *Config) { cfg.SnapshotEntries, cfg.SnapshotCatchUpEntries = snapEvery, 2 })
	ctx := testCtx(t)
	g1 := c.groups[1]
	if err := g1.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g1.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 4, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// Write until the leader took a snapshot and compacted its log, and
	// is far enough from the next one that adding a learner does not
	// bring it on: the learner must get a snapshot that names it, which
	// only the snapshot taken for a new member is.
	for i := 0; ; i++ {
		if i > 10*snapEvery {
			t.Fatalf("no snapshot after %d writes", i)
		}
		if err := g1.CAS(ctx, CAS{Partition: 0, PrevEpoch: uint64(i), Epoch: uint64(i + 1), Cohort: []uint64{1}, Leader: 1}); err != nil {
			t.Fatalf("cas %d: %v", i, err)
		}
		// The persisted snapshot may lag the one taken: that only widens
		// the distance to the next.
		snap := persistedSnapIndex(t, c.stores[1])
		if applied := g1.Meta().Applied; snap > 0 && applied-snap <= snapEvery/2 {
			break
		}
	}
	testkit.WaitFor(t, testWait, func() error { // compaction follows the snapshot
		if first, _ := g1.storage.FirstIndex(); first <= 2 {
			return fmt.Errorf("leader's log starts at %d: not compacted", first)
		}
		return nil
	})

	for _, id := range []uint64{2, 3} {
		c.join(id)
		if err := g1.AddLearner(ctx, id); err != nil {
			t.Fatalf("add learner %d: %v", id, err)
		}
		c.converged(g1.Meta())
		if c.groups[id].snapshotsInstalled.Load() == 0 {
			t.Errorf("node %d caught up without a snapshot", id)
		}
	}
	c.waitConfig([]uint64{1}, []uint64{2, 3})

	// Each learner promotes itself: its proposal is forwarded to the
	// leader.
	concurrently(t, func() error { return c.groups[2].Promote(ctx, 2) }, func() error { return c.groups[3].Promote(ctx, 3) })
	c.waitConfig([]uint64{1, 2, 3}, nil)
	if err := c.groups[3].CAS(ctx, CAS{Partition: 1, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1, 2, 3}, Leader: 3}); err != nil {
		t.Fatalf("cas from a promoted node: %v", err)
	}
	c.converged(c.groups[3].Meta())

	lead := c.leader()
	c.kill(lead)
	newLead := c.leader()
	if newLead == lead {
		t.Fatalf("leader %d survived its own close", lead)
	}
	s := c.groups[newLead]
	if err := s.CAS(ctx, CAS{Partition: 1, PrevEpoch: 1, Epoch: 2, Cohort: []uint64{newLead}, Leader: newLead}); err != nil {
		t.Fatalf("cas after the leader died: %v", err)
	}
	if err := s.Remove(ctx, lead); err != nil {
		t.Fatalf("remove the dead leader: %v", err)
	}
	var survivors []uint64
	for _, id := range c.ids {
		if c.groups[id] != nil {
			survivors = append(survivors, id)
		}
	}
	c.waitConfig(survivors, nil)
	c.converged(s.Meta())

	// Restart a survivor: configuration and state come back from its store
	// (a snapshot plus the log after it), and the two voters commit again.
	r := c.follower(newLead)
	want := c.groups[r].Meta()
	c.restart(r)
	waitConfig(t, r, c.groups[r], survivors, nil)
	testkit.WaitFor(t, testWait, func() error { return sameContent(c.groups[r].Meta(), want) })
	prev := want.Partitions[1].Epoch
	if err := c.groups[r].CAS(ctx, CAS{Partition: 1, PrevEpoch: prev, Epoch: prev + 1, Cohort: survivors, Leader: r}); err != nil {
		t.Fatalf("cas from the restarted node: %v", err)
	}
	c.converged(c.groups[r].Meta())
}

// A voter demotes and promotes itself; the leader removes itself and
// steps down, and no longer proposes; the last two shrink to one, which
// leads alone.
func TestConfChangeRemoveSelf(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3}, nil)
	ctx := testCtx(t)
	lead := c.leader()
	if _, err := c.groups[lead].Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 2, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	f := c.follower(lead)
	others := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == f })
	if err := c.groups[f].Demote(ctx, f); err != nil {
		t.Fatalf("demote self: %v", err)
	}
	c.waitConfig(others, []uint64{f})
	if err := c.groups[f].Promote(ctx, f); err != nil {
		t.Fatalf("promote self: %v", err)
	}
	c.waitConfig(c.ids, nil)

	g := c.groups[lead]
	if err := g.Remove(ctx, lead); err != nil {
		t.Fatalf("leader removes itself: %v", err)
	}
	rest := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == lead })
	waitConfig(t, lead, g, rest, nil)
	wantErr(t, "cas on a removed node", g.CAS(ctx, CAS{Partition: 0, PrevEpoch: 0, Epoch: 1, Cohort: rest, Leader: rest[0]}), ErrRemoved)
	wantErr(t, "add learner on a removed node", g.AddLearner(ctx, 7), ErrRemoved)
	testkit.WaitFor(t, testWait, func() error {
		if st := g.node.Status(); st.RaftState != raft.StateFollower {
			return fmt.Errorf("removed leader is %v", st.RaftState)
		}
		return nil
	})
	// It stays attached to the network, but nobody talks to it and it
	// does not campaign: the others elect a leader among themselves.
	delete(c.groups, lead)
	newLead := c.leader()
	if err := c.groups[newLead].CAS(ctx, CAS{Partition: 0, PrevEpoch: 0, Epoch: 1, Cohort: rest, Leader: newLead}); err != nil {
		t.Fatalf("cas after the leader left: %v", err)
	}
	c.waitConfig(rest, nil)
	if st := g.node.Status(); st.RaftState != raft.StateFollower || g.Leader() != 0 {
		t.Errorf("removed node: state %v, leader %d; want a follower that knows no leader", st.RaftState, g.Leader())
	}

	// A follower removes itself; the last voter leads alone.
	f = c.follower(newLead)
	if err := c.groups[f].Remove(ctx, f); err != nil {
		t.Fatalf("follower removes itself: %v", err)
	}
	delete(c.groups, f)
	c.waitConfig([]uint64{newLead}, nil)
	if got := c.leader(); got != newLead {
		t.Errorf("leader: got %d; want %d", got, newLead)
	}
	if err := c.groups[newLead].CAS(ctx, CAS{Partition: 0, PrevEpoch: 1, Epoch: 2, Cohort: []uint64{newLead}, Leader: newLead}); err != nil {
		t.Fatalf("cas on the last voter: %v", err)
	}
}

// raft drops a conf change proposed while another is pending, without a
// word: it appends an empty entry instead. The proposer notices nothing
// but the silence, and proposes again until its change applies.
func TestConfChangeDroppedIsProposedAgain(t *testing.T) {
	// A long election timeout, so the leader keeps its term while its
	// followers are cut off (CheckQuorum would depose it after one to two
	// timeouts) and the retry below is the timer's, not a leader change's.
	c := newCluster(t, []uint64{1, 2, 3}, func(cfg *Config) { cfg.ElectionTicks = 50 })
	ctx := testCtx(t)
	lead := c.leader()
	g := c.groups[lead]
	base, err := g.storage.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	c.net.isolate(lead, c.ids)
	// A cannot commit while the followers are cut off, so it stays pending.
	a := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{single(pb.ConfChangeAddLearnerNode, 5)}}
	if err := g.node.ProposeConfChange(ctx, a); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- g.AddLearner(ctx, 6) }()
	testkit.WaitFor(t, testWait, func() error {
		last, _ := g.storage.LastIndex()
		if last < base+2 {
			return fmt.Errorf("leader's log ends at %d; want %d", last, base+2)
		}
		return nil
	})
	ents, err := g.storage.Entries(base+1, base+3, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].GetType() != pb.EntryConfChangeV2 || ents[1].GetType() != pb.EntryNormal || len(ents[1].GetData()) != 0 {
		t.Fatalf("entries %v; want the conf change, then the second one dropped to an empty entry", ents)
	}
	c.net.heal()
	if err := <-errc; err != nil {
		t.Fatalf("add learner after a drop: %v", err)
	}
	c.waitConfig(c.ids, []uint64{5, 6})
}

// Proposals waiting when this node applies its own removal end with
// ErrRemoved, unless their result came with the removal.
func TestRemovalWakesWaiters(t *testing.T) {
	g, err := New(singleConfig(t, testStore(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := testCtx(t)
	g.removed.Store(true)
	g.removedOnce.Do(func() { close(g.removedc) })
	leaderCh := make(chan struct{})
	_, again, err := g.awaitApply(ctx, make(chan result, 1), &leaderCh, nil)
	if again || !errors.Is(err, ErrRemoved) {
		t.Errorf("waiting proposal: got again=%v, %v; want %v", again, err, ErrRemoved)
	}
	ch := make(chan result, 1)
	ch <- result{}
	if _, again, err := g.awaitApply(ctx, ch, &leaderCh, nil); again || err != nil {
		t.Errorf("applied proposal: got again=%v, %v; want its result", again, err)
	}
	if _, err := g.register(); !errors.Is(err, ErrClosed) {
		t.Errorf("register before start: got %v; want %v", err, ErrClosed)
	}
}

// persistedSnapIndex is the index of the snapshot in st, 0 if none.
func persistedSnapIndex(t *testing.T, st *store.Store) uint64 {
	t.Helper()
	rs, err := st.LoadRaft()
	if err != nil {
		t.Fatal(err)
	}
	if rs.Snapshot == nil {
		return 0
	}
	snap := &pb.Snapshot{}
	if err := proto.Unmarshal(rs.Snapshot, snap); err != nil {
		t.Fatal(err)
	}
	return snap.GetMetadata().GetIndex()
}

// concurrently runs fs at once and fails the test with their errors.
func concurrently(t *testing.T, fs ...func() error) {
	t.Helper()
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, f := range fs {
		wg.Go(func() {
			<-start
			errs[i] = f()
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
