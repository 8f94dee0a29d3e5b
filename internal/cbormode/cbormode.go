// Package cbormode configures skuldd's CBOR, in one place: the one
// encoding every package writes (the wire's messages, the store's
// records, the metadata log's entries, the anti-entropy hashes) and the
// decoders of what each reads, which share their rules and differ only
// in their bounds.
//
// The encoding is RFC 8949's core deterministic encoding (§4.2.1:
// shortest heads, sorted map keys) without tags: equal values have equal
// bytes on every node, which anti-entropy's hashes and the hand-written
// codecs of package task (held to the library's bytes by their tests)
// rely on. It imports only the CBOR library and must stay a leaf: every
// package that encodes may import it.
package cbormode

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Enc is skuldd's CBOR encoding (see the package doc). It encodes into
// the caller's buffer too (cbor.UserBufferEncMode).
var Enc = func() cbor.UserBufferEncMode {
	eo := cbor.CoreDetEncOptions()
	eo.TagsMd = cbor.TagsForbidden
	em, err := eo.UserBufferEncMode()
	if err != nil {
		panic(fmt.Sprintf("cbormode: encode options: %v", err))
	}
	return em
}()

// Limits bound what decoding one input may build, so that no input (a
// peer's message, a damaged file, a log entry) exhausts memory or stack.
type Limits struct {
	// Nested is the deepest nesting of arrays and maps.
	Nested int
	// Array is the most elements of one array.
	Array int
	// MapPairs is the most pairs of one map.
	MapPairs int
	// StrictFields refuses a map key the target struct does not have
	// (the metadata log: a command this version does not know in full
	// must not be applied in part). Without it unknown keys are ignored,
	// so a newer peer may add optional fields.
	StrictFields bool
}

// Dec returns a decoder bounded by l, with the rules every decoder of
// skuldd shares: a repeated map key is refused (which value would
// win?); no indefinite lengths (the encoding never writes them, and they
// let an input stream an item of unknown size); no tags (none of our
// values use them, and each is a code path an input could poke at);
// text must be valid UTF-8; task.ID and similar types decode through
// UnmarshalBinary from a byte string.
func Dec(l Limits) (cbor.DecMode, error) {
	extra := cbor.ExtraDecErrorNone
	if l.StrictFields {
		extra = cbor.ExtraDecErrorUnknownField
	}
	return cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:   l.Nested,
		MaxArrayElements:  l.Array,
		MaxMapPairs:       l.MapPairs,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		UTF8:              cbor.UTF8RejectInvalid,
		ExtraReturnErrors: extra,
		BinaryUnmarshaler: cbor.BinaryUnmarshalerByteString,
	}.DecMode()
}

// MustDec is Dec for the decoders packages make at init: bounds that the
// library refuses are a programming error.
func MustDec(l Limits) cbor.DecMode {
	dm, err := Dec(l)
	if err != nil {
		panic(fmt.Sprintf("cbormode: decode options %+v: %v", l, err))
	}
	return dm
}
