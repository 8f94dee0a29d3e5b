// Package wire owns everything that crosses the network: the frame format
// (a 4-byte big-endian length, then a CBOR envelope with integer keys and a
// protocol version), the CBOR encoding and decoding modes with their limits,
// hand-written codecs for the bodies sent most under load (fastcodec.go,
// held to the library's bytes and values by differential tests), the API
// messages (api.go), the error-code table (errors.go), and the QUIC
// transport: a server that dispatches tagged requests to a Handler, and a
// client Conn that multiplexes tagged requests over a few long-lived
// streams.
//
// Requests carry an id; responses carry the same id and may arrive in any
// order. A streamed response is a sequence of frames flagged More, ended by
// one frame without it. Nothing a peer sends can crash a node: every
// decoder has size limits, and what it does not understand gets an error
// frame.
//
// wire is the only importer of quic-go. It may import task (value types)
// and clock; it must not import store, partition, raftgroup or node.
package wire
