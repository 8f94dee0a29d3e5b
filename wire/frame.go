package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/task"
)

// Version is the protocol version every frame carries. A frame with another
// version is answered with CodeVersion.
const Version = 1

// DefaultMaxFrame is the default limit on a frame's envelope: the bytes of
// CBOR after the length prefix.
const DefaultMaxFrame = 16 << 20

// lenPrefixSize is the size of the big-endian length that precedes each
// envelope.
const lenPrefixSize = 4

// maxEncodableFrame is the largest envelope the length prefix can express.
const maxEncodableFrame = math.MaxUint32

// Op is a request kind. The constants are defined with the API messages
// (api.go); the transport only carries the value.
type Op uint16

// Flags qualify a frame.
type Flags uint8

// FlagMore marks a streamed response frame: more frames with the same ID
// follow. The last frame of a response never has it.
const FlagMore Flags = 1

// knownFlags are the flags this version understands; a frame with any
// other bit set is rejected as CodeBadFrame by the server and the client.
const knownFlags = FlagMore

// Frame is the envelope of every message: a request (Code 0, Flags 0), a
// response frame, or an error frame (Code non-zero, always final).
//
// IDs: a request's ID is chosen by the client, is never 0 and is unique
// among the client's in-flight requests on a connection; every response
// frame carries its request's ID. An error frame with ID 0 is about the
// stream, not a request (an envelope too broken to read its ID).
type Frame struct {
	Version uint8           `cbor:"1,keyasint"`
	ID      uint64          `cbor:"2,keyasint"`
	Op      Op              `cbor:"3,keyasint"`
	Flags   Flags           `cbor:"4,keyasint,omitempty"`
	Code    Code            `cbor:"5,keyasint,omitempty"` // non-zero => error frame
	Msg     string          `cbor:"6,keyasint,omitempty"`
	Body    cbor.RawMessage `cbor:"7,keyasint,omitempty"`
}

// WriteFrame writes f as one frame: a 4-byte big-endian length, then the
// CBOR envelope. The whole frame goes out in one Write call. It does not
// fill in f.Version; the caller sets it. f.Body, if not empty, must be one
// well-formed CBOR item within the decoding limits (as produced by
// Marshal); otherwise WriteFrame fails without writing.
//
// WriteFrame does not apply a size limit other than the length prefix's own
// (4 GiB); the transport checks its MaxFrame before writing.
func WriteFrame(w io.Writer, f *Frame) error {
	buf := getEncBuf()
	defer putEncBuf(buf)
	if err := appendFrame(buf, f, nil, math.MaxInt); err != nil {
		return err
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("wire: write frame: %w", err)
	}
	return nil
}

// CBOR major types, for writing the envelope by hand.
const (
	cborMajorUint = 0 << 5
	cborMajorText = 3 << 5
	cborMajorMap  = 5 << 5
)

// Envelope keys, as in Frame's struct tags.
const (
	envKeyVersion = 1 + iota
	envKeyID
	envKeyOp
	envKeyFlags
	envKeyCode
	envKeyMsg
	envKeyBody
)

// appendFrame appends the length prefix and the envelope of f to buf. If
// body is non-nil (and not an empty cbor.RawMessage) it is the frame's
// body, encoded straight into buf with Marshal's encoding (f.Body is then
// ignored); otherwise f.Body, which must be one well-formed CBOR item
// within the decoding limits, is copied.
//
// The envelope is written by hand, byte for byte what cborEnc produces for
// the Frame (keys ascending, shortest integer forms, omitempty fields
// left out): this saves encoding the body twice, since the hot paths
// (Call, Reply) never build a separate body. TestAppendFrameMatchesCBOR and
// FuzzReadFrame hold it to the library's encoding.
//
// An envelope over maxFrame bytes gives a *Error with CodeFrameTooLarge; a
// body that does not encode gives a wrapped cbor error. buf's contents are
// unspecified after an error.
func appendFrame(buf *bytes.Buffer, f *Frame, body any, maxFrame int) error {
	start := buf.Len()
	var hdr [lenPrefixSize]byte
	buf.Write(hdr[:])

	if rm, ok := body.(cbor.RawMessage); ok && len(rm) == 0 {
		body = nil // an empty pre-encoded body is no body, not CBOR null
	}
	hasBody := body != nil || len(f.Body) > 0
	fields := 3 // Version, ID and Op are always present
	for _, present := range [...]bool{f.Flags != 0, f.Code != CodeOK, f.Msg != "", hasBody} {
		if present {
			fields++
		}
	}
	buf.WriteByte(cborMajorMap | byte(fields))
	appendUintField(buf, envKeyVersion, uint64(f.Version))
	appendUintField(buf, envKeyID, f.ID)
	appendUintField(buf, envKeyOp, uint64(f.Op))
	if f.Flags != 0 {
		appendUintField(buf, envKeyFlags, uint64(f.Flags))
	}
	if f.Code != CodeOK {
		appendUintField(buf, envKeyCode, uint64(f.Code))
	}
	if f.Msg != "" {
		buf.WriteByte(envKeyMsg)
		appendHead(buf, cborMajorText, uint64(len(f.Msg)))
		buf.WriteString(f.Msg)
	}
	if hasBody {
		buf.WriteByte(envKeyBody)
		if body != nil {
			if err := appendBody(buf, body); err != nil {
				return err
			}
		} else {
			if err := cborDec.Wellformed(f.Body); err != nil {
				return fmt.Errorf("wire: frame body: %w", err)
			}
			buf.Write(f.Body)
		}
	}

	n := buf.Len() - start - lenPrefixSize
	limit := min(uint64(maxFrame), maxEncodableFrame)
	if uint64(n) > limit {
		return &Error{Code: CodeFrameTooLarge, Msg: fmt.Sprintf("wire: frame of %d bytes exceeds the limit of %d", n, limit)}
	}
	binary.BigEndian.PutUint32(buf.Bytes()[start:], uint32(n))
	return nil
}

// EncodeBody returns v's CBOR encoding as a frame carries it, with the
// same encoders and the same limit: nil (or an empty cbor.RawMessage) is
// no body, and a body over maxFrame fails with CodeFrameTooLarge. For a
// transport that hands bodies over without frames (node/peer's in-memory
// network), so that what it delivers is what QUIC would.
func EncodeBody(v any, maxFrame int) (cbor.RawMessage, error) {
	if rm, ok := v.(cbor.RawMessage); v == nil || ok && len(rm) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := appendBody(&buf, v); err != nil {
		return nil, &Error{Code: CodeInternal, Msg: err.Error()}
	}
	if limit := min(uint64(maxFrame), maxEncodableFrame); uint64(buf.Len()) > limit {
		return nil, &Error{Code: CodeFrameTooLarge, Msg: fmt.Sprintf("wire: body of %d bytes exceeds the frame limit of %d", buf.Len(), limit)}
	}
	return buf.Bytes(), nil
}

// appendBody appends body's CBOR encoding: hand-written for the types
// that have one (canonicalBody), the library's for the others.
func appendBody(buf *bytes.Buffer, body any) error {
	if cb, ok := body.(canonicalBody); ok {
		if b, ok := cb.appendCBOR(buf.AvailableBuffer()); ok {
			buf.Write(b)
			return nil
		}
	}
	if err := cborEnc.MarshalToBuffer(body, buf); err != nil {
		return fmt.Errorf("wire: encode %T: %w", body, err)
	}
	return nil
}

// appendUintField appends a one-byte integer key and an unsigned value.
func appendUintField(buf *bytes.Buffer, key byte, v uint64) {
	buf.WriteByte(key)
	appendHead(buf, cborMajorUint, v)
}

// appendHead appends a CBOR head of the given major type and argument in
// its shortest form (task.AppendCBORHead).
func appendHead(buf *bytes.Buffer, major byte, v uint64) {
	buf.Write(task.AppendCBORHead(buf.AvailableBuffer(), major, v))
}

// ReadFrame reads one frame from r into f, which it first resets to the
// zero Frame. A length over maxFrame (DefaultMaxFrame if maxFrame <= 0) is
// rejected before anything is allocated for it. f.Body is freshly
// allocated: the caller owns it.
//
// At the end of input between frames ReadFrame returns io.EOF unwrapped. Its
// errors are of two kinds, told apart by Resumable:
//
//   - Resumable: the length prefix was sound and the whole frame was
//     consumed, but its envelope was bad. The error is a *Error with
//     CodeBadFrame (not CBOR, not an envelope, or over a decoding limit) or
//     CodeVersion (f holds what decoded, so f.ID may name the request). The
//     next ReadFrame may succeed.
//   - Not resumable: the stream is unusable. A *Error with
//     CodeFrameTooLarge (the length is over the limit; the frame is not
//     consumed, so the stream cannot be resynchronised), or a wrapped read
//     error (io.ErrUnexpectedEOF for a short frame, a stream reset, ...).
//
// Frames larger than poolMaxCap are read into a buffer that grows as bytes
// arrive, so a peer that announces a large frame and sends little of it
// costs little memory.
func ReadFrame(r io.Reader, maxFrame int, f *Frame) error {
	*f = Frame{}
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	var hdr [lenPrefixSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("wire: read frame length: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(maxFrame) {
		return &Error{Code: CodeFrameTooLarge, Msg: fmt.Sprintf("wire: frame of %d bytes exceeds the limit of %d", n, maxFrame)}
	}

	var b []byte
	if n <= poolMaxCap {
		bp := readPool.Get().(*[]byte)
		defer readPool.Put(bp)
		b = (*bp)[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("wire: read frame of %d bytes: %w", n, unexpectedEOF(err))
		}
	} else {
		var bb bytes.Buffer
		bb.Grow(poolMaxCap)
		got, err := bb.ReadFrom(io.LimitReader(r, int64(n)))
		if err == nil && got < int64(n) {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("wire: read frame of %d bytes: %w", n, unexpectedEOF(err))
		}
		b = bb.Bytes()
	}

	// The envelope decodes with the same limits as any body, so the body
	// inside it is well-formed and within limits once this succeeds.
	// cbor.RawMessage copies its bytes, so f.Body does not alias b.
	if !decodeEnvelope(b, f) {
		if err := cborDec.Unmarshal(b, f); err != nil {
			return &Error{Code: CodeBadFrame, Msg: fmt.Sprintf("wire: bad frame envelope: %v", err)}
		}
	}
	if f.Version != Version {
		return &Error{Code: CodeVersion, Msg: fmt.Sprintf("wire: unsupported protocol version %d (this node speaks %d)", f.Version, Version)}
	}
	return nil
}

// decodeEnvelope decodes b into f without reflection when b is an
// envelope in the form appendFrame writes (a map of at most 7 pairs, keys
// 1..7 ascending in one byte, unsigned values in range, a valid text
// message, the body last), which is every frame our peers and clients
// send. It reports false, leaving f alone, for anything else: ReadFrame
// then decodes b with cborDec, so the frames accepted and what they decode
// to are the library's either way (FuzzEnvelope checks that every frame
// this accepts, the library decodes to the same Frame).
//
// The whole of b is checked with cborDec.Wellformed first: the same
// limits (nesting counted from the envelope, lengths, no indefinite
// lengths, no tags) as decoding it, without the reflection that made the
// envelope cost as much as a small body. Wellformed does not check UTF-8:
// the message is checked here, and the body's text by its Unmarshal, as
// before (the library copies a RawMessage without looking inside).
func decodeEnvelope(b []byte, f *Frame) bool {
	if len(b) == 0 || b[0]&0xe0 != cborMajorMap || b[0]&0x1f > envKeyBody {
		return false
	}
	if cborDec.Wellformed(b) != nil {
		return false
	}
	pairs := int(b[0] & 0x1f)
	var fr Frame
	i, last := 1, 0
	for k := range pairs {
		if i >= len(b) {
			return false
		}
		key := int(b[i])
		if key <= last || key > envKeyBody {
			return false
		}
		last = key
		i++
		if key == envKeyBody {
			if k != pairs-1 {
				return false
			}
			fr.Body = bytes.Clone(b[i:])
			i = len(b)
			break
		}
		major, v, n, ok := cborHead(b[i:])
		if !ok {
			return false
		}
		i += n
		if key == envKeyMsg {
			if major != cborMajorText || v > uint64(len(b)-i) || !utf8.Valid(b[i:i+int(v)]) {
				return false
			}
			fr.Msg = string(b[i : i+int(v)])
			i += int(v)
			continue
		}
		if major != cborMajorUint {
			return false
		}
		switch key {
		case envKeyVersion:
			if v > math.MaxUint8 {
				return false
			}
			fr.Version = uint8(v)
		case envKeyID:
			fr.ID = v
		case envKeyOp:
			if v > math.MaxUint16 {
				return false
			}
			fr.Op = Op(v)
		case envKeyFlags:
			if v > math.MaxUint8 {
				return false
			}
			fr.Flags = Flags(v)
		case envKeyCode:
			if v > math.MaxUint16 {
				return false
			}
			fr.Code = Code(v)
		}
	}
	if i != len(b) {
		return false
	}
	*f = fr
	return true
}

// cborHead reads the head of a CBOR item in b: its major type (in the top
// three bits), its argument (a length or an unsigned value) and the head's
// size; ok is false for a head that is cut short or has an indefinite or
// reserved length.
func cborHead(b []byte) (major byte, v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, 0, false
	}
	major, info := b[0]&0xe0, b[0]&0x1f
	switch {
	case info < 24:
		return major, uint64(info), 1, true
	case info <= 27:
		size := 1 << (info - 24)
		if len(b) < 1+size {
			return 0, 0, 0, false
		}
		for _, c := range b[1 : 1+size] {
			v = v<<8 | uint64(c)
		}
		return major, v, 1 + size, true
	}
	return 0, 0, 0, false
}

// Resumable reports whether err, returned by ReadFrame, was about one bad
// frame that ReadFrame consumed whole, so the stream is still in sync and
// the next ReadFrame may succeed. It is false for nil, io.EOF, read errors
// and CodeFrameTooLarge.
func Resumable(err error) bool {
	var we *Error
	if !errors.As(err, &we) {
		return false
	}
	return we.Code == CodeBadFrame || we.Code == CodeVersion
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readPool holds *[]byte of capacity poolMaxCap for reading envelopes.
// ReadFrame returns the buffer before returning: nothing it returns aliases
// it.
var readPool = sync.Pool{New: func() any {
	b := make([]byte, poolMaxCap)
	return &b
}}

// Stream buffering, shared by the server and the client.
const (
	// readBufSize is the bufio.Reader size on each stream: many small
	// frames are read per call into the QUIC stream.
	readBufSize = 16 << 10
	// writeBufSize is the bufio.Writer size on each stream: frames queued
	// while the writer was busy go out in one stream write.
	writeBufSize = 16 << 10
	// sendQueueLen is the capacity, in frames, of each stream's send queue.
	// When it is full, senders (handlers, callers) block until the writer
	// catches up or the stream dies: backpressure, never a drop.
	sendQueueLen = 128
)

// writeFrames is the body of a stream's writer goroutine: the only
// goroutine that writes to the stream. It takes encoded frames (length
// prefix included) from out, writes them into a bufio.Writer and flushes
// only when out is momentarily empty, so frames queued while it was
// writing share a flush and, usually, packets. Before flushing it yields
// once (runtime.Gosched) to let goroutines that are about to queue a frame
// do so: on a loaded node this costs nothing, and it cut the packets per
// request of BenchmarkCallParallel from ~0.8 to ~0.2 and doubled its
// throughput. Each buffer taken from out goes back to encPool.
//
// It returns nil after a final flush when out is closed, nil at once when
// stop is closed (a nil stop never is), or the first write error.
func writeFrames(w io.Writer, out <-chan *bytes.Buffer, stop <-chan struct{}) error {
	bw := bufio.NewWriterSize(w, writeBufSize)
	for {
		var buf *bytes.Buffer
		select {
		case b, ok := <-out:
			if !ok {
				return bw.Flush()
			}
			buf = b
		case <-stop:
			return nil
		}
		_, err := bw.Write(buf.Bytes())
		putEncBuf(buf)
		if err == nil && len(out) == 0 {
			runtime.Gosched()
			if len(out) == 0 {
				err = bw.Flush()
			}
		}
		if err != nil {
			return err
		}
	}
}
