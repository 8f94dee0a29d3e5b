package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestCredentialHello: a client proves a credential the node holds, and
// handlers see its id; the cluster token still opens a connection (id
// 0). A wrong secret under a real id, an id the node does not hold (a
// revoked credential), and a node that holds other keys for the id (one
// posing as the cluster) are each refused, the last by the client.
func TestCredentialHello(t *testing.T) {
	keys, err := DeriveKeys([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	tok, id, ckeys, err := NewCredentialToken()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := CredentialID(tok); !ok || got != id || id == 0 {
		t.Fatalf("CredentialID: %d, %v; want %d", got, ok, id)
	}
	var mu sync.Mutex
	held := map[uint64]CredentialKeys{id: ckeys}
	starting := false
	lookup := func(id uint64) (CredentialKeys, error) {
		mu.Lock()
		defer mu.Unlock()
		if starting {
			return CredentialKeys{}, fmt.Errorf("%w: starting", ErrUnavailable)
		}
		k, ok := held[id]
		if !ok {
			return k, errors.New("no such credential")
		}
		return k, nil
	}
	whoami := HandlerFunc(func(_ context.Context, req *Request, w ResponseWriter) { _ = w.Reply(req.PeerID) })
	_, addr := startServer(t, whoami, func(c *ServerConfig) { c.Keys, c.Credentials = keys, lookup })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	who := func(tok []byte) (uint64, error) {
		c, err := Dial(ctx, addr, ClientConfig{MaxFrame: testMaxFrame, Token: tok})
		if err != nil {
			return 0, err
		}
		defer c.Close()
		var got uint64
		err = c.Call(ctx, OpPing, nil, &got)
		return got, err
	}
	if got, err := who(tok); err != nil || got != id {
		t.Fatalf("with the credential: %d, %v; want %d", got, err, id)
	}
	if got, err := who(keys.ClientToken); err != nil || got != 0 {
		t.Fatalf("with the cluster token: %d, %v; want 0", got, err)
	}
	wrong := append([]byte(nil), tok...)
	wrong[len(wrong)-1] ^= 1
	if _, err := who(wrong); !errors.Is(err, ErrAuth) {
		t.Fatalf("a wrong secret: %v; want ErrAuth", err)
	}
	other, _, _, err := NewCredentialToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := who(other); !errors.Is(err, ErrAuth) {
		t.Fatalf("an id the node does not hold: %v; want ErrAuth", err)
	}
	// A node that cannot tell yet (starting) puts the client off: it may
	// retry, elsewhere or later, and is not told its token is wrong.
	mu.Lock()
	starting = true
	mu.Unlock()
	if _, err := who(tok); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAuth) {
		t.Fatalf("a starting node: %v; want ErrUnavailable, not ErrAuth", err)
	}
	mu.Lock()
	starting = false
	mu.Unlock()
	// A node that holds other keys under the id cannot answer as the
	// cluster: the client refuses it even though the node would take the
	// proof (its stored key is right, its server key is not).
	mu.Lock()
	forged := ckeys
	forged.Server[0] ^= 1
	held[id] = forged
	mu.Unlock()
	if _, err := who(tok); !errors.Is(err, ErrAuth) {
		t.Fatalf("a node with a wrong server key: %v; want ErrAuth", err)
	}
	// A node without credentials refuses every one.
	_, plain := startServer(t, whoami, func(c *ServerConfig) { c.Keys = keys })
	if c, err := Dial(ctx, plain, ClientConfig{MaxFrame: testMaxFrame, Token: tok}); err == nil {
		c.Close()
		t.Fatal("a node without credentials took one")
	}
}

// TestCredentialToken: a credential token's text round-trips, its check
// takes its keys only, and malformed ones are refused.
func TestCredentialToken(t *testing.T) {
	tok, id, keys, err := NewCredentialToken()
	if err != nil {
		t.Fatal(err)
	}
	s := FormatToken(tok)
	if !strings.HasPrefix(s, "skuld_") || len(s) != len("skuld_")+16+1+64 {
		t.Fatalf("FormatToken: %q", s)
	}
	back, err := ParseToken(s)
	if err != nil || string(back) != string(tok) {
		t.Fatalf("round trip: %x, %v", back, err)
	}
	if got, _ := CredentialID(back); got != id {
		t.Fatalf("id %d; want %d", got, id)
	}
	if !CheckCredential(tok, keys) {
		t.Fatal("CheckCredential refused the token's own keys")
	}
	other, _, okeys, _ := NewCredentialToken()
	if CheckCredential(other, keys) || CheckCredential(tok, okeys) {
		t.Fatal("CheckCredential took another credential's keys")
	}
	if CheckCredential(tok[:32], keys) {
		t.Fatal("CheckCredential took the cluster token's length")
	}
	for _, bad := range []string{"skuld_", "skuld_zz_" + strings.Repeat("0", 64), s[:len(s)-1], "skuld_" + strings.Repeat("0", 16) + "-" + strings.Repeat("0", 64)} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}
