package listen

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/wire"
)

// HTTP server timeouts: a slow client must not hold a connection forever.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 2 * time.Minute
)

// ErrInsecureBind is returned for a non-loopback bind without a cluster
// secret or Insecure.
var ErrInsecureBind = errors.New("refusing to bind a non-loopback address without a cluster secret (--cluster-secret-file) or --insecure")

// CheckAdvertise checks that an explicit advertise address ("": none)
// is host:port and dialable: not a wildcard.
func CheckAdvertise(advertise string) error {
	if advertise == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		return fmt.Errorf("advertise %q: %w", advertise, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return fmt.Errorf("advertise %s: a wildcard address cannot be dialed", advertise)
	}
	return nil
}

// CheckBind checks that bind is host:port with an IP address or localhost,
// and a loopback one unless insecure (ErrInsecureBind).
func CheckBind(bind string, insecure bool) error {
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		return fmt.Errorf("bind %q: %w", bind, err)
	}
	if insecure {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("bind %q: host must be an IP address or localhost", bind)
	}
	if !ip.IsLoopback() {
		return fmt.Errorf("bind %s: %w", bind, ErrInsecureBind)
	}
	return nil
}

// Config configures a node's listeners. Node fills it from its own
// Config (where the defaults live).
type Config struct {
	// Bind is the address to bind, host:port; port 0 picks one.
	Bind string
	// Advertise is the address peers and clients are told (host:port; a
	// port 0 takes the bound one); empty: the bound address, or a host
	// address for a wildcard bind.
	Advertise string
	// NodeID is the node's id, which the QUIC server proves to peers.
	NodeID uint64
	// ResetKey is the node's QUIC stateless reset key, kept across
	// restarts.
	ResetKey *[32]byte
	// ClusterSecret, when set, derives the peers' and clients' keys: the
	// HTTP API then needs the client token (but for the probes), and the
	// HTTP port serves HTTPS, with TLSCert and TLSKey or with a
	// certificate the node makes (wire.DeriveHTTPS).
	ClusterSecret []byte
	// Credentials looks up a client credential's keys for the QUIC
	// server (wire.ServerConfig.Credentials); nil: none.
	Credentials func(id uint64) (wire.CredentialKeys, error)
	// AdmitPeer checks a peer that proved its id, on a connection of
	// protocol version v (wire.ServerConfig.AdmitPeer); MaxPeerVersion
	// caps the versions offered (0: all this build's; tests play older
	// builds with it).
	AdmitPeer      func(id uint64, v version.V) error
	MaxPeerVersion version.V
	// Authenticate returns the principal an HTTP client's token proves;
	// IsAdmin says whether a principal may do everything (pprof and the
	// test hooks are the admin's). Nil: the cluster token alone opens
	// the HTTP API, as its admin (clusterTokenOnly).
	Authenticate func(token string) (wire.Principal, error)
	IsAdmin      func(wire.Principal) bool
	// TLSCert and TLSKey are the PEM files of the HTTPS certificate and
	// key (both or neither): the port serves HTTPS with them, secret or
	// not, and reads them again when they change (a renewed certificate
	// needs no restart).
	TLSCert, TLSKey string
	// Pprof serves /debug/pprof/.
	Pprof bool
	// Debug, when set, serves /debug/ (the test hooks).
	Debug http.Handler
	// Gate, when set, holds each HTTP request until it returns (the test
	// faults' freeze); an error drops the request.
	Gate func(context.Context) error
	// Log is the node's logger.
	Log *slog.Logger
}

// Listener is a node's bound sockets and the servers on them.
type Listener struct {
	cfg  Config
	udp  net.PacketConn
	tcp  net.Listener
	addr string
	keys wire.Keys

	quic *wire.Server
	http *http.Server
	// tls is the HTTP port's TLS configuration; nil: plain HTTP.
	tls *tls.Config
	// api is what the HTTP server serves: the starting handler
	// (ServeHTTP), then the whole API (SetAPI).
	api atomic.Pointer[http.Handler]
	wg  sync.WaitGroup // the servers' Serve
}

// listenPacket is net.ListenPacket; a test makes UDP pick a port that
// TCP has in use.
var listenPacket = net.ListenPacket

// anyPortTries bounds Bind's picks of a port for port 0: each is free for
// UDP, and taken for TCP only by chance.
const anyPortTries = 16

// Bind opens UDP (QUIC) and TCP (HTTP) on one port number. With port 0,
// UDP picks the port and TCP takes the same number (UDP picks again when
// TCP has it in use).
func Bind(cfg Config) (_ *Listener, err error) {
	l := &Listener{cfg: cfg}
	if cfg.ClusterSecret != nil {
		if l.keys, err = wire.DeriveKeys(cfg.ClusterSecret); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	if cfg.ClusterSecret != nil && cfg.Authenticate == nil {
		cfg.Authenticate, cfg.IsAdmin = clusterTokenOnly(l.keys.ClientToken)
		l.cfg = cfg
	}
	host, want, _ := net.SplitHostPort(cfg.Bind)
	var port, addr string
	for try := 1; ; try++ {
		udp, err := listenPacket("udp", cfg.Bind)
		if err != nil {
			return nil, fmt.Errorf("listen: bind udp %s: %w", cfg.Bind, err)
		}
		port = strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
		addr = net.JoinHostPort(host, port)
		tcp, err := net.Listen("tcp", addr)
		if err != nil {
			_ = udp.Close()
			// A port UDP picked may be taken for TCP (an outgoing
			// connection's ephemeral port, say): pick again.
			if want == "0" && errors.Is(err, syscall.EADDRINUSE) && try < anyPortTries {
				continue
			}
			return nil, fmt.Errorf("listen: bind tcp %s: %w", addr, err)
		}
		l.udp, l.tcp, l.addr = udp, tcp, addr
		break
	}
	defer func() {
		if err != nil {
			_ = l.udp.Close()
			_ = l.tcp.Close()
		}
	}()
	if a := cfg.Advertise; a != "" {
		ahost, aport, _ := net.SplitHostPort(a)
		if aport == "0" {
			aport = port
		}
		l.addr = net.JoinHostPort(ahost, aport)
	} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		l.addr = net.JoinHostPort(hostIP(), port)
		cfg.Log.Info("advertising a host address for the wildcard bind (set --advertise to choose)", "addr", l.addr)
	}
	if l.tls, err = httpsConfig(cfg, l.certHosts()); err != nil {
		return nil, fmt.Errorf("listen: https: %w", err)
	}
	return l, nil
}

// HTTPS reports whether the HTTP port serves HTTPS.
func (l *Listener) HTTPS() bool { return l.tls != nil }

// hostIP returns the first non-loopback IPv4 address of the host's
// interfaces, or 127.0.0.1 when there is none.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(p.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
					return ip.Unmap().String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// Addr returns the address the node advertises.
func (l *Listener) Addr() string { return l.addr }

// ServeQUIC starts the QUIC server of client and peers (peers' handlers
// may be zero: the peer protocol then goes elsewhere) and returns it, for
// the peer transport's dials.
func (l *Listener) ServeQUIC(client wire.Handler, peers peer.Handlers) (*wire.Server, error) {
	cert, err := wire.SelfSignedCert()
	if err != nil {
		return nil, fmt.Errorf("listen: tls: %w", err)
	}
	srv, err := wire.NewServer(wire.ServerConfig{
		TLS:      wire.ServerTLS(cert),
		Logger:   l.cfg.Log,
		ResetKey: l.cfg.ResetKey,
		NodeID:   l.cfg.NodeID,
		Keys:     l.keys,
		// Credentials only where clients must say hello (a secret).
		Credentials: l.credentials(),
		// In tests a handler's panic fails the test (invariant's rule).
		RethrowPanics:  testing.Testing(),
		PeerHandler:    peers.Peer,
		RawHandler:     peers.Raw,
		AdmitPeer:      l.cfg.AdmitPeer,
		MaxPeerVersion: l.cfg.MaxPeerVersion,
	}, client)
	if err != nil {
		return nil, fmt.Errorf("listen: quic server: %w", err)
	}
	l.quic = srv
	l.wg.Go(func() {
		if err := srv.Serve(l.udp); err != nil {
			l.cfg.Log.Error("quic server stopped", "err", err)
		}
	})
	return srv, nil
}

// clusterTokenOnly is the HTTP authentication of a listener given none:
// the cluster token, as the admin.
func clusterTokenOnly(token []byte) (func(string) (wire.Principal, error), func(wire.Principal) bool) {
	authn := func(s string) (wire.Principal, error) {
		tok, err := wire.ParseToken(s)
		if err != nil || subtle.ConstantTimeCompare(tok, token) != 1 {
			return wire.Principal{}, fmt.Errorf("%w: the token is not the cluster's", wire.ErrUnauthenticated)
		}
		return wire.Principal{}, nil
	}
	return authn, func(wire.Principal) bool { return true }
}

// credentials is the QUIC server's credential lookup: Config's, on a
// node with a secret.
func (l *Listener) credentials() func(uint64) (wire.CredentialKeys, error) {
	if l.cfg.ClusterSecret == nil {
		return nil
	}
	return l.cfg.Credentials
}

// Probes are the node's liveness and readiness, as the HTTP server
// reports them (httpapi.Config's Live and Ready).
type Probes struct {
	Live  func() error
	Ready func() []string
}

// ServeHTTP starts the HTTP server from now on, with the gate and the
// token as configured, before the node can serve its API: until SetAPI,
// GET /healthz says the node is alive and starting, /readyz why it is not
// ready, and every other request is refused at once, a 503 the client can
// retry elsewhere. (The TCP socket is bound from the start, so a server
// that waited for SetAPI left connections hanging in the kernel's backlog
// for the whole start, up to their deadline.)
func (l *Listener) ServeHTTP(p Probes) {
	starting := httpapi.Starting(httpapi.Config{Live: p.Live, Ready: p.Ready, Log: l.cfg.Log})
	l.api.Store(&starting)
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*l.api.Load()).ServeHTTP(w, r)
	})
	if gate := l.cfg.Gate; gate != nil {
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := gate(r.Context()); err != nil {
				return // the client went away while the node was frozen
			}
			inner.ServeHTTP(w, r)
		})
	}
	// With a secret every endpoint but the probes needs a token: the
	// cluster's or a credential's, pprof and the test hooks the admin's.
	if l.cfg.ClusterSecret != nil {
		handler = httpapi.Authenticate(handler, l.cfg.Authenticate, l.cfg.IsAdmin)
	}
	l.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		TLSConfig:         l.tls,
		ErrorLog:          log.New(serverLog{l.cfg.Log}, "", 0),
	}
	l.wg.Go(func() {
		serve := func() error { return l.http.Serve(l.tcp) }
		if l.tls != nil {
			// The certificates are in TLSConfig (ServeTLS reads no file).
			serve = func() error { return l.http.ServeTLS(l.tcp, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.cfg.Log.Error("http server stopped", "err", err)
		}
	})
}

// SetAPI makes the HTTP server serve the whole API: the client's
// operations, health and metrics, with the test hooks and pprof as
// configured (the gate and the token, ServeHTTP's, apply to both). Call it once, after ServeHTTP, when the node is ready.
func (l *Listener) SetAPI(api wire.Service, p Probes, metrics http.Handler) {
	var handler http.Handler = httpapi.New(httpapi.Config{
		Service: api, Live: p.Live, Ready: p.Ready, Metrics: metrics, Log: l.cfg.Log,
	})
	// The test hooks first: pprof's own /debug/pprof/ then takes
	// precedence over their /debug/.
	if l.cfg.Debug != nil {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/debug/", l.cfg.Debug)
		handler = mux
	}
	if l.cfg.Pprof {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
	}
	l.api.Store(&handler)
}

// Drain stops the HTTP server, waiting up to timeout for its requests
// (or closes the TCP socket when there is no server).
func (l *Listener) Drain(timeout time.Duration) {
	if l.http == nil {
		_ = l.tcp.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := l.http.Shutdown(ctx); err != nil {
		l.cfg.Log.Warn("http shutdown", "err", err)
	}
}

// Silence closes the UDP socket at once, so that no QUIC close reaches
// the peers: how a crash looks to them.
func (l *Listener) Silence() { _ = l.udp.Close() }

// Close closes the QUIC server and the sockets, and waits for the
// servers to return. Drain first.
func (l *Listener) Close() {
	if l.quic != nil {
		if err := l.quic.Close(); err != nil {
			l.cfg.Log.Warn("quic shutdown", "err", err)
		}
	}
	_ = l.udp.Close()
	l.wg.Wait()
}
