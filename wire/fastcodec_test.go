package wire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/skuldd/skuldd/task"
)

// replSource draws replication requests, biased to the boundaries of
// CBOR's integer forms and to absent fields.
type replSource struct{ rng *rand.Rand }

var edgeInts = []int64{0, 1, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
	-1, -24, -25, -256, -257, -65536, -65537, math.MinInt32, math.MinInt64}

func (s replSource) i64() int64 {
	switch s.rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return edgeInts[s.rng.IntN(len(edgeInts))]
	}
	return int64(s.rng.Uint64()) >> s.rng.IntN(64)
}

func (s replSource) id() task.ID { return task.MakeID(s.i64(), s.rng.Uint64(), s.rng.Uint32()) }

func (s replSource) ids() []task.ID {
	var out []task.ID
	for range s.rng.IntN(3) {
		out = append(out, s.id())
	}
	return out
}

func (s replSource) str() string {
	return string(bytes.Repeat([]byte{'a' + byte(s.rng.IntN(26))}, []int{0, 1, 23, 24, 300}[s.rng.IntN(5)]))
}

func (s replSource) spec(data bool) *task.Spec {
	sp := &task.Spec{ID: s.id(), Queue: s.str(), Priority: int32(s.i64()), Deps: s.ids(), NotBefore: s.i64(),
		Group: s.str(), Description: s.str(), MaxAttempts: uint32(s.i64()), EnqueuedAt: s.i64()}
	if data && s.rng.IntN(2) == 0 {
		sp.Data = bytes.Repeat([]byte{9}, 1+s.rng.IntN(300))
	}
	return sp
}

func (s replSource) state() *task.State {
	st := &task.State{DepsDone: s.ids(), RequeueBase: uint32(s.i64())}
	for range s.rng.IntN(3) {
		st.Claims = append(st.Claims, task.Claim{Index: uint32(s.i64()), Start: s.i64(), End: s.i64(), Epoch: uint64(s.i64())})
	}
	for range s.rng.IntN(3) {
		st.Releases = append(st.Releases, task.Release{Claim: uint32(s.i64()), At: s.i64(), Snooze: s.rng.IntN(2) == 0, Until: s.i64(), Reason: s.str()})
	}
	if s.rng.IntN(2) == 0 {
		st.Completion = &task.Completion{Claim: uint32(s.i64()), Seq: uint64(s.i64()), At: s.i64()}
	}
	return st
}

func (s replSource) record() RecordMsg {
	m := RecordMsg{ID: s.id(), Dependents: s.ids()}
	if s.rng.IntN(4) == 0 {
		m.Tomb = s.i64()
		return m
	}
	if s.rng.IntN(2) == 0 {
		m.Spec = s.spec(true)
	} else if s.rng.IntN(2) == 0 {
		m.Meta = s.spec(false)
	}
	if s.rng.IntN(3) > 0 {
		m.State = s.state()
	}
	for range s.rng.IntN(3) {
		m.Updates = append(m.Updates, UpdateMsg{Claim: uint32(s.i64()), Seq: uint64(s.i64()), Data: bytes.Repeat([]byte{3}, 1+s.rng.IntN(30))})
	}
	return m
}

func (s replSource) request() *ReplicateRequest {
	req := &ReplicateRequest{Items: []ReplicateItem{}}
	for range s.rng.IntN(4) {
		it := ReplicateItem{Part: uint16(s.i64()), Epoch: uint64(s.i64()), Records: []RecordMsg{}}
		for range 1 + s.rng.IntN(3) {
			it.Records = append(it.Records, s.record())
		}
		req.Items = append(req.Items, it)
	}
	return req
}

// TestReplicateCodecMatchesLibrary: the hand-written encoder writes the
// library's bytes; the hand-written decoder takes them and reads what the
// library reads; values the encoder leaves to the library (nil slices
// the library writes as null) still round-trip through Unmarshal.
func TestReplicateCodecMatchesLibrary(t *testing.T) {
	src := replSource{rand.New(rand.NewPCG(5, 6))}
	for i := range 3000 {
		req := src.request()
		want, err := cborEnc.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := req.appendCBOR([]byte{7})
		if !ok || got[0] != 7 || !bytes.Equal(got[1:], want) {
			t.Fatalf("request %d (ok %v):\nhand    %x\nlibrary %x", i, ok, got[1:], want)
		}
		var lib ReplicateRequest
		if err := cborDec.Unmarshal(want, &lib); err != nil {
			t.Fatal(err)
		}
		var fast ReplicateRequest
		// An empty item list is left to the library (it reads []{} as an
		// empty, non-nil slice); everything else is read by hand.
		if ok := fast.decodeCBOR(want); ok != (len(req.Items) > 0) {
			t.Fatalf("request %d: hand decoder took it: %v, %x", i, ok, want)
		} else if ok && !reflect.DeepEqual(fast, lib) {
			t.Fatalf("request %d:\nhand    %+v\nlibrary %+v", i, fast, lib)
		}
		var viaAPI ReplicateRequest
		if err := Unmarshal(want, &viaAPI); err != nil || !reflect.DeepEqual(viaAPI, lib) {
			t.Fatalf("request %d: Unmarshal: %v, %+v", i, err, viaAPI)
		}
	}
	// Left to the library: nil lists and a nil update payload.
	for _, req := range []*ReplicateRequest{
		{},
		{Items: []ReplicateItem{{Part: 1}}},
		{Items: []ReplicateItem{{Records: []RecordMsg{{Updates: []UpdateMsg{{Claim: 1}}}}}}},
	} {
		if _, ok := req.appendCBOR(nil); ok {
			t.Fatalf("%+v: hand encoder took a value it must leave to the library", req)
		}
		var buf bytes.Buffer
		if err := appendBody(&buf, req); err != nil {
			t.Fatal(err)
		}
		if want, _ := cborEnc.Marshal(req); !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("%+v: appendBody %x, library %x", req, buf.Bytes(), want)
		}
	}
}

// FuzzReplicateDecode: whatever the hand decoder takes, the library reads
// the same; and Unmarshal reads every input as the library does.
func FuzzReplicateDecode(f *testing.F) {
	src := replSource{rand.New(rand.NewPCG(7, 8))}
	for range 30 {
		b, _ := cborEnc.Marshal(src.request())
		f.Add(b)
	}
	f.Add([]byte{0xa1, 0x01, 0x81, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var lib ReplicateRequest
		libErr := cborDec.Unmarshal(data, &lib)
		var api ReplicateRequest
		apiErr := Unmarshal(data, &api)
		if (libErr == nil) != (apiErr == nil) || libErr == nil && !reflect.DeepEqual(api, lib) {
			t.Fatalf("%x: Unmarshal %+v (%v); library %+v (%v)", data, api, apiErr, lib, libErr)
		}
		var fast ReplicateRequest
		if cborDec.Wellformed(data) == nil && fast.decodeCBOR(data) {
			if libErr != nil || !reflect.DeepEqual(fast, lib) {
				t.Fatalf("%x: hand decoder %+v; library %+v (%v)", data, fast, lib, libErr)
			}
		}
	})
}
