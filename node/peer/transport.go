package peer

import (
	"context"
	"net"

	"github.com/fxamacker/cbor/v2"
	"github.com/skuldd/skuldd/wire"
)

// Conn is one connection to a peer: requests with one answer (Call) or a
// streamed answer (Stream), and raw two-way byte streams (OpenRaw, for
// gossip). Implementations are safe for concurrent use.
//
// Semantics every implementation keeps (they are wire.Conn's): an error
// answer comes back as a *wire.Error; a dead connection gives an error
// wrapping wire.ErrUnavailable and closes Done; when ctx ends, Call and
// Stream return ctx.Err() at once and the peer may still execute the
// request.
type Conn interface {
	Call(ctx context.Context, op wire.Op, req, resp any) error
	Stream(ctx context.Context, op wire.Op, req any, each func(body cbor.RawMessage) error) error
	OpenRaw(ctx context.Context, kind byte) (net.Conn, error)
	// Done is closed once the connection failed or was closed.
	Done() <-chan struct{}
	Close() error
}

// Transport dials peers by address. A Conn it returns is the caller's to
// close.
type Transport interface {
	Dial(ctx context.Context, addr string) (Conn, error)
}

// Handlers is what a node serves its peers with.
type Handlers struct {
	// Peer serves requests.
	Peer wire.Handler
	// Raw receives the raw streams peers open; it owns the stream and
	// must close it.
	Raw func(ctx context.Context, rs wire.RawStream)
}

// QUIC is the production Transport: connections dialed from the node's
// own QUIC server socket (wire.Server.DialPeer), so that a peer sees the
// node's listen address as the remote address. The server serves the
// node's Handlers (wire.ServerConfig.PeerHandler and RawHandler).
type QUIC struct {
	Server *wire.Server
	Config wire.ClientConfig
}

// Dial implements Transport.
func (q QUIC) Dial(ctx context.Context, addr string) (Conn, error) {
	c, err := q.Server.DialPeer(ctx, addr, q.Config)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ Conn = (*wire.Conn)(nil)
