// Package hints owns a node's hinted enqueues (docs/design.md, Operations:
// placement and hints): a task whose cohort the node could not write when
// its enqueue asked for a hint is kept in the node's store, synced before
// the enqueue is answered "hinted", and handed to W replicas of its
// cohort once they can be reached, by the same direct write an enqueue
// uses (replication.Plane.ShipNew); only then is the hint deleted. A
// handover repeated after a crash is idempotent: the replicas take a
// task they hold as a repeat. A keyed hint goes to the key's leader,
// which writes it retired if another task took the key meanwhile
// (partition.NewTask.Hinted); tasks with deps are never hinted. A node
// also keeps hints another node's coordinator spread to it (ServePut,
// OpHintPut: tasks without key or deps whose direct write was left in
// doubt) and hands them over as its own; repeats from several holders
// are repeats.
//
// hints imports node/replication, partition, store, clock, task and
// wire; it must not reach into the node.
package hints
