// Package shards is the worker-shard plane of a node: the client
// operations on shard sets (join, renew, leave, members), which go
// through the metadata group (raftgroup.ShardSet holds the rules), and
// the expiry of members whose leases ran out, which the group's leader
// decides on its own clock.
//
// Expiry needs no agreement on time. The leader notes, on its clock,
// when it first saw each member's current beat (the count of its
// renewals, in the group's state); a member whose beat has not moved for
// its lease plus ExpiryMargin is expired by a proposal that names that
// beat, so a renewal that commits first wins. A member stops its work
// when its own lease runs out, measured from when it sent the renewal
// that last succeeded: earlier in real time than any leader's count can
// end, since a leader sees a renewal only after it was sent, and a new
// leader starts every member's count afresh.
//
// It imports raftgroup, wire, task and clock; it must not import node,
// partition, store or any other plane.
package shards
