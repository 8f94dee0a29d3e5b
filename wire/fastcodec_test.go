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
	st := &task.State{DepsDone: s.ids(), RequeueBase: uint32(s.i64()), Stamp: uint64(s.i64())}
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

func (s replSource) record() task.Record {
	m := task.Record{ID: s.id(), Dependents: s.ids()}
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
		m.Updates = append(m.Updates, task.Update{Claim: uint32(s.i64()), Seq: uint64(s.i64()), Data: bytes.Repeat([]byte{3}, 1+s.rng.IntN(30))})
	}
	m.Full = s.rng.IntN(2) == 0
	return m
}

func (s replSource) request() *ReplicateRequest {
	req := &ReplicateRequest{Items: []ReplicateItem{}}
	for range 1 + s.rng.IntN(3) {
		it := ReplicateItem{Part: uint16(s.i64()), Epoch: uint64(s.i64()), Records: []task.Record{}, Direct: s.rng.IntN(2) == 0}
		for range 1 + s.rng.IntN(3) {
			it.Records = append(it.Records, s.record())
		}
		req.Items = append(req.Items, it)
	}
	return req
}

func (s replSource) code() Code { return Code(s.i64()) }

func (s replSource) replicateResponse() *ReplicateResponse {
	resp := &ReplicateResponse{Results: []ReplicateResult{}}
	for range 1 + s.rng.IntN(3) {
		res := ReplicateResult{Code: s.code(), Err: s.str()}
		for range s.rng.IntN(3) {
			res.Records = append(res.Records, Result{Code: s.code(), Err: s.str()})
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

func (s replSource) enqueueRequest() *EnqueueRequest {
	req := &EnqueueRequest{W: int(s.i64()), Hint: s.rng.IntN(2) == 0}
	for range 1 + s.rng.IntN(3) {
		t := EnqueueTask{Queue: s.str(), Priority: int32(s.i64()), Deps: s.ids(), DelayMs: s.i64(), Group: s.str(),
			Description: s.str(), MaxAttempts: uint32(s.i64()), FreshID: s.rng.IntN(2) == 0, TimeLimitMs: s.i64(),
			Kind: s.str(), Subtopic: s.str(), Key: s.str(), UniqueForMs: s.i64(), Hinted: s.rng.IntN(2) == 0}
		if s.rng.IntN(2) == 0 {
			id := s.id()
			t.ID = &id
		}
		if s.rng.IntN(2) == 0 {
			t.Data = bytes.Repeat([]byte{5}, 1+s.rng.IntN(300))
		}
		req.Tasks = append(req.Tasks, t)
	}
	return req
}

func (s replSource) enqueueResponse() *EnqueueResponse {
	resp := &EnqueueResponse{}
	for range 1 + s.rng.IntN(3) {
		resp.Results = append(resp.Results, EnqueueResult{ID: s.id(), Acks: int(s.i64()), Duplicate: s.rng.IntN(2) == 0, Hinted: s.rng.IntN(2) == 0})
	}
	return resp
}

func (s replSource) claimRequest() *ClaimRequest {
	return &ClaimRequest{Queue: s.str(), TTLMs: s.i64(), Count: int(s.i64()), WaitMs: s.i64()}
}

// maybe returns a pointer to v half the time.
func maybe[T any](s replSource, v T) *T {
	if s.rng.IntN(2) == 0 {
		return nil
	}
	return &v
}

func (s replSource) view() TaskView {
	v := TaskView{ID: s.id(), Queue: s.str(), Priority: int32(s.i64()), Deps: s.ids(), State: s.str(),
		Claim: maybe(s, uint32(s.i64())), Group: s.str(), Description: s.str(), MaxAttempts: uint32(s.i64()),
		Attempts: uint32(s.i64()), NotBefore: s.i64(), EnqueuedAt: s.i64(), TimeLimitMs: s.i64(),
		Kind: s.str(), Subtopic: s.str(), Key: s.str(), UniqueForMs: s.i64()}
	if s.rng.IntN(2) == 0 {
		v.Data = bytes.Repeat([]byte{1}, 1+s.rng.IntN(300))
	}
	for range s.rng.IntN(3) {
		v.Claims = append(v.Claims, ClaimView{Claim: uint32(s.i64()), Start: s.i64(), End: s.i64(), Completed: maybe(s, s.i64()), Epoch: uint64(s.i64())})
	}
	for range s.rng.IntN(3) {
		u := UpdateView{Claim: uint32(s.i64()), Seq: uint64(s.i64())}
		if s.rng.IntN(3) > 0 {
			u.Data = bytes.Repeat([]byte{2}, 1+s.rng.IntN(30))
		}
		v.Updates = append(v.Updates, u)
	}
	for range s.rng.IntN(3) {
		v.Failures = append(v.Failures, FailureView{Claim: uint32(s.i64()), At: s.i64(), Reason: s.str(), Snooze: s.rng.IntN(2) == 0, Until: s.i64(), TimeLimit: s.rng.IntN(2) == 0, NoRetry: s.rng.IntN(2) == 0})
	}
	if s.rng.IntN(3) == 0 {
		v.Cancelled = &CancelView{At: s.i64(), Reason: s.str()}
	}
	return v
}

func (s replSource) views() []TaskView {
	var vs []TaskView
	for range s.rng.IntN(3) {
		vs = append(vs, s.view())
	}
	return vs
}

// fastBodies are the body types with hand-written codecs, each with a
// generator of values and the values it must leave to the library.
var fastBodies = []struct {
	name    string
	gen     func(replSource) canonicalBody
	library []canonicalBody // nil lists the library writes as null, empty lists the decoders leave to it
}{
	{"ReplicateRequest", func(s replSource) canonicalBody { return s.request() }, []canonicalBody{
		&ReplicateRequest{},
		&ReplicateRequest{Items: []ReplicateItem{{Part: 1}}},
		&ReplicateRequest{Items: []ReplicateItem{{Records: []task.Record{{Updates: []task.Update{{Claim: 1}}}}}}},
	}},
	{"ReplicateResponse", func(s replSource) canonicalBody { return s.replicateResponse() }, []canonicalBody{&ReplicateResponse{}}},
	{"EnqueueRequest", func(s replSource) canonicalBody { return s.enqueueRequest() }, []canonicalBody{&EnqueueRequest{W: 2}}},
	{"EnqueueResponse", func(s replSource) canonicalBody { return s.enqueueResponse() }, []canonicalBody{&EnqueueResponse{}}},
	{"ClaimRequest", func(s replSource) canonicalBody { return s.claimRequest() }, nil},
	{"ClaimResponse", func(s replSource) canonicalBody { return &ClaimResponse{Tasks: s.views()} }, []canonicalBody{&ClaimResponse{Tasks: []TaskView{}}}},
	{"CompleteRequest", func(s replSource) canonicalBody {
		r := &CompleteRequest{ID: s.id(), Claim: uint32(s.i64()), Seq: maybe(s, uint64(s.i64()))}
		if s.rng.IntN(2) == 0 {
			r.Next = s.claimRequest()
		}
		return r
	}, nil},
	{"CompleteResponse", func(s replSource) canonicalBody { return &CompleteResponse{Acks: int(s.i64()), Next: s.views()} }, nil},
}

func newBody(v canonicalBody) canonicalBody {
	return reflect.New(reflect.TypeOf(v).Elem()).Interface().(canonicalBody)
}

// TestFastCodecsMatchLibrary: each hand-written encoder writes the
// library's bytes; its decoder takes them and reads what the library
// reads, and so does Unmarshal; values an encoder leaves to the library
// (and empty lists, which the decoders leave to it) go through it
// unchanged.
func TestFastCodecsMatchLibrary(t *testing.T) {
	for _, fb := range fastBodies {
		t.Run(fb.name, func(t *testing.T) {
			src := replSource{rand.New(rand.NewPCG(5, 6))}
			for i := range 2000 {
				v := fb.gen(src)
				want, err := cborEnc.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				got, ok := v.appendCBOR([]byte{7})
				if !ok || got[0] != 7 || !bytes.Equal(got[1:], want) {
					t.Fatalf("value %d (ok %v):\nhand    %x\nlibrary %x", i, ok, got[1:], want)
				}
				lib := newBody(v)
				if err := cborDec.Unmarshal(want, lib); err != nil {
					t.Fatal(err)
				}
				if fast := newBody(v); !fast.decodeCBOR(want) {
					t.Fatalf("value %d: the hand decoder refused %x", i, want)
				} else if !reflect.DeepEqual(fast, lib) {
					t.Fatalf("value %d:\nhand    %+v\nlibrary %+v", i, fast, lib)
				}
				if api := newBody(v); Unmarshal(want, api) != nil || !reflect.DeepEqual(api, lib) {
					t.Fatalf("value %d: Unmarshal gave %+v", i, api)
				}
			}
			for _, v := range fb.library {
				var buf bytes.Buffer
				if err := appendBody(&buf, v); err != nil {
					t.Fatal(err)
				}
				want, _ := cborEnc.Marshal(v)
				if !bytes.Equal(buf.Bytes(), want) {
					t.Fatalf("%+v: appendBody %x, library %x", v, buf.Bytes(), want)
				}
				lib, api := newBody(v), newBody(v)
				if err := cborDec.Unmarshal(want, lib); err != nil {
					t.Fatal(err)
				}
				if Unmarshal(want, api) != nil || !reflect.DeepEqual(api, lib) {
					t.Fatalf("%x: Unmarshal gave %+v, the library %+v", want, api, lib)
				}
			}
		})
	}
}

// FuzzFastDecode: whatever a hand decoder takes, the library reads the
// same; and Unmarshal reads every input as the library does. The first
// byte picks the body type.
func FuzzFastDecode(f *testing.F) {
	src := replSource{rand.New(rand.NewPCG(7, 8))}
	for i, fb := range fastBodies {
		for range 10 {
			b, _ := cborEnc.Marshal(fb.gen(src))
			f.Add(append([]byte{byte(i)}, b...))
		}
	}
	f.Add([]byte{0, 0xa1, 0x01, 0x81, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		zero := fastBodies[int(data[0])%len(fastBodies)].gen(replSource{rand.New(rand.NewPCG(1, 1))})
		data = data[1:]
		lib := newBody(zero)
		libErr := cborDec.Unmarshal(data, lib)
		api := newBody(zero)
		apiErr := Unmarshal(data, api)
		if (libErr == nil) != (apiErr == nil) || libErr == nil && !reflect.DeepEqual(api, lib) {
			t.Fatalf("%x: Unmarshal %+v (%v); library %+v (%v)", data, api, apiErr, lib, libErr)
		}
		if fast := newBody(zero); cborDec.Wellformed(data) == nil && fast.decodeCBOR(data) {
			if libErr != nil || !reflect.DeepEqual(fast, lib) {
				t.Fatalf("%x: hand decoder %+v; library %+v (%v)", data, fast, lib, libErr)
			}
		}
	})
}

// TestFastCodecFieldsKnown: the hand-written codecs know every field of
// the types they cover. A new field fails this test until the codec
// writes and reads it (a new omitempty field that the generators leave
// zero would otherwise pass TestFastCodecsMatchLibrary and be dropped).
func TestFastCodecFieldsKnown(t *testing.T) {
	for v, fields := range map[any]int{
		&ReplicateRequest{}: 1, &ReplicateItem{}: 4, &task.Record{}: 8, &task.Update{}: 3,
		&ReplicateResponse{}: 1, &ReplicateResult{}: 3, &Result{}: 2,
		// EnqueueRequest.Taken and EnqueueTask.Drawn are never encoded.
		&EnqueueRequest{}: 3 + 1, &EnqueueTask{}: 16 + 1, &EnqueueResponse{}: 1, &EnqueueResult{}: 4,
		// ClaimResponse.Waited is never encoded.
		&ClaimRequest{}: 4, &ClaimResponse{}: 1 + 1, &CompleteRequest{}: 4, &CompleteResponse{}: 2,
		&TaskView{}: 22, &CancelView{}: 2, &ClaimView{}: 5, &UpdateView{}: 3, &FailureView{}: 7,
	} {
		if n := reflect.TypeOf(v).Elem().NumField(); n != fields {
			t.Errorf("%T has %d fields; its hand-written codec (fastcodec.go) knows %d", v, n, fields)
		}
	}
}
