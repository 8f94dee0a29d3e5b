package listen

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// TestHTTPSCertFiles: with --tls-cert and --tls-key the port serves
// HTTPS with them, secret or not, and a renewed pair takes effect at the
// next connection without a restart; a pair that does not load refuses
// the start. Without a secret or files the port is plain HTTP.
func TestHTTPSCertFiles(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// Two authorities stand for an operator's CA before and after a
	// renewal.
	first, err := wire.DeriveHTTPS([]byte("the operator's first authority"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := wire.DeriveHTTPS([]byte("the operator's second authority"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(id *wire.HTTPSIdentity, stamp time.Time) {
		t.Helper()
		cert, err := id.ServerCert([]string{"127.0.0.1"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		var chain []byte
		for _, der := range cert.Certificate {
			chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		for path, b := range map[string][]byte{certPath: chain, keyPath: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, stamp, stamp); err != nil {
				t.Fatal(err)
			}
		}
	}

	cfg := testConfig(t)
	cfg.TLSCert, cfg.TLSKey = certPath, keyPath
	if _, err := Bind(cfg); err == nil {
		t.Fatal("bound with certificate files that do not exist")
	}
	write(first, time.Now().Add(-time.Minute))
	l, err := Bind(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !l.HTTPS() {
		t.Fatal("certificate files and plain HTTP")
	}
	l.ServeHTTP(Probes{Live: func() error { return nil }, Ready: func() []string { return nil }})
	defer func() {
		l.Drain(time.Second)
		l.Close()
	}()
	trusting := func(id *wire.HTTPSIdentity) error {
		tr := &http.Transport{TLSClientConfig: id.ClientTLS()}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + l.Addr() + "/healthz")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := trusting(first); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}
	write(second, time.Now())
	if err := trusting(second); err != nil {
		t.Fatalf("after the renewal: %v; want the new certificate served", err)
	}
	if err := trusting(first); err == nil {
		t.Fatal("after the renewal the old certificate is still served")
	}
	// A broken pair (a renewal half written) keeps the last good one.
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := trusting(second); err != nil {
		t.Fatalf("with a broken key file: %v; want the last good certificate", err)
	}

	plain, err := Bind(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		plain.Drain(time.Second)
		plain.Close()
	}()
	if plain.HTTPS() {
		t.Fatal("no secret, no certificate: want plain HTTP")
	}
}
