package wire

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerHandler echoes, and records the peer ids and remote addresses it saw.
type peerHandler struct {
	mu      sync.Mutex
	ids     []uint64
	remotes []string
}

func (h *peerHandler) Serve(ctx context.Context, req *Request, w ResponseWriter) {
	h.mu.Lock()
	h.ids = append(h.ids, req.PeerID)
	h.remotes = append(h.remotes, req.Remote.String())
	h.mu.Unlock()
	_ = w.Reply(req.Body)
}

// startPeer runs a server that serves peers with id and keys, and echoes
// raw streams (replying with the kind byte first).
func startPeer(t *testing.T, id uint64, keys Keys) (*Server, string, *peerHandler) {
	t.Helper()
	ph := &peerHandler{}
	srv, addr := startServer(t, newTestHandler(), func(c *ServerConfig) {
		c.NodeID = id
		c.Keys = keys
		c.PeerHandler = ph
		c.RawHandler = func(ctx context.Context, rs RawStream) {
			defer rs.Close()
			b, err := io.ReadAll(io.LimitReader(rs, 64))
			if err != nil {
				return
			}
			_, _ = rs.Write(append([]byte{rs.Kind, byte(rs.PeerID)}, b...))
		}
	})
	return srv, addr, ph
}

// dialPeer dials from srv to addr, retrying while srv has not started
// serving yet (startServer runs Serve on a goroutine).
func dialPeer(t *testing.T, srv *Server, addr string) (*Conn, error) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		c, err := srv.DialPeer(ctx, addr, ClientConfig{MaxFrame: testMaxFrame, DialTimeout: 3 * time.Second})
		cancel()
		if err == nil || time.Now().After(deadline) || !isNotServing(err) {
			return c, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isNotServing(err error) bool { return errors.Is(err, errNotServing) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestPeerHelloAndCall(t *testing.T) {
	keys, err := DeriveKeys([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := startPeer(t, 0xa, keys)
	_, bAddr, bh := startPeer(t, 0xb, keys)
	c, err := dialPeer(t, a, bAddr)
	if err != nil {
		t.Fatalf("DialPeer: %v", err)
	}
	defer c.Close()
	if c.PeerID() != 0xb {
		t.Fatalf("PeerID = %x, want b", c.PeerID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var got string
	if err := c.Call(ctx, opEcho, "hi", &got); err != nil || got != "hi" {
		t.Fatalf("Call = %q, %v", got, err)
	}
	bh.mu.Lock()
	ids, remotes := bh.ids, bh.remotes
	bh.mu.Unlock()
	if len(ids) != 1 || ids[0] != 0xa {
		t.Fatalf("peer handler saw ids %v, want [a]", ids)
	}
	// The dial went out from a's listening socket.
	a.mu.Lock()
	aAddr := a.mu.tr.Conn.LocalAddr().String()
	a.mu.Unlock()
	if remotes[0] != aAddr {
		t.Fatalf("remote = %s, want a's listen address %s", remotes[0], aAddr)
	}

	raw, err := c.OpenRaw(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = raw.(*streamConn).Stream.Close()
	}
	b, err := io.ReadAll(raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "\x07\x0aping" {
		t.Fatalf("raw echo = %q", b)
	}
}

func TestPeerAuthRefusals(t *testing.T) {
	good, err := DeriveKeys([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := DeriveKeys([]byte("another-secret-0123456"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		dialer, node Keys
		ok           bool
	}{
		{"same secret", good, good, true},
		{"no secret anywhere", Keys{}, Keys{}, true},
		{"wrong secret", bad, good, false},
		{"dialer has none", Keys{}, good, false},
		{"node has none", good, Keys{}, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, _, _ := startPeer(t, uint64(100+2*i), tc.dialer)
			_, bAddr, bh := startPeer(t, uint64(101+2*i), tc.node)
			c, err := dialPeer(t, a, bAddr)
			if tc.ok {
				if err != nil {
					t.Fatalf("DialPeer: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("DialPeer succeeded; want refusal")
			}
			if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrUnavailable) && !contains(err.Error(), "auth") {
				t.Fatalf("DialPeer error %v does not say authentication", err)
			}
			bh.mu.Lock()
			n := len(bh.ids)
			bh.mu.Unlock()
			if n != 0 {
				t.Fatalf("refused peer reached the handler %d times", n)
			}
		})
	}
}

func TestClientToken(t *testing.T) {
	keys, err := DeriveKeys([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, newTestHandler(), func(c *ServerConfig) { c.Keys = keys })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	c, err := Dial(ctx, addr, ClientConfig{MaxFrame: testMaxFrame, Token: keys.ClientToken})
	if err != nil {
		t.Fatalf("Dial with token: %v", err)
	}
	var got string
	if err := c.Call(ctx, opEcho, "x", &got); err != nil || got != "x" {
		t.Fatalf("Call with token = %q, %v", got, err)
	}
	c.Close()

	// The peer key is not a client token.
	if c, err := Dial(ctx, addr, ClientConfig{MaxFrame: testMaxFrame, Token: keys.PeerKey[:tokenLen]}); err == nil {
		c.Close()
		t.Fatal("Dial with the peer key as token succeeded")
	}
	// No token: the first call fails, quickly (not after a timeout).
	start := time.Now()
	c, err = Dial(ctx, addr, ClientConfig{MaxFrame: testMaxFrame})
	if err == nil {
		err = c.Call(ctx, opEcho, "x", &got)
		c.Close()
	}
	if err == nil {
		t.Fatal("a client without token was served")
	}
	if d := time.Since(start); d > helloTimeout {
		t.Fatalf("refusal took %v", d)
	}
	// A token the node does not need: the node cannot prove the secret.
	_, plain := startServer(t, newTestHandler(), nil)
	if c, err := Dial(ctx, plain, ClientConfig{MaxFrame: testMaxFrame, Token: keys.ClientToken}); err == nil {
		c.Close()
		t.Fatal("a node without a secret passed a token client's check")
	} else if !errors.Is(err, ErrAuth) {
		t.Fatalf("error %v, want ErrAuth", err)
	}
}

func TestTokenFormat(t *testing.T) {
	keys, err := DeriveKeys([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseToken(FormatToken(keys.ClientToken))
	if err != nil || string(tok) != string(keys.ClientToken) {
		t.Fatalf("round trip: %x, %v", tok, err)
	}
	for _, bad := range []string{"", "zz", FormatToken(keys.ClientToken)[2:]} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
	if _, err := DeriveKeys([]byte("short")); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
}
