// Package cron parses the five-field cron expressions of periodic tasks
// (ctl schedule set --cron) and finds their next time.
//
// An expression is "minute hour day-of-month month day-of-week", each
// field "*", a number, a range "a-b", any of these with a step "/n", or a
// comma-separated list of them; months and weekdays also take their
// three-letter English names, and weekday 7 is Sunday as 0 is. The
// macros @yearly (@annually), @monthly, @weekly, @daily (@midnight) and
// @hourly stand for their usual expressions. As in Vixie cron, when both
// day fields are restricted a day matches if either does. Times are UTC:
// every node computes the same occurrences whatever its time zone.
//
// It is a leaf: pure functions of their arguments, no clock, no I/O. The
// metadata group validates an expression with Parse when it applies a
// schedule, so Parse must be deterministic and must never panic.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxExprBytes bounds an expression: a longer one is refused.
const MaxExprBytes = 256

// searchYears bounds Next's search: an expression with no time within
// this many years (February 30th) has none. 29 February recurs at most
// 8 years apart (2096, 2104).
const searchYears = 9

// Expr is a parsed expression: one bit per allowed value of each field.
type Expr struct {
	minute, hour, dom, month, dow uint64
	// domAny and dowAny: the field was "*" (unrestricted), which decides
	// how the two day fields combine.
	domAny, dowAny bool
}

type field struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}

var (
	minuteField = field{name: "minute", min: 0, max: 59}
	hourField   = field{name: "hour", min: 0, max: 23}
	domField    = field{name: "day of month", min: 1, max: 31}
	monthField  = field{name: "month", min: 1, max: 12,
		names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}}
	// Weekday 7 is Sunday too; Parse folds it onto 0.
	dowField = field{name: "day of week", min: 0, max: 7,
		names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}}
)

var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses an expression. It refuses one that never matches a time
// within searchYears of 2000-01-01 (such as "0 0 30 2 *").
func Parse(s string) (*Expr, error) {
	if len(s) > MaxExprBytes {
		return nil, fmt.Errorf("cron: expression of %d bytes, limit %d", len(s), MaxExprBytes)
	}
	src := strings.TrimSpace(s)
	if strings.HasPrefix(src, "@") {
		m, ok := macros[strings.ToLower(src)]
		if !ok {
			return nil, fmt.Errorf("cron: unknown macro %q (want @yearly, @monthly, @weekly, @daily or @hourly)", src)
		}
		src = m
	}
	parts := strings.Fields(src)
	if len(parts) != 5 {
		return nil, fmt.Errorf("cron: %q has %d fields, want 5 (minute hour day-of-month month day-of-week)", s, len(parts))
	}
	var e Expr
	var err error
	if e.minute, _, err = minuteField.parse(parts[0]); err != nil {
		return nil, err
	}
	if e.hour, _, err = hourField.parse(parts[1]); err != nil {
		return nil, err
	}
	if e.dom, e.domAny, err = domField.parse(parts[2]); err != nil {
		return nil, err
	}
	if e.month, _, err = monthField.parse(parts[3]); err != nil {
		return nil, err
	}
	if e.dow, e.dowAny, err = dowField.parse(parts[4]); err != nil {
		return nil, err
	}
	if e.dow&(1<<7) != 0 {
		e.dow = e.dow&^(1<<7) | 1
	}
	if _, ok := e.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()); !ok {
		return nil, fmt.Errorf("cron: %q matches no time", s)
	}
	return &e, nil
}

// parse reads one field into a bit set; any reports a bare "*".
func (f field) parse(s string) (bits uint64, any bool, err error) {
	if s == "*" {
		return f.span(f.min, f.max, 1), true, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		b, err := f.parseItem(item)
		if err != nil {
			return 0, false, err
		}
		bits |= b
	}
	return bits, false, nil
}

func (f field) parseItem(s string) (uint64, error) {
	rng, stepStr, hasStep := strings.Cut(s, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepStr)
		if err != nil || n < 1 || n > f.max-f.min+1 {
			return 0, fmt.Errorf("cron: %s step %q: want 1 to %d", f.name, stepStr, f.max-f.min+1)
		}
		step = n
	}
	lo, hi := f.min, f.max
	switch {
	case rng == "*":
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		var err error
		if lo, err = f.value(a); err != nil {
			return 0, err
		}
		if hi, err = f.value(b); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, fmt.Errorf("cron: %s range %q runs backwards", f.name, rng)
		}
	default:
		v, err := f.value(rng)
		if err != nil {
			return 0, err
		}
		lo = v
		if !hasStep {
			hi = v // "5" is 5 alone; "5/10" is 5, 15, ... to the end
		}
	}
	return f.span(lo, hi, step), nil
}

func (f field) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < f.min || v > f.max {
		return 0, fmt.Errorf("cron: %s %q: want %d to %d", f.name, s, f.min, f.max)
	}
	return v, nil
}

func (f field) span(lo, hi, step int) uint64 {
	var b uint64
	for v := lo; v <= hi; v += step {
		b |= 1 << uint(v)
	}
	return b
}

func has(bits uint64, v int) bool { return bits&(1<<uint(v)) != 0 }

// dayMatches applies the day-of-month/day-of-week rule.
func (e *Expr) dayMatches(t time.Time) bool {
	dom, dow := has(e.dom, t.Day()), has(e.dow, int(t.Weekday()))
	switch {
	case e.domAny && e.dowAny:
		return true
	case e.domAny:
		return dow
	case e.dowAny:
		return dom
	}
	return dom || dow
}

// Next returns the first time the expression matches strictly after
// afterMs (Unix milliseconds), at the start of its minute, in Unix
// milliseconds; ok is false if none comes within searchYears.
func (e *Expr) Next(afterMs int64) (int64, bool) {
	t := time.UnixMilli(afterMs).UTC().Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(searchYears, 0, 0)
	for t.Before(end) {
		switch {
		case !has(e.month, int(t.Month())):
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !e.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case !has(e.hour, t.Hour()):
			t = t.Truncate(time.Hour).Add(time.Hour)
		case !has(e.minute, t.Minute()):
			t = t.Add(time.Minute)
		default:
			return t.UnixMilli(), true
		}
	}
	return 0, false
}
