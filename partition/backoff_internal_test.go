package partition

import (
	"testing"
	"time"

	"github.com/skuldd/skuldd/task"
)

// TestBackoffJitter: the backoffs of tasks that failed together spread
// over the ±25% window, and a task's draw for an attempt is always the
// same (a replay computes the same delay).
func TestBackoffJitter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	seen := map[int64]bool{}
	lo, hi := int64(1<<62), int64(0)
	for i := range 1000 {
		id := task.MakeID(t0, 1, uint32(i))
		d := backoff(id, 3, time.Second, time.Hour)
		if d != backoff(id, 3, time.Second, time.Hour) {
			t.Fatalf("task %d: two draws differ", i)
		}
		if d < 3000 || d > 5000 {
			t.Fatalf("task %d: %d ms; want 4000 ±25%%", i, d)
		}
		seen[d], lo, hi = true, min(lo, d), max(hi, d)
	}
	// 1000 draws over 2000 ms: most distinct, the window's ends nearly
	// reached (a draw that ignored the id would give one value).
	if len(seen) < 500 || lo > 3100 || hi < 4900 {
		t.Fatalf("1000 tasks drew %d distinct delays in [%d, %d]; want them spread over [3000, 5000]", len(seen), lo, hi)
	}
	// The same task draws anew at each attempt.
	id := task.MakeID(t0, 1, 0)
	fracs := map[float64]bool{}
	for n := uint32(1); n <= 8; n++ {
		d := backoff(id, n, time.Second, time.Hour)
		fracs[float64(d)/float64(int64(1000)<<(n-1))] = true
	}
	if len(fracs) < 6 {
		t.Fatalf("8 attempts of one task drew %d distinct fractions; want them to differ", len(fracs))
	}
	// At most max, whatever the draw.
	for i := range 100 {
		if d := backoff(task.MakeID(t0, 1, uint32(i)), 20, time.Second, time.Minute); d > 60_000 || d < 45_000 {
			t.Fatalf("task %d at the cap: %d ms; want 45000..60000", i, d)
		}
	}
}
