// Package coord is the coordinator plane of a node: the client API as a
// node serves it, and how a node that receives a client's request
// decides where its parts run (docs/design.md, Operations). Every node
// coordinates every request: an operation on one task runs at the leader
// of the task's partition, forwarded there over a peer connection; a
// cluster-wide operation (a count, a listing, a bulk op) runs at every
// leader, each told its partitions, and is merged here; a claim goes
// where the best head is; an enqueue's tasks go to their leaders, or are
// written to their cohorts by this node itself.
//
// The plane serves through two faces (service.go): Coordinator, a
// client's request, tried once (node/retrying retries it), and
// Forwarded, a request a peer's coordinator sent on, served strictly
// here. Which face took a request is the only source of that fact: no
// request field and no context value says it.
//
// The routing decisions are pure planners, each a function of a snapshot
// of the registry and the request, tested by tables:
//
//   - PlanFan: which partitions a cluster-wide op serves here and which
//     each other leader serves, so that every partition is served
//     exactly once;
//   - DirectWrite and RouteTask: which tasks of an enqueue the
//     coordinator writes to their cohort itself, without their leader,
//     and where each of the others goes (its leader, or a hint here);
//   - SplitEnqueue: how one enqueue's tasks go to their routes, and
//     whether dependencies between them force the parts to go one at a
//     time;
//   - PlanForward: how long a forward to a leader is waited for, and what
//     the coordinator does when it is not answered in time.
//
// The plane acts through the node's other planes (Planes: the replicas,
// the store, replication, dependencies, hints, heads, queues' settings,
// schedules, shards) and sees the node's changing state through Host. It
// must not import node, node/control or node/membership; node builds it
// at Start and hands its faces to the servers.
package coord
