// Package member owns cluster membership: which skuldd nodes exist, where
// they listen, and whether each one is alive, dead or has left. It runs
// github.com/hashicorp/memberlist (SWIM-style probing and gossip) and is the
// only package that imports it.
//
// # What it must not import
//
// member must not import quic-go, pebble, etcd raft, or any internal skuldd
// package. It reaches the network only through the small Net interface,
// which the node implements with its QUIC peer connections; incoming
// traffic is handed back with (*Member).DeliverPacket and
// (*Member).DeliverStream. So memberlist needs no port of its own and this
// package can be tested with an in-memory network.
//
// # Identity
//
// A node is its durable, non-zero uint64 ID (STYLE.md habit 3: never derived
// from an address). Its memberlist node name is the ID as exactly 16
// lowercase hex digits; alive messages carrying any other name are refused,
// so every peer this package reports has a valid ID.
//
// # States
//
// memberlist v0.7.0 reports no node states through its public API: the
// State field of the nodes it returns always reads alive (the real state is
// in an unexported field that shadows it), and Members leaves out dead
// nodes entirely. So Member keeps its own table, fed by memberlist's event
// delegate: NotifyJoin and NotifyUpdate mean Alive, NotifyLeave means Dead or
// Left. memberlist does not tell its delegate whether a leave was graceful,
// so Leave first re-advertises this node with a "leaving" flag in its
// metadata and only then broadcasts memberlist's own leave; a peer whose last
// metadata carried the flag is reported Left when it goes, any other Dead.
// memberlist gives its delegates no signal for suspicion either, so Suspect
// exists for completeness and is not reported by this version.
//
// Dead peers (not Left ones) are retried with a memberlist join every
// Config.ReconnectInterval, so two sides of a healed network partition find
// each other again even after memberlist itself stopped gossiping to the
// dead. Dead and Left peers are forgotten after Config.DeadRetention.
//
// # Invariants
//
//   - Members always includes this node itself (Alive, or Left after Leave)
//     and never includes a node with ID 0; it is sorted by ID.
//   - Nothing a peer sends can panic this package or block memberlist's
//     probe loop: WriteTo only copies into a bounded per-peer queue, and
//     DeliverPacket only copies into a bounded inbound queue; both drop and
//     count when full (DroppedPackets).
//   - Every goroutine this package starts ends in Shutdown, which waits for
//     them: the per-peer senders, the change notifier and the reconnect
//     loop. memberlist's own goroutines end when it shuts down; a few of its
//     timers may still fire later and only update state.
//
// # Concurrency
//
// All exported methods of Member are safe for concurrent use. Leave,
// SetMeta and Shutdown are serialized with each other. Config.OnChange runs
// on one goroutine owned by Member, never concurrently with itself and
// without any lock held, so it may call Members; it must not call Shutdown.
// Calls are coalesced: one call may stand for several changes.
//
// Lock order: Member.opMu, then memberlist's internal node lock, then
// Member.mu, then transport.mu. memberlist calls the event delegate with its
// node lock held, so Member never calls into memberlist while holding
// Member.mu.
package member
