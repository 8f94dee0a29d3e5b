package wire

import (
	"math"

	"github.com/skuldd/skuldd/task"
)

// Hand-written CBOR for the bodies a node encodes and decodes most under
// load: ReplicateRequest and ReplicateResponse (every write goes to every
// follower in one), EnqueueRequest and EnqueueResponse. Reflection made
// their encoding and decoding about a tenth of a node's CPU.
//
// The encoders write the library's bytes exactly (core deterministic
// encoding, as cborEnc). The decoders take only that form (see
// task.CBORReader) and leave anything else to the library, so what they
// accept they must decode as the library does. TestFastCodecsMatchLibrary
// and FuzzFastDecode hold both to the library; a field added to these
// types must be added here too, or the test fails.

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
	cborTrue       = 0xf5
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
	return finish(r, m, out)
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

func appendText(b []byte, s string) []byte {
	return append(task.AppendCBORHead(b, cborMajorText, uint64(len(s))), s...)
}

func (m *ReplicateResponse) appendCBOR(b []byte) ([]byte, bool) {
	if m.Results == nil {
		return b, false
	}
	b = append(b, cborMajorMap|1, 1)
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Results)))
	for _, res := range m.Results {
		n := byte(0)
		for _, present := range [...]bool{res.Code != CodeOK, res.Err != "", len(res.Records) > 0} {
			if present {
				n++
			}
		}
		b = appendResult(append(b, cborMajorMap|n), res.Code, res.Err)
		if len(res.Records) > 0 {
			b = append(b, 3)
			b = task.AppendCBORHead(b, cborMajorArray, uint64(len(res.Records)))
			for _, rr := range res.Records {
				n := byte(0)
				if rr.Code != CodeOK {
					n++
				}
				if rr.Err != "" {
					n++
				}
				b = appendResult(append(b, cborMajorMap|n), rr.Code, rr.Err)
			}
		}
	}
	return b, true
}

// appendResult appends the omitempty code (key 1) and error (key 2) of a
// result.
func appendResult(b []byte, code Code, msg string) []byte {
	if code != CodeOK {
		b = task.AppendCBORHead(append(b, 1), cborMajorUint, uint64(code))
	}
	if msg != "" {
		b = appendText(append(b, 2), msg)
	}
	return b
}

func (m *ReplicateResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ReplicateResponse
	r.Fields(1, func(uint64) {
		out.Results = make([]ReplicateResult, r.Len(cborMajorArray))
		for i := range out.Results {
			res := &out.Results[i]
			r.Fields(3, func(k uint64) {
				switch k {
				case 1:
					res.Code = Code(r.Uint(1<<16 - 1))
				case 2:
					res.Err = r.Text()
				case 3:
					res.Records = make([]Result, r.Len(cborMajorArray))
					for j := range res.Records {
						rr := &res.Records[j]
						r.Fields(2, func(k uint64) {
							if k == 1 {
								rr.Code = Code(r.Uint(1<<16 - 1))
							} else {
								rr.Err = r.Text()
							}
						})
					}
				}
			})
		}
	})
	return finish(r, m, out)
}

// finish stores out in m if r read all of its input without a fault.
func finish[T any](r *task.CBORReader, m *T, out T) bool {
	if r.Bad || len(r.B) != 0 {
		return false
	}
	*m = out
	return true
}

func (m *EnqueueRequest) appendCBOR(b []byte) ([]byte, bool) {
	if m.Tasks == nil {
		return b, false
	}
	if m.W != 0 {
		b = append(b, cborMajorMap|2, 1)
	} else {
		b = append(b, cborMajorMap|1, 1)
	}
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Tasks)))
	for i := range m.Tasks {
		t := &m.Tasks[i]
		n := byte(1)
		for _, present := range [...]bool{t.ID != nil, t.Priority != 0, len(t.Data) > 0, len(t.Deps) > 0, t.DelayMs != 0,
			t.Group != "", t.Description != "", t.MaxAttempts != 0, t.FreshID} {
			if present {
				n++
			}
		}
		b = append(b, cborMajorMap|n)
		if t.ID != nil {
			b = task.AppendCBORHead(append(b, 1), cborMajorBytes, task.IDLen)
			b = append(b, t.ID[:]...)
		}
		b = appendText(append(b, 2), t.Queue)
		if t.Priority != 0 {
			b = appendInt(append(b, 3), int64(t.Priority))
		}
		if len(t.Data) > 0 {
			b = task.AppendCBORHead(append(b, 4), cborMajorBytes, uint64(len(t.Data)))
			b = append(b, t.Data...)
		}
		if len(t.Deps) > 0 {
			b = appendIDs(append(b, 5), t.Deps)
		}
		if t.DelayMs != 0 {
			b = appendInt(append(b, 6), t.DelayMs)
		}
		if t.Group != "" {
			b = appendText(append(b, 7), t.Group)
		}
		if t.Description != "" {
			b = appendText(append(b, 8), t.Description)
		}
		if t.MaxAttempts != 0 {
			b = task.AppendCBORHead(append(b, 9), cborMajorUint, uint64(t.MaxAttempts))
		}
		if t.FreshID {
			b = append(b, 10, cborTrue)
		}
	}
	if m.W != 0 {
		b = appendInt(append(b, 2), int64(m.W))
	}
	return b, true
}

func (m *EnqueueRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out EnqueueRequest
	r.Fields(2, func(k uint64) {
		if k == 2 {
			out.W = int(r.Int(math.MinInt, math.MaxInt))
			return
		}
		out.Tasks = make([]EnqueueTask, r.Len(cborMajorArray))
		for i := range out.Tasks {
			t := &out.Tasks[i]
			r.Fields(10, func(k uint64) {
				switch k {
				case 1:
					id := r.ID()
					t.ID = &id
				case 2:
					t.Queue = r.Text()
				case 3:
					t.Priority = int32(r.Int(math.MinInt32, math.MaxInt32))
				case 4:
					t.Data = r.Bytes()
				case 5:
					t.Deps = r.IDs()
				case 6:
					t.DelayMs = r.Int(math.MinInt64, math.MaxInt64)
				case 7:
					t.Group = r.Text()
				case 8:
					t.Description = r.Text()
				case 9:
					t.MaxAttempts = uint32(r.Uint(math.MaxUint32))
				case 10:
					t.FreshID = r.Bool()
				}
			})
		}
	})
	return finish(r, m, out)
}

func (m *EnqueueResponse) appendCBOR(b []byte) ([]byte, bool) {
	if m.Results == nil {
		return b, false
	}
	b = append(b, cborMajorMap|1, 1)
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Results)))
	for _, res := range m.Results {
		b = append(b, cborMajorMap|2, 1)
		b = task.AppendCBORHead(b, cborMajorBytes, task.IDLen)
		b = append(b, res.ID[:]...)
		b = appendInt(append(b, 2), int64(res.Acks))
	}
	return b, true
}

func (m *EnqueueResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out EnqueueResponse
	r.Fields(1, func(uint64) {
		out.Results = make([]EnqueueResult, r.Len(cborMajorArray))
		for i := range out.Results {
			res := &out.Results[i]
			r.Fields(2, func(k uint64) {
				if k == 1 {
					res.ID = r.ID()
				} else {
					res.Acks = int(r.Int(math.MinInt, math.MaxInt))
				}
			})
		}
	})
	return finish(r, m, out)
}
