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
// Lock order: Replica.mu is taken before anything the OnHead callback
// locks; the callbacks must not call back into the replica.
//
// partition imports task, store, ring, epoch and clock; it must not import
// wire, raftgroup or node.
package partition
