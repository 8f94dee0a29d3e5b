package partition

import (
	"testing"

	"github.com/skuldd/skuldd/task"
)

// The filter never forgets an id it was given (a false "not held" would
// let a write overwrite a stored task), and says "not held" for most ids
// it was not given.
func TestIDFilter(t *testing.T) {
	f := newIDFilter()
	const n = 100_000
	for i := range n {
		f.add(task.MakeID(1_700_000_000_000+int64(i/7), 42, uint32(i)))
	}
	for i := range n {
		if id := task.MakeID(1_700_000_000_000+int64(i/7), 42, uint32(i)); !f.mayHold(id) {
			t.Fatalf("id %d of %d added but not held", i, n)
		}
	}
	fp := 0
	for i := range n {
		if f.mayHold(task.MakeID(1_700_000_000_000+int64(i/7), 43, uint32(i))) {
			fp++
		}
	}
	// Each filter of the chain is sized for about 0.3% false positives,
	// and a query may hit any of the (log4(n/1024)+1 = 5) filters.
	if rate := float64(fp) / n; rate > 0.03 {
		t.Errorf("false positive rate %.3f; want at most 0.03", rate)
	}
	if b := f.bytes(); b > filterGrowth*n*filterBitsPerID/8 {
		t.Errorf("filter uses %d bytes for %d ids", b, n)
	}
	t.Logf("false positives %.4f, %d bytes for %d ids", float64(fp)/n, f.bytes(), n)
}
