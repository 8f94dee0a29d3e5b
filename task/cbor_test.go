package task_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/task"
)

// coreDet is the encoding the store and the anti-entropy hash use.
var coreDet = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// libDec decodes as the wire package does (ids from byte strings through
// UnmarshalBinary).
var libDec = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		BinaryUnmarshaler: cbor.BinaryUnmarshalerByteString,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// readBack decodes b with DecodeCBOR into a new value of v's type;
// ok is false when the reader refused b or left bytes over.
func readBack(v any, b []byte) (out any, ok bool) {
	r := &task.CBORReader{B: b}
	switch v.(type) {
	case *task.Spec:
		sp := new(task.Spec)
		sp.DecodeCBOR(r)
		out = sp
	case *task.State:
		st := new(task.State)
		st.DecodeCBOR(r)
		out = st
	}
	return out, !r.Bad && len(r.B) == 0
}

// valueSource draws values from fuzz input or a PRNG, biased to the
// boundaries of CBOR's integer forms.
type valueSource struct {
	b   []byte
	rng *rand.Rand
}

var intEdges = []int64{0, 1, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
	-1, -24, -25, -256, -257, -65536, -65537, math.MinInt32, math.MinInt64}

func (s *valueSource) u64() uint64 {
	if s.rng != nil {
		return s.rng.Uint64()
	}
	var w [8]byte
	n := copy(w[:], s.b)
	s.b = s.b[n:]
	return binary.LittleEndian.Uint64(w[:])
}

func (s *valueSource) small(n int) int { return int(s.u64() % uint64(n)) }

func (s *valueSource) i64() int64 {
	switch s.small(3) {
	case 0:
		return 0
	case 1:
		return intEdges[s.small(len(intEdges))]
	}
	v := int64(s.u64())
	return v >> s.small(64)
}

func (s *valueSource) u64v() uint64 { return uint64(s.i64()) }

func (s *valueSource) str() string {
	n := s.small(4)
	if n == 3 {
		n = 24 + s.small(300) // longer than the one-byte length form
	}
	return string(bytes.Repeat([]byte{'a' + byte(s.small(26))}, n))
}

func (s *valueSource) id() task.ID { return task.MakeID(s.i64(), s.u64(), uint32(s.u64())) }

func (s *valueSource) ids() []task.ID {
	n := s.small(4)
	if n == 0 && s.small(2) == 0 {
		return []task.ID{} // empty, not nil: omitted all the same
	}
	var out []task.ID
	for range n {
		out = append(out, s.id())
	}
	return out
}

func (s *valueSource) spec() *task.Spec {
	sp := &task.Spec{
		ID: s.id(), Queue: s.str(), Priority: int32(s.i64()), Deps: s.ids(), NotBefore: s.i64(),
		Group: s.str(), Description: s.str(), MaxAttempts: uint32(s.u64v()), EnqueuedAt: s.i64(), TimeLimit: s.i64(),
		Kind: s.str(), Subtopic: s.str(), Key: s.str(), UniqueFor: s.i64(),
	}
	switch s.small(3) {
	case 1:
		sp.Data = []byte{}
	case 2:
		sp.Data = bytes.Repeat([]byte{7}, s.small(70000))
	}
	return sp
}

func (s *valueSource) state() *task.State {
	st := &task.State{DepsDone: s.ids(), RequeueBase: uint32(s.u64v()), Stamp: s.u64v()}
	for range s.small(4) {
		st.Claims = append(st.Claims, task.Claim{Index: uint32(s.u64v()), Start: s.i64(), End: s.i64(), Epoch: s.u64v()})
	}
	for range s.small(4) {
		st.Releases = append(st.Releases, task.Release{Claim: uint32(s.u64v()), At: s.i64(), Snooze: s.small(2) == 1, Until: s.i64(), Reason: s.str(), NoRetry: s.small(2) == 1})
	}
	if s.small(2) == 1 {
		st.Completion = &task.Completion{Claim: uint32(s.u64v()), Seq: s.u64v(), At: s.i64(), Cancelled: s.small(2) == 1, Reason: s.str()}
	}
	return st
}

// checkSame fails unless AppendCBOR gives the library's bytes for sp and
// st, also when appending to a non-empty buffer.
func checkSame(t *testing.T, sp *task.Spec, st *task.State) {
	t.Helper()
	for _, v := range []interface {
		AppendCBOR([]byte) []byte
	}{sp, st} {
		want, err := coreDet.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.AppendCBOR(nil); !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nAppendCBOR %x\nlibrary    %x", v, got, want)
		}
		if got := v.AppendCBOR([]byte{1, 2}); !bytes.Equal(got[2:], want) || got[0] != 1 || got[1] != 2 {
			t.Fatalf("%+v: appending to a buffer changed its bytes or the encoding", v)
		}
		// The reader takes every encoding the encoder writes, and reads
		// what the library reads.
		got, ok := readBack(v, want)
		if !ok {
			t.Fatalf("%+v: the reader refused its encoding %x", v, want)
		}
		lib := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := libDec.Unmarshal(want, lib); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, lib) {
			t.Fatalf("%x:\nreader  %+v\nlibrary %+v", want, got, lib)
		}
	}
}

// TestAppendCBORMatchesLibrary: the hand-written encoders give the CBOR
// library's core deterministic bytes, across integer forms, lengths and
// omitted fields.
func TestAppendCBORMatchesLibrary(t *testing.T) {
	checkSame(t, &task.Spec{}, &task.State{})
	src := &valueSource{rng: rand.New(rand.NewPCG(1, 2))}
	for range 3000 {
		checkSame(t, src.spec(), src.state())
	}
}

// FuzzAppendCBOR: the same, for values drawn from fuzz input.
func FuzzAppendCBOR(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 200))
	f.Add(bytes.Repeat([]byte{0x01, 0x80, 0x17, 0x18}, 100))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &valueSource{b: data}
		checkSame(t, src.spec(), src.state())
	})
}

// FuzzCBORReader: whatever bytes the reader accepts as a whole spec or
// state, the library decodes to the same value. (It refuses much that
// the library takes; the wire package then uses the library.)
func FuzzCBORReader(f *testing.F) {
	src := &valueSource{rng: rand.New(rand.NewPCG(3, 4))}
	for range 20 {
		b, _ := coreDet.Marshal(src.spec())
		f.Add(b, false)
		b, _ = coreDet.Marshal(src.state())
		f.Add(b, true)
	}
	f.Add([]byte{0xa1, 0x03, 0x39, 0x01, 0x00}, false)
	f.Fuzz(func(t *testing.T, data []byte, state bool) {
		var v, lib any = new(task.Spec), new(task.Spec)
		if state {
			v, lib = new(task.State), new(task.State)
		}
		got, ok := readBack(v, data)
		if !ok {
			return
		}
		if err := libDec.Unmarshal(data, lib); err != nil {
			t.Fatalf("%x: the reader took what the library refuses (%v): %+v", data, err, got)
		}
		if !reflect.DeepEqual(got, lib) {
			t.Fatalf("%x:\nreader  %+v\nlibrary %+v", data, got, lib)
		}
	})
}

// TestCBORFieldsKnown: the hand-written encoders and decoders know every
// field of the types they cover (see the wire package's
// TestFastCodecFieldsKnown for why a count).
func TestCBORFieldsKnown(t *testing.T) {
	for v, fields := range map[any]int{
		&task.Spec{}: 15, &task.State{}: 6, &task.Claim{}: 4, &task.Release{}: 6, &task.Completion{}: 5,
	} {
		if n := reflect.TypeOf(v).Elem().NumField(); n != fields {
			t.Errorf("%T has %d fields; its hand-written codec (cbor.go) knows %d", v, n, fields)
		}
	}
}
