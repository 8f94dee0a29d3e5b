// Package raftgroup runs this node's member of the metadata raft group: an
// etcd/raft group that holds the cluster config (partitions P, replicas N),
// the node registry and each partition's (epoch, cohort, leader). It is
// the compare-and-set the Skuld seed did in ZooKeeper (docs/design.md,
// Topology and Partition leaders). DESIGN.md in this directory says why it
// is built the way it is.
//
// # Usage
//
//	g, err := raftgroup.New(cfg) // cfg from DefaultConfig, plus NodeID, Peers, Store, Transport
//	err = g.Start()
//	defer g.Close()
//	err = g.WaitLeader(ctx)
//	cc, err := g.Init(ctx, raftgroup.ClusterConfig{ClusterID: id, Partitions: 64, Replicas: 3})
//	err = g.CAS(ctx, raftgroup.CAS{Partition: 7, PrevEpoch: 0, Epoch: 1, Cohort: []uint64{1, 2, 3}, Leader: 1})
//	ch := g.Changed(); m := g.Meta(); ...; <-ch
//
// The transport delivers each Outbound to the named node's Group.Step.
//
// A new node starts its Group with no Peers ("join" mode) and waits. A
// member adds it as a learner, which catches up from the log or a
// snapshot, and later promotes it; PlanVoters says when:
//
//	err = g.AddLearner(ctx, newID) // on a member, not on the new node
//	voters, learners := g.Config()
//	for _, s := range raftgroup.PlanVoters(voters, learners, alive, deadSince, now, raftgroup.VoterPolicy{}) {
//		err = g.ApplyConfStep(ctx, s) // AddLearner, Promote, Demote or Remove
//	}
//	err = g.Remove(ctx, retiredID) // final: the id never comes back
//
// # The raft loop
//
// One goroutine (run) owns the raft.Node's Ready stream, the
// MemoryStorage writes and the live state machine, as in etcd's
// raftexample. For each Ready it persists the snapshot, entries and hard
// state in one synced store batch, then sends the messages, then applies
// the snapshot and committed entries (calling ApplyConfChange for
// conf-change entries), then calls Advance. A failed persist panics: raft
// already treats the Ready as durable, so the node must crash and recover
// from disk.
//
// # Invariants
//
//   - Apply is deterministic: applyCommand reads no clock and does no I/O;
//     times in the state (CreatedAt, Since) come from the proposer. Every
//     replica that applied index i holds the same Meta.
//   - A partition's epoch only grows, and changes only through a CAS whose
//     PrevEpoch matched: two CASes from the same PrevEpoch never both win.
//   - Meta.Applied is the index of the last applied entry, and a snapshot
//     at index i holds exactly the state with Applied == i.
//   - On disk: the entries follow the snapshot without a gap, and the hard
//     state's commit index lies within them (checked at Start).
//   - Snapshots carry the ConfState as of their index, and confState is
//     raft's configuration: a conf-change entry is applied by raft and by
//     this package alike, or refused by both (decideConfChange).
//   - Once the log was compacted, the latest snapshot names every member
//     (raft refuses a snapshot that does not name its recipient).
//
// # Concurrency
//
// Every exported method of Group is safe for concurrent use. Init,
// PutMember and CAS block until this node applied the command (then
// Meta reflects it) or ctx ends or the group closes; a follower forwards
// the proposal to the leader, and a proposer proposes again when a new
// leader appears, since raft drops proposals silently. AddLearner,
// Promote, Demote and Remove block the same way until this node applied
// the change (then Config reflects it), and also propose again every
// election timeout, since raft drops a conf change while another is
// pending. Once this node applied its own removal, proposals fail with
// ErrRemoved. Meta returns a deep copy. Transport.Send is
// called on the raft goroutine and must not block. Step may be called
// from any goroutine and blocks until raft takes the message. Changed's
// channel is closed after the apply batch that next changes Meta's
// content or Config. Close waits for the raft goroutine; Close the Group before its
// Store.
//
// Lock order: Group.lifeMu, then Group.mu. mu is never held across I/O,
// a channel send or a call into raft.
//
// # Imports
//
// raftgroup is the only non-test importer of go.etcd.io/raft. It imports
// store for persistence, and must not import node, wire, partition,
// antientropy, memberlist or cli: raft messages leave it as opaque bytes
// through the Transport interface, which the node wires to wire's QUIC
// transport.
package raftgroup
