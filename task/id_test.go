package task_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Data model": an id is a 160-bit k-ordered flake id
// (64-bit ms time, 64-bit node id, 32-bit counter), written as 40 lowercase
// hex chars, that sorts by time.

func TestIDParseFormatRoundTrip(t *testing.T) {
	cases := []task.ID{
		task.MakeID(1, 0, 0),
		task.MakeID(1_700_000_000_123, 42, 7),
		task.MakeID(1<<62, ^uint64(0), ^uint32(0)),
		task.MakeID(0, 0, 1),
	}
	for _, id := range cases {
		s := id.String()
		if len(s) != 2*task.IDLen || s != strings.ToLower(s) {
			t.Errorf("String() = %q: want %d lowercase hex chars", s, 2*task.IDLen)
		}
		got, err := task.ParseID(s)
		if err != nil {
			t.Fatalf("ParseID(%q): %v", s, err)
		}
		if got != id {
			t.Errorf("ParseID(%q) = %v; want %v", s, got, id)
		}
		// Either case parses.
		if up, err := task.ParseID(strings.ToUpper(s)); err != nil || up != id {
			t.Errorf("ParseID(upper %q) = %v, %v; want %v", s, up, err, id)
		}
		// Text (JSON) round trip.
		b, err := json.Marshal(id)
		if err != nil {
			t.Fatal(err)
		}
		if want := `"` + s + `"`; string(b) != want {
			t.Errorf("json = %s; want %s", b, want)
		}
		var back task.ID
		if err := json.Unmarshal(b, &back); err != nil || back != id {
			t.Errorf("json round trip = %v, %v; want %v", back, err, id)
		}
	}
}

func TestIDParts(t *testing.T) {
	id := task.MakeID(1_700_000_000_123, 42, 7)
	if id.Millis() != 1_700_000_000_123 || id.Node() != 42 {
		t.Errorf("Millis, Node = %d, %d; want 1700000000123, 42", id.Millis(), id.Node())
	}
	// Byte order is time order, then node, then counter.
	ordered := []task.ID{
		task.MakeID(1, 9, 9),
		task.MakeID(2, 0, 0),
		task.MakeID(2, 1, 0),
		task.MakeID(2, 1, 1),
		task.MakeID(256, 0, 0),
	}
	for i := 1; i < len(ordered); i++ {
		if ordered[i-1].Compare(ordered[i]) >= 0 {
			t.Errorf("%v should sort before %v", ordered[i-1], ordered[i])
		}
	}
	if !(task.ID{}).IsZero() || id.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestParseIDErrors(t *testing.T) {
	valid := task.MakeID(5, 6, 7).String()
	cases := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"short", valid[:39]},
		{"long", valid + "0"},
		{"much too long", strings.Repeat("ab", 500)},
		{"non-hex", "g" + valid[1:]},
		{"space", " " + valid[1:]},
		{"hex prefix", "0x" + valid[2:]},
		{"multibyte", "é" + valid[2:]},
		{"zero", strings.Repeat("0", 40)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := task.ParseID(tc.in)
			if !errors.Is(err, task.ErrInvalid) {
				t.Fatalf("ParseID(%q) = %v, %v; want ErrInvalid", tc.in, id, err)
			}
			// An error message never carries an unbounded input.
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long: %q", len(err.Error()), err)
			}
			var u task.ID
			if err := u.UnmarshalText([]byte(tc.in)); !errors.Is(err, task.ErrInvalid) {
				t.Errorf("UnmarshalText(%q) = %v; want ErrInvalid", tc.in, err)
			}
		})
	}
}

func TestIDCBOR(t *testing.T) {
	id := task.MakeID(1_700_000_000_123, 42, 7)
	b, err := cbor.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	// A 20-byte byte string: major type 2, length 20 (0x54).
	if len(b) != 1+task.IDLen || b[0] != 0x54 {
		t.Fatalf("cbor = %x; want a 20-byte byte string", b)
	}
	var back task.ID
	if err := cbor.Unmarshal(b, &back); err != nil || back != id {
		t.Fatalf("cbor round trip = %v, %v; want %v", back, err, id)
	}
	for _, n := range []int{0, 1, 19, 21, 40} {
		enc, err := cbor.Marshal(make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		var got task.ID
		if err := cbor.Unmarshal(enc, &got); err == nil {
			t.Errorf("cbor decode of a %d-byte string into ID: no error", n)
		}
		if err := got.UnmarshalBinary(make([]byte, n)); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("UnmarshalBinary(%d bytes) = %v; want ErrInvalid", n, err)
		}
	}
}

func TestIDGenMonotonicWhenClockStepsBack(t *testing.T) {
	const node = 3
	start := time.UnixMilli(1_700_000_000_000)
	c := clock.NewManual(start)
	g := task.NewIDGen(node, c)
	var prev task.ID
	steps := []time.Duration{0, 0, time.Millisecond, -time.Second, 0, -time.Hour, 2 * time.Second, -time.Millisecond, time.Millisecond}
	for i, d := range steps {
		c.Advance(d)
		id := g.Next()
		if id.Node() != node {
			t.Errorf("step %d: node %d; want %d", i, id.Node(), node)
		}
		if i > 0 && prev.Compare(id) >= 0 {
			t.Fatalf("step %d (clock %+v): id %v not above previous %v", i, d, id, prev)
		}
		if id.IsZero() {
			t.Fatalf("step %d: zero id", i)
		}
		prev = id
	}
	// A clock that stepped back never makes the generator reuse a lower
	// millisecond.
	c.Set(start.Add(-24 * time.Hour))
	if id := g.Next(); id.Millis() < prev.Millis() || prev.Compare(id) >= 0 {
		t.Errorf("after a step back: %v (ms %d) after %v (ms %d)", id, id.Millis(), prev, prev.Millis())
	}
}

func TestIDGenConcurrentUnique(t *testing.T) {
	c := clock.NewManual(time.UnixMilli(1_700_000_000_000))
	g := task.NewIDGen(9, c)
	const workers, per = 16, 2000
	out := make([][]task.ID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ids := make([]task.ID, 0, per)
			for i := range per {
				if i%100 == 0 {
					// Move the clock both ways while others generate.
					if w%2 == 0 {
						c.Advance(time.Millisecond)
					} else {
						c.Advance(-time.Millisecond)
					}
				}
				ids = append(ids, g.Next())
			}
			out[w] = ids
		})
	}
	wg.Wait()
	seen := make(map[task.ID]bool, workers*per)
	for w, ids := range out {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %v", id)
			}
			seen[id] = true
			// Each goroutine sees its own ids strictly increase.
			if i > 0 && ids[i-1].Compare(id) >= 0 {
				t.Fatalf("worker %d: id %v not above %v", w, id, ids[i-1])
			}
		}
	}
}
