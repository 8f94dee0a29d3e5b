package wire

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTPSDerived: two derivations from one secret (a node's, ctl's)
// agree: a certificate the first makes verifies against the authority of
// the second, for its hosts only, and both name the same pin; another
// secret's authority refuses it.
func TestHTTPSDerived(t *testing.T) {
	secret := []byte("a cluster secret of enough bytes")
	node, err := DeriveHTTPS(secret)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := DeriveHTTPS(secret)
	if err != nil {
		t.Fatal(err)
	}
	other, err := DeriveHTTPS([]byte("another cluster's secret, as long"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DeriveHTTPS([]byte("short")); err == nil {
		t.Fatal("a short secret derived an authority")
	}
	pn, err := node.Pin()
	if err != nil {
		t.Fatal(err)
	}
	if pc, _ := ctl.Pin(); pc != pn || !strings.HasPrefix(pn, "sha256//") {
		t.Fatalf("pins %q and %q; want one, in curl's form", pn, pc)
	}
	if po, _ := other.Pin(); po == pn {
		t.Fatal("two secrets share a pin")
	}
	block, _ := pem.Decode(ctl.CAPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CAPEM: %q", ctl.CAPEM())
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatal(err)
	}

	cert, err := node.ServerCert([]string{"127.0.0.1", "localhost", "node-a.example", "127.0.0.1", ""}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Leaf.IPAddresses) != 1 || len(cert.Leaf.DNSNames) != 2 {
		t.Fatalf("SANs: ips %v names %v; want 127.0.0.1 once and the two names", cert.Leaf.IPAddresses, cert.Leaf.DNSNames)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	get := func(id *HTTPSIdentity, host string) error {
		tr := &http.Transport{TLSClientConfig: id.ClientTLS()}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + net.JoinHostPort(host, port))
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if err := get(ctl, host); err != nil {
			t.Errorf("ctl's derivation, %s: %v", host, err)
		}
	}
	var unknown x509.UnknownAuthorityError
	if err := get(other, "127.0.0.1"); !errors.As(err, &unknown) {
		t.Errorf("another secret's authority: %v; want unknown authority", err)
	}
	// A name the certificate does not carry is refused.
	var host x509.HostnameError
	if err := (func() error {
		tr := &http.Transport{TLSClientConfig: ctl.ClientTLS()}
		tr.TLSClientConfig.ServerName = "node-b.example"
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(srv.URL)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	})(); !errors.As(err, &host) {
		t.Errorf("a name the certificate does not carry: %v; want a hostname error", err)
	}
}
