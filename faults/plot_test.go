package faults

import (
	"image/png"
	"os"
	"path/filepath"
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
