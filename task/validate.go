package task

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on what a client may send. They bound memory and the work any one
// request can cause.
const (
	// MaxQueueLen is the longest queue name, in bytes.
	MaxQueueLen = 128
	// MaxGroupLen is the longest group label, in bytes.
	MaxGroupLen = 128
	// MaxDescriptionLen is the longest description, in bytes.
	MaxDescriptionLen = 1024
	// MaxDeps is the most dependencies one task may name.
	MaxDeps = 256
	// MaxKeyLen is the longest unique key, in bytes.
	MaxKeyLen = 512
	// MaxReasonLen is the longest fail reason kept, in bytes.
	MaxReasonLen = 1024
	// DefaultMaxData is the default payload limit: 1 MiB.
	DefaultMaxData = 1 << 20
)

// ValidateKey checks a unique key (Spec.Key): empty (no key), or up to
// MaxKeyLen bytes of UTF-8 without control characters; and its window,
// uniqueForMs, which only a key may have, from 0 (while the task is
// kept) up to maxD.
func ValidateKey(key string, uniqueForMs int64, maxD time.Duration) error {
	if key == "" {
		if uniqueForMs != 0 {
			return fmt.Errorf("%w: unique_for without a key", ErrInvalid)
		}
		return nil
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, limit %d", ErrInvalid, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: key is not UTF-8", ErrInvalid)
	}
	if i := strings.IndexFunc(key, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: key has a control character at byte %d", ErrInvalid, i)
	}
	return ValidateMs("unique_for", uniqueForMs, maxD)
}

// ValidateQueue checks a queue name: 1-128 bytes of [A-Za-z0-9._:-].
func ValidateQueue(q string) error {
	if q == "" {
		return fmt.Errorf("%w: queue name is empty", ErrInvalid)
	}
	return validateName("queue name", q, MaxQueueLen)
}

// ValidateGroup checks a group label: empty, or up to 128 bytes of
// [A-Za-z0-9._:-].
func ValidateGroup(g string) error {
	if g == "" {
		return nil
	}
	return validateName("group", g, MaxGroupLen)
}

// ValidateLabel checks a task's kind or subtopic (what names which): empty,
// or up to MaxGroupLen bytes of [A-Za-z0-9._:-], as a group.
func ValidateLabel(what, s string) error {
	if s == "" {
		return nil
	}
	return validateName(what, s, MaxGroupLen)
}

func validateName(what, s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalid, what, len(s), maxLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %s %q has byte %q at %d; allowed: A-Z a-z 0-9 . _ : -", ErrInvalid, what, truncate(s, 64), c, i)
		}
	}
	return nil
}

// ValidateDescription checks a description: valid UTF-8, no control
// characters other than tab and newline, up to 1024 bytes.
func ValidateDescription(d string) error {
	if len(d) > MaxDescriptionLen {
		return fmt.Errorf("%w: description is %d bytes, limit %d", ErrInvalid, len(d), MaxDescriptionLen)
	}
	if !utf8.ValidString(d) {
		return fmt.Errorf("%w: description is not valid UTF-8", ErrInvalid)
	}
	for _, r := range d {
		// unicode.IsControl covers C0, DEL and C1 (U+0080-U+009F, which
		// include NEL and the 8-bit CSI a terminal may act on).
		if unicode.IsControl(r) && r != '\t' && r != '\n' {
			return fmt.Errorf("%w: description has control character %U", ErrInvalid, r)
		}
	}
	return nil
}

// NormalizeDeps validates deps and returns them sorted and without
// duplicates. self is the id of the task being enqueued.
func NormalizeDeps(deps []ID, self ID) ([]ID, error) {
	if len(deps) > MaxDeps {
		return nil, fmt.Errorf("%w: %d dependencies, limit %d", ErrInvalid, len(deps), MaxDeps)
	}
	if len(deps) == 0 {
		return nil, nil
	}
	out := slices.Clone(deps)
	slices.SortFunc(out, ID.Compare)
	out = slices.Compact(out)
	for _, d := range out {
		if d.IsZero() {
			return nil, fmt.Errorf("%w: dependency is the zero id", ErrInvalid)
		}
		if d == self {
			return nil, fmt.Errorf("%w: task %s depends on itself", ErrInvalid, self)
		}
	}
	return out, nil
}

// ValidateData checks a payload against the limit.
func ValidateData(data []byte, limit int) error {
	if len(data) > limit {
		return fmt.Errorf("%w: payload is %d bytes, limit %d", ErrTooLarge, len(data), limit)
	}
	return nil
}

// TrimReason bounds a fail reason to MaxReasonLen bytes on a rune boundary
// and replaces invalid UTF-8, so a reason never makes a record invalid.
func TrimReason(r string) string {
	r = string([]rune(r)) // replaces invalid UTF-8 with U+FFFD
	if len(r) <= MaxReasonLen {
		return r
	}
	cut := MaxReasonLen
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut]
}

// ValidateMs checks a duration in ms from a request: not negative, not
// over maxD.
func ValidateMs(what string, v int64, maxD time.Duration) error {
	if v < 0 {
		return fmt.Errorf("%w: %s %dms is negative", ErrInvalid, what, v)
	}
	if v > maxD.Milliseconds() {
		return fmt.Errorf("%w: %s %dms exceeds the limit of %v", ErrInvalid, what, v, maxD)
	}
	return nil
}
