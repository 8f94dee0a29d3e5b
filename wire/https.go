package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// HTTPS of a cluster with a secret.
//
// The HTTP port serves TLS whenever the node has a cluster secret. Unless
// the operator gives a certificate (--tls-cert, --tls-key), the node makes
// one at start, signed by a certificate authority that every holder of the
// secret derives alike: its key comes from the secret (DeriveHTTPS), so
// `skuldd ctl` checks a node's certificate against it with nothing more
// than the secret file, and `skuldd ctl tls-ca` prints it for curl, a
// browser or an HTTP client library. The server key is derived too, the
// same on every node, so one public-key pin (HTTPSIdentity.Pin, curl's
// --pinnedpubkey) names every node of the cluster.
//
// Deriving keys from the secret adds no secret to keep: whoever holds the
// secret can already act as any node of the cluster. A new secret makes a
// new authority.

// Key-derivation labels of the HTTPS keys (see derive).
const (
	deriveHTTPSCA     = "skuld https ca key v1"
	deriveHTTPSServer = "skuld https server key v1"
)

// HTTPS certificate parameters.
const (
	// httpsCAName is the authority's subject; a short hash of its key
	// follows, so that the authorities of two clusters read apart.
	httpsCAName = "skuldd cluster CA"
	// httpsCALifetimeYears is the authority's validity from
	// httpsCANotBefore: fixed, so that every derivation of it is the same
	// certificate but for its signature. It lives as long as the secret.
	httpsCALifetimeYears = 100
	// httpsServerName is the node certificate's subject.
	httpsServerName = "skuldd node"
)

// httpsCANotBefore is the authority's fixed start of validity.
var httpsCANotBefore = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// HTTPSIdentity is the HTTPS authority and server key of a cluster,
// derived from its secret.
type HTTPSIdentity struct {
	ca        *x509.Certificate
	caDER     []byte
	caKey     *ecdsa.PrivateKey
	serverKey *ecdsa.PrivateKey
}

// DeriveHTTPS derives the cluster's HTTPS authority and server key from
// its secret: the same for every caller with the same secret.
func DeriveHTTPS(secret []byte) (*HTTPSIdentity, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("wire: cluster secret is %d bytes; at least %d are needed", len(secret), MinSecretLen)
	}
	caKey, err := derivedP256(secret, deriveHTTPSCA)
	if err != nil {
		return nil, err
	}
	serverKey, err := derivedP256(secret, deriveHTTPSServer)
	if err != nil {
		return nil, err
	}
	pub, err := caKey.PublicKey.Bytes()
	if err != nil {
		return nil, fmt.Errorf("wire: https authority: %w", err)
	}
	spki := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		// The serial and the validity are fixed: every derivation is the
		// same certificate but for its (randomised) signature, which a
		// trust anchor's check does not read.
		SerialNumber:          new(big.Int).SetBytes(spki[:16]),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s %x", httpsCAName, spki[:4])},
		NotBefore:             httpsCANotBefore,
		NotAfter:              httpsCANotBefore.AddDate(httpsCALifetimeYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("wire: https authority: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("wire: https authority: %w", err)
	}
	return &HTTPSIdentity{ca: ca, caDER: der, caKey: caKey, serverKey: serverKey}, nil
}

// derivedP256 derives a P-256 private key from the secret under label:
// the first HMAC output (over label and a counter) that is a valid scalar.
// A 256-bit value falls outside [1, n-1] with probability below 2^-32, so
// the loop almost never runs twice; it is bounded all the same.
func derivedP256(secret []byte, label string) (*ecdsa.PrivateKey, error) {
	for i := range uint32(16) {
		d := derive(secret, string(binary.BigEndian.AppendUint32([]byte(label), i)))
		if k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d); err == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("wire: no https key derives from this secret")
}

// CAPEM returns the authority's certificate, PEM-encoded: what curl's
// --cacert, a browser's import and an HTTP client's root pool take.
func (h *HTTPSIdentity) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.caDER})
}

// Pool returns a certificate pool of the authority alone.
func (h *HTTPSIdentity) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(h.ca)
	return p
}

// Pin returns the SHA-256 of the server key's public key info, base64,
// in curl's --pinnedpubkey form ("sha256//..."): the same for every node
// whose certificate the node made.
func (h *HTTPSIdentity) Pin() (string, error) {
	spki, err := x509.MarshalPKIXPublicKey(&h.serverKey.PublicKey)
	if err != nil {
		return "", fmt.Errorf("wire: https pin: %w", err)
	}
	sum := sha256.Sum256(spki)
	return "sha256//" + base64.StdEncoding.EncodeToString(sum[:]), nil
}

// ClientTLS returns the TLS configuration of an HTTPS client of the
// cluster: the authority as the only root.
func (h *HTTPSIdentity) ClientTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: h.Pool()}
}

// ServerCert makes a node's HTTPS certificate for hosts (IP addresses or
// names), signed by the authority, with the derived server key, valid
// from now (less certBackdate) for certLifetime. A node makes it at each
// start, so it only has to outlast an uptime.
func (h *HTTPSIdentity) ServerCert(hosts []string, now time.Time) (tls.Certificate, error) {
	serial, err := certSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: httpsServerName},
		NotBefore:    now.Add(-certBackdate),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	seen := map[string]bool{}
	for _, host := range hosts {
		if host == "" || seen[host] {
			continue
		}
		seen[host] = true
		if ip, err := netip.ParseAddr(host); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.Unmap().AsSlice()))
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, h.ca, &h.serverKey.PublicKey, h.caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: https certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: https certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, h.caDER}, PrivateKey: h.serverKey, Leaf: leaf}, nil
}
