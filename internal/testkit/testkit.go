// Package testkit is what the tests of every skuldd package share: one
// way to wait for a condition and one test logger (STYLE.md habits 7 and
// 17). It is for tests only: only _test.go files and the node/nodetest
// harness import it (layering_test.go holds every other package to its
// list of imports, which does not name it).
//
// The package imports nothing of skuldd, so any package's tests may use
// it without a cycle.
//
// Concurrency: Poll, PollEvery and Cond may be called from any
// goroutine; WaitFor and WaitEvery call t.Fatalf and must be called from
// the test's goroutine. A Logger may be used from any goroutine.
package testkit

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// PollInterval is the pause between WaitFor's attempts: short against the
// 10ms timers the tests configure, long enough not to starve the code
// under test of a core.
const PollInterval = 5 * time.Millisecond

// WaitFor calls f every PollInterval until it returns nil, and fails the
// test with f's last error if timeout passes first: f's error says what
// is awaited and how far it got. It is the one place tests wait: they
// never sleep bare (STYLE.md habit 7).
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	WaitEvery(t, timeout, PollInterval, f)
}

// WaitEvery is WaitFor polling every interval: for conditions that are
// costly to check, such as a request to a child process.
func WaitEvery(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	if err := PollEvery(timeout, interval, f); err != nil {
		t.Fatalf("condition not met within %v: %v", timeout, err)
	}
}

// Poll is WaitFor without the test: it calls f every PollInterval until
// it returns nil or timeout passes, and returns nil or f's last error.
func Poll(timeout time.Duration, f func() error) error {
	return PollEvery(timeout, PollInterval, f)
}

// PollEvery is Poll polling every interval. f is called at least once,
// and once more at or after the deadline, so a timeout shorter than the
// interval still checks twice.
func PollEvery(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		time.Sleep(min(interval, left)) // the polling pause, not a wait for an event
	}
}

// Cond turns a predicate into a condition for WaitFor: while cond is
// false, its error is what, the thing awaited.
func Cond(what string, cond func() bool) func() error {
	err := errors.New("still waiting for " + what)
	return func() error {
		if cond() {
			return nil
		}
		return err
	}
}

// Logger returns a logger that writes to t.Log at Info level, so logs
// show only for failing tests (or with -v), next to the test that made
// them.
func Logger(t testing.TB) *slog.Logger { return LoggerAt(t, slog.LevelInfo) }

// LoggerAt is Logger at the given level. Lines logged after the test's
// cleanups have run (by timers of a library that outlive the test) are
// dropped: t.Log would panic on them.
func LoggerAt(t testing.TB, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(newTBWriter(t), &slog.HandlerOptions{Level: level}))
}

// tbWriter is the io.Writer behind Logger: a slog text handler writes each
// record in one Write, which becomes one t.Log line.
type tbWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTBWriter(t testing.TB) *tbWriter {
	w := &tbWriter{t: t}
	// Cleanups run last in, first out: this one, registered when the
	// logger is made, runs after those registered later (the components
	// that log closing), so their shutdown still shows.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
