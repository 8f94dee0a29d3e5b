package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/quic-go/quic-go"
)

// Client credentials (node/access holds them; this file is their proof).
//
// A credential's token is its id (8 bytes) and a random secret (32),
// written "skuld_<16 hex>_<64 hex>"; the cluster token (DeriveKeys) is 32
// bytes, 64 hex, and a token's length says which it is. From the secret
// come three keys: the client key its holder proves, the stored key (the
// client key's SHA-256), and the server key. The nodes keep only the
// stored and server keys, so whoever reads the metadata group cannot
// prove the credential.
//
// Over QUIC the holder sends, in its hello, the credential's id and the
// client key XORed with HMAC(stored key, TLS exporter of this connection,
// id) (the SCRAM construction, bound to the connection): the node
// computes the same HMAC from the stored key, recovers the client key and
// checks that its hash is the stored key. The node answers with
// HMAC(server key, exporter, node id), which the holder checks: a node
// that does not know the credential cannot pose as the cluster. Over
// HTTPS the holder sends the token itself (the TLS connection protects
// it) and the node checks it the same way (CheckCredential).

const (
	// credSecretLen is a credential token's secret part.
	credSecretLen = 32
	// credTokenLen is a credential token: id, then secret.
	credTokenLen = 8 + credSecretLen
	// credTokenPrefix starts a credential token's text form.
	credTokenPrefix = "skuld_"
)

// Key-derivation labels of a credential's keys.
const (
	deriveCredClient = "skuld credential client key v1"
	deriveCredServer = "skuld credential server key v1"
)

// CredentialKeys are what a node keeps of a credential.
type CredentialKeys struct {
	Stored, Server [sha256.Size]byte
}

// NewCredentialToken returns a fresh credential token (its id never 0),
// and its keys.
func NewCredentialToken() (tok []byte, id uint64, keys CredentialKeys, err error) {
	tok = make([]byte, credTokenLen)
	for id == 0 {
		if _, err := rand.Read(tok); err != nil {
			return nil, 0, CredentialKeys{}, fmt.Errorf("wire: credential token: %w", err)
		}
		id = binary.BigEndian.Uint64(tok)
	}
	_, keys = credentialKeys(tok)
	return tok, id, keys, nil
}

// CredentialID returns the id of a credential token; ok is false for the
// cluster token (or anything else).
func CredentialID(tok []byte) (id uint64, ok bool) {
	if len(tok) != credTokenLen {
		return 0, false
	}
	return binary.BigEndian.Uint64(tok), true
}

// credentialKeys derives a credential token's client key and the keys a
// node keeps.
func credentialKeys(tok []byte) (client [sha256.Size]byte, keys CredentialKeys) {
	secret := tok[8:]
	copy(client[:], derive(secret, deriveCredClient))
	keys.Stored = sha256.Sum256(client[:])
	copy(keys.Server[:], derive(secret, deriveCredServer))
	return client, keys
}

// CheckCredential reports whether tok is a credential token whose keys
// are keys: its holder's proof over HTTPS.
func CheckCredential(tok []byte, keys CredentialKeys) bool {
	if _, ok := CredentialID(tok); !ok {
		return false
	}
	_, got := credentialKeys(tok)
	return subtle.ConstantTimeCompare(got.Stored[:], keys.Stored[:]) == 1
}

// credentialProof is what a credential's holder sends in its hello: its
// client key XORed with HMAC(stored key, exporter, id).
func credentialProof(qc *quic.Conn, tok []byte, label string) (id uint64, msg []byte, err error) {
	id, _ = CredentialID(tok)
	client, keys := credentialKeys(tok)
	sig, err := proof(qc, keys.Stored[:], label, id)
	if err != nil {
		return 0, nil, err
	}
	for i := range sig {
		sig[i] ^= client[i]
	}
	return id, sig, nil
}

// checkCredentialProof checks a hello's proof of credential id against
// its keys.
func checkCredentialProof(qc *quic.Conn, id uint64, theirs []byte, keys CredentialKeys, label string) (bool, error) {
	sig, err := proof(qc, keys.Stored[:], label, id)
	if err != nil {
		return false, err
	}
	for i := range sig {
		sig[i] ^= theirs[i]
	}
	stored := sha256.Sum256(sig)
	return hmac.Equal(stored[:], keys.Stored[:]), nil
}

// formatCredential renders a credential token.
func formatCredential(tok []byte) string {
	return credTokenPrefix + hex.EncodeToString(tok[:8]) + "_" + hex.EncodeToString(tok[8:])
}

// parseCredential parses what formatCredential rendered.
func parseCredential(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, credTokenPrefix)
	idHex, secretHex, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || len(idHex) != 16 || len(secretHex) != 2*credSecretLen {
		return nil, fmt.Errorf("wire: a credential token is %s, 16 hex characters, _ and %d hex characters", credTokenPrefix, 2*credSecretLen)
	}
	id, err1 := hex.DecodeString(idHex)
	secret, err2 := hex.DecodeString(secretHex)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("wire: a credential token's id and secret are hex")
	}
	return append(id, secret...), nil
}
