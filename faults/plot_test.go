package faults

import (
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWritePlot(t *testing.T) {
	withBeyond := base()
	withBeyond.beyondFault("clock-skew", 1000, 2000)
	tests := []struct {
		name string
		in   *Input
	}{
		{"base", base().input()},
		{"beyond the bounds", withBeyond.input()},
		{"empty", &Input{Run: testRun()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "throughput.png")
			if err := WritePlot(tc.in, path); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
				t.Errorf("image %v; want a real plot", b)
			}
		})
	}
	if err := WritePlot(base().input(), filepath.Join(t.TempDir(), "no", "such", "dir.png")); err == nil {
		t.Error("WritePlot into a missing directory succeeded")
	}
}

// The plot draws a series per operation acknowledged, cancels included,
// in the report's order of operations.
func TestThroughputSeries(t *testing.T) {
	b := base()
	cancelled(b, OK, "why-G")
	b.op(FSnooze, 5300, 5310, OK, Event{Task: taskA, Claim: u32(0)}, Event{})
	series, peak := throughput(digest(b.input()))
	var names []string
	for _, s := range series {
		names = append(names, s.f)
	}
	want := []string{FEnqueue, FClaim, FRenew, FUpdate, FComplete, FFail, FSnooze, FCancel, FGet}
	if !slices.Equal(names, want) {
		t.Errorf("series %v; want %v", names, want)
	}
	if peak < 1 {
		t.Errorf("peak %d; want at least 1", peak)
	}
	for _, f := range opNames {
		if opColors[f] == nil {
			t.Errorf("%s has no color of its own", f)
		}
	}
}
