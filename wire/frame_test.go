package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%v): %v", v, err)
	}
	return b
}

func encodeFrame(t testing.TB, f *Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteFrame(&buf, f); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	return buf.Bytes()
}

// lengthPrefixed returns payload behind a 4-byte big-endian length.
func lengthPrefixed(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

func framesEqual(a, b *Frame) bool {
	return a.Version == b.Version && a.ID == b.ID && a.Op == b.Op && a.Flags == b.Flags &&
		a.Code == b.Code && a.Msg == b.Msg && bytes.Equal(a.Body, b.Body)
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []*Frame{
		{Version: Version, ID: 1, Op: 7},
		{Version: Version, ID: 1<<64 - 1, Op: 65535, Flags: FlagMore, Body: mustMarshal(t, []int{1, 2, 3})},
		{Version: Version, ID: 9, Op: 2, Code: CodeNotFound, Msg: "task not found"},
	}
	var stream bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&stream, f); err != nil {
			t.Fatalf("WriteFrame(%+v): %v", f, err)
		}
	}
	for i, want := range frames {
		var got Frame
		if err := ReadFrame(&stream, 0, &got); err != nil {
			t.Fatalf("frame %d: ReadFrame: %v", i, err)
		}
		if !framesEqual(&got, want) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got, *want)
		}
	}
	var f Frame
	if err := ReadFrame(&stream, 0, &f); err != io.EOF {
		t.Fatalf("ReadFrame at end = %v, want io.EOF", err)
	}
}

// The envelope bytes are deterministic: the same frame always encodes the
// same, whatever the map order in the body value.
func TestMarshalDeterministic(t *testing.T) {
	m := map[string]int{}
	for _, k := range strings.Fields("q w e r t y u i o p a s d f g h j k l") {
		m[k] = len(k)
	}
	first := mustMarshal(t, m)
	for range 20 {
		if got := mustMarshal(t, m); !bytes.Equal(got, first) {
			t.Fatalf("Marshal not deterministic: %x vs %x", got, first)
		}
	}
}

func TestReadFrameTooLargeBeforeReadingBody(t *testing.T) {
	const maxFrame = 1 << 16
	hdr := binary.BigEndian.AppendUint32(nil, 1<<30)
	r := &strictReader{data: hdr}
	var f Frame
	err := ReadFrame(r, maxFrame, &f)
	if CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("ReadFrame = %v (code %s), want CodeFrameTooLarge", err, CodeOf(err).Name())
	}
	if Resumable(err) {
		t.Fatalf("a too-large frame must not be resumable")
	}
	if r.overread {
		t.Fatalf("ReadFrame read past the length prefix of a too-large frame")
	}
}

// strictReader serves data, then records any attempt to read more.
type strictReader struct {
	data     []byte
	overread bool
}

func (r *strictReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		r.overread = true
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadFrameErrors(t *testing.T) {
	valid := encodeFrame(t, &Frame{Version: Version, ID: 5, Op: 1})
	tests := []struct {
		name      string
		in        []byte
		code      Code // CodeOK: not a wire error
		resumable bool
		wantID    uint64
	}{
		{"junk in a valid prefix", lengthPrefixed([]byte{0x1c, 0xff, 0x00, 0x13}), CodeBadFrame, true, 0},
		{"empty envelope", lengthPrefixed(nil), CodeBadFrame, true, 0},
		{"not a map", lengthPrefixed(mustMarshal(t, 42)), CodeBadFrame, true, 0},
		{"trailing bytes", lengthPrefixed(append(valid[4:], 0x01)), CodeBadFrame, true, 0},
		{"wrong version", lengthPrefixed(mustMarshal(t, map[int]any{1: 2, 2: 77, 3: 1})), CodeVersion, true, 77},
		{"missing version", lengthPrefixed(mustMarshal(t, map[int]any{2: 77})), CodeVersion, true, 77},
		{"duplicate key", lengthPrefixed([]byte{0xa2, 0x01, 0x01, 0x01, 0x01}), CodeBadFrame, true, 0},
		{"indefinite map", lengthPrefixed([]byte{0xbf, 0x01, 0x01, 0xff}), CodeBadFrame, true, 0},
		{"tag", lengthPrefixed([]byte{0xc1, 0x01}), CodeBadFrame, true, 0},
		{"too deep", lengthPrefixed(nested(maxNestedLevels + 1)), CodeBadFrame, true, 0},
		{"truncated prefix", valid[:2], CodeOK, false, 0},
		{"truncated body", valid[:len(valid)-1], CodeOK, false, 0},
		{"too large", binary.BigEndian.AppendUint32(nil, DefaultMaxFrame+1), CodeFrameTooLarge, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f Frame
			err := ReadFrame(bytes.NewReader(tc.in), 0, &f)
			if err == nil {
				t.Fatalf("ReadFrame succeeded: %+v", f)
			}
			var we *Error
			if tc.code == CodeOK {
				if errors.As(err, &we) {
					t.Fatalf("ReadFrame = %v, want a read error", err)
				}
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("ReadFrame = %v, want io.ErrUnexpectedEOF", err)
				}
			} else if !errors.As(err, &we) || we.Code != tc.code {
				t.Fatalf("ReadFrame = %v, want code %s", err, tc.code.Name())
			}
			if got := Resumable(err); got != tc.resumable {
				t.Fatalf("Resumable(%v) = %v, want %v", err, got, tc.resumable)
			}
			if f.ID != tc.wantID {
				t.Fatalf("f.ID = %d, want %d", f.ID, tc.wantID)
			}
		})
	}
}

// nested returns depth nested one-element arrays around 0.
func nested(depth int) []byte {
	b := bytes.Repeat([]byte{0x81}, depth)
	return append(b, 0x00)
}

// After a resumable error the next frame reads fine.
func TestReadFrameResumes(t *testing.T) {
	var in bytes.Buffer
	in.Write(lengthPrefixed([]byte("garbage!")))
	in.Write(encodeFrame(t, &Frame{Version: Version, ID: 3, Op: 1}))
	var f Frame
	if err := ReadFrame(&in, 0, &f); !Resumable(err) {
		t.Fatalf("first ReadFrame = %v, want a resumable error", err)
	}
	if err := ReadFrame(&in, 0, &f); err != nil || f.ID != 3 {
		t.Fatalf("second ReadFrame = %v, %+v; want frame 3", err, f)
	}
}

// A frame above the pool size is read through the growing buffer.
func TestReadFrameLarge(t *testing.T) {
	body := mustMarshal(t, bytes.Repeat([]byte{0xab}, 3*poolMaxCap))
	in := encodeFrame(t, &Frame{Version: Version, ID: 1, Op: 1, Body: body})
	var f Frame
	if err := ReadFrame(bytes.NewReader(in), 0, &f); err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if !bytes.Equal(f.Body, body) {
		t.Fatalf("body mismatch")
	}
	if err := ReadFrame(bytes.NewReader(in[:len(in)-10]), 0, &f); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated large frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestAppendFrameLimit(t *testing.T) {
	var buf bytes.Buffer
	f := &Frame{Version: Version, ID: 1, Op: 1, Body: mustMarshal(t, make([]byte, 2000))}
	if err := appendFrame(&buf, f, nil, 1000); CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("appendFrame over the limit = %v, want CodeFrameTooLarge", err)
	}
	buf.Reset()
	if err := appendFrame(&buf, &Frame{Version: Version, ID: 1}, make([]byte, 2000), 1000); CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("appendFrame with a body over the limit = %v, want CodeFrameTooLarge", err)
	}
	buf.Reset()
	if err := appendFrame(&buf, &Frame{Version: Version, ID: 1, Body: []byte{0x1c}}, nil, 1000); err == nil {
		t.Fatalf("appendFrame with a malformed body succeeded")
	}
	buf.Reset()
	if err := appendFrame(&buf, &Frame{Version: Version, ID: 1}, make(chan int), 1000); CodeOf(err) != CodeInternal {
		t.Fatalf("appendFrame with an unencodable body = %v, want CodeInternal", err)
	}
}

// checkMatchesCBOR fails unless appendFrame's hand-written envelope is
// exactly what the cbor library encodes for f, both with f.Body and with the
// body passed as a value.
func checkMatchesCBOR(t testing.TB, f *Frame) {
	t.Helper()
	want, err := cborEnc.Marshal(f)
	if err != nil {
		t.Fatalf("cbor Marshal(%+v): %v", f, err)
	}
	var buf bytes.Buffer
	if err := appendFrame(&buf, f, nil, math.MaxInt); err != nil {
		t.Fatalf("appendFrame(%+v): %v", f, err)
	}
	if got := buf.Bytes()[lenPrefixSize:]; !bytes.Equal(got, want) {
		t.Fatalf("appendFrame(%+v):\n got %x\nwant %x", f, got, want)
	}
	if binary.BigEndian.Uint32(buf.Bytes()) != uint32(len(want)) {
		t.Fatalf("length prefix %d, want %d", binary.BigEndian.Uint32(buf.Bytes()), len(want))
	}
	if len(f.Body) > 0 {
		g := *f
		g.Body = nil
		buf.Reset()
		if err := appendFrame(&buf, &g, f.Body, math.MaxInt); err != nil {
			t.Fatalf("appendFrame(%+v) with body value: %v", f, err)
		}
		if got := buf.Bytes()[lenPrefixSize:]; !bytes.Equal(got, want) {
			t.Fatalf("appendFrame(%+v) with body value:\n got %x\nwant %x", f, got, want)
		}
	}
}

func TestAppendFrameMatchesCBOR(t *testing.T) {
	// Integers at every boundary of the CBOR head sizes.
	ints := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	for _, n := range ints {
		checkMatchesCBOR(t, &Frame{Version: Version, ID: n, Op: Op(n), Flags: Flags(n), Code: Code(n)})
	}
	for _, l := range []int{0, 1, 23, 24, 255, 256, 65535, 65536} {
		checkMatchesCBOR(t, &Frame{Version: Version, ID: 5, Msg: strings.Repeat("é", l/2) + strings.Repeat("m", l%2)})
	}
	bodies := []any{nil, 0, "x", []byte{}, map[string]int{"b": 1, "a": 2}, struct {
		A int `cbor:"1,keyasint"`
	}{7}}
	for _, b := range bodies {
		checkMatchesCBOR(t, &Frame{Version: Version, ID: 1, Op: 2, Flags: FlagMore, Code: 3, Msg: "m", Body: mustMarshal(t, b)})
	}
}

func TestUnmarshalLimits(t *testing.T) {
	var v any
	tests := []struct {
		name string
		in   []byte
		msg  string // a substring of the error
	}{
		{"too deep", nested(maxNestedLevels + 1), "exceeded max nested level"},
		{"too many elements", append([]byte{0x9a, 0x00, 0x01, 0x00, 0x01}, make([]byte, maxArrayElements+1)...), "exceeded max number of elements"},
		{"too many pairs", append([]byte{0xba, 0x00, 0x00, 0x10, 0x01}, make([]byte, 2*(maxMapPairs+1))...), "exceeded max number of key-value pairs"},
		{"duplicate key", []byte{0xa2, 0x01, 0x01, 0x01, 0x02}, "duplicate map key"},
		{"indefinite", []byte{0x9f, 0x01, 0xff}, "indefinite-length"},
		{"tag", []byte{0xc1, 0x01}, "tag"},
		{"bad utf8", []byte{0x62, 0xff, 0xfe}, "UTF-8"},
		{"trailing", []byte{0x01, 0x02}, "extraneous data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Unmarshal(tc.in, &v)
			if CodeOf(err) != CodeBadFrame {
				t.Fatalf("Unmarshal = %v, want CodeBadFrame", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Unmarshal = %v, want it to mention %q", err, tc.msg)
			}
		})
	}
	if err := Unmarshal(nested(maxNestedLevels-1), &v); err != nil {
		t.Fatalf("Unmarshal at the nesting limit: %v", err)
	}
	var big []uint8
	ok := append([]byte{0x9a, 0x00, 0x01, 0x00, 0x00}, make([]byte, maxArrayElements)...)
	if err := Unmarshal(ok, &big); err != nil || len(big) != maxArrayElements {
		t.Fatalf("Unmarshal at the array limit: %v (%d elements)", err, len(big))
	}
}

// fuzzMaxFrame is the frame limit FuzzReadFrame reads with.
const fuzzMaxFrame = 1 << 16

// FuzzReadFrame feeds arbitrary bytes to ReadFrame: it must never panic,
// and every frame that decodes must re-encode and decode to the same frame.
func FuzzReadFrame(f *testing.F) {
	valid := encodeFrame(f, &Frame{Version: Version, ID: 42, Op: 3, Body: mustMarshal(f, map[string]any{"a": 1, "b": []string{"x"}})})
	errFrame := encodeFrame(f, &Frame{Version: Version, ID: 43, Op: 3, Code: CodeNotFound, Msg: "task not found"})
	more := encodeFrame(f, &Frame{Version: Version, ID: 44, Op: 9, Flags: FlagMore, Body: mustMarshal(f, []byte("payload"))})
	f.Add(valid)
	f.Add(append(append(append([]byte{}, valid...), errFrame...), more...))
	f.Add(valid[:len(valid)-3])                           // truncated
	f.Add(binary.BigEndian.AppendUint32(nil, 1<<30))      // huge length
	f.Add(lengthPrefixed([]byte{0xa1, 0x07, 0x9f, 0xff})) // indefinite body
	f.Add(lengthPrefixed([]byte{0xa2, 0x01, 0x01, 0x07, 0xf6}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			var fr Frame
			err := ReadFrame(r, fuzzMaxFrame, &fr)
			if Resumable(err) {
				continue // the bad frame was consumed; r made progress
			}
			if err != nil {
				return
			}
			checkMatchesCBOR(t, &fr)
			var buf bytes.Buffer
			if err := WriteFrame(&buf, &fr); err != nil {
				t.Fatalf("re-encode %+v: %v", fr, err)
			}
			var again Frame
			if err := ReadFrame(&buf, 0, &again); err != nil {
				t.Fatalf("decode re-encoded %+v: %v", fr, err)
			}
			if !framesEqual(&fr, &again) {
				t.Fatalf("round trip changed the frame:\n%+v\n%+v", fr, again)
			}
			if buf.Len() != 0 {
				t.Fatalf("%d bytes left after the re-encoded frame", buf.Len())
			}
		}
	})
}

// envelopeSeeds are envelopes (without the length prefix) in and out of
// the form decodeEnvelope takes.
func envelopeSeeds(t testing.TB) [][]byte {
	body := mustMarshal(t, map[string]any{"a": 1, "b": []string{"x"}})
	var seeds [][]byte
	for _, f := range []*Frame{
		{Version: Version, ID: 42, Op: 3, Body: body},
		{Version: Version, ID: 1<<64 - 1, Op: 65535, Flags: FlagMore, Body: mustMarshal(t, []byte("payload"))},
		{Version: Version, ID: 43, Op: 3, Code: CodeNotFound, Msg: "task not found"},
		{Version: 2, ID: 7, Op: 1},
		{},
	} {
		seeds = append(seeds, encodeFrame(t, f)[lenPrefixSize:])
	}
	return append(seeds,
		[]byte{0xa3, 0x01, 0x18, 0x01, 0x02, 0x19, 0x00, 0x05, 0x03, 0x01},                                                 // integers not in shortest form
		[]byte{0xa3, 0x02, 0x05, 0x01, 0x01, 0x03, 0x01},                                                                   // keys out of order
		[]byte{0xa3, 0x01, 0x01, 0x01, 0x01, 0x03, 0x01},                                                                   // a repeated key
		[]byte{0xa3, 0x01, 0x19, 0x01, 0x00, 0x02, 0x05, 0x03, 0x01},                                                       // version over uint8
		[]byte{0xa3, 0x01, 0x01, 0x07, 0x01, 0x02, 0x05},                                                                   // body before another key
		[]byte{0xa2, 0x01, 0x01, 0x06, 0x62, 0xc3, 0x28},                                                                   // message not UTF-8
		[]byte{0xa2, 0x01, 0x01, 0x07, 0xc1, 0x01},                                                                         // a tag in the body
		[]byte{0xa2, 0x01, 0x01, 0x08, 0x01},                                                                               // an unknown key
		[]byte{0xbf, 0x01, 0x01, 0xff},                                                                                     // an indefinite map
		[]byte{0xa1, 0x07, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x01}, // nested to the limit, counted from the envelope
	)
}

// FuzzEnvelope: decodeEnvelope, ReadFrame's fast path, accepts only
// envelopes the CBOR library decodes, to the same Frame, and leaves the
// frame alone when it declines.
func FuzzEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Frame
		if !decodeEnvelope(data, &fast) {
			if !framesEqual(&fast, &Frame{}) {
				t.Fatalf("declined, but wrote %+v", fast)
			}
			return
		}
		var lib Frame
		if err := cborDec.Unmarshal(data, &lib); err != nil {
			t.Fatalf("fast path took %x as %+v; the library refuses it: %v", data, fast, err)
		}
		if !framesEqual(&fast, &lib) {
			t.Fatalf("%x: fast path %+v, library %+v", data, fast, lib)
		}
	})
}

// TestEnvelopeFastPath: the frames appendFrame writes take the fast path.
func TestEnvelopeFastPath(t *testing.T) {
	for i, s := range envelopeSeeds(t)[:5] {
		var fr Frame
		if !decodeEnvelope(s, &fr) {
			t.Errorf("seed %d (%x): declined", i, s)
		}
	}
}
