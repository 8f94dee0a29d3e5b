package testkit

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPollReturnsOnceTrue(t *testing.T) {
	calls := 0
	err := Poll(time.Minute, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll: %v after %d calls; want nil after 3", err, calls)
	}
}

func TestPollReturnsLastError(t *testing.T) {
	calls := 0
	err := PollEvery(20*time.Millisecond, time.Millisecond, func() error {
		calls++
		return fmt.Errorf("call %d", calls)
	})
	if want := fmt.Sprintf("call %d", calls); err == nil || err.Error() != want || calls < 2 {
		t.Fatalf("PollEvery: %v after %d calls; want %q, the last error, after at least 2", err, calls, want)
	}
}

// fakeTB records a WaitFor's failure instead of ending the test.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
	logs   []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
}

func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	f.logs = append(f.logs, fmt.Sprint(args...))
	f.mu.Unlock()
}

func TestWaitForFailsSayingWhat(t *testing.T) {
	f := &fakeTB{TB: t}
	WaitEvery(f, 10*time.Millisecond, time.Millisecond, Cond("the sky to fall", func() bool { return false }))
	if !strings.Contains(f.failed, "the sky to fall") {
		t.Fatalf("WaitFor failed with %q; want it to name what it waited for", f.failed)
	}
	f.failed = ""
	WaitFor(f, time.Minute, Cond("nothing", func() bool { return true }))
	if f.failed != "" {
		t.Fatalf("WaitFor of a true condition failed: %q", f.failed)
	}
}

func TestCond(t *testing.T) {
	ok := false
	c := Cond("ok", func() bool { return ok })
	if err := c(); err == nil || !strings.Contains(err.Error(), "ok") {
		t.Fatalf("Cond while false: %v; want an error naming it", err)
	}
	ok = true
	if err := c(); err != nil {
		t.Fatalf("Cond while true: %v", err)
	}
}

func TestLoggerWritesToTestUntilCleanup(t *testing.T) {
	f := &fakeTB{TB: t}
	var cleanups []func()
	ft := &cleanupTB{fakeTB: f, cleanups: &cleanups}
	log := Logger(ft)
	log.Info("hello", "k", 1)
	log.Debug("hidden")
	if len(f.logs) != 1 || !strings.Contains(f.logs[0], "msg=hello k=1") || strings.HasSuffix(f.logs[0], "\n") {
		t.Fatalf("logs %q; want one line with the record, no trailing newline", f.logs)
	}
	for _, c := range cleanups {
		c()
	}
	log.Info("after the test")
	if len(f.logs) != 1 {
		t.Fatalf("logs after cleanup %q; want the line dropped", f.logs)
	}
}

type cleanupTB struct {
	*fakeTB
	cleanups *[]func()
}

func (c *cleanupTB) Cleanup(f func()) { *c.cleanups = append(*c.cleanups, f) }
