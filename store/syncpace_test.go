package store

import (
	"testing"
	"time"
)

// TestSyncPacer: the hold follows a sync cycle in which busySyncCommits
// commits or more waited at once, never one with fewer, and never while
// the hold is 0.
func TestSyncPacer(t *testing.T) {
	const hold = 3 * time.Millisecond
	for _, tc := range []struct {
		name string
		hold time.Duration
		// cycles is the commits that wait together in each cycle (each
		// applied, then all synced); want the hold after each.
		cycles []int
		want   []time.Duration
	}{
		{"lone writer", hold, []int{1, 1, 0, 1}, []time.Duration{0, 0, 0, 0}},
		{"busy", hold, []int{busySyncCommits, 10, 1, busySyncCommits - 1, busySyncCommits}, []time.Duration{hold, hold, 0, 0, hold}},
		{"off", 0, []int{10, busySyncCommits, 1}, []time.Duration{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p syncPacer
			p.hold.Store(int64(tc.hold))
			var held uint64
			for i, n := range tc.cycles {
				for range n {
					p.applied()
				}
				for range n {
					p.synced()
				}
				got := p.next()
				if got != tc.want[i] {
					t.Errorf("cycle %d (%d commits): hold %v, want %v", i, n, got, tc.want[i])
				}
				if got > 0 {
					held++
				}
			}
			if p.syncs.Load() != uint64(len(tc.cycles)) || p.held.Load() != held {
				t.Errorf("counted %d syncs, %d held; want %d, %d", p.syncs.Load(), p.held.Load(), len(tc.cycles), held)
			}
		})
	}
}

// TestSyncPacerLoneWriterAheadOfTheAsk: Pebble asks for the hold after it
// has woken the sync's waiters, so a lone writer's next commit may be
// applied before the ask (CI's TestWALHold saw "6 syncs, 1 held" for
// five commits one after another). That cycle still had one commit
// waiting at a time: no hold. Commits that overlap while the ask is late
// are two waiting at once: a hold.
func TestSyncPacerLoneWriterAheadOfTheAsk(t *testing.T) {
	const hold = 3 * time.Millisecond
	var p syncPacer
	p.hold.Store(int64(hold))
	p.applied()
	for i := range 5 {
		p.synced()  // the sync woke the writer...
		p.applied() // ...whose next commit comes before Pebble's ask
		if got := p.next(); got != 0 {
			t.Fatalf("sync %d of a lone writer: hold %v, want none", i, got)
		}
	}
	p.applied() // a second writer while the first still waits
	if got := p.next(); got != hold {
		t.Fatalf("two commits waiting at once: hold %v, want %v", got, hold)
	}
}
