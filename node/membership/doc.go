// Package membership is how a node is part of its cluster: the metadata
// raft group's bring-up (founding a cluster, joining one, coming back
// after a restart), the admission of joiners (OpJoin), gossip (package
// member) and the loop that keeps it joined to the registry's members,
// the address book of peers, the carriers of raft messages and gossip
// over node/peer (OpRaft, OpGossip, the gossip streams), and the cluster
// view of `ctl cluster`.
//
// Invariants it keeps: a node with raft state comes back as what it was
// and never asks to be admitted again (a fresh node only); the cluster's
// partition and replica counts are fixed at founding (Init refuses flags
// that disagree, a joiner takes the cluster's); every node registers its
// own current address before it serves.
//
// It does not decide who leads a partition or which nodes vote in the
// metadata group (node/control reacts to membership through
// Config.OnChange and changes voters itself), holds no partition, and
// serves no client. It imports node/peer for the pool and the op
// registry, and nothing of node.
package membership
