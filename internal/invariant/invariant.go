// Package invariant reports broken invariants: conditions the code
// relies on that only a bug can break. In a test binary a broken one
// panics, so the test fails where the bug is; in production it is logged
// as a bug (with what the caller passes) and Check returns an error the
// caller refuses its operation with, or carries past where refusing would
// do more harm (the caller says why).
//
// invariant imports nothing of skuldd; any package may use it.
package invariant

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
)

// ErrBroken is what Check returns for a broken invariant.
var ErrBroken = errors.New("invariant broken (a bug)")

// panics is whether a broken invariant panics: in test binaries.
var panics = testing.Testing()

// Check returns nil if ok; otherwise it panics in a test binary, and in
// production logs what (with args, as slog key-value pairs) at error
// level and returns an error wrapping ErrBroken.
func Check(ok bool, log *slog.Logger, what string, args ...any) error {
	if ok {
		return nil
	}
	if panics {
		panic(fmt.Sprintf("invariant broken: %s %v", what, args))
	}
	log.Error("invariant broken: "+what, args...)
	return fmt.Errorf("%w: %s", ErrBroken, what)
}
