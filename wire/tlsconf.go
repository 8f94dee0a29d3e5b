package wire

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	"github.com/quic-go/quic-go"
)

// ALPN protocol names. A connection negotiates exactly one; the server
// offers both, a client offers ALPNClient and a peer (a later issue) offers
// ALPNPeer.
const (
	ALPNClient = "skuld-client/1"
	ALPNPeer   = "skuld-peer/1"
)

// Self-signed certificate parameters.
const (
	// certCommonName names the certificate; nothing verifies it yet.
	certCommonName = "skuldd"
	// certSerialBits is the size of the random serial number (RFC 5280
	// allows up to 20 octets; 128 bits is unique in practice).
	certSerialBits = 128
	// certBackdate tolerates peers whose clocks run behind ours.
	certBackdate = time.Hour
	// certLifetime is how long a generated certificate is valid. A node
	// makes a new one at each start, so this only has to outlast an uptime.
	certLifetime = 10 * 365 * 24 * time.Hour
)

// SelfSignedCert makes an ed25519 self-signed certificate with a fresh key.
//
// Node identity (a certificate bound to the cluster secret and verified by
// peers) comes with the cluster work; for now clients do not verify the
// server, which is why the node binds loopback only unless --insecure.
func SelfSignedCert() (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: generate ed25519 key: %w", err)
	}
	serial, err := certSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	// Wall-clock time is right here (validity is compared with the peer's
	// wall clock); this does not go through clock.Clock because the value
	// has no effect on skuldd's own logic.
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: certCommonName},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: parse certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}, nil
}

// certSerial draws a certificate's random serial number.
func certSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), certSerialBits))
	if err != nil {
		return nil, fmt.Errorf("wire: certificate serial: %w", err)
	}
	return serial, nil
}

// ServerTLS returns the server's TLS configuration: TLS 1.3 (QUIC requires
// it), cert as the only certificate, the client and peer protocols offered.
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   append([]string{ALPNClient}, peerALPNs()...),
	}
}

// ClientTLS returns the default client TLS configuration: TLS 1.3 and ALPN
// ALPNClient.
func ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Nodes present fresh self-signed certificates (SelfSignedCert) and
		// there is no CA or pinned identity yet, so there is nothing to
		// verify against. The connection is still encrypted; it is not
		// authenticated, which is why nodes listen on loopback only unless
		// told otherwise. Node identity replaces this with
		// VerifyPeerCertificate.
		InsecureSkipVerify: true,
		NextProtos:         []string{ALPNClient},
	}
}

// QUIC settings, shared by the server and the client.
const (
	// handshakeIdleTimeout bounds a handshake (and so a Dial to a dead
	// address: QUIC ignores ICMP, so such a dial waits this long).
	handshakeIdleTimeout = 5 * time.Second
	// maxIdleTimeout closes a connection after this long without any
	// packet from the peer; keep-alives prevent it on a healthy link.
	maxIdleTimeout = 30 * time.Second
	// keepAlivePeriod is how often an otherwise idle connection sends a
	// packet, well inside maxIdleTimeout.
	keepAlivePeriod = 10 * time.Second
	// maxIncomingStreams bounds the concurrent bidirectional streams a peer
	// may open (quic-go's default of 100 is too few for peers).
	maxIncomingStreams = 1024
	// maxIncomingUniStreams bounds concurrent unidirectional streams.
	maxIncomingUniStreams = 1024
	// initialStreamReceiveWindow is the starting per-stream flow-control
	// window; auto-tuning grows it up to maxStreamReceiveWindow when the
	// reader keeps up.
	initialStreamReceiveWindow = 512 << 10
	// maxStreamReceiveWindow lets one stream carry a DefaultMaxFrame frame
	// in one window.
	maxStreamReceiveWindow = 16 << 20
	// initialConnectionReceiveWindow is the starting connection-wide
	// window.
	initialConnectionReceiveWindow = 1 << 20
	// maxConnectionReceiveWindow bounds the bytes buffered for one
	// connection: a few large frames in flight on several streams at once.
	maxConnectionReceiveWindow = 64 << 20
)

// quicConfig returns the QUIC configuration, built explicitly rather than
// relying on quic-go's defaults.
func quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           handshakeIdleTimeout,
		MaxIdleTimeout:                 maxIdleTimeout,
		KeepAlivePeriod:                keepAlivePeriod,
		MaxIncomingStreams:             maxIncomingStreams,
		MaxIncomingUniStreams:          maxIncomingUniStreams,
		InitialStreamReceiveWindow:     initialStreamReceiveWindow,
		MaxStreamReceiveWindow:         maxStreamReceiveWindow,
		InitialConnectionReceiveWindow: initialConnectionReceiveWindow,
		MaxConnectionReceiveWindow:     maxConnectionReceiveWindow,
		// Completed streams free their slot without an explicit release.
		RequireStreamCreditRelease: false,
		// Datagrams are for the peer transport (memberlist); the client
		// protocol uses streams only.
		EnableDatagrams: false,
		Allow0RTT:       false,
	}
}
