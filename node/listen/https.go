package listen

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// httpsConfig is the HTTP port's TLS configuration: the operator's
// certificate files when given, else with a cluster secret a certificate
// for hosts signed by the secret's authority; nil (plain HTTP) with
// neither, which config validation allows on loopback or with --insecure
// only.
func httpsConfig(cfg Config, hosts []string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	switch {
	case cfg.TLSCert != "":
		f := &certFiles{cert: cfg.TLSCert, key: cfg.TLSKey}
		if _, err := f.get(nil); err != nil {
			return nil, err
		}
		tc.GetCertificate = f.get
	case cfg.ClusterSecret != nil:
		id, err := wire.DeriveHTTPS(cfg.ClusterSecret)
		if err != nil {
			return nil, err
		}
		// Wall-clock time is right here: validity is compared with the
		// client's wall clock, and has no effect on skuldd's own logic.
		cert, err := id.ServerCert(hosts, time.Now())
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	default:
		return nil, nil
	}
	return tc, nil
}

// certHosts are the names and addresses a certificate the node makes
// carries: the advertised host, the bound one (every interface's address
// for a wildcard bind), the host name, and loopback's.
func (l *Listener) certHosts() []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	ahost, _, _ := net.SplitHostPort(l.addr)
	bhost, _, _ := net.SplitHostPort(l.cfg.Bind)
	hosts = append(hosts, ahost, bhost)
	if ip, err := netip.ParseAddr(bhost); err == nil && ip.IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if p, ok := a.(*net.IPNet); ok {
					hosts = append(hosts, p.IP.String())
				}
			}
		}
	}
	return hosts
}

// certFiles serves the operator's certificate, read again whenever either
// file changed since it was last read, so that a renewed certificate (a
// certificate manager's, an ACME client's) takes effect at the next
// connection. A pair that does not load (one file renewed, the other not
// yet) keeps the last good one until it does.
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	stamp   [2]time.Time
	current *tls.Certificate
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	ci, err := os.Stat(f.cert)
	if err != nil {
		return f.keep(fmt.Errorf("tls cert: %w", err))
	}
	ki, err := os.Stat(f.key)
	if err != nil {
		return f.keep(fmt.Errorf("tls key: %w", err))
	}
	stamp := [2]time.Time{ci.ModTime(), ki.ModTime()}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil && stamp == f.stamp {
		return f.current, nil
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		if f.current != nil {
			return f.current, nil
		}
		return nil, fmt.Errorf("tls cert %s, key %s: %w", f.cert, f.key, err)
	}
	f.current, f.stamp = &cert, stamp
	return f.current, nil
}

// keep answers with the last good certificate when a file is missing for
// a moment (replaced by a rename), else with err.
func (f *certFiles) keep(err error) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil {
		return f.current, nil
	}
	return nil, err
}

// serverLog takes the HTTP server's own log lines: a failed TLS handshake
// (a plain-HTTP request to the HTTPS port, a client that does not trust
// the certificate, a port scan) is the client's to report, so it goes to
// the debug level; anything else is a warning.
type serverLog struct{ log *slog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	if bytes.Contains(p, []byte("TLS handshake error")) {
		s.log.Debug("http server", "line", msg)
	} else {
		s.log.Warn("http server", "line", msg)
	}
	return len(p), nil
}
