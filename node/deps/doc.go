// Package deps is a node's part of the dependency protocol across
// partitions (docs/design.md, Operations: dependencies): the reverse edges
// recorded at each dep's leader when a dependent is enqueued (Link,
// OpDependents), the notices a completion sends to its dependents'
// leaders (Completed, OpDepDone), the re-check after an enqueue
// (CheckNew) and the periodic reconcile of blocked tasks (Reconcile), and
// the set of this node's tasks that others wait on.
//
// It sees the node through Host (its replicas and store, the route to a
// partition's leader, the replication plane that ships what it writes)
// and must not reach into node, the control plane or the client API.
package deps
