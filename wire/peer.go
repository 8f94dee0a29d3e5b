package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// rawKindTimeout bounds the wait for a raw stream's kind byte, which the
// opener writes together with the type byte.
const rawKindTimeout = handshakeIdleTimeout

// hello runs the listener's side of the connection's hello on str. A
// failed or repeated hello closes the connection: the dialer is either a
// stranger or broken.
func (cs *serverConn) hello(str *quic.Stream) {
	ran := false
	cs.helloStarted.Store(true)
	cs.helloOnce.Do(func() {
		ran = true
		var creds func(uint64) (CredentialKeys, error)
		if !cs.peer {
			creds = cs.srv.cfg.Credentials
			if creds == nil {
				creds = noCredentials
			}
		}
		var admit func(uint64) error
		if check := cs.srv.cfg.AdmitPeer; cs.peer && check != nil {
			admit = func(id uint64) error { return check(id, cs.peerVersion) }
		}
		id, err := acceptHello(cs.qc, str, cs.key, cs.srv.cfg.NodeID, creds, admit)
		if err != nil {
			if errors.Is(err, ErrPeerRefused) {
				cs.log.Warn("wire: refusing a peer", "peer", fmt.Sprintf("%016x", id), "err", err)
				_ = cs.qc.CloseWithError(appErrVersion, err.Error())
				return
			}
			// Close the connection, not the stream: the dialer must see
			// the connection's reason, and a stream reset could reach it
			// first.
			if errors.Is(err, ErrUnavailable) {
				cs.log.Debug("wire: refusing connection for now", "err", err)
				_ = cs.qc.CloseWithError(appErrNotYet, "the node cannot check this credential yet (starting): retry")
				return
			}
			if errors.Is(err, ErrAuth) {
				cs.log.Warn("wire: refusing connection: authentication failed", "err", err)
				_ = cs.qc.CloseWithError(appErrAuth, "authentication failed: wrong cluster secret or token")
				return
			}
			cs.log.Debug("wire: hello failed", "err", err)
			_ = cs.qc.CloseWithError(appErrAuth, "hello failed")
			return
		}
		cs.log.Debug("wire: hello", "peer", fmt.Sprintf("%016x", id))

		// peerID is read by handlers after authed is closed; a connection
		// that needs no hello keeps 0 (a client says 0 with the cluster
		// token, its credential's id with a credential).
		if cs.needHello {
			cs.peerID = id
			close(cs.authed)
		}
	})
	if !ran {
		str.CancelRead(streamErrUnknownType)
		str.CancelWrite(streamErrUnknownType)
	}
}

// noCredentials is the lookup of a server that holds no credentials.
func noCredentials(uint64) (CredentialKeys, error) {
	return CredentialKeys{}, errors.New("this node holds no credentials")
}

// waitAuthed waits until the connection said hello when it must. A
// connection that must and does not within helloTimeout is closed.
func (cs *serverConn) waitAuthed() bool {
	select {
	case <-cs.authed:
		return true
	default:
	}
	// A dialer says hello before anything else and waits for the reply,
	// so a stream before any hello means the dialer has no key: refuse at
	// once rather than after a timeout.
	if !cs.helloStarted.Load() {
		cs.refuseUnauthenticated()
		return false
	}
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	select {
	case <-cs.authed:
		return true
	case <-t.C:
		cs.refuseUnauthenticated()
		return false
	case <-cs.ctx.Done():
		return false
	}
}

// refuseUnauthenticated closes a connection that must say hello and did
// not, logging it once.
func (cs *serverConn) refuseUnauthenticated() {
	cs.refuseOnce.Do(func() {
		cs.log.Warn("wire: refusing connection: no authentication (a cluster secret or token is required)")
		_ = cs.qc.CloseWithError(appErrAuth, "authentication required: this node needs a cluster secret or token")
	})
}

// RawStream is a raw two-way stream a peer opened with OpenRaw.
type RawStream struct {
	net.Conn
	// Kind is the byte the opener chose.
	Kind byte
	// PeerID is the node id the opener proved.
	PeerID uint64
}

// serveRaw hands a raw stream to the RawHandler.
func (cs *serverConn) serveRaw(str *quic.Stream, log *slog.Logger) {
	if cs.srv.cfg.RawHandler == nil || !cs.peer {
		log.Debug("wire: raw stream refused")
		str.CancelRead(streamErrUnknownType)
		str.CancelWrite(streamErrUnknownType)
		return
	}
	var kind [1]byte
	_ = str.SetReadDeadline(time.Now().Add(rawKindTimeout))
	if _, err := io.ReadFull(str, kind[:]); err != nil {
		str.CancelRead(streamErrNone)
		str.CancelWrite(streamErrNone)
		return
	}
	_ = str.SetReadDeadline(time.Time{})
	cs.srv.cfg.RawHandler(cs.ctx, RawStream{Conn: newStreamConn(cs.qc, str), Kind: kind[0], PeerID: cs.peerID})
}

// streamConn adapts a QUIC stream to net.Conn, with the connection's
// addresses.
type streamConn struct {
	*quic.Stream
	qc *quic.Conn
}

func newStreamConn(qc *quic.Conn, str *quic.Stream) *streamConn {
	return &streamConn{Stream: str, qc: qc}
}

func (c *streamConn) LocalAddr() net.Addr  { return c.qc.LocalAddr() }
func (c *streamConn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }

// Close ends both directions: quic-go's Stream.Close ends only the send
// side.
func (c *streamConn) Close() error {
	c.Stream.CancelRead(streamErrNone)
	return c.Stream.Close()
}

// OpenRaw opens a raw stream of the given kind to the peer (only on a
// connection from DialPeer). The returned net.Conn is the caller's to
// close.
func (c *Conn) OpenRaw(ctx context.Context, kind byte) (net.Conn, error) {
	select {
	case <-c.done:
		return nil, c.err
	default:
	}
	str, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("wire: open raw stream to %s: %w", c.remote, err)
	}
	if _, err := str.Write([]byte{streamTypeRaw, kind}); err != nil {
		str.CancelRead(streamErrNone)
		str.CancelWrite(streamErrNone)
		return nil, fmt.Errorf("wire: open raw stream to %s: %w", c.remote, err)
	}
	return newStreamConn(c.qc, str), nil
}

// PeerID is the node id the other end proved in its hello; 0 when no
// hello was exchanged.
func (c *Conn) PeerID() uint64 { return c.peerID }

// Done is closed once the connection failed or was closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// errNotServing is returned by DialPeer before Serve started.
var errNotServing = errors.New("the server is not serving")

// DialPeer connects to the peer node at addr from the server's own UDP
// socket (so the peer sees our listen address as the remote address), with
// this build's peer protocols (peerversion.go), says hello with the server's NodeID and peer key, and opens
// its request streams (ClientConfig.Streams). cfg.TLS defaults to
// PeerTLS's settings.
// Close the Conn when done; it does not close the server's socket.
func (s *Server) DialPeer(ctx context.Context, addr string, cfg ClientConfig) (*Conn, error) {
	select {
	case <-s.listening:
	case <-s.ctx.Done():
	case <-ctx.Done():
	}
	s.mu.Lock()
	tr := s.mu.tr
	s.mu.Unlock()
	if tr == nil {
		return nil, fmt.Errorf("wire: dial peer %s: %w", addr, errNotServing)
	}
	if cfg.TLS == nil {
		cfg.TLS = ClientTLS()
		cfg.TLS.NextProtos = peerALPNsUpTo(s.cfg.MaxPeerVersion)
	}
	cfg.hello = &helloConfig{key: s.cfg.Keys.PeerKey, id: s.cfg.NodeID}
	c, err := dialOn(ctx, tr, addr, cfg)
	if err != nil {
		return nil, err
	}
	// The dialer checks too: a node of an older build still accepts us,
	// and must not take part once the cluster runs past its build.
	if v, ok := PeerVersion(c.alpn); ok && s.cfg.AdmitPeer != nil {
		if err := s.cfg.AdmitPeer(c.peerID, v); err != nil {
			_ = c.qc.CloseWithError(appErrVersion, err.Error())
			_ = c.Close()
			return nil, fmt.Errorf("wire: dial peer %s: %w", addr, err)
		}
	}
	return c, nil
}
