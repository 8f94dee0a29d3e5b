package wire

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/version"
)

func TestPeerALPN(t *testing.T) {
	if peerALPN(version.Base) != ALPNPeer {
		t.Fatalf("Base's peer protocol %q is not the one builds before versions offer (%q)", peerALPN(version.Base), ALPNPeer)
	}
	if got := peerALPNs(); len(got) != int(version.Max) || got[0] != peerALPN(version.Max) || got[len(got)-1] != ALPNPeer {
		t.Fatalf("offered %q", got)
	}
	for _, c := range []struct {
		alpn string
		v    version.V
		ok   bool
	}{
		{"skuld-peer/1", 1, true},
		{"skuld-peer/2", 2, true},
		{"skuld-peer/17", 17, true},
		{"skuld-peer/0", 0, false},
		{"skuld-peer/02", 0, false},
		{"skuld-peer/", 0, false},
		{"skuld-peer/+2", 0, false},
		{"skuld-client/1", 0, false},
		{"h3", 0, false},
	} {
		if v, ok := PeerVersion(c.alpn); v != c.v || ok != c.ok {
			t.Errorf("PeerVersion(%q) = %d, %v; want %d, %v", c.alpn, v, ok, c.v, c.ok)
		}
	}
}

// TestPeerVersionRefused: in a cluster at version 2 a node of a build
// that supports only Base (it offers ALPNPeer alone) is refused when it
// dials, with the reason (its build prints it), and when it is dialed;
// two current builds settle on the highest version.
func TestPeerVersionRefused(t *testing.T) {
	keys, err := DeriveKeys([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	atTwo := func(c *ServerConfig) {
		c.AdmitPeer = func(_ uint64, v version.V) error {
			if v < 2 {
				return &TooOldError{Peer: v, Cluster: 2}
			}
			return nil
		}
	}
	startAt := func(id uint64, mod func(*ServerConfig)) (*Server, string) {
		ph := &peerHandler{}
		return startServer(t, newTestHandler(), func(c *ServerConfig) {
			c.NodeID, c.Keys, c.PeerHandler = id, keys, ph
			if mod != nil {
				mod(c)
			}
		})
	}
	dial := func(from *Server, addr string, protos []string) (*Conn, error) {
		deadline := time.Now().Add(testTimeout)
		for {
			cfg := ClientConfig{MaxFrame: testMaxFrame, DialTimeout: 3 * time.Second}
			if protos != nil {
				cfg.TLS = ClientTLS()
				cfg.TLS.NextProtos = protos
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			c, err := from.DialPeer(ctx, addr, cfg)
			cancel()
			if err == nil || time.Now().After(deadline) || !isNotServing(err) {
				return c, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	newer, newerAddr := startAt(0xa, atTwo)
	other, _ := startAt(0xb, atTwo)
	// A Base build: offers and serves only ALPNPeer, checks nothing.
	older, olderAddr := startAt(0xc, func(c *ServerConfig) { c.MaxPeerVersion = version.Base })

	c, err := dial(other, newerAddr, nil)
	if err != nil {
		t.Fatalf("two current builds: %v", err)
	}
	if c.alpn != peerALPN(version.Max) {
		t.Fatalf("negotiated %q, want %q", c.alpn, peerALPN(version.Max))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var got string
	if err := c.Call(ctx, opEcho, "hi", &got); err != nil || got != "hi" {
		t.Fatalf("call: %q %v", got, err)
	}
	_ = c.Close()

	_, err = dial(older, newerAddr, nil)
	if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), "cluster runs cluster version 2; the node's build supports at most 1") {
		t.Fatalf("an older build dialing: %v", err)
	}
	_, err = dial(newer, olderAddr, nil)
	var tooOld *TooOldError
	if !errors.As(err, &tooOld) || tooOld.Peer != version.Base {
		t.Fatalf("dialing an older build: %v", err)
	}
	// What a build before versions offers exactly.
	_, err = dial(other, newerAddr, []string{ALPNPeer})
	if !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("offering ALPNPeer alone: %v", err)
	}
}
