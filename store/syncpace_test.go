package store

import (
	"testing"
	"time"
)

// TestSyncPacer: the hold follows a sync cycle of busySyncCommits commits
// or more, never one with fewer, and never while the hold is 0.
func TestSyncPacer(t *testing.T) {
	const hold = 3 * time.Millisecond
	for _, tc := range []struct {
		name string
		hold time.Duration
		// cycles is the commits in each cycle; want the hold after each.
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
					p.committed()
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
