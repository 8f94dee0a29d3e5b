// Package schedules is the periodic-task plane of a node: it enqueues
// the occurrences of the schedules kept in the metadata group
// (raftgroup.Schedule) while the node leads that group.
//
// Each occurrence is enqueued once. The enqueuer reads a schedule's
// progress (DoneMs) from the group, enqueues the occurrences due after it
// with the key wire.OccurrenceKey(name, version, time), then advances DoneMs
// by a compare-and-set on the progress it read. A leader that stops
// between the two, or two nodes that both believe they lead, enqueue an
// occurrence twice at most with one key, which the key's partition leader
// turns into one task; the compare-and-set keeps the counts exact.
//
// Plan is the pure decision (which occurrences a pass enqueues, which it
// skips), tested by tables; the plane performs it. It imports raftgroup
// for the schedules, internal/cron for their grids, wire and clock; it
// must not import node, partition, store or any other plane.
package schedules
