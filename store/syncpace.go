package store

import (
	"sync/atomic"
	"time"
)

// Group commit, paced by load.
//
// Every durable commit waits for an fsync of the write-ahead log, and the
// commits that wait at the same time share one. By default a sync starts
// as soon as the previous one ends. Under many concurrent writers each
// sync then carries only the few commits that arrived while the previous
// one ran, and on a virtual disk, where an fsync costs tens of
// microseconds of CPU plus interrupts and context switches, those syncs
// take CPU that the writers need: measured with three nodes on two cores,
// they were a third of the nodes' CPU.
//
// Holding the next sync back a little lets more commits share it, but a
// hold costs the writers it holds: with a 1 ms hold always on, one
// client's enqueues on one node went from 0.33 ms to 1.5 ms, and four
// clients' throughput fell by two thirds. So a hold applies only when the
// CPU it saves is wanted: while the node's owner says the CPU is
// contended (SetWALHold; the node judges by how long its goroutines wait
// to run), and then only after a sync cycle that carried at least
// busySyncCommits commits, since holding a lone writer saves no sync.
//
// Pebble asks for the hold after each sync (Options.WALMinSyncInterval is
// a function), on the WAL's flush goroutine.

// busySyncCommits is the fewest commits in one sync cycle (from the end of
// one sync to the end of the next) after which the next sync may be held:
// with fewer, the hold would gather nothing to share the sync with.
const busySyncCommits = 2

// syncPacer counts the log's synced commits and syncs, and decides each
// hold.
type syncPacer struct {
	// hold is the hold after a busy cycle, in nanoseconds; 0 never holds.
	hold atomic.Int64
	// commits counts the commits that asked for a sync since Open.
	commits atomic.Uint64
	// seen is commits as of the previous sync.
	seen atomic.Uint64
	// syncs counts the syncs, held those followed by a hold.
	syncs, held atomic.Uint64
}

// committed records a commit that waits for a sync.
func (p *syncPacer) committed() { p.commits.Add(1) }

// next is Pebble's WALMinSyncInterval: called after each sync, it returns
// how long the next sync must wait from now.
func (p *syncPacer) next() time.Duration {
	p.syncs.Add(1)
	n := p.commits.Load()
	cycle := n - p.seen.Swap(n)
	hold := time.Duration(p.hold.Load())
	if hold == 0 || cycle < busySyncCommits {
		return 0
	}
	p.held.Add(1)
	return hold
}

// SetWALHold sets how long a sync of the write-ahead log is held back
// after a sync cycle that carried several commits; 0 turns holds off.
// The node sets Config.WALMinSyncInterval while its CPU is contended, 0
// otherwise. It takes effect from the next sync.
func (s *Store) SetWALHold(d time.Duration) { s.pacer.hold.Store(int64(max(d, 0))) }

// WALSyncs returns the number of syncs of the write-ahead log since Open,
// and how many of them were followed by a hold because the log was busy.
func (s *Store) WALSyncs() (syncs, held uint64) {
	return s.pacer.syncs.Load(), s.pacer.held.Load()
}
