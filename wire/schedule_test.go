package wire

import "testing"

func TestOccurrenceKey(t *testing.T) {
	k := OccurrenceKey("nightly.report", 42, 1_765_000_000_000)
	if k != "schedule:nightly.report:42:1765000000000" {
		t.Fatal(k)
	}
	name, v, at, ok := ParseOccurrenceKey(k)
	if !ok || name != "nightly.report" || v != 42 || at != 1_765_000_000_000 {
		t.Fatalf("ParseOccurrenceKey = %q %d %d %v", name, v, at, ok)
	}
	for _, bad := range []string{"", "schedule:", "schedule:a:1", "schedule:a b:1:2", "schedule:a:x:2", "other:a:1:2", "schedule:a:1:2:3"} {
		if _, _, _, ok := ParseOccurrenceKey(bad); ok {
			t.Errorf("ParseOccurrenceKey(%q) ok", bad)
		}
	}
}
