package task

import (
	"math"
	"unicode/utf8"
)

// Hand-written CBOR encoders for Spec and State, the two values every
// write encodes (the store keeps them, and anti-entropy hashes them).
// They produce exactly the bytes of CBOR's core deterministic encoding
// of the struct tags above (cbor.CoreDetEncOptions, as the store and the
// hash use): a map with the present fields in ascending key order,
// integers in their shortest form, ids as 20-byte strings (MarshalBinary),
// empty fields left out where the tag says omitempty. Reflection made
// these encodings a few percent of a node's CPU under load.
// TestAppendCBORMatchesLibrary and FuzzAppendCBOR hold them to the
// library's bytes; a new field must be added here too, or they fail.

// CBOR major types.
const (
	cborUint  = 0 << 5
	cborNeg   = 1 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborMap   = 5 << 5
	cborTrue  = 0xf5
	cborFalse = 0xf4
	cborNull  = 0xf6
)

// AppendCBORHead appends a CBOR head of major type major (in the top three
// bits) with argument v, in its shortest form (RFC 8949 section 4.2.1).
// The wire package's hand-written envelopes use it too.
func AppendCBORHead(b []byte, major byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(b, major|byte(v))
	case v <= 0xff:
		return append(b, major|24, byte(v))
	case v <= 0xffff:
		return append(b, major|25, byte(v>>8), byte(v))
	case v <= 0xffff_ffff:
		return append(b, major|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, major|27, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// AppendCBORInt appends an integer in its shortest form.
func AppendCBORInt(b []byte, v int64) []byte {
	if v < 0 {
		return AppendCBORHead(b, cborNeg, uint64(-(v + 1)))
	}
	return AppendCBORHead(b, cborUint, uint64(v))
}

// AppendCBORID appends an id as a byte string (its MarshalBinary form).
func AppendCBORID(b []byte, id ID) []byte {
	b = AppendCBORHead(b, cborBytes, IDLen)
	return append(b, id[:]...)
}

// AppendCBORIDs appends an array of ids.
func AppendCBORIDs(b []byte, ids []ID) []byte {
	b = AppendCBORHead(b, cborArray, uint64(len(ids)))
	for _, id := range ids {
		b = AppendCBORID(b, id)
	}
	return b
}

// AppendCBORText appends a text string.
func AppendCBORText(b []byte, s string) []byte {
	b = AppendCBORHead(b, cborText, uint64(len(s)))
	return append(b, s...)
}

// The field appenders write a map key (a small integer, one byte) and its
// value.

func intField(b []byte, key byte, v int64) []byte { return AppendCBORInt(append(b, key), v) }

func uintField(b []byte, key byte, v uint64) []byte {
	return AppendCBORHead(append(b, key), cborUint, v)
}

func stringField(b []byte, key byte, s string) []byte { return AppendCBORText(append(b, key), s) }

// CountPresent returns how many of present are true: the size of a map
// whose omitempty fields may be left out. The wire package's encoders
// use it too.
func CountPresent(present ...bool) uint64 {
	n := uint64(0)
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

// AppendCBOR appends sp's deterministic CBOR encoding to b.
func (sp *Spec) AppendCBOR(b []byte) []byte {
	b = AppendCBORHead(b, cborMap, CountPresent(true, true, sp.Priority != 0, len(sp.Deps) > 0, sp.NotBefore != 0,
		sp.Group != "", sp.Description != "", sp.MaxAttempts != 0, sp.EnqueuedAt != 0, len(sp.Data) > 0, sp.TimeLimit != 0,
		sp.Kind != "", sp.Subtopic != "", sp.Key != "", sp.UniqueFor != 0))
	b = append(b, 1)
	b = AppendCBORID(b, sp.ID)
	b = stringField(b, 2, sp.Queue)
	if sp.Priority != 0 {
		b = intField(b, 3, int64(sp.Priority))
	}
	if len(sp.Deps) > 0 {
		b = append(b, 4)
		b = AppendCBORIDs(b, sp.Deps)
	}
	if sp.NotBefore != 0 {
		b = intField(b, 5, sp.NotBefore)
	}
	if sp.Group != "" {
		b = stringField(b, 6, sp.Group)
	}
	if sp.Description != "" {
		b = stringField(b, 7, sp.Description)
	}
	if sp.MaxAttempts != 0 {
		b = uintField(b, 8, uint64(sp.MaxAttempts))
	}
	if sp.EnqueuedAt != 0 {
		b = intField(b, 9, sp.EnqueuedAt)
	}
	if len(sp.Data) > 0 {
		b = append(b, 10)
		b = AppendCBORHead(b, cborBytes, uint64(len(sp.Data)))
		b = append(b, sp.Data...)
	}
	if sp.TimeLimit != 0 {
		b = intField(b, 11, sp.TimeLimit)
	}
	if sp.Kind != "" {
		b = stringField(b, 12, sp.Kind)
	}
	if sp.Subtopic != "" {
		b = stringField(b, 13, sp.Subtopic)
	}
	if sp.Key != "" {
		b = stringField(b, 14, sp.Key)
	}
	if sp.UniqueFor != 0 {
		b = intField(b, 15, sp.UniqueFor)
	}
	return b
}

// AppendCBOR appends st's deterministic CBOR encoding to b.
func (st *State) AppendCBOR(b []byte) []byte {
	b = AppendCBORHead(b, cborMap, CountPresent(len(st.Claims) > 0, len(st.Releases) > 0, st.Completion != nil,
		len(st.DepsDone) > 0, st.RequeueBase != 0, st.Stamp != 0))
	if len(st.Claims) > 0 {
		b = append(b, 1)
		b = AppendCBORHead(b, cborArray, uint64(len(st.Claims)))
		for _, c := range st.Claims {
			b = AppendCBORHead(b, cborMap, CountPresent(true, true, true, c.Epoch != 0))
			b = uintField(b, 1, uint64(c.Index))
			b = intField(b, 2, c.Start)
			b = intField(b, 3, c.End)
			if c.Epoch != 0 {
				b = uintField(b, 4, c.Epoch)
			}
		}
	}
	if len(st.Releases) > 0 {
		b = append(b, 2)
		b = AppendCBORHead(b, cborArray, uint64(len(st.Releases)))
		for _, r := range st.Releases {
			b = AppendCBORHead(b, cborMap, CountPresent(true, true, r.Snooze, r.Until != 0, r.Reason != "", r.NoRetry))
			b = uintField(b, 1, uint64(r.Claim))
			b = intField(b, 2, r.At)
			if r.Snooze {
				b = append(b, 3, cborTrue)
			}
			if r.Until != 0 {
				b = intField(b, 4, r.Until)
			}
			if r.Reason != "" {
				b = stringField(b, 5, r.Reason)
			}
			if r.NoRetry {
				b = append(b, 6, cborTrue)
			}
		}
	}
	if c := st.Completion; c != nil {
		b = append(b, 3)
		b = AppendCBORHead(b, cborMap, CountPresent(true, true, true, c.Cancelled, c.Reason != ""))
		b = uintField(b, 1, uint64(c.Claim))
		b = uintField(b, 2, c.Seq)
		b = intField(b, 3, c.At)
		if c.Cancelled {
			b = append(b, 4, cborTrue)
		}
		if c.Reason != "" {
			b = stringField(b, 5, c.Reason)
		}
	}
	if len(st.DepsDone) > 0 {
		b = append(b, 4)
		b = AppendCBORIDs(b, st.DepsDone)
	}
	if st.RequeueBase != 0 {
		b = uintField(b, 5, uint64(st.RequeueBase))
	}
	if st.Stamp != 0 {
		b = uintField(b, 6, st.Stamp)
	}
	return b
}

// CBORReader decodes the canonical forms the encoders above write, and
// only those, without reflection: shortest-form heads, definite lengths,
// map keys strictly ascending, no tags or floats, no empty arrays or byte
// strings (the library decodes those to empty non-nil slices, a
// distinction not worth mirroring). Any other input sets Bad, and the
// caller decodes the bytes with the library instead, so a reader that
// succeeds must give the library's result; TestAppendCBORMatchesLibrary,
// FuzzCBORReader and the wire package's FuzzFastDecode hold it to that.
//
// It does not check the library's limits (nesting, array and map sizes):
// callers run the library's Wellformed over the input first.
//
// It never panics and never reads past B, whatever B holds.
type CBORReader struct {
	B   []byte
	Bad bool
}

// fail marks the input as not in canonical form; the reads that follow
// return zero values.
func (r *CBORReader) fail() { r.Bad = true; r.B = nil }

// Head reads a head of major type major (top three bits) and returns its
// argument.
func (r *CBORReader) Head(major byte) uint64 {
	if r.Bad || len(r.B) == 0 || r.B[0]&0xe0 != major {
		r.fail()
		return 0
	}
	ai := r.B[0] & 0x1f
	n := 0 // bytes after the initial byte
	switch {
	case ai < 24:
		r.B = r.B[1:]
		return uint64(ai)
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	default: // reserved, or an indefinite length
		r.fail()
		return 0
	}
	if len(r.B) < 1+n {
		r.fail()
		return 0
	}
	var v uint64
	for _, c := range r.B[1 : 1+n] {
		v = v<<8 | uint64(c)
	}
	// Shortest form: the argument needed this many bytes.
	if (n == 1 && v < 24) || (n > 1 && v>>(uint(n)*4) == 0) {
		r.fail()
		return 0
	}
	r.B = r.B[1+n:]
	return v
}

// Uint reads an unsigned integer no larger than max.
func (r *CBORReader) Uint(max uint64) uint64 {
	v := r.Head(cborUint)
	if v > max {
		r.fail()
		return 0
	}
	return v
}

// Int reads an integer in [min, max].
func (r *CBORReader) Int(min, max int64) int64 {
	if r.Bad || len(r.B) == 0 {
		r.fail()
		return 0
	}
	var v int64
	if r.B[0]&0xe0 == cborNeg {
		a := r.Head(cborNeg)
		if a > 1<<63-1 {
			r.fail()
			return 0
		}
		v = -1 - int64(a)
	} else {
		a := r.Head(cborUint)
		if a > 1<<63-1 {
			r.fail()
			return 0
		}
		v = int64(a)
	}
	if v < min || v > max {
		r.fail()
		return 0
	}
	return v
}

// take returns the next n bytes.
func (r *CBORReader) take(n uint64) []byte {
	if r.Bad || n > uint64(len(r.B)) {
		r.fail()
		return nil
	}
	b := r.B[:n]
	r.B = r.B[n:]
	return b
}

// Text reads a UTF-8 text string.
func (r *CBORReader) Text() string {
	b := r.take(r.Head(cborText))
	if !utf8.Valid(b) {
		r.fail()
		return ""
	}
	return string(b)
}

// Bytes reads a non-empty byte string into a new slice.
func (r *CBORReader) Bytes() []byte {
	b := r.take(r.Head(cborBytes))
	if len(b) == 0 {
		r.fail()
		return nil
	}
	return append([]byte(nil), b...)
}

// Len reads the head of a non-empty array or map (major) and returns its
// length, bounded by what the remaining bytes could hold (every element
// takes a byte at least), so a caller may allocate it.
func (r *CBORReader) Len(major byte) int {
	n := r.Head(major)
	if n == 0 || n > uint64(len(r.B)) {
		r.fail()
		return 0
	}
	return int(n)
}

// Map reads a map head and returns its number of pairs (0 allowed).
func (r *CBORReader) Map() int {
	n := r.Head(cborMap)
	if n > uint64(len(r.B)) {
		r.fail()
		return 0
	}
	return int(n)
}

// Key reads a map key, which must be greater than prev and at most max.
func (r *CBORReader) Key(prev, max uint64) uint64 {
	k := r.Uint(max)
	if k <= prev {
		r.fail()
	}
	return k
}

// Fields reads a map whose keys are integers ascending from 1 to at most
// max, calling field to read the value of each.
func (r *CBORReader) Fields(max uint64, field func(key uint64)) {
	n, k := r.Map(), uint64(0)
	for range n {
		if k = r.Key(k, max); r.Bad {
			return
		}
		field(k)
	}
}

// Null reads a null, if one comes next: the library's encoding of a nil
// slice in a field that is not omitempty.
func (r *CBORReader) Null() bool {
	if r.Bad || len(r.B) == 0 || r.B[0] != cborNull {
		return false
	}
	r.B = r.B[1:]
	return true
}

// Bool reads true or false.
func (r *CBORReader) Bool() bool {
	if r.Bad || len(r.B) == 0 || (r.B[0] != cborTrue && r.B[0] != cborFalse) {
		r.fail()
		return false
	}
	v := r.B[0] == cborTrue
	r.B = r.B[1:]
	return v
}

// ID reads an id (a byte string of IDLen bytes).
func (r *CBORReader) ID() ID {
	var id ID
	if r.Head(cborBytes) != IDLen {
		r.fail()
		return id
	}
	copy(id[:], r.take(IDLen))
	return id
}

// IDs reads a non-empty array of ids.
func (r *CBORReader) IDs() []ID {
	return ReadList(r, func(id *ID, r *CBORReader) { *id = r.ID() })
}

// ReadList reads a non-empty array, each element with read.
func ReadList[T any](r *CBORReader, read func(*T, *CBORReader)) []T {
	n := r.Len(cborArray)
	if r.Bad {
		return nil
	}
	list := make([]T, n)
	for i := range list {
		read(&list[i], r)
	}
	return list
}

// Int32, Int64, Uint32 and Uint64 read an integer of that Go type.
func (r *CBORReader) Int32() int32   { return int32(r.Int(math.MinInt32, math.MaxInt32)) }
func (r *CBORReader) Int64() int64   { return r.Int(math.MinInt64, math.MaxInt64) }
func (r *CBORReader) Uint32() uint32 { return uint32(r.Uint(math.MaxUint32)) }
func (r *CBORReader) Uint64() uint64 { return r.Uint(math.MaxUint64) }

// DecodeCBOR reads a spec in the form AppendCBOR writes into sp, which
// must be the zero Spec.
func (sp *Spec) DecodeCBOR(r *CBORReader) {
	r.Fields(15, func(k uint64) {
		switch k {
		case 1:
			sp.ID = r.ID()
		case 2:
			sp.Queue = r.Text()
		case 3:
			sp.Priority = r.Int32()
		case 4:
			sp.Deps = r.IDs()
		case 5:
			sp.NotBefore = r.Int64()
		case 6:
			sp.Group = r.Text()
		case 7:
			sp.Description = r.Text()
		case 8:
			sp.MaxAttempts = r.Uint32()
		case 9:
			sp.EnqueuedAt = r.Int64()
		case 10:
			sp.Data = r.Bytes()
		case 11:
			sp.TimeLimit = r.Int64()
		case 12:
			sp.Kind = r.Text()
		case 13:
			sp.Subtopic = r.Text()
		case 14:
			sp.Key = r.Text()
		case 15:
			sp.UniqueFor = r.Int64()
		}
	})
}

// DecodeCBOR reads a state in the form AppendCBOR writes into st, which
// must be the zero State.
func (st *State) DecodeCBOR(r *CBORReader) {
	r.Fields(6, func(k uint64) {
		switch k {
		case 1:
			st.Claims = ReadList(r, (*Claim).decodeCBOR)
		case 2:
			st.Releases = ReadList(r, (*Release).decodeCBOR)
		case 3:
			c := new(Completion)
			c.decodeCBOR(r)
			st.Completion = c
		case 4:
			st.DepsDone = r.IDs()
		case 5:
			st.RequeueBase = r.Uint32()
		case 6:
			st.Stamp = r.Uint64()
		}
	})
}

func (c *Claim) decodeCBOR(r *CBORReader) {
	r.Fields(4, func(k uint64) {
		switch k {
		case 1:
			c.Index = r.Uint32()
		case 2:
			c.Start = r.Int64()
		case 3:
			c.End = r.Int64()
		case 4:
			c.Epoch = r.Uint64()
		}
	})
}

func (rl *Release) decodeCBOR(r *CBORReader) {
	r.Fields(6, func(k uint64) {
		switch k {
		case 1:
			rl.Claim = r.Uint32()
		case 2:
			rl.At = r.Int64()
		case 3:
			rl.Snooze = r.Bool()
		case 4:
			rl.Until = r.Int64()
		case 5:
			rl.Reason = r.Text()
		case 6:
			rl.NoRetry = r.Bool()
		}
	})
}

func (c *Completion) decodeCBOR(r *CBORReader) {
	r.Fields(5, func(k uint64) {
		switch k {
		case 1:
			c.Claim = r.Uint32()
		case 2:
			c.Seq = r.Uint64()
		case 3:
			c.At = r.Int64()
		case 4:
			c.Cancelled = r.Bool()
		case 5:
			c.Reason = r.Text()
		}
	})
}
