package task_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Data model": a queue is 1–128 bytes of
// [A-Za-z0-9._:-]; TESTING.md section 8, bad queue names.
func TestValidateQueue(t *testing.T) {
	cases := []struct {
		name string
		q    string
		ok   bool
	}{
		{"simple", "emails", true},
		{"every allowed class", "AZaz09._:-", true},
		{"one byte", "q", true},
		{"128 bytes", strings.Repeat("a", 128), true},
		{"empty", "", false},
		{"129 bytes", strings.Repeat("a", 129), false},
		{"slash", "a/b", false},
		{"dot dot slash", "../etc", false},
		{"NUL", "a\x00b", false},
		{"space", "a b", false},
		{"newline", "q\n", false},
		{"tab", "\tq", false},
		{"DEL", "q\x7f", false},
		{"backslash", `a\b`, false},
		{"star", "q*", false},
		{"unicode", "é", false},
		{"NFD twin", "e\u0301", false},
		{"fullwidth", "ｑ", false},
		{"invalid UTF-8", "q\xff", false},
		{"long and bad", strings.Repeat("/", 1000), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := task.ValidateQueue(tc.q)
			if tc.ok && err != nil {
				t.Errorf("ValidateQueue(%q) = %v; want ok", tc.q, err)
			}
			if !tc.ok {
				if !errors.Is(err, task.ErrInvalid) {
					t.Errorf("ValidateQueue(%q) = %v; want ErrInvalid", tc.q, err)
				} else if len(err.Error()) > 300 {
					t.Errorf("error is %d bytes: it should not echo the whole input", len(err.Error()))
				}
			}
		})
	}
}

func TestValidateGroup(t *testing.T) {
	for _, g := range []string{"", "g", "team-a:build", strings.Repeat("g", task.MaxGroupLen)} {
		if err := task.ValidateGroup(g); err != nil {
			t.Errorf("ValidateGroup(%q) = %v; want ok", g, err)
		}
	}
	for _, g := range []string{strings.Repeat("g", task.MaxGroupLen+1), "a/b", "a b", "é"} {
		if err := task.ValidateGroup(g); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("ValidateGroup(%q) = %v; want ErrInvalid", g, err)
		}
	}
}

func TestValidateDescription(t *testing.T) {
	cases := []struct {
		name string
		d    string
		ok   bool
	}{
		{"empty", "", true},
		{"text", "send the weekly report", true},
		{"tab and newline", "line 1\n\tline 2", true},
		{"unicode", "héllo, 世界 🎉", true},
		{"at limit", strings.Repeat("x", task.MaxDescriptionLen), true},
		{"over limit", strings.Repeat("x", task.MaxDescriptionLen+1), false},
		{"NUL", "a\x00b", false},
		{"escape", "\x1b[31mred", false},
		{"carriage return", "a\rb", false},
		{"DEL", "a\x7fb", false},
		{"C1 control NEL", "a\u0085b", false},
		{"C1 control CSI", "\u009b31mred", false},
		{"invalid UTF-8", "a\xffb", false},
		{"truncated rune", "a\xe4\xb8", false},
		{"surrogate half", "\xed\xa0\x80", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := task.ValidateDescription(tc.d)
			if tc.ok && err != nil {
				t.Errorf("ValidateDescription(%q) = %v; want ok", tc.d, err)
			}
			if !tc.ok && !errors.Is(err, task.ErrInvalid) {
				t.Errorf("ValidateDescription(%q) = %v; want ErrInvalid", tc.d, err)
			}
		})
	}
}

func TestNormalizeDeps(t *testing.T) {
	self := task.MakeID(100, 1, 0)
	a, b, c := task.MakeID(1, 1, 0), task.MakeID(2, 1, 0), task.MakeID(3, 1, 0)
	many := func(n int) []task.ID {
		out := make([]task.ID, n)
		for i := range out {
			out[i] = task.MakeID(int64(i+1), 2, 0)
		}
		return out
	}
	cases := []struct {
		name    string
		deps    []task.ID
		want    []task.ID
		wantErr error
	}{
		{"none", nil, nil, nil},
		{"empty", []task.ID{}, nil, nil},
		{"sorted", []task.ID{c, a, b}, []task.ID{a, b, c}, nil},
		{"duplicates collapsed", []task.ID{b, a, b, a, a}, []task.ID{a, b}, nil},
		{"at limit", many(task.MaxDeps), many(task.MaxDeps), nil},
		{"over limit", many(task.MaxDeps + 1), nil, task.ErrInvalid},
		{"self", []task.ID{a, self}, nil, task.ErrInvalid},
		{"zero", []task.ID{a, {}}, nil, task.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.deps)
			got, err := task.NormalizeDeps(tc.deps, self)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("NormalizeDeps = %v, %v; want %v", got, err, tc.wantErr)
			}
			if err == nil && !slices.Equal(got, tc.want) {
				t.Errorf("NormalizeDeps = %v; want %v", got, tc.want)
			}
			if !slices.Equal(in, tc.deps) {
				t.Error("NormalizeDeps changed its input")
			}
		})
	}
}

func TestValidateData(t *testing.T) {
	if err := task.ValidateData(make([]byte, 10), 10); err != nil {
		t.Errorf("at limit: %v", err)
	}
	if err := task.ValidateData(make([]byte, 11), 10); !errors.Is(err, task.ErrTooLarge) {
		t.Errorf("over limit: %v; want ErrTooLarge", err)
	}
}

func TestTrimReason(t *testing.T) {
	long := strings.Repeat("x", 2*task.MaxReasonLen)
	// 3-byte runes: 1024 is not a multiple of 3, so the cut lands inside a
	// rune and must back off to 1023.
	wide := strings.Repeat("世", task.MaxReasonLen)
	cases := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", ""},
		{"short", "disk full", "disk full"},
		{"at limit", long[:task.MaxReasonLen], long[:task.MaxReasonLen]},
		{"long ascii", long, long[:task.MaxReasonLen]},
		{"long wide runes", wide, wide[:1023]},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"invalid and long", strings.Repeat("\xff", task.MaxReasonLen), strings.Repeat("\uFFFD", 341)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := task.TrimReason(tc.in)
			if got != tc.want {
				t.Errorf("TrimReason = %q (%d bytes); want %q (%d bytes)", trunc(got), len(got), trunc(tc.want), len(tc.want))
			}
			if !utf8.ValidString(got) || len(got) > task.MaxReasonLen {
				t.Errorf("TrimReason returned %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
