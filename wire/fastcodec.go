package wire

import (
	"github.com/skuldd/skuldd/task"
)

// Hand-written CBOR for ReplicateRequest, the body a node encodes and
// decodes most under load: every write goes to every follower in one.
// Reflection made its encoding and decoding about a tenth of a node's
// CPU. The encoder writes the library's bytes exactly (core
// deterministic encoding, as cborEnc); the decoder takes only that form
// (see task.CBORReader) and leaves anything else to the library, so what
// it accepts it must decode as the library does.
// TestReplicateCodecMatchesLibrary and FuzzReplicateDecode hold both to
// the library; a field added to these types must be added here too.

// canonicalBody is a body type with a hand-written codec.
type canonicalBody interface {
	// appendCBOR appends the value's encoding, or reports false for a
	// value whose encoding it leaves to the library (a nil slice that
	// is not omitempty: the library writes null).
	appendCBOR(b []byte) ([]byte, bool)
	// decodeCBOR decodes b, a whole well-formed body, into the value,
	// which must be zero; it reports false, leaving the value zero, when
	// b is not in the form appendCBOR writes.
	decodeCBOR(b []byte) bool
}

// More CBOR major types (see cborMajorMap).
const (
	cborMajorNeg   = 1 << 5
	cborMajorBytes = 2 << 5
	cborMajorArray = 4 << 5
)

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return task.AppendCBORHead(b, cborMajorNeg, uint64(-(v + 1)))
	}
	return task.AppendCBORHead(b, cborMajorUint, uint64(v))
}

func appendIDs(b []byte, ids []task.ID) []byte {
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(ids)))
	for _, id := range ids {
		b = task.AppendCBORHead(b, cborMajorBytes, task.IDLen)
		b = append(b, id[:]...)
	}
	return b
}

func (m *ReplicateRequest) appendCBOR(b []byte) ([]byte, bool) {
	if m.Items == nil {
		return b, false
	}
	b = append(b, cborMajorMap|1, 1)
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Items)))
	for i := range m.Items {
		it := &m.Items[i]
		if it.Records == nil {
			return b, false
		}
		b = append(b, cborMajorMap|3, 1)
		b = task.AppendCBORHead(b, cborMajorUint, uint64(it.Part))
		b = append(b, 2)
		b = task.AppendCBORHead(b, cborMajorUint, it.Epoch)
		b = append(b, 3)
		b = task.AppendCBORHead(b, cborMajorArray, uint64(len(it.Records)))
		for j := range it.Records {
			var ok bool
			if b, ok = it.Records[j].appendCBOR(b); !ok {
				return b, false
			}
		}
	}
	return b, true
}

func (m *RecordMsg) appendCBOR(b []byte) ([]byte, bool) {
	n := byte(1)
	for _, present := range [...]bool{m.Spec != nil, m.State != nil, len(m.Updates) > 0, len(m.Dependents) > 0, m.Tomb != 0, m.Meta != nil} {
		if present {
			n++
		}
	}
	b = append(b, cborMajorMap|n, 1)
	b = task.AppendCBORHead(b, cborMajorBytes, task.IDLen)
	b = append(b, m.ID[:]...)
	if m.Spec != nil {
		b = m.Spec.AppendCBOR(append(b, 2))
	}
	if m.State != nil {
		b = m.State.AppendCBOR(append(b, 3))
	}
	if len(m.Updates) > 0 {
		b = append(b, 4)
		b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Updates)))
		for _, u := range m.Updates {
			if u.Data == nil {
				return b, false
			}
			b = append(b, cborMajorMap|3, 1)
			b = task.AppendCBORHead(b, cborMajorUint, uint64(u.Claim))
			b = append(b, 2)
			b = task.AppendCBORHead(b, cborMajorUint, u.Seq)
			b = append(b, 3)
			b = task.AppendCBORHead(b, cborMajorBytes, uint64(len(u.Data)))
			b = append(b, u.Data...)
		}
	}
	if len(m.Dependents) > 0 {
		b = appendIDs(append(b, 5), m.Dependents)
	}
	if m.Tomb != 0 {
		b = appendInt(append(b, 6), m.Tomb)
	}
	if m.Meta != nil {
		b = m.Meta.AppendCBOR(append(b, 7))
	}
	return b, true
}

func (m *ReplicateRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ReplicateRequest
	r.Fields(1, func(uint64) {
		out.Items = make([]ReplicateItem, r.Len(cborMajorArray))
		for i := range out.Items {
			out.Items[i].decodeCBOR(r)
		}
	})
	if r.Bad || len(r.B) != 0 {
		return false
	}
	*m = out
	return true
}

func (it *ReplicateItem) decodeCBOR(r *task.CBORReader) {
	r.Fields(3, func(k uint64) {
		switch k {
		case 1:
			it.Part = uint16(r.Uint(1<<16 - 1))
		case 2:
			it.Epoch = r.Uint(1<<64 - 1)
		case 3:
			it.Records = make([]RecordMsg, r.Len(cborMajorArray))
			for i := range it.Records {
				it.Records[i].decodeCBOR(r)
			}
		}
	})
}

func (m *RecordMsg) decodeCBOR(r *task.CBORReader) {
	r.Fields(7, func(k uint64) {
		switch k {
		case 1:
			m.ID = r.ID()
		case 2:
			m.Spec = new(task.Spec)
			m.Spec.DecodeCBOR(r)
		case 3:
			m.State = new(task.State)
			m.State.DecodeCBOR(r)
		case 4:
			m.Updates = make([]UpdateMsg, r.Len(cborMajorArray))
			for i := range m.Updates {
				m.Updates[i].decodeCBOR(r)
			}
		case 5:
			m.Dependents = r.IDs()
		case 6:
			m.Tomb = r.Int(-1<<63, 1<<63-1)
		case 7:
			m.Meta = new(task.Spec)
			m.Meta.DecodeCBOR(r)
		}
	})
}

func (u *UpdateMsg) decodeCBOR(r *task.CBORReader) {
	r.Fields(3, func(k uint64) {
		switch k {
		case 1:
			u.Claim = uint32(r.Uint(1<<32 - 1))
		case 2:
			u.Seq = r.Uint(1<<64 - 1)
		case 3:
			u.Data = r.Bytes()
		}
	})
}
