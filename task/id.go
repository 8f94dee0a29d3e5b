package task

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/skuldd/skuldd/clock"
)

// IDLen is the length of an ID in bytes: 64-bit ms time, 64-bit node id,
// 32-bit counter (a 160-bit flake id).
const IDLen = 20

// ID is a k-ordered flake id. IDs sort by creation time (ms), then by node,
// then by counter; the byte order is the sort order.
type ID [IDLen]byte

// String returns the id as 40 lowercase hex characters.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Compare orders ids bytewise, which is creation order.
func (id ID) Compare(o ID) int { return bytes.Compare(id[:], o[:]) }

// IsZero reports whether id is the zero id, which is never assigned.
func (id ID) IsZero() bool { return id == ID{} }

// Check rejects the zero id (ErrInvalid): no request may name it.
func (id ID) Check() error {
	if id.IsZero() {
		return fmt.Errorf("%w: the zero id is reserved", ErrInvalid)
	}
	return nil
}

// Millis returns the Unix millisecond time the id was created at.
func (id ID) Millis() int64 { return int64(binary.BigEndian.Uint64(id[0:8])) }

// Node returns the id of the node that created the id.
func (id ID) Node() uint64 { return binary.BigEndian.Uint64(id[8:16]) }

// MarshalText encodes the id as hex, for JSON.
func (id ID) MarshalText() ([]byte, error) {
	b := make([]byte, 2*IDLen)
	hex.Encode(b, id[:])
	return b, nil
}

// UnmarshalText parses 40 hex characters.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalBinary returns the 20 raw bytes; CBOR encodes ids this way.
func (id ID) MarshalBinary() ([]byte, error) { return id[:], nil }

// UnmarshalBinary takes exactly 20 bytes.
func (id *ID) UnmarshalBinary(b []byte) error {
	if len(b) != IDLen {
		return fmt.Errorf("%w: id must be %d bytes, got %d", ErrInvalid, IDLen, len(b))
	}
	copy(id[:], b)
	return nil
}

// ParseID parses 40 hex characters (either case) into an ID.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*IDLen {
		return id, fmt.Errorf("%w: malformed id %q: want %d hex characters", ErrInvalid, truncate(s, 64), 2*IDLen)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: malformed id %q: not hex", ErrInvalid, truncate(s, 64))
	}
	return id, id.Check()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// IDGen makes k-ordered ids for one node. Safe for concurrent use.
//
// Invariant: ids from one IDGen strictly increase, even if the wall clock
// steps back: the generator never reuses a millisecond below the last one it
// issued, and when the 32-bit counter of a millisecond runs out it borrows
// the next millisecond.
type IDGen struct {
	node  uint64
	clock clock.Clock

	mu      sync.Mutex
	lastMs  int64
	counter uint32
	// reserve, when set (Reserve), durably records a millisecond up to
	// which ids may have been issued; reserved is the last one recorded
	// and ahead how far past an id's millisecond a new record reaches.
	// INVARIANT: with reserve set, no id with a millisecond above
	// reserved is returned unless a record of it failed (and was
	// retried on the next id).
	reserve  func(ms int64) error
	reserved int64
	ahead    int64
}

// NewIDGen returns a generator for node, reading time from c.
func NewIDGen(node uint64, c clock.Clock) *IDGen { return &IDGen{node: node, clock: c} }

// Next returns a fresh id.
func (g *IDGen) Next() ID {
	now := clock.UnixMilli(g.clock)
	g.mu.Lock()
	switch {
	case now > g.lastMs:
		g.lastMs, g.counter = now, 0
	case g.counter == ^uint32(0):
		g.lastMs, g.counter = g.lastMs+1, 0
	default:
		g.counter++
	}
	ms, ctr := g.lastMs, g.counter
	if g.reserve != nil && ms > g.reserved {
		// Record before issuing: a restart reads the record, so even a
		// clock set back never reissues an id. Once per ahead ms; a
		// failure (the disk) is retried on the next id.
		if err := g.reserve(ms + g.ahead); err == nil {
			g.reserved = ms + g.ahead
		}
	}
	g.mu.Unlock()
	return MakeID(ms, g.node, ctr)
}

// Reserve makes g record, durably through record, how far its ids may
// reach before it issues them: each record covers ahead ms past the id
// that needed it. A node restarts its generator with After(the recorded
// millisecond), so it never issues an id twice, whatever its clock did;
// ids issued into partitions the node does not hold are covered too.
func (g *IDGen) Reserve(record func(ms int64) error, ahead int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reserve, g.ahead = record, max(ahead, 1)
}

// After makes every later id from g sort after id. A node calls it at
// start with the highest id it issued before: its clock may have been set
// back across the restart, and an id issued twice would overwrite the
// task that holds it.
func (g *IDGen) After(id ID) {
	ms, ctr := id.Millis(), binary.BigEndian.Uint32(id[16:20])
	g.mu.Lock()
	defer g.mu.Unlock()
	if ms > g.lastMs || ms == g.lastMs && ctr > g.counter {
		g.lastMs, g.counter = ms, ctr
	}
}

// MakeID assembles an id from its parts.
func MakeID(ms int64, node uint64, counter uint32) ID {
	var id ID
	binary.BigEndian.PutUint64(id[0:8], uint64(ms))
	binary.BigEndian.PutUint64(id[8:16], node)
	binary.BigEndian.PutUint32(id[16:20], counter)
	return id
}
