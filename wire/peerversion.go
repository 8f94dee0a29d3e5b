package wire

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/skuldd/skuldd/internal/version"
)

// The peer protocol's version is the highest cluster version a node's
// build supports (package internal/version), named in the connection's
// ALPN: "skuld-peer/V". A build offers every version it supports, the
// highest first, so two builds settle on the highest both speak, and a
// build from before versions, which offers only ALPNPeer
// ("skuld-peer/1"), settles on version.Base. Nothing else of the protocol
// differs between versions: frames carry their own envelope version
// (Version), and what a cluster version adds is refused by the nodes
// until the cluster runs it. The version only lets a node refuse a peer
// whose build is older than the cluster (ServerConfig.AdmitPeer), with
// a reason the older build prints, instead of a record it cannot decode.

// appErrVersion closes a peer connection the node refuses to admit (its
// build is too old for the cluster, or it was removed); the close's
// reason says why.
const appErrVersion quic.ApplicationErrorCode = 4

// ErrPeerRefused: a node refuses a peer (ServerConfig.AdmitPeer).
var ErrPeerRefused = errors.New("peer refused")

// peerALPN is the ALPN of peer protocol version v.
func peerALPN(v version.V) string {
	return "skuld-peer/" + strconv.FormatUint(uint64(v), 10)
}

// peerALPNs are the peer protocols this build offers, the highest first.
func peerALPNs() []string { return peerALPNsUpTo(version.Max) }

// peerALPNsUpTo are the peer protocols up to max (0: version.Max), the
// highest first.
func peerALPNsUpTo(max version.V) []string {
	if max == 0 || max > version.Max {
		max = version.Max
	}
	out := make([]string, 0, max)
	for v := max; v >= version.Base; v-- {
		out = append(out, peerALPN(v))
	}
	return out
}

// PeerVersion is the peer protocol version an ALPN names; ok is false
// for anything but a peer protocol.
func PeerVersion(alpn string) (v version.V, ok bool) {
	s, found := strings.CutPrefix(alpn, "skuld-peer/")
	if !found {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < uint64(version.Base) || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return version.V(n), true
}

// isPeerALPN reports whether alpn is one of this build's peer protocols.
func isPeerALPN(alpn string) bool {
	return slices.Contains(peerALPNs(), alpn)
}

// TooOldError is how a node refuses a peer whose build supports only
// versions below the cluster's.
type TooOldError struct {
	// Peer is the version the peer's build supports at most; Cluster
	// the cluster's.
	Peer, Cluster version.V
}

func (e *TooOldError) Error() string {
	return fmt.Sprintf("the cluster runs cluster version %d; the node's build supports at most %d: run a build that supports %d (a rollback past a finalized upgrade is not possible)",
		e.Cluster, e.Peer, e.Cluster)
}

func (e *TooOldError) Unwrap() error { return ErrPeerRefused }
