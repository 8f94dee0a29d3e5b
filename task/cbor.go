package task

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

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return AppendCBORHead(b, cborNeg, uint64(-(v + 1)))
	}
	return AppendCBORHead(b, cborUint, uint64(v))
}

func appendID(b []byte, id ID) []byte {
	b = AppendCBORHead(b, cborBytes, IDLen)
	return append(b, id[:]...)
}

func appendIDs(b []byte, ids []ID) []byte {
	b = AppendCBORHead(b, cborArray, uint64(len(ids)))
	for _, id := range ids {
		b = appendID(b, id)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = AppendCBORHead(b, cborText, uint64(len(s)))
	return append(b, s...)
}

// The field appenders write a map key (a small integer, one byte) and its
// value.

func intField(b []byte, key byte, v int64) []byte { return appendInt(append(b, key), v) }

func uintField(b []byte, key byte, v uint64) []byte {
	return AppendCBORHead(append(b, key), cborUint, v)
}

func stringField(b []byte, key byte, s string) []byte { return appendString(append(b, key), s) }

// count returns how many of present are true: the size of a map whose
// omitempty fields may be left out.
func count(present ...bool) uint64 {
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
	b = AppendCBORHead(b, cborMap, count(true, true, sp.Priority != 0, len(sp.Deps) > 0, sp.NotBefore != 0,
		sp.Group != "", sp.Description != "", sp.MaxAttempts != 0, sp.EnqueuedAt != 0, len(sp.Data) > 0))
	b = append(b, 1)
	b = appendID(b, sp.ID)
	b = stringField(b, 2, sp.Queue)
	if sp.Priority != 0 {
		b = intField(b, 3, int64(sp.Priority))
	}
	if len(sp.Deps) > 0 {
		b = append(b, 4)
		b = appendIDs(b, sp.Deps)
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
	return b
}

// AppendCBOR appends st's deterministic CBOR encoding to b.
func (st *State) AppendCBOR(b []byte) []byte {
	b = AppendCBORHead(b, cborMap, count(len(st.Claims) > 0, len(st.Releases) > 0, st.Completion != nil,
		len(st.DepsDone) > 0, st.RequeueBase != 0))
	if len(st.Claims) > 0 {
		b = append(b, 1)
		b = AppendCBORHead(b, cborArray, uint64(len(st.Claims)))
		for _, c := range st.Claims {
			b = AppendCBORHead(b, cborMap, count(true, true, true, c.Epoch != 0))
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
			b = AppendCBORHead(b, cborMap, count(true, true, r.Snooze, r.Until != 0, r.Reason != ""))
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
		}
	}
	if c := st.Completion; c != nil {
		b = append(b, 3)
		b = AppendCBORHead(b, cborMap, 3)
		b = uintField(b, 1, uint64(c.Claim))
		b = uintField(b, 2, c.Seq)
		b = intField(b, 3, c.At)
	}
	if len(st.DepsDone) > 0 {
		b = append(b, 4)
		b = appendIDs(b, st.DepsDone)
	}
	if st.RequeueBase != 0 {
		b = uintField(b, 5, uint64(st.RequeueBase))
	}
	return b
}
