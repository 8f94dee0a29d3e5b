package invariant

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if err := Check(true, log, "holds"); err != nil {
		t.Fatal(err)
	}
	// In a test binary a broken invariant panics.
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "the ready index is ready") {
				t.Fatalf("recovered %v; want the invariant's panic", r)
			}
		}()
		_ = Check(false, log, "the ready index is ready", "task", 7)
		t.Fatal("Check(false) returned in a test binary")
	}()
	// In production it logs and returns ErrBroken.
	panics = false
	defer func() { panics = true }()
	err := Check(false, log, "the ready index is ready", "task", 7)
	if !errors.Is(err, ErrBroken) || !strings.Contains(buf.String(), "invariant broken: the ready index is ready") || !strings.Contains(buf.String(), "task=7") {
		t.Fatalf("production: %v, log %q", err, buf.String())
	}
}
