package clock

import (
	"testing"
	"time"
)

func TestOffsetShiftsBase(t *testing.T) {
	base := NewManual(time.UnixMilli(1_000_000))
	c := Offset{Base: base, By: 30 * time.Second}
	if got, want := UnixMilli(c), int64(1_030_000); got != want {
		t.Fatalf("offset clock: got %d; want %d", got, want)
	}
	base.Advance(time.Second)
	if got, want := UnixMilli(c), int64(1_031_000); got != want {
		t.Fatalf("after advance: got %d; want %d", got, want)
	}
}

func TestManualSet(t *testing.T) {
	m := NewManual(time.UnixMilli(5))
	m.Set(time.UnixMilli(9))
	if got := UnixMilli(m); got != 9 {
		t.Fatalf("got %d; want 9", got)
	}
}

func TestRealMovesForward(t *testing.T) {
	a := UnixMilli(Real{})
	if a < 1_600_000_000_000 {
		t.Fatalf("real clock reads %d ms, before 2020", a)
	}
}
