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
// to run), and then only after a sync cycle in which at least
// busySyncCommits commits waited for a sync at once, since holding a lone
// writer saves no sync.
//
// Pebble asks for the hold after each sync (Options.WALMinSyncInterval is
// a function), on the WAL's flush goroutine, after it has woken the
// sync's waiters. So a lone writer's next commit can be applied before
// Pebble asks: counting the commits applied since the previous ask would
// then count two in the cycle and hold a lone writer. Counting the
// commits that wait at once cannot: a lone writer's commit stops waiting
// (Pending.Wait returns) before its next one is applied.

// busySyncCommits is the fewest commits waiting at once in a sync cycle
// (from the end of one sync to the end of the next) after which the next
// sync may be held: with fewer, the hold would gather nothing to share the
// sync with.
const busySyncCommits = 2

// syncPacer counts the log's waiting commits and its syncs, and decides
// each hold.
type syncPacer struct {
	// hold is the hold after a busy cycle, in nanoseconds; 0 never holds.
	hold atomic.Int64
	// waiting counts the commits applied that wait for a sync and have not
	// finished waiting. A Pending that is never waited on stays counted:
	// the pacer then holds after cycles one commit less busy, which costs
	// latency while the CPU is contended, never durability.
	waiting atomic.Int64
	// peak is the most commits waiting at once since the previous sync.
	peak atomic.Int64
	// syncs counts the syncs, held those followed by a hold.
	syncs, held atomic.Uint64
}

// applied records a commit that waits for a sync; synced, that it has
// finished waiting (durable or failed).
func (p *syncPacer) applied() {
	n := p.waiting.Add(1)
	for {
		m := p.peak.Load()
		if n <= m || p.peak.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *syncPacer) synced() { p.waiting.Add(-1) }

// next is Pebble's WALMinSyncInterval: called after each sync, it returns
// how long the next sync must wait from now. The next cycle's peak starts
// at the commits waiting now (the next sync's, and any of this sync's
// that have not yet woken).
func (p *syncPacer) next() time.Duration {
	p.syncs.Add(1)
	peak := p.peak.Swap(p.waiting.Load())
	hold := time.Duration(p.hold.Load())
	if hold == 0 || peak < busySyncCommits {
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
