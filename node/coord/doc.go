// Package coord is the coordinator plane of a node: how a node that
// receives a client's request decides where its parts run. It holds the
// pure routing planners, each a function of a snapshot of the partition
// registry and the request, tested by tables:
//
//   - PlanFan: which partitions a cluster-wide op (a count, a listing, a
//     bulk op) serves here and which each other leader serves, so that
//     every partition is served exactly once;
//   - SplitEnqueue: how one enqueue's tasks go to their partitions'
//     leaders, and whether dependencies between them force the parts to
//     go one at a time;
//   - DirectWrite: which tasks the coordinator writes to their cohort
//     itself, without their leader.
//
// coord decides and never performs I/O: the node waits for leadership,
// resolves addresses and forwards. It imports wire (for its error codes)
// and task; it must not import node, partition, store or any other plane.
package coord
