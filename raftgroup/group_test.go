package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/store"
)

func metaEqual(a, b Meta) bool { return reflect.DeepEqual(a, b) }

func fmtMeta(m Meta) string {
	cfg := "nil"
	if m.Config != nil {
		cfg = fmt.Sprintf("%+v", *m.Config)
	}
	return fmt.Sprintf("{Config:%s Members:%v Partitions:%v Queues:%v Schedules:%v Applied:%d}", cfg, m.Members, m.Partitions, m.Queues, m.Schedules, m.Applied)
}

func singleConfig(t *testing.T, st *store.Store) Config {
	cfg := DefaultLocalConfig()
	cfg.NodeID = 1
	cfg.Peers = []uint64{1}
	cfg.Store = st
	cfg.Logger = testkit.Logger(t)
	return cfg
}

func startGroup(t *testing.T, cfg Config) *Group {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := g.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v; want %v", what, err, want)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A lone voter leads at once. The tick is a full second, so an election
// timeout would take 10-20s: a leader within the deadline below can only
// come from the immediate campaign.
func TestSingleVoterCampaignsAtOnce(t *testing.T) {
	cfg := singleConfig(t, testStore(t))
	cfg.TickInterval = time.Second
	g := startGroup(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.WaitLeader(ctx); err != nil {
		t.Fatalf("wait leader: %v", err)
	}
	if got := g.Leader(); got != 1 {
		t.Errorf("leader: got %d; want 1", got)
	}
	// Proposals commit without ticks.
	if _, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 1}); err != nil {
		t.Errorf("init: %v", err)
	}
}

func TestSingleVoterOperations(t *testing.T) {
	g := startGroup(t, singleConfig(t, testStore(t)))
	ctx := testCtx(t)
	if err := g.WaitLeader(ctx); err != nil {
		t.Fatalf("wait leader: %v", err)
	}

	err := g.CAS(ctx, CAS{Partition: 0, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1}, Leader: 1})
	wantErr(t, "cas before init", err, ErrNotInitialized)

	want := ClusterConfig{ClusterID: "c1", Partitions: 8, Replicas: 3, CreatedAt: 1000}
	got, err := g.Init(ctx, want)
	if err != nil || got != want {
		t.Fatalf("init: got %+v, %v; want %+v", got, err, want)
	}
	// Equal P and N: the first config stands.
	got, err = g.Init(ctx, ClusterConfig{ClusterID: "c2", Partitions: 8, Replicas: 3, CreatedAt: 2000})
	if err != nil || got != want {
		t.Errorf("init again: got %+v, %v; want %+v", got, err, want)
	}
	_, err = g.Init(ctx, ClusterConfig{ClusterID: "c1", Partitions: 16, Replicas: 3})
	wantErr(t, "init with other partitions", err, ErrConfigMismatch)
	if err != nil && (!strings.Contains(err.Error(), "partitions=8") || !strings.Contains(err.Error(), "partitions=16")) {
		t.Errorf("mismatch error %q does not name both values", err)
	}
	_, err = g.Init(ctx, ClusterConfig{ClusterID: "c1", Partitions: 0, Replicas: 3})
	wantErr(t, "init with 0 partitions", err, ErrInvalid)

	m := Member{ID: 1, Addr: "127.0.0.1:13000", Since: 1000}
	if err := g.PutMember(ctx, m); err != nil {
		t.Fatalf("put member: %v", err)
	}
	wantErr(t, "put member 0", g.PutMember(ctx, Member{ID: 0, Addr: "x:1"}), ErrInvalid)

	ch := g.Changed()
	if err := g.CAS(ctx, CAS{Partition: 3, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1}, Leader: 1}); err != nil {
		t.Fatalf("cas: %v", err)
	}
	if !closed(ch) {
		t.Errorf("Changed not closed after a successful cas")
	}
	meta := g.Meta()
	if meta.Config == nil || *meta.Config != want {
		t.Errorf("config: got %+v; want %+v", meta.Config, want)
	}
	if meta.Members[1] != m {
		t.Errorf("member: got %+v; want %+v", meta.Members[1], m)
	}
	if p := meta.Partitions[3]; p.Epoch != 1 || p.Leader != 1 || !reflect.DeepEqual(p.Cohort, []uint64{1}) {
		t.Errorf("partition 3: got %+v", p)
	}
	if len(meta.Partitions) != 8 {
		t.Errorf("partitions: got %d; want 8", len(meta.Partitions))
	}

	ch = g.Changed()
	err = g.CAS(ctx, CAS{Partition: 3, PrevEpoch: 0, Epoch: 2, Cohort: []uint64{1}, Leader: 1})
	wantErr(t, "cas with a stale prev epoch", err, ErrCASConflict)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Current.Epoch != 1 || ce.Current.Leader != 1 {
		t.Errorf("conflict: got %v; want a *ConflictError at epoch 1, leader 1", err)
	}
	if closed(ch) {
		t.Errorf("Changed closed by a cas that failed")
	}
	err = g.CAS(ctx, CAS{Partition: 3, PrevEpoch: 1, Epoch: 1, Cohort: []uint64{1}, Leader: 1})
	wantErr(t, "cas with epoch == prev", err, ErrInvalid)
	err = g.CAS(ctx, CAS{Partition: 8, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1}, Leader: 1})
	wantErr(t, "cas on partition 8 of 8", err, ErrBadPartition)
	err = g.CAS(ctx, CAS{Partition: -1, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1}, Leader: 1})
	wantErr(t, "cas on partition -1", err, ErrBadPartition)
	err = g.CAS(ctx, CAS{Partition: 2, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1}, Leader: 2})
	wantErr(t, "cas with a leader outside the cohort", err, ErrInvalid)

	// Meta is a deep copy.
	meta.Partitions[3].Cohort[0] = 99
	meta.Config.Partitions = 1
	if again := g.Meta(); again.Partitions[3].Cohort[0] != 1 || again.Config.Partitions != 8 {
		t.Errorf("Meta aliases the group's state")
	}
}

// Restart must restore exactly, from the log alone and from snapshots plus
// a compacted log.
func TestRestartRestoresMeta(t *testing.T) {
	for _, tc := range []struct {
		name      string
		snapEvery uint64
	}{
		{"log replay", 100000},
		{"snapshots and compaction", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			st := openStore(t, fs)
			cfg := singleConfig(t, st)
			cfg.SnapshotEntries = tc.snapEvery
			g := startGroup(t, cfg)
			ctx := testCtx(t)
			const parts, rounds = 4, 50
			if _, err := g.Init(ctx, ClusterConfig{ClusterID: "c1", Partitions: parts, Replicas: 3, CreatedAt: 7}); err != nil {
				t.Fatal(err)
			}
			for id := uint64(1); id <= 3; id++ {
				if err := g.PutMember(ctx, Member{ID: id, Addr: fmt.Sprintf("10.0.0.%d:13000", id), Since: int64(id)}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range rounds {
				p := i % parts
				prev := uint64(i / parts)
				c := CAS{Partition: p, PrevEpoch: prev, Epoch: prev + 1, Cohort: []uint64{1, 2, 3}, Leader: uint64(i%3 + 1)}
				if err := g.CAS(ctx, c); err != nil {
					t.Fatalf("cas %d: %v", i, err)
				}
			}
			before := g.Meta()
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			rs, err := st.LoadRaft()
			if err != nil {
				t.Fatal(err)
			}
			if tc.snapEvery < rounds {
				if got := persistedVoters(t, st); !reflect.DeepEqual(got, []uint64{1}) {
					t.Errorf("voters in the snapshot: got %v; want [1]", got)
				}
				if len(rs.Entries) > 0 && rs.Entries[0].Index <= tc.snapEvery {
					t.Errorf("log not compacted: first entry %d", rs.Entries[0].Index)
				}
			} else if rs.Snapshot != nil {
				t.Errorf("snapshot persisted with snapshots off")
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}

			for restart := 1; restart <= 2; restart++ {
				st = openStore(t, fs)
				cfg.Store = st
				g = startGroup(t, cfg)
				testkit.WaitFor(t, testWait, func() error {
					if got := g.Meta(); got.Applied < before.Applied {
						return fmt.Errorf("applied %d of %d", got.Applied, before.Applied)
					}
					return nil
				})
				if err := sameContent(g.Meta(), before); err != nil {
					t.Fatalf("restart %d: %v", restart, err)
				}
				// The restarted group leads again and takes writes.
				c := CAS{Partition: 0, PrevEpoch: before.Partitions[0].Epoch, Epoch: before.Partitions[0].Epoch + 1, Cohort: []uint64{2}, Leader: 2}
				if err := g.CAS(ctx, c); err != nil {
					t.Fatalf("restart %d: cas: %v", restart, err)
				}
				before = g.Meta()
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A store whose hard state commits past its log is refused at Start with
// an error, not a raft panic.
func TestStartRefusesInconsistentStore(t *testing.T) {
	st := testStore(t)
	hs, err := proto.Marshal(&pb.HardState{Term: new(uint64(2)), Commit: new(uint64(10))})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveRaft(hs, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	g, err := New(singleConfig(t, st))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Start(); err == nil || !strings.Contains(err.Error(), "commit index 10") {
		t.Errorf("start: got %v; want a commit index error", err)
	}
}

func TestStepRejectsBadMessages(t *testing.T) {
	g, err := New(singleConfig(t, testStore(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	heartbeat := func(from, to uint64, typ pb.MessageType) []byte {
		b, err := proto.Marshal(&pb.Message{Type: typ.Enum(), From: new(from), To: new(to), Term: new(uint64(1))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wantErr(t, "step before start", g.Step(ctx, heartbeat(2, 1, pb.MsgHeartbeat)), ErrClosed)
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"garbage":          {0xff, 0xff, 0xff},
		"truncated":        heartbeat(2, 1, pb.MsgHeartbeat)[:3],
		"empty (MsgHup)":   {},
		"for another node": heartbeat(2, 3, pb.MsgHeartbeat),
		"from no node":     heartbeat(0, 1, pb.MsgHeartbeat),
		"from itself":      heartbeat(1, 1, pb.MsgHeartbeat),
		"local type":       heartbeat(2, 1, pb.MsgHup),
		"too large":        make([]byte, maxStepBytes+1),
	}
	for name, data := range bad {
		wantErr(t, name, g.Step(ctx, data), ErrBadMessage)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "step after close", g.Step(ctx, heartbeat(2, 1, pb.MsgHeartbeat)), ErrClosed)
}

// Close fails a proposal that is waiting (here: for a leader that cannot
// be elected, since the other two voters never start).
func TestCloseFailsPendingProposals(t *testing.T) {
	cfg := singleConfig(t, testStore(t))
	cfg.Peers = []uint64{1, 2, 3}
	cfg.Transport = nopTransport{}
	g := startGroup(t, cfg)
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		_, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 1})
		errc <- err
	}()
	testkit.WaitFor(t, testWait, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.mu.waiters) == 0 {
			return errors.New("proposal not pending yet")
		}
		return nil
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "pending init", <-errc, ErrClosed)
	_, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 1})
	wantErr(t, "init after close", err, ErrClosed)
	wantErr(t, "wait leader after close", g.WaitLeader(ctx), ErrClosed)
	if err := g.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if err := g.Start(); err == nil {
		t.Errorf("start after close: got nil error")
	}
}

// Three voters over the in-memory network (docs/design.md, Topology: the
// metadata group survives the loss of its leader).
func TestThreeVoters(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3}, nil)
	ctx := testCtx(t)
	lead := c.leader()
	f := c.groups[c.follower(lead)]

	// Proposals from a follower are forwarded and applied everywhere.
	if _, err := f.Init(ctx, ClusterConfig{ClusterID: "c3", Partitions: 8, Replicas: 3, CreatedAt: 1}); err != nil {
		t.Fatalf("init from a follower: %v", err)
	}
	for _, id := range c.ids {
		if err := f.PutMember(ctx, Member{ID: id, Addr: fmt.Sprintf("n%d:13000", id)}); err != nil {
			t.Fatalf("put member from a follower: %v", err)
		}
	}
	if err := f.CAS(ctx, CAS{Partition: 0, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1, 2, 3}, Leader: lead}); err != nil {
		t.Fatalf("cas from a follower: %v", err)
	}
	c.converged(f.Meta())

	// Kill the leader: the other two elect a new one, and CAS still works.
	c.kill(lead)
	newLead := c.leader()
	if newLead == lead {
		t.Fatalf("leader %d survived its own close", lead)
	}
	s := c.groups[c.follower(lead)]
	var alive []uint64
	for _, id := range c.ids {
		if c.groups[id] != nil {
			alive = append(alive, id)
		}
	}
	if err := s.CAS(ctx, CAS{Partition: 0, PrevEpoch: 1, Epoch: 2, Cohort: alive, Leader: newLead}); err != nil {
		t.Fatalf("cas after the leader died: %v", err)
	}
	c.converged(s.Meta())

	// Two nodes race to CAS the same partition from the same epoch:
	// exactly one wins, whoever proposes.
	var survivors []*Group
	for _, g := range c.groups {
		survivors = append(survivors, g)
	}
	for p := 1; p < 8; p++ {
		errs := make([]error, len(survivors))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, g := range survivors {
			wg.Go(func() {
				<-start
				errs[i] = g.CAS(ctx, CAS{Partition: p, PrevEpoch: 0, Epoch: uint64(10 + i), Cohort: alive, Leader: g.cfg.NodeID})
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, ErrCASConflict):
				t.Fatalf("partition %d, node %d: got %v; want nil or ErrCASConflict", p, survivors[i].cfg.NodeID, err)
			}
		}
		if wins != 1 {
			t.Fatalf("partition %d: %d winners; want exactly 1 (%v)", p, wins, errs)
		}
	}
	c.converged(s.Meta())
}

// A follower cut off while the leader snapshots and compacts past it
// catches up through a snapshot once the network heals.
func TestLaggingFollowerGetsSnapshot(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3},
		func(cfg *Config) { cfg.SnapshotEntries, cfg.SnapshotCatchUpEntries = 5, 2 })
	ctx := testCtx(t)
	lead := c.leader()
	g := c.groups[lead]
	if _, err := g.Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 2, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	lag := c.follower(lead)
	c.converged(g.Meta())
	c.net.isolate(lag, c.ids)
	for i := range 30 {
		if err := g.CAS(ctx, CAS{Partition: 0, PrevEpoch: uint64(i), Epoch: uint64(i + 1), Cohort: []uint64{lead}, Leader: lead}); err != nil {
			t.Fatalf("cas %d: %v", i, err)
		}
	}
	if got := c.groups[lag].Meta().Partitions[0].Epoch; got != 0 {
		t.Fatalf("isolated follower applied epoch %d", got)
	}
	first, err := g.storage.FirstIndex() // MemoryStorage is safe for concurrent use
	if err != nil {
		t.Fatal(err)
	}
	if lagApplied := c.groups[lag].Meta().Applied; first <= lagApplied+1 {
		t.Fatalf("leader's log starts at %d, follower applied %d: no snapshot needed", first, lagApplied)
	}
	c.net.heal()
	c.converged(g.Meta())
	if n := c.groups[lag].snapshotsInstalled.Load(); n == 0 {
		t.Errorf("follower caught up without installing a snapshot")
	}

	// The follower restarts from the snapshot it received: its ConfState
	// came with it, so it still knows all three voters and keeps up.
	if got := persistedVoters(t, c.stores[lag]); !reflect.DeepEqual(got, c.ids) {
		t.Errorf("voters in the persisted snapshot: got %v; want %v", got, c.ids)
	}
	c.restart(lag)
	lead = c.leader()
	g = c.groups[lead]
	prev := g.Meta().Partitions[0].Epoch
	if err := c.groups[lag].CAS(ctx, CAS{Partition: 0, PrevEpoch: prev, Epoch: prev + 1, Cohort: c.ids, Leader: lag}); err != nil {
		t.Fatalf("cas from the restarted follower: %v", err)
	}
	c.converged(c.groups[lag].Meta()) // the proposer applied it; the leader may not have yet
}

// persistedVoters reads the voters of the snapshot in st.
func persistedVoters(t *testing.T, st *store.Store) []uint64 {
	t.Helper()
	rs, err := st.LoadRaft()
	if err != nil {
		t.Fatal(err)
	}
	if rs.Snapshot == nil {
		t.Fatalf("no snapshot persisted")
	}
	snap := &pb.Snapshot{}
	if err := proto.Unmarshal(rs.Snapshot, snap); err != nil {
		t.Fatal(err)
	}
	return snap.GetMetadata().GetConfState().GetVoters()
}

// A proposal forwarded to a leader that is then cut off is lost by raft
// without notice; the proposer proposes again once it learns of the new
// leader, instead of waiting out its deadline (TESTING.md, scenario 12:
// metadata raft faults).
func TestProposalSurvivesLeaderLoss(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3}, nil)
	ctx := testCtx(t)
	lead := c.leader()
	if _, err := c.groups[lead].Init(ctx, ClusterConfig{ClusterID: "c", Partitions: 1, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	c.converged(c.groups[lead].Meta())
	f := c.follower(lead)
	c.net.isolate(lead, c.ids)
	// Without the re-proposal this CAS would wait for ctx to end: its
	// first copy went to the cut-off leader and is gone.
	if err := c.groups[f].CAS(ctx, CAS{Partition: 0, PrevEpoch: 0, Epoch: 1, Cohort: c.ids, Leader: f}); err != nil {
		t.Fatalf("cas while the leader is cut off: %v", err)
	}
	c.net.heal()
	c.converged(c.groups[f].Meta())
	if got := c.groups[lead].Meta().Partitions[0].Epoch; got != 1 {
		t.Errorf("old leader after heal: epoch %d; want 1", got)
	}
}

// TestDroppedProposalIsProposedAgain: a proposal a follower forwards to
// the leader can be lost on the way while the leader stays the leader (a
// dropped message, a link cut one way for a moment). raft never says so,
// and no leader change prompts a retry: without the periodic re-proposal
// the call waits until its context ends (a node's start then fails after
// StartTimeout, as the seeded simulation found with a one-way cut).
func TestDroppedProposalIsProposedAgain(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3}, nil)
	lead := c.leader()
	f := c.follower(lead)
	var dropped atomic.Int32
	c.net.mu.Lock()
	c.net.drop = func(from, to uint64, data []byte) bool {
		m := &pb.Message{}
		if from != f || to != lead || proto.Unmarshal(data, m) != nil || m.GetType() != pb.MessageType_MsgProp {
			return false
		}
		return dropped.Add(1) == 1 // the first forwarded proposal only
	}
	c.net.mu.Unlock()
	// Many election timeouts: long enough for a retry, short enough that
	// waiting it out (without one) fails the test quickly.
	ctx, cancel := context.WithTimeout(context.Background(), 30*c.groups[f].proposalRetry())
	defer cancel()
	if err := c.groups[f].PutMember(ctx, Member{ID: 9, Addr: "127.0.0.9:1", Since: 1}); err != nil {
		t.Fatalf("put member after its first proposal was dropped: %v", err)
	}
	if dropped.Load() < 2 {
		t.Fatalf("%d proposals from the follower; want the dropped one and its retry", dropped.Load())
	}
	// PutMember returns once the proposing follower applied the entry;
	// the leader applies it on its own loop, at most a moment later.
	testkit.WaitFor(t, testWait, func() error {
		if got := c.groups[lead].Meta().Members[9].Addr; got != "127.0.0.9:1" {
			return fmt.Errorf("leader's registry has member 9 at %q", got)
		}
		return nil
	})
}
