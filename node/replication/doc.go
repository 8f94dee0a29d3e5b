// Package replication is a node's replication data plane: what makes the
// replicas of a partition hold the same records.
//
// It owns, for the partitions this node holds:
//   - shipping (ship.go): a leader's writes sent to the followers over
//     one batching link per follower node, and the wait for W durable
//     replicas; the follower side that merges them (OpReplicate); the
//     leader's quorum reads with read repair, and the confirmation that
//     it still leads (ConfirmLeading);
//   - partition transfers to a new cohort member (OpExport, PullPartition);
//   - anti-entropy (aae.go): the leader's periodic Merkle-tree rounds with
//     each follower, and the serving side of the tree exchanges;
//   - the carry of a leader handoff (carry.go, epoch.Carrier);
//   - garbage collection (gc.go): the leader's passes over completed
//     tasks and their dependency components, tombstone expiry.
//
// It sees the rest of the node through Host (the replicas, the
// registry's cohorts and leaders, peer addresses, dependency notices)
// and reaches peers through node/peer. It does not decide who leads or
// where partitions live (node/control), does not serve clients (node),
// and keeps no metrics registry: node/metrics reads Stats, through node,
// at scrape time.
package replication
