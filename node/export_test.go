package node

// WithForwarded marks ctx as a request a peer forwarded, as the peer
// server does, for tests that play the coordinator.
var WithForwarded = withForwarded
