package cbormode

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

type small struct {
	A int    `cbor:"1,keyasint"`
	B string `cbor:"2,keyasint,omitempty"`
}

// TestEncDeterministic: map keys sorted and heads shortest, whatever the
// order of the source map: the same value has the same bytes.
func TestEncDeterministic(t *testing.T) {
	a, err := Enc.Marshal(map[string]int{"b": 2, "a": 1, "c": 300})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xa3, 0x61, 'a', 0x01, 0x61, 'b', 0x02, 0x61, 'c', 0x19, 0x01, 0x2c}
	if !bytes.Equal(a, want) {
		t.Fatalf("encoding = %x; want %x", a, want)
	}
}

func TestDecRules(t *testing.T) {
	loose := MustDec(Limits{Nested: 4, Array: 16, MapPairs: 16})
	strict := MustDec(Limits{Nested: 4, Array: 16, MapPairs: 16, StrictFields: true})
	for _, tc := range []struct {
		name string
		dm   cbor.DecMode
		in   []byte
		want string // "" decodes
	}{
		{"plain", loose, []byte{0xa1, 0x01, 0x05}, ""},
		{"unknown key ignored", loose, []byte{0xa2, 0x01, 0x05, 0x03, 0x01}, ""},
		{"unknown key refused when strict", strict, []byte{0xa2, 0x01, 0x05, 0x03, 0x01}, "unknown field"},
		{"repeated key", loose, []byte{0xa2, 0x01, 0x05, 0x01, 0x06}, "duplicate map key"},
		{"indefinite map", loose, []byte{0xbf, 0x01, 0x05, 0xff}, "indefinite-length"},
		{"tag", loose, []byte{0xc1, 0xa1, 0x01, 0x05}, "tag"},
		{"invalid utf-8", loose, []byte{0xa1, 0x02, 0x61, 0xff}, "UTF-8"},
		{"too many pairs", loose, manyPairs(17), "exceeded max number of key-value pairs"},
		{"pairs within the bound", loose, manyPairs(16), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v small
			err := tc.dm.Unmarshal(tc.in, &v)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("decode: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("decode = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDecRefusesBadLimits(t *testing.T) {
	if _, err := Dec(Limits{Nested: 1 << 30}); err == nil {
		t.Fatal("Dec accepted a nesting bound the library refuses")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustDec did not panic on bounds the library refuses")
		}
	}()
	MustDec(Limits{Nested: 1 << 30})
}

// manyPairs encodes a map of k pairs, keys 24.. (unknown to small), each
// value 1.
func manyPairs(k int) []byte {
	b := []byte{0xb8, byte(k)}
	for i := 24; i < 24+k; i++ {
		b = append(b, 0x18, byte(i), 0x01)
	}
	return b
}
