package cron

import (
	"strings"
	"testing"
	"time"
)

func at(s string) int64 {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		expr, after string
		want        []string // the next times, in order
	}{
		{"* * * * *", "2026-12-07 10:15", []string{"2026-12-07 10:16", "2026-12-07 10:17"}},
		{"*/15 * * * *", "2026-12-07 10:15", []string{"2026-12-07 10:30", "2026-12-07 10:45", "2026-12-07 11:00"}},
		{"5 4 * * *", "2026-12-07 10:15", []string{"2026-12-08 04:05", "2026-12-09 04:05"}},
		{"0 9-17/4 * * mon-fri", "2026-12-04 16:00", []string{"2026-12-04 17:00", "2026-12-07 09:00", "2026-12-07 13:00"}},
		{"0 0 1 * *", "2026-12-07 10:15", []string{"2027-01-01 00:00", "2027-02-01 00:00"}},
		{"0 0 31 * *", "2026-01-31 00:00", []string{"2026-03-31 00:00", "2026-05-31 00:00"}},
		{"0 0 29 feb *", "2026-12-07 10:15", []string{"2028-02-29 00:00", "2032-02-29 00:00"}},
		{"0 12 * * 7", "2026-12-07 10:15", []string{"2026-12-13 12:00"}}, // 7 is Sunday
		{"0 12 * * SUN,wed", "2026-12-07 10:15", []string{"2026-12-09 12:00", "2026-12-13 12:00"}},
		// Both day fields restricted: either matches (the 1st, or a Monday).
		{"0 0 1 * 1", "2026-12-01 00:00", []string{"2026-12-07 00:00", "2026-12-14 00:00", "2026-12-21 00:00", "2026-12-28 00:00", "2027-01-01 00:00"}},
		{"10/20 * * * *", "2026-12-07 10:00", []string{"2026-12-07 10:10", "2026-12-07 10:30", "2026-12-07 10:50", "2026-12-07 11:10"}},
		{"1,2,58 23 31 12 *", "2026-12-31 23:02", []string{"2026-12-31 23:58", "2027-12-31 23:01"}},
		{"@hourly", "2026-12-07 10:15", []string{"2026-12-07 11:00"}},
		{"@weekly", "2026-12-07 10:15", []string{"2026-12-13 00:00"}},
		{"@YEARLY", "2026-12-07 10:15", []string{"2027-01-01 00:00"}},
	} {
		e, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.expr, err)
		}
		cur := at(tc.after)
		for _, w := range tc.want {
			got, ok := e.Next(cur)
			if !ok || got != at(w) {
				t.Fatalf("%q after %s: got %s (%v), want %s", tc.expr, time.UnixMilli(cur).UTC(), time.UnixMilli(got).UTC(), ok, w)
			}
			cur = got
		}
	}
}

func TestNextFromMidMinute(t *testing.T) {
	e, err := Parse("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	// 10:15:30.5 is after 10:15; the next start of a minute is 10:16.
	got, _ := e.Next(at("2026-12-07 10:15") + 30_500)
	if got != at("2026-12-07 10:16") {
		t.Fatalf("got %s", time.UnixMilli(got).UTC())
	}
}

func TestParseRefuses(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "*/61 * * * *", "5-1 * * * *", "a * * * *",
		"1,,2 * * * *", "- * * * *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "@every", "@reboot",
		"* * * foo *", strings.Repeat("1,", MaxExprBytes) + "1 * * * *",
	} {
		if e, err := Parse(expr); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", expr, e)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 1,15 jan-mar mon", "@daily", "0 0 29 2 *", "1-60/0 * * * *"} {
		f.Add(s, int64(1_765_000_000_000))
	}
	f.Fuzz(func(t *testing.T, s string, after int64) {
		e, err := Parse(s)
		if err != nil {
			return
		}
		after = after % (1 << 50) // within years the search can reach
		if after < 0 {
			after = -after
		}
		got, ok := e.Next(after)
		if !ok {
			return // a February 29th beyond searchYears is possible from some starts
		}
		if got <= after || got%60_000 != 0 {
			t.Fatalf("%q: Next(%d) = %d: not after it at the start of a minute", s, after, got)
		}
		if again, ok := e.Next(got - 1); !ok || again != got {
			t.Fatalf("%q: Next(%d) = %d, but Next of a millisecond before it is %d", s, after, got, again)
		}
	})
}
