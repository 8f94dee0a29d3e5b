package listen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/wire"
)

func testConfig(t *testing.T) Config {
	return Config{Bind: "127.0.0.1:0", NodeID: 1, ResetKey: new([32]byte), Log: testkit.Logger(t)}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBindOnePort: UDP and TCP share one port number, which the advertised
// address takes when it names port 0.
func TestBindOnePort(t *testing.T) {
	for _, tc := range []struct {
		advertise, host string
	}{
		{"", "127.0.0.1"},
		{"10.1.2.3:0", "10.1.2.3"},
	} {
		cfg := testConfig(t)
		cfg.Advertise = tc.advertise
		l, err := Bind(cfg)
		if err != nil {
			t.Fatal(err)
		}
		udp, tcp := l.udp.LocalAddr().(*net.UDPAddr).Port, l.tcp.Addr().(*net.TCPAddr).Port
		if udp != tcp {
			t.Errorf("udp port %d, tcp port %d; want one", udp, tcp)
		}
		if host, _, _ := net.SplitHostPort(l.Addr()); host != tc.host || port(t, l.Addr()) != udp {
			t.Errorf("advertise %q: address %s; want %s:%d", tc.advertise, l.Addr(), tc.host, udp)
		}
		l.Drain(time.Second)
		l.Close()
	}
}

// TestBindTCPTaken: when the TCP port is taken, Bind fails and leaves the
// UDP port it had bound free again.
func TestBindTCPTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig(t)
	cfg.Bind = taken.Addr().String()
	if _, err := Bind(cfg); err == nil {
		t.Fatal("Bind on a taken TCP port succeeded")
	}
	udp, err := net.ListenPacket("udp", cfg.Bind)
	if err != nil {
		t.Fatalf("the UDP port stayed bound after the failed Bind: %v", err)
	}
	_ = udp.Close()
}

// TestHTTP: the API's health and the metrics are served; with a secret
// over HTTPS only, with the certificate the secret's authority signed,
// and everything but the probes needs the client token; the gate sees
// every request that passed the token check and drops those it refuses;
// Drain ends the server.
func TestHTTP(t *testing.T) {
	cfg := testConfig(t)
	cfg.ClusterSecret = []byte("a secret of enough bytes for the keys")
	var gated atomic.Int32
	var refuse atomic.Bool
	cfg.Gate = func(context.Context) error {
		gated.Add(1)
		if refuse.Load() {
			return errors.New("frozen")
		}
		return nil
	}
	l, err := Bind(cfg)
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "skuldd_up 1\n") })
	var ready atomic.Bool
	probes := Probes{
		Live: func() error { return nil },
		Ready: func() []string {
			if !ready.Load() {
				return []string{"starting"}
			}
			return nil
		},
	}
	l.ServeHTTP(probes)
	keys, err := wire.DeriveKeys(cfg.ClusterSecret)
	if err != nil {
		t.Fatal(err)
	}
	if !l.HTTPS() {
		t.Fatal("a node with a secret serves plain HTTP")
	}
	id, err := wire.DeriveHTTPS(cfg.ClusterSecret)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: id.ClientTLS()}}
	defer client.CloseIdleConnections()
	get := func(path string, token bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://"+l.Addr()+path, nil)
		if token {
			req.Header.Set("Authorization", "Bearer "+wire.FormatToken(keys.ClientToken))
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Before SetAPI: /healthz says the node is alive and starting,
	// /readyz that it is not ready, and every other request is refused
	// at once (not left waiting for the whole start), the token still
	// checked first; the probes need none.
	if code, body := get("/healthz", false); code != http.StatusOK || !strings.Contains(body, "starting") {
		t.Errorf("/healthz while starting: %d %q; want 200, starting", code, body)
	}
	if code, body := get("/readyz", false); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/readyz while starting: %d %q; want 503, starting", code, body)
	}
	if code, body := get("/v1/queues", true); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/v1/queues while starting: %d %q; want 503, starting", code, body)
	}
	if code, _ := get("/metrics", false); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token while starting: %d; want 401", code)
	}
	// Plain HTTP is refused, and so is a client trusting another
	// cluster's authority.
	if resp, err := http.Get("http://" + l.Addr() + "/healthz"); err != nil {
		t.Errorf("plain HTTP: %v; want an answer saying HTTPS", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
			t.Errorf("plain HTTP: %d %q; want 400 saying HTTPS", resp.StatusCode, b)
		}
	}
	other, err := wire.DeriveHTTPS([]byte("another cluster's secret, long enough"))
	if err != nil {
		t.Fatal(err)
	}
	otr := &http.Transport{TLSClientConfig: other.ClientTLS()}
	if _, err := (&http.Client{Transport: otr}).Get("https://" + l.Addr() + "/healthz"); err == nil {
		t.Error("a client trusting another cluster's authority was served")
	}
	otr.CloseIdleConnections()
	l.SetAPI(struct{ wire.Service }{}, probes, metrics)
	ready.Store(true)
	if code, _ := get("/healthz", false); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d; want 200", code)
	}
	if code, _ := get("/readyz", false); code != http.StatusOK {
		t.Errorf("/readyz without a token: %d; want 200", code)
	}
	if code, _ := get("/metrics", false); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d; want 401", code)
	}
	if code, body := get("/metrics", true); code != http.StatusOK || body != "skuldd_up 1\n" {
		t.Errorf("/metrics with the token: %d %q", code, body)
	}
	if code, _ := get("/debug/pprof/", true); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without Pprof: %d; want 404", code)
	}
	refuse.Store(true)
	if code, body := get("/metrics", true); code != http.StatusOK || body != "" {
		t.Errorf("/metrics through a refusing gate: %d %q; want nothing served", code, body)
	}
	// The token is checked first: the requests without it never reached
	// the gate (nor did those refused for their scheme or authority); the
	// three while starting did, as the five after.
	if n := gated.Load(); n != 8 {
		t.Errorf("the gate saw %d requests; want 8", n)
	}
	client.CloseIdleConnections()
	l.Drain(time.Second)
	l.Close()
	if _, err := client.Get("https://" + l.Addr() + "/healthz"); err == nil {
		t.Error("HTTP still served after Drain")
	}
}

// TestBindAnyPortTakenForTCP: with port 0, the port UDP picks may be in
// use for TCP (an outgoing connection's ephemeral port: CI saw "address
// already in use" when a node restarted on port 0). Bind picks again.
func TestBindAnyPortTakenForTCP(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	picks := 0
	listenPacket = func(network, addr string) (net.PacketConn, error) {
		picks++
		if picks == 1 {
			return net.ListenPacket(network, busy) // free for UDP, taken for TCP
		}
		return net.ListenPacket(network, addr)
	}
	defer func() { listenPacket = net.ListenPacket }()
	l, err := Bind(testConfig(t))
	if err != nil {
		t.Fatalf("bind port 0 when UDP's first pick is taken for TCP: %v", err)
	}
	defer l.Close()
	// At least a second pick: port 0's pick may be taken for TCP too, by
	// another process, and then a third follows (seen under go test ./...).
	if picks < 2 || l.Addr() == busy {
		t.Fatalf("picks %d, address %s (taken %s); want another pick", picks, l.Addr(), busy)
	}
}
