package antientropy

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
)

// TestCodecFrozen pins the byte formats (codec.go): peers of different
// versions must read each other.
func TestCodecFrozen(t *testing.T) {
	s := DefaultConfig().Shape
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"digests", AppendDigests(nil, []Digest{{1}, {2}}),
			"01" + "02" + "01000000000000000000000000000000" + "02000000000000000000000000000000"},
		{"no digests", AppendDigests(nil, nil), "0100"},
		{"entries", AppendEntries(nil, []Entry{{ID: vectorID, Digest: Digest{9}}}),
			"02" + "01" + "0102030405060708090a0b0c0d0e0f1011121314" + "09000000000000000000000000000000"},
		{"nodes request", NodesRequest{Shape: s, Level: 2, Idx: []int{3, 200, 1023}}.Append(nil),
			"03" + "0a05" + "02" + "03" + "03" + "c501" + "b706"},
		{"buckets request", BucketsRequest{Shape: s, Buckets: []int{0, 7}}.Append(nil),
			"04" + "0a05" + "02" + "00" + "07"},
	}
	for _, tc := range tests {
		if got := hex.EncodeToString(tc.got); got != tc.want {
			t.Errorf("%s: %s; want %s", tc.name, got, tc.want)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	ds := []Digest{syntheticDigest(1), syntheticDigest(2), {}}
	gotDs, err := DecodeDigests(AppendDigests(nil, ds), len(ds))
	if err != nil || !slices.Equal(gotDs, ds) {
		t.Errorf("digests: got %v, %v; want %v", gotDs, err, ds)
	}
	es := []Entry{{ID: testID(3), Digest: syntheticDigest(3)}, {ID: testID(1), Digest: syntheticDigest(1)}}
	SortEntries(es)
	gotEs, err := DecodeEntries(AppendEntries(nil, es), len(es))
	if err != nil || !slices.Equal(gotEs, es) {
		t.Errorf("entries: got %v, %v; want %v", gotEs, err, es)
	}
	for _, s := range []Shape{DefaultConfig().Shape, {Buckets: BucketsMax, Fanout: FanoutMax}, {Buckets: 2, Fanout: 2}} {
		nr := NodesRequest{Shape: s, Level: s.Depth(), Idx: []int{0, s.Buckets - 1}}
		gotNr, err := DecodeNodesRequest(nr.Append(nil))
		if err != nil || gotNr.Shape != nr.Shape || gotNr.Level != nr.Level || !slices.Equal(gotNr.Idx, nr.Idx) {
			t.Errorf("nodes request: got %+v, %v; want %+v", gotNr, err, nr)
		}
		br := BucketsRequest{Shape: s, Buckets: []int{0, s.Buckets - 1}}
		gotBr, err := DecodeBucketsRequest(br.Append(nil))
		if err != nil || gotBr.Shape != br.Shape || !slices.Equal(gotBr.Buckets, br.Buckets) {
			t.Errorf("buckets request: got %+v, %v; want %+v", gotBr, err, br)
		}
	}
}

func TestCodecRejects(t *testing.T) {
	hx := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatalf("bad test hex %q", s)
		}
		return b
	}
	zeros := func(n int) string { return hex.EncodeToString(make([]byte, n)) }
	digest := zeros(DigestLen)
	entry := func(last byte) string { return zeros(IDLen-1) + hex.EncodeToString([]byte{last}) + digest }
	decodeDigests := func(b []byte) error { _, err := DecodeDigests(b, 4); return err }
	decodeEntries := func(b []byte) error { _, err := DecodeEntries(b, 4); return err }
	decodeNodes := func(b []byte) error { _, err := DecodeNodesRequest(b); return err }
	decodeBuckets := func(b []byte) error { _, err := DecodeBucketsRequest(b); return err }
	tests := []struct {
		name   string
		decode func([]byte) error
		in     string
		want   error
	}{
		{"digests: empty", decodeDigests, "", ErrMalformed},
		{"digests: wrong tag", decodeDigests, "02" + "00", ErrMalformed},
		{"digests: no count", decodeDigests, "01", ErrMalformed},
		{"digests: short", decodeDigests, "01" + "01" + zeros(DigestLen-1), ErrMalformed},
		{"digests: trailing", decodeDigests, "01" + "01" + digest + "00", ErrMalformed},
		{"digests: over the limit", decodeDigests, "01" + "05" + digest + digest + digest + digest + digest, ErrMalformed},
		{"digests: huge count", decodeDigests, "01" + "ffffffffffffffffff01", ErrMalformed},
		{"digests: long varint", decodeDigests, "01" + "8100" + digest, ErrMalformed},
		{"entries: zero id", decodeEntries, "02" + "01" + zeros(EntryLen), ErrMalformed},
		{"entries: duplicate", decodeEntries, "02" + "02" + entry(1) + entry(1), ErrMalformed},
		{"entries: unsorted", decodeEntries, "02" + "02" + entry(2) + entry(1), ErrMalformed},
		{"entries: short", decodeEntries, "02" + "01" + entry(1)[2:], ErrMalformed},
		{"nodes: no shape", decodeNodes, "03" + "0a", ErrMalformed},
		{"nodes: shape beyond bounds", decodeNodes, "03" + "4005" + "00" + "01" + "00", ErrShape},
		{"nodes: invalid shape", decodeNodes, "03" + "0300" + "00" + "01" + "00", ErrShape},
		{"nodes: fanout above buckets", decodeNodes, "03" + "0205" + "00" + "01" + "00", ErrShape},
		{"nodes: level below leaves", decodeNodes, "03" + "0a05" + "03" + "01" + "00", ErrMalformed},
		{"nodes: no index", decodeNodes, "03" + "0a05" + "00" + "00", ErrMalformed},
		{"nodes: index beyond level", decodeNodes, "03" + "0a05" + "01" + "01" + "20", ErrMalformed},
		{"nodes: repeated index", decodeNodes, "03" + "0a05" + "01" + "02" + "03" + "00", ErrMalformed},
		{"nodes: more indexes than bytes", decodeNodes, "03" + "0a05" + "01" + "05" + "01", ErrMalformed},
		{"nodes: more indexes than width", decodeNodes, "03" + "0a05" + "00" + "02" + "00" + "01", ErrMalformed},
		{"nodes: trailing", decodeNodes, "03" + "0a05" + "00" + "01" + "00" + "00", ErrMalformed},
		{"nodes: gap overflow", decodeNodes, "03" + "0a05" + "02" + "02" + "01" + "ffffffffffffffff7f", ErrMalformed},
		{"buckets: wrong tag", decodeBuckets, "03" + "0a05" + "01" + "00", ErrMalformed},
		{"buckets: beyond buckets", decodeBuckets, "04" + "0a05" + "01" + "8008", ErrMalformed},
		{"buckets: count beyond buckets", decodeBuckets, "04" + "0101" + "03" + "00" + "01" + "01", ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(hx(tc.in))
			if !errors.Is(err, tc.want) {
				t.Fatalf("decode %s: %v; want %v", tc.in, err, tc.want)
			}
		})
	}
}

func TestAppendEntriesPanicsUnsorted(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AppendEntries of unsorted entries did not panic")
		}
	}()
	AppendEntries(nil, []Entry{{ID: testID(2)}, {ID: testID(1)}})
}

// The fuzz tests check that no input makes a decoder panic, and that what
// a decoder accepts re-encodes to the same bytes (one encoding per value).
// Run each with a count, e.g.:
//
//	go test -run=xxx -fuzz=FuzzDecodeEntries -fuzztime=2000x ./antientropy/

func FuzzDecodeDigests(f *testing.F) {
	f.Add(AppendDigests(nil, []Digest{{1}, {2}}))
	f.Add([]byte{tagDigests, 0})
	f.Add([]byte{tagDigests, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 64
		ds, err := DecodeDigests(b, limit)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(ds) > limit {
			t.Fatalf("%d digests beyond the limit %d", len(ds), limit)
		}
		if re := AppendDigests(nil, ds); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding %x gives %x", b, re)
		}
	})
}

func FuzzDecodeEntries(f *testing.F) {
	f.Add(AppendEntries(nil, []Entry{{ID: testID(1), Digest: Digest{1}}, {ID: testID(2)}}))
	f.Add([]byte{tagEntries, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 64
		es, err := DecodeEntries(b, limit)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(es) > limit {
			t.Fatalf("%d entries beyond the limit %d", len(es), limit)
		}
		if re := AppendEntries(nil, es); !bytes.Equal(re, b) { // panics if unsorted
			t.Fatalf("re-encoding %x gives %x", b, re)
		}
	})
}

func FuzzDecodeNodesRequest(f *testing.F) {
	f.Add(NodesRequest{Shape: DefaultConfig().Shape, Level: 2, Idx: []int{3, 200, 1023}}.Append(nil))
	f.Add(NodesRequest{Shape: Shape{Buckets: 2, Fanout: 2}, Level: 0, Idx: []int{0}}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeNodesRequest(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrShape) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrShape", err)
			}
			return
		}
		if re := r.Append(nil); !bytes.Equal(re, b) { // panics if invalid
			t.Fatalf("re-encoding %x gives %x", b, re)
		}
		// A decoded request is safe to answer from a tree of its shape.
		tr, err := NewTree(r.Shape)
		if err != nil {
			t.Fatalf("decoded shape %+v: %v", r.Shape, err)
		}
		if ds, err := tr.Answer(r, nil); err != nil || len(ds) != len(r.Idx) {
			t.Fatalf("Answer(%+v): %d digests, %v", r, len(ds), err)
		}
	})
}

func FuzzDecodeBucketsRequest(f *testing.F) {
	f.Add(BucketsRequest{Shape: DefaultConfig().Shape, Buckets: []int{0, 7}}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBucketsRequest(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrShape) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrShape", err)
			}
			return
		}
		if re := r.Append(nil); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding %x gives %x", b, re)
		}
	})
}
