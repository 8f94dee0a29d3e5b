package antientropy

import (
	"encoding/binary"
	"fmt"
)

// The byte formats of the exchange, for a transport that carries them as
// opaque bytes (package wire frames them; it need not know them). Each
// starts with a format tag, so that bytes of one format fed to another's
// decoder fail at once, and a later layout gets a new tag. Integers are
// unsigned varints (encoding/binary), in their shortest form only, so that
// every value has exactly one encoding. Index lists are strictly
// increasing and written as the first index then the positive gaps.
//
//	digests         tagDigests n:uvarint n*[DigestLen]
//	entries         tagEntries n:uvarint n*([IDLen] [DigestLen]), ids strictly increasing, none zero
//	nodes request   tagNodesRequest shape level:uvarint n:uvarint n*index
//	buckets request tagBucketsRequest shape n:uvarint n*index
//	shape           log2(Buckets):byte log2(Fanout):byte
//
// Every decoder checks its input fully and fails with ErrMalformed (or
// ErrShape for a shape outside the bounds) rather than panic: the input
// comes from peers.
const (
	tagDigests        byte = 1
	tagEntries        byte = 2
	tagNodesRequest   byte = 3
	tagBucketsRequest byte = 4
)

// Sizes of the fixed parts of the formats.
const (
	tagLen   = 1
	shapeLen = 2
	// EntryLen is the encoded size of one Entry.
	EntryLen = IDLen + DigestLen
)

// NodesRequest asks a peer for the digests of some nodes of one level of
// its tree. Shape is the asker's, so the peer can refuse to compare trees
// of different shapes (Tree.Answer).
type NodesRequest struct {
	Shape Shape
	// Level is the level asked about, in [0, Shape.Depth()].
	Level int
	// Idx are the nodes asked for: strictly increasing, within the level,
	// at least one.
	Idx []int
}

// BucketsRequest asks a peer for the entries of some buckets. Shape is the
// asker's; the peer must refuse another shape than its own (ErrShape), since
// a bucket's ids depend on it. The peer answers with one entries encoding
// per bucket, in order; it may also refuse more buckets than its own
// Limits.BucketsPerRound.
type BucketsRequest struct {
	Shape Shape
	// Buckets are the buckets asked for: strictly increasing, within
	// [0, Shape.Buckets), at least one.
	Buckets []int
}

// AppendDigests appends the encoding of ds to dst.
func AppendDigests(dst []byte, ds []Digest) []byte {
	dst = append(dst, tagDigests)
	dst = binary.AppendUvarint(dst, uint64(len(ds)))
	for i := range ds {
		dst = append(dst, ds[i][:]...)
	}
	return dst
}

// DecodeDigests decodes an AppendDigests encoding of at most limit digests.
func DecodeDigests(b []byte, limit int) ([]Digest, error) {
	rest, err := readTag(b, tagDigests)
	if err != nil {
		return nil, err
	}
	n, rest, err := readCount(rest, limit, DigestLen)
	if err != nil {
		return nil, fmt.Errorf("digests: %w", err)
	}
	ds := make([]Digest, n)
	for i := range ds {
		rest = rest[copy(ds[i][:], rest):]
	}
	return ds, nil
}

// AppendEntries appends the encoding of es to dst. es must be sorted by id
// with no duplicate and no zero id (SortEntries sorts); it panics
// otherwise, as that is a bug of the caller, not input.
func AppendEntries(dst []byte, es []Entry) []byte {
	if err := checkSorted(es); err != nil {
		panic(fmt.Sprintf("antientropy: AppendEntries: %v", err))
	}
	dst = append(dst, tagEntries)
	dst = binary.AppendUvarint(dst, uint64(len(es)))
	for i := range es {
		dst = append(dst, es[i].ID[:]...)
		dst = append(dst, es[i].Digest[:]...)
	}
	return dst
}

// DecodeEntries decodes an AppendEntries encoding of at most limit entries.
// The entries come out sorted by id, with no duplicate and no zero id.
func DecodeEntries(b []byte, limit int) ([]Entry, error) {
	rest, err := readTag(b, tagEntries)
	if err != nil {
		return nil, err
	}
	n, rest, err := readCount(rest, limit, EntryLen)
	if err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	es := make([]Entry, n)
	for i := range es {
		rest = rest[copy(es[i].ID[:], rest):]
		rest = rest[copy(es[i].Digest[:], rest):]
	}
	if err := checkSorted(es); err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	return es, nil
}

// Append appends the encoding of r to dst. r must be valid (as Diff makes
// it); it panics otherwise.
func (r NodesRequest) Append(dst []byte) []byte {
	if err := r.validate(); err != nil {
		panic(fmt.Sprintf("antientropy: NodesRequest.Append: %v", err))
	}
	dst = append(dst, tagNodesRequest)
	dst = appendShape(dst, r.Shape)
	dst = binary.AppendUvarint(dst, uint64(r.Level))
	return appendIndexes(dst, r.Idx)
}

// DecodeNodesRequest decodes a NodesRequest.Append encoding. The request
// is valid for its own shape; the answering peer still compares that shape
// with its own (Tree.Answer).
func DecodeNodesRequest(b []byte) (NodesRequest, error) {
	rest, err := readTag(b, tagNodesRequest)
	if err != nil {
		return NodesRequest{}, err
	}
	var r NodesRequest
	if r.Shape, rest, err = readShape(rest); err != nil {
		return NodesRequest{}, fmt.Errorf("nodes request: %w", err)
	}
	level, rest, err := readUvarint(rest)
	if err != nil {
		return NodesRequest{}, fmt.Errorf("nodes request: level: %w", err)
	}
	if level > uint64(r.Shape.Depth()) {
		return NodesRequest{}, fmt.Errorf("%w: nodes request: level %d below depth %d", ErrMalformed, level, r.Shape.Depth())
	}
	r.Level = int(level)
	if r.Idx, err = readIndexes(rest, r.Shape.Width(r.Level)); err != nil {
		return NodesRequest{}, fmt.Errorf("nodes request: level %d: %w", r.Level, err)
	}
	return r, nil
}

// Append appends the encoding of r to dst. r must be valid (as Diff makes
// it); it panics otherwise.
func (r BucketsRequest) Append(dst []byte) []byte {
	if err := r.validate(); err != nil {
		panic(fmt.Sprintf("antientropy: BucketsRequest.Append: %v", err))
	}
	dst = append(dst, tagBucketsRequest)
	dst = appendShape(dst, r.Shape)
	return appendIndexes(dst, r.Buckets)
}

// DecodeBucketsRequest decodes a BucketsRequest.Append encoding. The
// answering peer must still compare the shape with its own.
func DecodeBucketsRequest(b []byte) (BucketsRequest, error) {
	rest, err := readTag(b, tagBucketsRequest)
	if err != nil {
		return BucketsRequest{}, err
	}
	var r BucketsRequest
	if r.Shape, rest, err = readShape(rest); err != nil {
		return BucketsRequest{}, fmt.Errorf("buckets request: %w", err)
	}
	if r.Buckets, err = readIndexes(rest, r.Shape.Buckets); err != nil {
		return BucketsRequest{}, fmt.Errorf("buckets request: %w", err)
	}
	return r, nil
}

func (r NodesRequest) validate() error {
	if err := r.Shape.Validate(); err != nil {
		return err
	}
	if r.Level < 0 || r.Level > r.Shape.Depth() {
		return fmt.Errorf("%w: level %d outside [0, %d]", ErrShape, r.Level, r.Shape.Depth())
	}
	return checkIndexes(r.Idx, r.Shape.Width(r.Level))
}

func (r BucketsRequest) validate() error {
	if err := r.Shape.Validate(); err != nil {
		return err
	}
	return checkIndexes(r.Buckets, r.Shape.Buckets)
}

// checkIndexes checks that idx is non-empty, strictly increasing and
// within [0, width).
func checkIndexes(idx []int, width int) error {
	if len(idx) == 0 {
		return fmt.Errorf("%w: no index", ErrMalformed)
	}
	for i, v := range idx {
		if v < 0 || v >= width {
			return fmt.Errorf("%w: index %d outside [0, %d)", ErrMalformed, v, width)
		}
		if i > 0 && v <= idx[i-1] {
			return fmt.Errorf("%w: index %d after %d: not strictly increasing", ErrMalformed, v, idx[i-1])
		}
	}
	return nil
}

func appendShape(dst []byte, s Shape) []byte {
	return append(dst, byte(s.bucketBits()), byte(log2(s.Fanout)))
}

// readShape reads a shape and validates it: the log2 values are bounded
// before shifting, so no input makes a huge shift.
func readShape(b []byte) (Shape, []byte, error) {
	if len(b) < shapeLen {
		return Shape{}, nil, fmt.Errorf("%w: shape: %d bytes, want %d", ErrMalformed, len(b), shapeLen)
	}
	bb, fb := int(b[0]), int(b[1])
	if bb > log2(BucketsMax) || fb > log2(FanoutMax) {
		return Shape{}, nil, fmt.Errorf("%w: shape 2^%d buckets, fan-out 2^%d: beyond 2^%d, 2^%d",
			ErrShape, bb, fb, log2(BucketsMax), log2(FanoutMax))
	}
	s := Shape{Buckets: 1 << bb, Fanout: 1 << fb}
	if err := s.Validate(); err != nil {
		return Shape{}, nil, fmt.Errorf("%w: %w", ErrShape, err)
	}
	return s, b[shapeLen:], nil
}

func appendIndexes(dst []byte, idx []int) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(idx)))
	prev := 0
	for i, v := range idx {
		if i == 0 {
			dst = binary.AppendUvarint(dst, uint64(v))
		} else {
			dst = binary.AppendUvarint(dst, uint64(v-prev))
		}
		prev = v
	}
	return dst
}

// readIndexes reads an index list that must fill b exactly: a count in
// [1, width], then strictly increasing indexes below width.
func readIndexes(b []byte, width int) ([]int, error) {
	n, b, err := readUvarint(b)
	if err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	if n == 0 || n > uint64(width) {
		return nil, fmt.Errorf("%w: %d indexes: want [1, %d]", ErrMalformed, n, width)
	}
	if n > uint64(len(b)) { // each index takes at least one byte
		return nil, fmt.Errorf("%w: %d indexes in %d bytes", ErrMalformed, n, len(b))
	}
	idx := make([]int, n)
	var v uint64
	for i := range idx {
		var gap uint64
		if gap, b, err = readUvarint(b); err != nil {
			return nil, fmt.Errorf("index %d: %w", i, err)
		}
		if i > 0 && gap == 0 {
			return nil, fmt.Errorf("%w: index %d repeats %d", ErrMalformed, i, v)
		}
		if gap >= uint64(width) || v+gap >= uint64(width) { // v < width, so no overflow
			return nil, fmt.Errorf("%w: index %d beyond width %d", ErrMalformed, i, width)
		}
		v += gap
		idx[i] = int(v)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
	}
	return idx, nil
}

// readTag checks the format tag.
func readTag(b []byte, tag byte) ([]byte, error) {
	if len(b) < tagLen {
		return nil, fmt.Errorf("%w: empty input, want tag %d", ErrMalformed, tag)
	}
	if b[0] != tag {
		return nil, fmt.Errorf("%w: tag %d, want %d", ErrMalformed, b[0], tag)
	}
	return b[tagLen:], nil
}

// readCount reads the count of a list of fixed-size elements, which must
// be at most limit and fill the rest of b exactly.
func readCount(b []byte, limit, size int) (int, []byte, error) {
	n, rest, err := readUvarint(b)
	if err != nil {
		return 0, nil, fmt.Errorf("count: %w", err)
	}
	if limit < 0 || n > uint64(limit) {
		return 0, nil, fmt.Errorf("%w: %d elements, at most %d allowed", ErrMalformed, n, limit)
	}
	// Divide before multiplying: n*size may overflow, len(rest)/size not.
	if n > uint64(len(rest)/size) || uint64(len(rest)) != n*uint64(size) {
		return 0, nil, fmt.Errorf("%w: %d elements of %d bytes in %d bytes", ErrMalformed, n, size, len(rest))
	}
	return int(n), rest, nil
}

// readUvarint reads an unsigned varint in its shortest form.
func readUvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad varint", ErrMalformed)
	}
	if n != uvarintLen(v) {
		return 0, nil, fmt.Errorf("%w: varint %d in %d bytes, not the shortest form", ErrMalformed, v, n)
	}
	return v, b[n:], nil
}

// uvarintLen returns the encoded length of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Encoded sizes, for Stats: what the round's messages weigh in these
// formats, whatever the transport adds.

func nodesRequestLen(level int, idx []int) int {
	return tagLen + shapeLen + uvarintLen(uint64(level)) + indexesLen(idx)
}

func bucketsRequestLen(buckets []int) int { return tagLen + shapeLen + indexesLen(buckets) }

func digestsLen(n int) int { return tagLen + uvarintLen(uint64(n)) + n*DigestLen }

func entriesLen(n int) int { return tagLen + uvarintLen(uint64(n)) + n*EntryLen }

func indexesLen(idx []int) int {
	n := uvarintLen(uint64(len(idx)))
	prev := 0
	for i, v := range idx {
		if i == 0 {
			n += uvarintLen(uint64(v))
		} else {
			n += uvarintLen(uint64(v - prev))
		}
		prev = v
	}
	return n
}
