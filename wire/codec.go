package wire

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/skuldd/skuldd/internal/cbormode"
)

// Decoding limits. They apply to every CBOR item wire decodes: frame
// envelopes (which contain the body, so the body is checked twice: once as
// part of the envelope, once by the handler's Unmarshal) and bodies. They
// bound the memory and stack one untrusted frame can make a node spend; the
// frame size limit (ServerConfig.MaxFrame, ClientConfig.MaxFrame) bounds the
// total bytes, which also bounds every byte and text string.
const (
	// maxNestedLevels is the deepest nesting of arrays, maps and tags. Our
	// messages nest 4-5 levels (envelope > body > list > task > state >
	// claims); 16 leaves room without letting a peer exhaust the stack.
	maxNestedLevels = 16
	// maxArrayElements is the longest array: enough for a batch of 10,000
	// tasks or a list page with room to spare (65,536), and below the
	// library default of 131,072.
	maxArrayElements = 1 << 16
	// maxMapPairs is the largest map. Our structs have at most a few dozen
	// fields; the only maps with data-dependent size are small per-queue or
	// per-status tables.
	maxMapPairs = 1 << 12
)

// The CBOR modes. Both are built once, explicitly, and are safe for
// concurrent use.
var (
	// cborEnc encodes with RFC 8949 core deterministic encoding: the same
	// value always gives the same bytes (shortest integers and floats,
	// sorted map keys, no indefinite lengths). Tags are forbidden because
	// the decoder forbids them: an encoding that emits one (a big.Int
	// bignum, say) fails at the sender rather than at the peer.
	cborEnc = cbormode.Enc
	// cborDec decodes untrusted input with the limits above.
	cborDec = cbormode.MustDec(cbormode.Limits{Nested: maxNestedLevels, Array: maxArrayElements, MapPairs: maxMapPairs})
)

// Marshal encodes v with deterministic CBOR (RFC 8949 core deterministic
// encoding, no tags). The result is freshly allocated and owned by the
// caller. Errors wrap the cbor error; they are bugs of the caller's types,
// so CodeOf maps them to CodeInternal.
func Marshal(v any) ([]byte, error) {
	b, err := cborEnc.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("wire: encode %T: %w", v, err)
	}
	return b, nil
}

// Unmarshal decodes one CBOR item from b into v, enforcing the decoding
// limits (nesting 16, arrays 65,536 elements, maps 4,096 pairs, no
// duplicate map keys, no indefinite lengths, no tags, valid UTF-8) and
// rejecting trailing bytes. Unknown map keys are ignored.
//
// An error is a *Error with CodeBadFrame ("undecodable frame or body"), so
// a handler can pass it to ResponseWriter.Error unchanged. Unmarshal does
// not retain b.
func Unmarshal(b []byte, v any) error {
	if cb, ok := v.(canonicalBody); ok && isZeroBody(cb) && cborDec.Wellformed(b) == nil && cb.decodeCBOR(b) {
		return nil
	}
	if err := cborDec.Unmarshal(b, v); err != nil {
		return &Error{Code: CodeBadFrame, Msg: fmt.Sprintf("wire: decode %T: %v", v, err)}
	}
	return nil
}

// isZeroBody reports whether v holds nothing yet: the hand-written
// decoders replace what they decode, where the library would merge into
// a value that holds something.
func isZeroBody(v canonicalBody) bool {
	switch m := v.(type) {
	case *ReplicateRequest:
		return m.Items == nil
	case *ReplicateResponse:
		return m.Results == nil
	case *EnqueueRequest:
		return m.Tasks == nil && m.W == 0
	case *EnqueueResponse:
		return m.Results == nil
	case *ClaimRequest:
		return *m == ClaimRequest{}
	case *ClaimResponse:
		return m.Tasks == nil
	case *CompleteRequest:
		return *m == CompleteRequest{}
	case *CompleteResponse:
		return m.Acks == 0 && m.Next == nil
	}
	return false
}

// Buffer pools. Buffers that grew past poolMaxCap are dropped rather than
// pooled, so one large frame does not pin its memory forever.
const poolMaxCap = 64 << 10

// encPool holds *bytes.Buffer for encoding frames.
var encPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getEncBuf() *bytes.Buffer {
	b := encPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putEncBuf(b *bytes.Buffer) {
	if b.Cap() > poolMaxCap {
		return
	}
	encPool.Put(b)
}
