// Package node is the composition root of one skuldd process: it owns the
// node's lifecycle (New, Start, Close, Kill, Leave: lifecycle.go), wires
// the store, the metadata raft group, the partition replicas, the planes
// and the QUIC and HTTP servers together, and runs the node's own loops
// (timers, the cached registry, the reconcile: loops.go). Client
// operations are the coordinator plane's (node/coord), which node builds
// at Start over coordHost and hands to the servers behind node/retrying
// and the request metrics (api.go).
//
// A single node is a cluster of one, not a separate code path: it hosts P
// partitions whose cohorts come from ring over the members the metadata
// group knows; each partition's leader is established by the epoch handoff
// (a majority of one) and its compare-and-set in raftgroup.
//
// Glossary (one word, one meaning): partition, a slice of the id space;
// cohort, the nodes that hold it; leader, the cohort member that grants its
// claims in an epoch; epoch, a partition's leadership generation (never a
// raft term); promise, a replica's persisted vow to refuse claim writes of
// lower epochs; claim, a lease on a task, numbered 0, 1, 2, ... (the claim
// id is the fencing token); attempt, a claim that ended without completion.
//
// Lock order: a queue's pick lock, then partition.Replica.mu, then
// heads.Index.mu. No lock is held
// across I/O other than the partition's own store reads and batch applies.
//
// The planes live beside it, each behind a small host interface that node
// implements: node/coord (the client API: routing, the enqueue path,
// claims, task ops, reads, bulk ops; coordHost), node/replication
// (shipping writes, quorum reads, transfers, anti-entropy, the carry,
// garbage collection; replHost) and node/control (the epoch handoff,
// failover, placement moves, zombies, drift stand-by, the metadata
// group's voters; controlHost). None imports node.
//
// Its root files depend on each other one way: node.go (the Node, its
// fields and accessors of them) at the bottom, lifecycle.go at the top.
//
// Its configuration (fields, defaults, validation) is node/config's.
// A queue's settings are node/queues' (kept in the metadata group; node
// refreshes them and applies them to requests).
//
// The node's place in the cluster is node/membership's: the metadata
// group's bring-up and joining, gossip, the address book of peers. Its
// sockets and the QUIC and HTTP servers on them are node/listen's; node
// hands them the handlers.
//
// Peers are reached through node/peer: the transport (QUIC, or
// Config.PeerNet in tests), the connection pool, and the op registry on
// which node and each plane register the handlers of their peer ops
// (registerPeerOps).
// Test faults wrap the transport and the handlers there; no code path
// here checks for them.
//
// GET /metrics is node/metrics': the registry, every family, and the
// meter of the client API; it reads the node through metricsSource
// (metrics.go), one line per value.
//
// node imports every internal package but cli; only cli (and tests) import
// node.
package node
