// Package partition owns one node's replica of one partition: the task
// records it holds in the store and the in-memory indexes built over them.
//
// The indexes, rebuilt from the store at start (Load):
//
//   - per queue, the ready tasks ordered by (priority desc, id asc): a claim
//     takes the minimum in O(log n), never a scan;
//   - the timers: delayed tasks by not-before, claimed tasks by the time
//     their claim expires for the leader (end + clock-skew bound);
//   - per queue, counts of tasks by state;
//   - an entry per task that is not completed (completed tasks are only
//     counted, so memory follows the open work, not the history).
//
// Every mutation takes the replica's lock, reads what it needs from the
// store, applies a store batch (which fixes its order in the WAL), updates
// the indexes, releases the lock and only then waits for the WAL sync. So
// concurrent operations share fsyncs, and the indexes never run ahead of
// the WAL order: a later write is never durable without the earlier ones it
// may depend on.
//
// A replica grants claims only while it leads (Lead, with the epoch won by
// the handoff in package epoch), and only at an epoch no lower than the
// one it promised; a promise to a higher epoch makes it step down.
//
// # Replication
//
// Every cohort member holds a replica with the same indexes; only the
// leader's grants claims (Epoch() > 0) and publishes heads, so a follower
// that wins a handoff serves at once. The leader applies a write locally
// and ships the task.Record the write returns (Write: the merged state,
// the new update; the spec once, with the enqueue) while its own sync
// runs; a follower merges it (Merge) and acknowledges after the
// returned Durable is waited on. Merge relies on the data model being
// CRDTs (docs/design.md, "Data model"), so these hold whatever the order,
// repetition or source of the records (live replication, Export, later
// anti-entropy):
//
//   - merging records of one line of writes (equal stamps; see "Epochs
//     and orphans") is commutative, associative and idempotent: a record
//     merged twice writes nothing, and replicas that merged the same
//     records hold the same specs, states and updates, hence the same
//     indexes;
//   - a task's spec is what its client sent, never replaced by another
//     task's: another spec under a known id is refused (task.ErrConflict),
//     and a record of an unknown task must carry its spec (else
//     task.ErrNotFound). Of two specs of the same task that differ in the
//     times the coordinator derives (a retried enqueue), each replica
//     keeps the one that comes first, so they converge;
//   - an update key (claim, seq) keeps its first value; other data under it
//     is refused;
//   - fencing: Merge at an epoch below the one the replica promised (or
//     leads at) writes nothing (task.ErrEpoch), so a leader cut off from a
//     majority of its cohort cannot get a claim acknowledged; a Merge
//     above it raises the promise;
//   - a replica refuses a record that brings a new claim index to a task
//     it knows to be completed (CompletedError), unless the record carries
//     a completion itself: with completions and claims both needing a
//     majority, an acknowledged completion is never followed by an
//     acknowledged claim;
//   - a merge goes through the same index path as a local write (under
//     mu, batch applied before the indexes move, hot cache refreshed), so
//     a leader that merges stays correct and republishes its heads.
//
// # Epochs and orphans
//
// A leader writes its own replica before it knows whether a majority
// accepts the write (package node ships in parallel with the local
// sync). A leader paused, or cut off, while the others promised a newer
// epoch to another node can so write after its epoch ended: a claim, a
// completion, an update that no majority accepted and whose client got
// a refusal or no answer. Such a write is an orphan. It may sit in the
// old leader's store, or in a replica that accepted it before it heard
// of the newer epoch, and it must never become any replica's truth: it
// could reuse a claim id the new leader granted, stretch a claim past
// the next one's start, or complete a task for a claim that was
// superseded. A refused operation changes nothing, anywhere.
//
// So every state a leader writes carries its epoch (task.State.Stamp),
// and the updates held with a state belong to its line of writes. The
// handoff to a new epoch (package epoch) carries into a majority of the
// new cohort exactly the writes no orphan is among, and records that
// majority in the registry as the epoch's sealed set. From then on:
//
//   - the leader holds every write that counts: the carried ones and
//     its own, which it makes before shipping them. A follower's state
//     stamped below the leader's epoch is replaced by the leader's when
//     the leader sends it (Source.Authority: shipped writes, anti-entropy
//     pushes, repairs, transfers), updates included (a whole record: the
//     follower refuses a partial one with task.ErrNotFound, and the
//     leader resends the whole record; only a record whose state has no
//     claim, hence no update, may be partial, and only over a zero
//     state). A follower's state stamped with
//     the leader's epoch is joined with it: it is the same line of
//     writes;
//   - the leader takes from a follower's records specs, reverse edges and
//     tombstones (grow-only, harmless), never a state stamped below its
//     own epoch (Source.Floor: the follower may hold orphans there);
//   - a replica that merges records of an epoch above the one it
//     promised raises its promise (Merge), so it refuses the superseded
//     leader from then on, and a superseded leader that receives them
//     steps down;
//   - the next handoff takes states stamped with the epoch it seals from
//     any promiser (that leader's line: every write of it acknowledged is
//     on a majority, so on a promiser) and older states only from sealed
//     members (they hold the carried ones and no orphan).
//
// Two rules keep a sealed member holding what was carried to it. A
// leader that promises a newer epoch, even to itself for its own
// handoff, stops writing at its old one (Promise): a write acknowledged
// there after the carry reached the other members would be on no sealed
// member but the leader. And a replica that promised an epoch above the
// one a zombie release was decided at keeps its data (ReleaseAt): a
// handoff to that epoch may be carrying to it and count it sealed; the
// carry raises each member's promise before it compares trees, so a copy
// it counts on is never released behind it.
//
// An orphan is thus never joined with anything, never carried, and
// replaced wherever a leader's records reach it; anti-entropy makes
// them reach it.
//
// Records come from peers: Merge validates what it relies on (partition,
// ids, ordering of the state's sets, the spec's queue and deps) and
// refuses the record (task.ErrInvalid) rather than trusting it. One
// record's refusal does not affect the others of the call.
//
// Export streams whole records in id order without the replica's lock,
// reading the store in bounded chunks, each from one snapshot; a write
// concurrent with it is merged by the receiver from live replication.
//
// # Anti-entropy
//
// Every replica keeps an antientropy.Tree of its records (docs/design.md,
// "Anti-entropy"; digest.go says what is hashed: a task's spec, its
// merged state unless zero, each update and each reverse edge; nothing
// local to the replica).
//
// INVARIANT: the tree equals the XOR of the items of the records this
// partition holds in the store. It is maintained under mu: every write
// computes the items it adds, removes or replaces while it stages its
// batch, and applies them to the tree only after the batch applied, before
// releasing mu (so a refused or failed write leaves the tree untouched).
// An item appears once: a spec only when new, an update key and an edge
// only when not held yet (a repeat adds nothing, or XOR would cancel it),
// a state by replacing the old state's item. Load rebuilds the tree from
// the store, Release empties it. Consequences: replicas holding the same
// records have equal trees whatever the order, repetition or source of
// their writes, and a store snapshot taken under mu holds exactly the
// records the tree sums at that instant.
//
// A round between two replicas of a partition (the node drives it):
//
//  1. the initiator takes TreeSnapshot and runs antientropy.Diff against
//     the peer, whose side answers the encoded requests with AnswerNodes
//     and AnswerBuckets, the initiator's own ListFunc being ListBuckets;
//  2. it fetches the peer's Records of Result.Pull and merges them
//     (Merge), and sends its own Records of Result.Push for the peer to
//     merge. Merging whole records is idempotent, so after both the two
//     replicas hold equal trees for those tasks.
//
// TreeSnapshot and AnswerNodes copy digests under mu; ListBuckets and
// Records read a store snapshot without it (ListBuckets takes its
// snapshot under mu), so a listing never stalls writes.
//
// # Garbage collection
//
// Collect deletes completed tasks whole and leaves a tombstone for each;
// a tombstone is one tree item (antientropy.TombItem), listed by
// ListBuckets and returned by Records as task.Record{ID, Tomb}, so anti-entropy
// spreads it and never brings the task back; ExpireTombs drops tombstones
// past the horizon. gc.go has the conventions and what Merge does with a
// tombstone.
//
// Lock order: Replica.mu is taken before anything the OnHead callback
// locks; the callbacks must not call back into the replica.
//
// partition imports task, store, antientropy, ring, epoch and clock; it
// must not import wire, raftgroup or node.
package partition
