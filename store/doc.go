// Package store owns the on-disk format: one Pebble database per node,
// holding task records, progress updates, dependency edges, partition
// promises, the metadata raft log and node identity.
//
// # Keyspace
//
// Every key starts with a kind byte. Task-related kinds continue with the
// partition as a big-endian uint16, so one partition's data of one kind is a
// contiguous range (cheap handoff and anti-entropy):
//
//	0x01 name                          node meta (identity, keyspace layout)
//	0x10 part id                       task spec, with its payload if small (CBOR; layout.go)
//	0x11 part id                       task spec with a large payload (CBOR; layout.go)
//	0x12 part id                       task state, the CRDT (CBOR)
//	0x13 part id claim(u32) seq(u64)   progress update payload (raw bytes)
//	0x14 part dep dependent            reverse dependency edge (empty value)
//	0x15 part                          promised epoch (u64)
//	0x16 part id                       tombstone of a collected task: deletion time (Unix ms, u64)
//	0x17 id                            hinted enqueue awaiting its handover (CBOR; hints.go)
//	0x18 part len queue id             queue index: a task by its queue (empty value; queueindex.go)
//	0x20 ...                           metadata raft log (raftlog.go)
//
// Values that are structs are a format-version byte followed by CBOR; a
// spec stored without its payload starts with its own mark (layout.go).
//
// # Durability
//
// A Batch is applied in order and then waited on: Apply assigns its place in
// the WAL while the caller still holds whatever lock orders its writes, and
// Wait blocks until the WAL is synced. Concurrent waiters share fsyncs
// (Pebble's group commit), so acks never need one fsync each.
//
// Invariant: nothing is acknowledged to a client before the batch holding it
// was waited on; a batch applied after another is never durable before it.
//
// A log file on disk is kept written with zeros a little ahead of its end
// (walfile.go), so a commit's fdatasync nearly always flushes data alone,
// without a grown file size or newly used blocks to commit as well. The
// zeroing wraps whatever filesystem the store is given, so the crash
// filesystems of tests sit under it and crash the log production writes:
// CrashFS (crashfs.go; the fault suite's test build), whose record of what
// is synced is shared by every handle of a file, and MemFS (memfs.go; the
// simulation's disks).
//
// store is the only importer of cockroachdb/pebble. It imports task,
// clock and internal/buildinfo (the build a layout record names); it must
// not import wire, partition, raftgroup, node or raft.
package store
