// Package listen is how clients and peers reach a node: one port number
// for UDP and TCP, the address the node advertises, the QUIC server (the
// client API and, unless the node uses an in-memory peer network, the
// peer protocol) and the HTTP server (the client API, GET /metrics,
// /healthz, the test hooks and pprof, behind the cluster's client token
// when there is a secret).
//
// It serves the handlers it is given and knows nothing of what they do:
// it does not route, retry or meter requests (node does), nor hold any
// peer connection (node/peer). Its Close order is the node's shutdown
// order: HTTP drains first (Drain), the sockets close last (Close).
package listen
