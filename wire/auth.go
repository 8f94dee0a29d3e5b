package wire

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
)

// Connection authentication (docs/design.md, Wire: Security).
//
// A dialer proves it knows a key by sending, on the connection's first
// stream (type streamTypeHello), its node id and an HMAC-SHA256 over a TLS
// exporter value of this very connection; the listener checks it and
// answers with its own id and MAC under a second exporter label. Binding
// the MAC to the TLS session means a proof cannot be relayed to another
// connection; one label per direction means a listener without the key
// cannot echo the dialer's proof back. The node id is inside the MAC, so a
// peer cannot claim another node's id.
//
// Peers always say hello (the listener learns who dialed it), keyed with
// the peer key derived from the cluster secret, or with the empty key when
// there is no secret (loopback or --insecure clusters: the hello then only
// names the peer). Clients say hello only when they have a token; a node
// with a cluster secret refuses client connections that do not.

// streamTypeHello is the first byte of the authentication stream.
const streamTypeHello byte = 'A'

// Authentication parameters.
const (
	// macLen is the length of an HMAC-SHA256.
	macLen = sha256.Size
	// helloLen is a hello message: 8-byte node id, then the MAC.
	helloLen = 8 + macLen
	// helloTimeout bounds the whole exchange on both sides. It starts after
	// the QUIC handshake, so one round trip normally ends it.
	helloTimeout = handshakeIdleTimeout
	// exporterLen is the length of the TLS exporter value MACed.
	exporterLen = 32
	// tokenLen is the length of a client token, in bytes (hex doubles it).
	tokenLen = 32
)

// Exporter labels (RFC 8446 7.5): one per direction and per protocol.
const (
	labelPeerDialer     = "EXPORTER-skuld-peer-dialer"
	labelPeerListener   = "EXPORTER-skuld-peer-listener"
	labelClientDialer   = "EXPORTER-skuld-client-dialer"
	labelClientListener = "EXPORTER-skuld-client-listener"
)

// Key-derivation labels for DeriveKeys.
const (
	derivePeer   = "skuld peer key v1"
	deriveClient = "skuld client token v1"
)

// appErrAuth closes a connection whose authentication failed.
const appErrAuth quic.ApplicationErrorCode = 2

// ErrAuth is wrapped by errors of a failed authentication.
var ErrAuth = errors.New("authentication failed")

// Keys are what a node proves and checks. A nil field means "no key": for
// PeerKey, peers are named but not authenticated; for ClientToken,
// clients are not asked for a token.
type Keys struct {
	// PeerKey is the MAC key peers prove to each other.
	PeerKey []byte
	// ClientToken is the token clients prove (the bytes, not the hex).
	ClientToken []byte
}

// DeriveKeys derives the peer key and the client token from a cluster
// secret. Different derivations keep a client token from being usable as
// a peer key: a leaked client token lets its holder call the client API,
// never join the cluster.
func DeriveKeys(secret []byte) (Keys, error) {
	if len(secret) < MinSecretLen {
		return Keys{}, fmt.Errorf("wire: cluster secret is %d bytes; at least %d are needed", len(secret), MinSecretLen)
	}
	return Keys{PeerKey: derive(secret, derivePeer), ClientToken: derive(secret, deriveClient)[:tokenLen]}, nil
}

// MinSecretLen is the shortest cluster secret accepted (128 bits).
const MinSecretLen = 16

// FormatToken renders a client token for --token and SKULD_TOKEN: the
// cluster token as hex, a credential's token as "skuld_ID_SECRET".
func FormatToken(tok []byte) string {
	if _, ok := CredentialID(tok); ok {
		return formatCredential(tok)
	}
	return hex.EncodeToString(tok)
}

// ParseToken parses what FormatToken rendered.
func ParseToken(s string) ([]byte, error) {
	if strings.HasPrefix(s, credTokenPrefix) {
		return parseCredential(s)
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != tokenLen {
		return nil, fmt.Errorf("wire: a token is %d hex characters (the cluster's) or %s... (a credential's)", 2*tokenLen, credTokenPrefix)
	}
	return b, nil
}

func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// proof computes the MAC a side sends: over the exporter value of the
// connection under label, and the sender's node id.
func proof(qc *quic.Conn, key []byte, label string, id uint64) ([]byte, error) {
	state := qc.ConnectionState()
	tlsState := state.TLS
	ekm, err := tlsState.ExportKeyingMaterial(label, nil, exporterLen)
	if err != nil {
		return nil, fmt.Errorf("wire: tls exporter: %w", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write(ekm)
	m.Write(binary.BigEndian.AppendUint64(nil, id))
	return m.Sum(nil), nil
}

func encodeHello(id uint64, mac []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, helloLen), id), mac...)
}

func decodeHello(b []byte) (uint64, []byte) {
	return binary.BigEndian.Uint64(b[:8]), b[8:]
}

// labels returns the exporter labels of a protocol.
func labels(alpn string) (dialer, listener string) {
	if _, peer := PeerVersion(alpn); peer {
		return labelPeerDialer, labelPeerListener
	}
	return labelClientDialer, labelClientListener
}

// dialHello runs the dialer's side of the exchange on qc: it proves key
// with id and checks the listener's proof. It returns the listener's id.
func dialHello(ctx context.Context, qc *quic.Conn, key []byte, id uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	alpn := qc.ConnectionState().TLS.NegotiatedProtocol
	dl, ll := labels(alpn)
	var mine, replyKey []byte
	var err error
	if _, cred := CredentialID(key); cred && alpn == ALPNClient {
		// A credential: its id and the SCRAM proof; the node answers
		// under the server key.
		id, mine, err = credentialProof(qc, key, dl)
		_, keys := credentialKeys(key)
		replyKey = keys.Server[:]
	} else {
		mine, err = proof(qc, key, dl, id)
		replyKey = key
	}
	if err != nil {
		return 0, err
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return 0, fmt.Errorf("wire: open hello stream: %w", err)
	}
	defer str.CancelRead(streamErrNone)
	if deadline, ok := ctx.Deadline(); ok {
		_ = str.SetDeadline(deadline)
	}
	msg := append([]byte{streamTypeHello}, encodeHello(id, mine)...)
	if _, err := str.Write(msg); err != nil {
		return 0, fmt.Errorf("wire: send hello: %w", err)
	}
	_ = str.Close()
	var resp [helloLen]byte
	if _, err := io.ReadFull(str, resp[:]); err != nil {
		// The listener closes the connection with appErrAuth when it
		// refuses us; the stream read may see that close, or the
		// connection's context may carry it.
		var ae *quic.ApplicationError
		for _, e := range []error{err, context.Cause(qc.Context())} {
			switch {
			case e == nil || !errors.As(e, &ae):
			case ae.ErrorCode == appErrAuth:
				return 0, fmt.Errorf("wire: hello refused: %w (%w)", e, ErrAuth)
			case ae.ErrorCode == appErrNotYet:
				return 0, fmt.Errorf("wire: hello put off: %w (%w)", e, ErrUnavailable)
			case ae.ErrorCode == appErrVersion:
				return 0, fmt.Errorf("wire: refused by the peer: %s (%w)", ae.ErrorMessage, ErrPeerRefused)
			}
		}
		return 0, fmt.Errorf("wire: read hello reply: %w", err)
	}
	peerID, theirs := decodeHello(resp[:])
	want, err := proof(qc, replyKey, ll, peerID)
	if err != nil {
		return 0, err
	}
	if !hmac.Equal(theirs, want) {
		return 0, fmt.Errorf("wire: the node does not prove the same cluster secret: %w", ErrAuth)
	}
	return peerID, nil
}

// acceptHello runs the listener's side on str (the type byte already
// read): it checks the dialer's proof under key and answers with the
// listener's own. It returns the dialer's id. On a client connection
// (creds non-nil) a dialer id other than 0 names a credential, whose
// keys creds looks up: its proof is checked against them and the answer
// made under its server key. admit, if not nil, is asked once the dialer
// proved who it is and before the answer: its error is returned as is
// and no answer is sent.
func acceptHello(qc *quic.Conn, str *quic.Stream, key []byte, id uint64, creds func(uint64) (CredentialKeys, error), admit func(peerID uint64) error) (uint64, error) {
	_ = str.SetDeadline(time.Now().Add(helloTimeout))
	var msg [helloLen]byte
	if _, err := io.ReadFull(str, msg[:]); err != nil {
		return 0, fmt.Errorf("wire: read hello: %w", err)
	}
	alpn := qc.ConnectionState().TLS.NegotiatedProtocol
	dl, ll := labels(alpn)
	peerID, theirs := decodeHello(msg[:])
	if creds != nil && peerID != 0 {
		keys, err := creds(peerID)
		if errors.Is(err, ErrUnavailable) {
			return 0, fmt.Errorf("wire: hello names credential %016x: %w", peerID, err)
		}
		if err != nil {
			return 0, fmt.Errorf("wire: hello names credential %016x: %v: %w", peerID, err, ErrAuth)
		}
		good, err := checkCredentialProof(qc, peerID, theirs, keys, dl)
		if err != nil {
			return 0, err
		}
		if !good {
			return 0, fmt.Errorf("wire: hello does not prove credential %016x: %w", peerID, ErrAuth)
		}
		key = keys.Server[:]
	} else {
		want, err := proof(qc, key, dl, peerID)
		if err != nil {
			return 0, err
		}
		if !hmac.Equal(theirs, want) {
			return 0, fmt.Errorf("wire: hello from node %016x does not prove the cluster secret: %w", peerID, ErrAuth)
		}
	}
	if admit != nil {
		if err := admit(peerID); err != nil {
			return peerID, err
		}
	}
	mine, err := proof(qc, key, ll, id)
	if err != nil {
		return 0, err
	}
	if _, err := str.Write(encodeHello(id, mine)); err != nil {
		return 0, fmt.Errorf("wire: send hello reply: %w", err)
	}
	_ = str.Close()
	return peerID, nil
}
