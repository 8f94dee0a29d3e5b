// Package pressure decides when a node holds its write-ahead log's busy
// syncs back (Config.WALMinSyncInterval): it owns the measure (the Go
// scheduler's latency) and the rule, sees the node through Host (the
// store's hold, whether the node replicates its writes) and reaches into
// nothing else.
package pressure
