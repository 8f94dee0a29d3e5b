package member

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// State is a peer's membership state as this node sees it.
type State uint8

const (
	// Alive: the peer answers probes, or has not been caught failing yet.
	Alive State = iota + 1
	// Suspect: the peer missed probes and may be declared dead. Not
	// reported by this version (memberlist v0.7.0 does not tell its
	// delegates about suspicion); callers should treat it like Alive.
	Suspect
	// Dead: the peer stopped answering and did not announce a leave.
	Dead
	// Left: the peer announced that it was leaving, then went.
	Left
)

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	default:
		return fmt.Sprintf("state(%d)", uint8(s))
	}
}

// Peer is one node of the membership view.
type Peer struct {
	ID    uint64
	Addr  string // "ip:port" it listens at
	State State
	Meta  []byte // the caller's own copy; nil if the peer has none
}

// nodeName is the memberlist node name for id: 16 lowercase hex digits.
func nodeName(id uint64) string {
	return fmt.Sprintf("%016x", id)
}

// parseNodeName is the inverse of nodeName. It accepts exactly that form,
// so each ID has one name and names from elsewhere are refused.
func parseNodeName(name string) (uint64, error) {
	if len(name) != 16 {
		return 0, fmt.Errorf("node name %q is not 16 hex digits", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, fmt.Errorf("node name %q is not 16 lowercase hex digits", name)
		}
	}
	id, err := strconv.ParseUint(name, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("node name %q: %w", name, err)
	}
	if id == 0 {
		return 0, errors.New("node name is id 0")
	}
	return id, nil
}

// The metadata memberlist gossips for a node is an envelope around the
// caller's Meta:
//
//	byte 0: metaVersion
//	byte 1: flags (metaFlagLeaving; unknown bits are ignored)
//	rest:   the caller's Meta
//
// The leaving flag is how peers tell a graceful leave from a crash (see
// the package doc).
const (
	metaVersion     = 1
	metaHeaderLen   = 2
	metaFlagLeaving = 1 << 0

	// MaxMetaSize is the largest Config.Meta or SetMeta accepts:
	// memberlist's limit less this package's 2-byte envelope header.
	MaxMetaSize = memberlist.MetaMaxSize - metaHeaderLen
)

func encodeMeta(meta []byte, leaving bool) []byte {
	b := make([]byte, metaHeaderLen, metaHeaderLen+len(meta))
	b[0] = metaVersion
	if leaving {
		b[1] |= metaFlagLeaving
	}
	return append(b, meta...)
}

// decodeMeta returns a copy of the caller's Meta inside b (nil if empty)
// and the leaving flag.
func decodeMeta(b []byte) (meta []byte, leaving bool, err error) {
	if len(b) < metaHeaderLen {
		return nil, false, fmt.Errorf("node meta is %d bytes, shorter than its header", len(b))
	}
	if b[0] != metaVersion {
		return nil, false, fmt.Errorf("node meta version %d, want %d", b[0], metaVersion)
	}
	leaving = b[1]&metaFlagLeaving != 0
	return cloneMeta(b[metaHeaderLen:]), leaving, nil
}

// cloneMeta copies b, normalizing empty to nil.
func cloneMeta(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}
