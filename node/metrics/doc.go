// Package metrics is a node's Prometheus exposition, served at GET
// /metrics. It owns the node's registry (never the global one: a test
// process runs several nodes, and each reports only itself) and every
// family in it:
//
//   - the request families, skuldd_requests_total and
//     skuldd_request_duration_seconds, which Meter feeds from the client
//     API it wraps: the only values the registry keeps;
//   - the node's own families (nodeScalars, raftScalars, clockScalars
//     and the labelled queue, leader-epoch and peer-offset families),
//     read from a Source at each scrape: the node already counts or
//     knows them, so no goroutine copies values into gauges, and a
//     scrape sees the state of that moment;
//   - the Go runtime's and the process's families, and skuldd_build_info.
//
// Each node reports what it owns: its requests, the queue depths of the
// partitions it leads (summing over nodes gives the cluster's), its
// anti-entropy, replication, log and garbage-collection work, its clock
// against its peers', and its place in the metadata group and the
// partition registry.
//
// metrics sees the node only through Source, which node implements over
// its state; it must not import node, reach into the store or the
// replicas beyond the read-only views Source returns, or change what it
// reads. It is the one package that imports prometheus/client_golang:
// the other packages keep plain counters that Source hands over.
package metrics
