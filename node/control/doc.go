// Package control holds the decisions of a node's leadership control
// plane as pure planners: given a snapshot of what gossip sees, what the
// metadata registry says and what this node's replicas hold, which
// partitions to take over (PlanFailover), who succeeds a leader, whether
// a cohort is reachable. The loops that take the snapshots and act on the
// plans stay in node; a planner does no I/O, reads no clock and keeps no
// state between calls (what it must remember comes in and goes out), so
// tests drive it with tables.
//
// control sees membership through member.State and placement through
// ring; it must not reach into node, partition, the store or the network.
package control
