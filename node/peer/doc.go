// Package peer owns how a node talks to its peers: the Transport seam
// (QUIC in production, an in-memory network in tests and the simulation),
// the pool of outgoing connections, the registry of peer ops each plane
// fills (Mux), the carriers of raft's messages (RaftCarrier) and of
// gossip (GossipNet), and the network faults tests inject (Faults, a wrapper
// around any Transport and any handler, so no code path checks for faults
// itself).
//
// peer knows the peer protocol's framing and errors (wire) and nothing of
// what the ops mean: it must not import the planes that serve them
// (partition, raftgroup, member, node). What a request body holds is the
// handlers' business; peer only counts what a fault needs to count.
package peer
