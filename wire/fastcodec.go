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
	cborMajorBytes = 2 << 5
	cborMajorArray = 4 << 5
	cborTrue       = 0xf5
)

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
		if it.Direct {
			b = append(b, cborMajorMap|4, 1)
		} else {
			b = append(b, cborMajorMap|3, 1)
		}
		b = task.AppendCBORHead(b, cborMajorUint, uint64(it.Part))
		b = append(b, 2)
		b = task.AppendCBORHead(b, cborMajorUint, it.Epoch)
		b = append(b, 3)
		b = task.AppendCBORHead(b, cborMajorArray, uint64(len(it.Records)))
		for j := range it.Records {
			var ok bool
			if b, ok = it.Records[j].AppendCBOR(b); !ok {
				return b, false
			}
		}
		if it.Direct {
			b = append(b, 4, cborTrue)
		}
	}
	return b, true
}

func (m *ReplicateRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ReplicateRequest
	r.Fields(1, func(uint64) {
		out.Items = task.ReadList(r, (*ReplicateItem).decodeCBOR)
	})
	return finish(r, m, out)
}

func (it *ReplicateItem) decodeCBOR(r *task.CBORReader) {
	r.Fields(4, func(k uint64) {
		switch k {
		case 1:
			it.Part = uint16(r.Uint(math.MaxUint16))
		case 2:
			it.Epoch = r.Uint64()
		case 3:
			it.Records = task.ReadList(r, (*task.Record).DecodeCBOR)
		case 4:
			it.Direct = r.Bool()
		}
	})
}

func (m *ReplicateResponse) appendCBOR(b []byte) ([]byte, bool) {
	if m.Results == nil {
		return b, false
	}
	b = append(b, cborMajorMap|1, 1)
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Results)))
	for _, res := range m.Results {
		n := presentCount(res.Code != CodeOK, res.Err != "", len(res.Records) > 0)
		b = appendResult(append(b, cborMajorMap|n), res.Code, res.Err)
		if len(res.Records) > 0 {
			b = append(b, 3)
			b = task.AppendCBORHead(b, cborMajorArray, uint64(len(res.Records)))
			for _, rr := range res.Records {
				b = appendResult(append(b, cborMajorMap|presentCount(rr.Code != CodeOK, rr.Err != "")), rr.Code, rr.Err)
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
		b = task.AppendCBORText(append(b, 2), msg)
	}
	return b
}

func (m *ReplicateResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ReplicateResponse
	r.Fields(1, func(uint64) {
		out.Results = task.ReadList(r, func(res *ReplicateResult, r *task.CBORReader) {
			r.Fields(3, func(k uint64) {
				switch k {
				case 1:
					res.Code = Code(r.Uint(math.MaxUint16))
				case 2:
					res.Err = r.Text()
				case 3:
					res.Records = task.ReadList(r, func(rr *Result, r *task.CBORReader) {
						r.Fields(2, func(k uint64) {
							if k == 1 {
								rr.Code = Code(r.Uint(math.MaxUint16))
							} else {
								rr.Err = r.Text()
							}
						})
					})
				}
			})
		})
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
	b = append(b, cborMajorMap|presentCount(true, m.W != 0, m.Hint), 1)
	b = task.AppendCBORHead(b, cborMajorArray, uint64(len(m.Tasks)))
	for i := range m.Tasks {
		t := &m.Tasks[i]
		n := presentCount(true, t.ID != nil, t.Priority != 0, len(t.Data) > 0, len(t.Deps) > 0, t.DelayMs != 0,
			t.Group != "", t.Description != "", t.MaxAttempts != 0, t.FreshID, t.TimeLimitMs != 0,
			t.Kind != "", t.Subtopic != "", t.Key != "", t.UniqueForMs != 0, t.Hinted)
		b = append(b, cborMajorMap|n)
		if t.ID != nil {
			b = task.AppendCBORID(append(b, 1), *t.ID)
		}
		b = task.AppendCBORText(append(b, 2), t.Queue)
		if t.Priority != 0 {
			b = task.AppendCBORInt(append(b, 3), int64(t.Priority))
		}
		if len(t.Data) > 0 {
			b = task.AppendCBORHead(append(b, 4), cborMajorBytes, uint64(len(t.Data)))
			b = append(b, t.Data...)
		}
		if len(t.Deps) > 0 {
			b = task.AppendCBORIDs(append(b, 5), t.Deps)
		}
		if t.DelayMs != 0 {
			b = task.AppendCBORInt(append(b, 6), t.DelayMs)
		}
		if t.Group != "" {
			b = task.AppendCBORText(append(b, 7), t.Group)
		}
		if t.Description != "" {
			b = task.AppendCBORText(append(b, 8), t.Description)
		}
		if t.MaxAttempts != 0 {
			b = task.AppendCBORHead(append(b, 9), cborMajorUint, uint64(t.MaxAttempts))
		}
		if t.FreshID {
			b = append(b, 10, cborTrue)
		}
		if t.TimeLimitMs != 0 {
			b = task.AppendCBORInt(append(b, 11), t.TimeLimitMs)
		}
		if t.Kind != "" {
			b = task.AppendCBORText(append(b, 12), t.Kind)
		}
		if t.Subtopic != "" {
			b = task.AppendCBORText(append(b, 13), t.Subtopic)
		}
		if t.Key != "" {
			b = task.AppendCBORText(append(b, 14), t.Key)
		}
		if t.UniqueForMs != 0 {
			b = task.AppendCBORInt(append(b, 15), t.UniqueForMs)
		}
		if t.Hinted {
			b = append(b, 16, cborTrue)
		}
	}
	if m.W != 0 {
		b = task.AppendCBORInt(append(b, 2), int64(m.W))
	}
	if m.Hint {
		b = append(b, 3, cborTrue)
	}
	return b, true
}

func (m *EnqueueRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out EnqueueRequest
	r.Fields(3, func(k uint64) {
		switch k {
		case 2:
			out.W = int(r.Int(math.MinInt, math.MaxInt))
			return
		case 3:
			out.Hint = r.Bool()
			return
		}
		out.Tasks = task.ReadList(r, func(t *EnqueueTask, r *task.CBORReader) {
			r.Fields(16, func(k uint64) {
				switch k {
				case 1:
					id := r.ID()
					t.ID = &id
				case 2:
					t.Queue = r.Text()
				case 3:
					t.Priority = r.Int32()
				case 4:
					t.Data = r.Bytes()
				case 5:
					t.Deps = r.IDs()
				case 6:
					t.DelayMs = r.Int64()
				case 7:
					t.Group = r.Text()
				case 8:
					t.Description = r.Text()
				case 9:
					t.MaxAttempts = r.Uint32()
				case 10:
					t.FreshID = r.Bool()
				case 11:
					t.TimeLimitMs = r.Int64()
				case 12:
					t.Kind = r.Text()
				case 13:
					t.Subtopic = r.Text()
				case 14:
					t.Key = r.Text()
				case 15:
					t.UniqueForMs = r.Int64()
				case 16:
					t.Hinted = r.Bool()
				}
			})
		})
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
		b = append(b, cborMajorMap|presentCount(true, true, res.Duplicate, res.Hinted), 1)
		b = task.AppendCBORID(b, res.ID)
		b = task.AppendCBORInt(append(b, 2), int64(res.Acks))
		if res.Duplicate {
			b = append(b, 3, cborTrue)
		}
		if res.Hinted {
			b = append(b, 4, cborTrue)
		}
	}
	return b, true
}

func (m *EnqueueResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out EnqueueResponse
	r.Fields(1, func(uint64) {
		out.Results = task.ReadList(r, func(res *EnqueueResult, r *task.CBORReader) {
			r.Fields(4, func(k uint64) {
				switch k {
				case 1:
					res.ID = r.ID()
				case 2:
					res.Acks = int(r.Int(math.MinInt, math.MaxInt))
				case 3:
					res.Duplicate = r.Bool()
				case 4:
					res.Hinted = r.Bool()
				}
			})
		})
	})
	return finish(r, m, out)
}

// cborNull is the library's encoding of a nil slice that is not omitempty.
const cborNull = 0xf6

// appendBytes appends a byte string that is not omitempty: null when nil.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, cborNull)
	}
	return append(task.AppendCBORHead(b, cborMajorBytes, uint64(len(v))), v...)
}

// readBytes reads what appendBytes writes (an empty string is left to the
// library, which reads it as an empty, non-nil slice).
func readBytes(r *task.CBORReader) []byte {
	if r.Null() {
		return nil
	}
	return r.Bytes()
}

// listHead appends the head of a list that is not omitempty of n
// elements, or null when nil.
func listHead(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, cborNull)
	}
	return task.AppendCBORHead(b, cborMajorArray, uint64(n))
}

// presentCount counts the fields of a map that are written.
func presentCount(present ...bool) byte { return byte(task.CountPresent(present...)) }

func (m *ClaimRequest) appendCBOR(b []byte) ([]byte, bool) {
	b = append(b, cborMajorMap|presentCount(true, m.TTLMs != 0, m.Count != 0, m.WaitMs != 0))
	b = task.AppendCBORText(append(b, 1), m.Queue)
	if m.TTLMs != 0 {
		b = task.AppendCBORInt(append(b, 2), m.TTLMs)
	}
	if m.Count != 0 {
		b = task.AppendCBORInt(append(b, 3), int64(m.Count))
	}
	if m.WaitMs != 0 {
		b = task.AppendCBORInt(append(b, 4), m.WaitMs)
	}
	return b, true
}

func (m *ClaimRequest) read(r *task.CBORReader) {
	r.Fields(4, func(k uint64) {
		switch k {
		case 1:
			m.Queue = r.Text()
		case 2:
			m.TTLMs = r.Int64()
		case 3:
			m.Count = int(r.Int(math.MinInt, math.MaxInt))
		case 4:
			m.WaitMs = r.Int64()
		}
	})
}

func (m *ClaimRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ClaimRequest
	out.read(r)
	return finish(r, m, out)
}

func (m *CompleteRequest) appendCBOR(b []byte) ([]byte, bool) {
	b = append(b, cborMajorMap|presentCount(true, true, m.Seq != nil, m.Next != nil), 1)
	b = task.AppendCBORID(b, m.ID)
	b = task.AppendCBORHead(append(b, 2), cborMajorUint, uint64(m.Claim))
	if m.Seq != nil {
		b = task.AppendCBORHead(append(b, 3), cborMajorUint, *m.Seq)
	}
	if m.Next != nil {
		b, _ = m.Next.appendCBOR(append(b, 4))
	}
	return b, true
}

func (m *CompleteRequest) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out CompleteRequest
	r.Fields(4, func(k uint64) {
		switch k {
		case 1:
			out.ID = r.ID()
		case 2:
			out.Claim = r.Uint32()
		case 3:
			seq := r.Uint64()
			out.Seq = &seq
		case 4:
			out.Next = new(ClaimRequest)
			out.Next.read(r)
		}
	})
	return finish(r, m, out)
}

func (m *ClaimResponse) appendCBOR(b []byte) ([]byte, bool) {
	b = append(b, cborMajorMap|1, 1)
	return appendViews(b, m.Tasks, m.Tasks == nil), true
}

func (m *ClaimResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out ClaimResponse
	r.Fields(1, func(uint64) {
		if !r.Null() {
			out.Tasks = task.ReadList(r, (*TaskView).read)
		}
	})
	return finish(r, m, out)
}

func (m *CompleteResponse) appendCBOR(b []byte) ([]byte, bool) {
	b = append(b, cborMajorMap|presentCount(true, len(m.Next) > 0), 1)
	b = task.AppendCBORInt(b, int64(m.Acks))
	if len(m.Next) > 0 {
		b = appendViews(append(b, 2), m.Next, false)
	}
	return b, true
}

func (m *CompleteResponse) decodeCBOR(b []byte) bool {
	r := &task.CBORReader{B: b}
	var out CompleteResponse
	r.Fields(2, func(k uint64) {
		if k == 1 {
			out.Acks = int(r.Int(math.MinInt, math.MaxInt))
		} else {
			out.Next = task.ReadList(r, (*TaskView).read)
		}
	})
	return finish(r, m, out)
}

func appendViews(b []byte, vs []TaskView, isNil bool) []byte {
	b = listHead(b, len(vs), isNil)
	for i := range vs {
		b = vs[i].appendCBOR(b)
	}
	return b
}

func (v *TaskView) appendCBOR(b []byte) []byte {
	b = append(b, cborMajorMap|presentCount(true, true, true, true, true, true, v.Claim != nil, true, true,
		v.Group != "", v.Description != "", true, true, v.NotBefore != 0, true, len(v.Failures) > 0, v.Cancelled != nil,
		v.TimeLimitMs != 0, v.Kind != "", v.Subtopic != "", v.Key != "", v.UniqueForMs != 0), 1)
	b = task.AppendCBORID(b, v.ID)
	b = task.AppendCBORText(append(b, 2), v.Queue)
	b = task.AppendCBORInt(append(b, 3), int64(v.Priority))
	b = appendBytes(append(b, 4), v.Data)
	if v.Deps == nil {
		b = append(b, 5, cborNull)
	} else {
		b = task.AppendCBORIDs(append(b, 5), v.Deps)
	}
	b = task.AppendCBORText(append(b, 6), v.State)
	if v.Claim != nil {
		b = task.AppendCBORHead(append(b, 7), cborMajorUint, uint64(*v.Claim))
	}
	b = listHead(append(b, 8), len(v.Claims), v.Claims == nil)
	for _, c := range v.Claims {
		b = append(b, cborMajorMap|presentCount(true, true, true, c.Completed != nil, c.Epoch != 0), 1)
		b = task.AppendCBORHead(b, cborMajorUint, uint64(c.Claim))
		b = task.AppendCBORInt(append(b, 2), c.Start)
		b = task.AppendCBORInt(append(b, 3), c.End)
		if c.Completed != nil {
			b = task.AppendCBORInt(append(b, 4), *c.Completed)
		}
		if c.Epoch != 0 {
			b = task.AppendCBORHead(append(b, 5), cborMajorUint, c.Epoch)
		}
	}
	b = listHead(append(b, 9), len(v.Updates), v.Updates == nil)
	for _, u := range v.Updates {
		b = append(b, cborMajorMap|3, 1)
		b = task.AppendCBORHead(b, cborMajorUint, uint64(u.Claim))
		b = task.AppendCBORHead(append(b, 2), cborMajorUint, u.Seq)
		b = appendBytes(append(b, 3), u.Data)
	}
	if v.Group != "" {
		b = task.AppendCBORText(append(b, 10), v.Group)
	}
	if v.Description != "" {
		b = task.AppendCBORText(append(b, 11), v.Description)
	}
	b = task.AppendCBORHead(append(b, 12), cborMajorUint, uint64(v.MaxAttempts))
	b = task.AppendCBORHead(append(b, 13), cborMajorUint, uint64(v.Attempts))
	if v.NotBefore != 0 {
		b = task.AppendCBORInt(append(b, 14), v.NotBefore)
	}
	b = task.AppendCBORInt(append(b, 15), v.EnqueuedAt)
	if len(v.Failures) > 0 {
		b = task.AppendCBORHead(append(b, 16), cborMajorArray, uint64(len(v.Failures)))
		for _, f := range v.Failures {
			b = append(b, cborMajorMap|presentCount(true, true, f.Reason != "", f.Snooze, f.Until != 0, f.TimeLimit, f.NoRetry), 1)
			b = task.AppendCBORHead(b, cborMajorUint, uint64(f.Claim))
			b = task.AppendCBORInt(append(b, 2), f.At)
			if f.Reason != "" {
				b = task.AppendCBORText(append(b, 3), f.Reason)
			}
			if f.Snooze {
				b = append(b, 4, cborTrue)
			}
			if f.Until != 0 {
				b = task.AppendCBORInt(append(b, 5), f.Until)
			}
			if f.TimeLimit {
				b = append(b, 6, cborTrue)
			}
			if f.NoRetry {
				b = append(b, 7, cborTrue)
			}
		}
	}
	if c := v.Cancelled; c != nil {
		b = append(b, 17, cborMajorMap|presentCount(true, c.Reason != ""), 1)
		b = task.AppendCBORInt(b, c.At)
		if c.Reason != "" {
			b = task.AppendCBORText(append(b, 2), c.Reason)
		}
	}
	if v.TimeLimitMs != 0 {
		b = task.AppendCBORInt(append(b, 18), v.TimeLimitMs)
	}
	if v.Kind != "" {
		b = task.AppendCBORText(append(b, 19), v.Kind)
	}
	if v.Subtopic != "" {
		b = task.AppendCBORText(append(b, 20), v.Subtopic)
	}
	if v.Key != "" {
		b = task.AppendCBORText(append(b, 21), v.Key)
	}
	if v.UniqueForMs != 0 {
		b = task.AppendCBORInt(append(b, 22), v.UniqueForMs)
	}
	return b
}

func (v *TaskView) read(r *task.CBORReader) {
	r.Fields(22, func(k uint64) {
		switch k {
		case 1:
			v.ID = r.ID()
		case 2:
			v.Queue = r.Text()
		case 3:
			v.Priority = r.Int32()
		case 4:
			v.Data = readBytes(r)
		case 5:
			if !r.Null() {
				v.Deps = r.IDs()
			}
		case 6:
			v.State = r.Text()
		case 7:
			c := r.Uint32()
			v.Claim = &c
		case 8:
			if !r.Null() {
				v.Claims = task.ReadList(r, (*ClaimView).read)
			}
		case 9:
			if !r.Null() {
				v.Updates = task.ReadList(r, func(u *UpdateView, r *task.CBORReader) {
					r.Fields(3, func(k uint64) {
						switch k {
						case 1:
							u.Claim = r.Uint32()
						case 2:
							u.Seq = r.Uint64()
						case 3:
							u.Data = readBytes(r)
						}
					})
				})
			}
		case 10:
			v.Group = r.Text()
		case 11:
			v.Description = r.Text()
		case 12:
			v.MaxAttempts = r.Uint32()
		case 13:
			v.Attempts = r.Uint32()
		case 14:
			v.NotBefore = r.Int64()
		case 15:
			v.EnqueuedAt = r.Int64()
		case 16:
			v.Failures = task.ReadList(r, (*FailureView).read)
		case 17:
			c := new(CancelView)
			r.Fields(2, func(k uint64) {
				switch k {
				case 1:
					c.At = r.Int64()
				case 2:
					c.Reason = r.Text()
				}
			})
			v.Cancelled = c
		case 18:
			v.TimeLimitMs = r.Int64()
		case 19:
			v.Kind = r.Text()
		case 20:
			v.Subtopic = r.Text()
		case 21:
			v.Key = r.Text()
		case 22:
			v.UniqueForMs = r.Int64()
		}
	})
}

func (c *ClaimView) read(r *task.CBORReader) {
	r.Fields(5, func(k uint64) {
		switch k {
		case 1:
			c.Claim = r.Uint32()
		case 2:
			c.Start = r.Int64()
		case 3:
			c.End = r.Int64()
		case 4:
			t := r.Int64()
			c.Completed = &t
		case 5:
			c.Epoch = r.Uint64()
		}
	})
}

func (f *FailureView) read(r *task.CBORReader) {
	r.Fields(7, func(k uint64) {
		switch k {
		case 1:
			f.Claim = r.Uint32()
		case 2:
			f.At = r.Int64()
		case 3:
			f.Reason = r.Text()
		case 4:
			f.Snooze = r.Bool()
		case 5:
			f.Until = r.Int64()
		case 6:
			f.TimeLimit = r.Bool()
		case 7:
			f.NoRetry = r.Bool()
		}
	})
}
