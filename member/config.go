package member

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Member. Start from DefaultConfig or DefaultLocalConfig
// and set ID, Addr and Net; New validates it.
type Config struct {
	// ID is this node's durable identity; non-zero. Its memberlist node
	// name is the ID as 16 lowercase hex digits.
	ID uint64
	// Addr is the address peers reach this node at, a literal "ip:port"
	// (no host names: membership never does DNS). It must be dialable, so
	// a wildcard IP such as 0.0.0.0 or :: is refused.
	Addr string
	// Meta is opaque node metadata gossiped with this node's alive
	// messages, at most MaxMetaSize bytes. Change it later with SetMeta.
	Meta []byte
	// Net carries memberlist's packets and streams. Required.
	Net Net
	// Logger receives this package's logs with "component"="member";
	// memberlist's own log lines go to it at debug level. Nil discards.
	Logger *slog.Logger
	// OnChange, if set, is called after the membership view changed (a
	// peer joined, left, died, came back, or changed its metadata). See
	// the package doc for its concurrency contract.
	OnChange func()
	// AckPayload, if set, returns bytes to attach to every ack this node
	// sends in answer to a probe (at most MaxAckPayloadSize; longer ones
	// are dropped). It is meant for clock readings. Called on memberlist's
	// packet goroutine: it must be fast and must not block.
	AckPayload func() []byte
	// OnPing, if set, is called after a direct probe of peer id got its
	// ack, with the round-trip time and the payload that peer's AckPayload
	// attached. Called on memberlist's probe goroutine: must not block.
	OnPing func(id uint64, rtt time.Duration, payload []byte)

	// ProbeInterval is the time between failure-detection probes of one
	// random peer each. Lower detects failures sooner at more traffic.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// asking others to probe indirectly; about the network's p99 RTT, and
	// less than ProbeInterval.
	ProbeTimeout time.Duration
	// IndirectChecks is how many peers are asked to probe a peer that
	// missed a direct probe.
	IndirectChecks int
	// SuspicionMult scales how long a suspect peer has to refute before it
	// is declared dead: SuspicionMult * log10(max(n,10)) * ProbeInterval.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds that suspicion time from above, as a
	// multiple of it, when too few peers confirm the suspicion.
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier caps how far a node that sees itself degraded
	// stretches its probe interval and timeouts.
	AwarenessMaxMultiplier int
	// GossipInterval is the time between gossip rounds that spread pending
	// membership updates.
	GossipInterval time.Duration
	// GossipNodes is how many random peers each gossip round goes to.
	GossipNodes int
	// GossipToTheDeadTime is how long memberlist keeps gossiping to a peer
	// after it died (so it can refute) and keeps it in its own table.
	GossipToTheDeadTime time.Duration
	// RetransmitMult scales how often each update is gossiped:
	// RetransmitMult * log10(n+1) times.
	RetransmitMult int
	// PushPullInterval is the time between full state exchanges with one
	// random peer over a stream (anti-entropy of membership). Must be > 0.
	PushPullInterval time.Duration
	// StreamTimeout bounds opening a stream and each push/pull exchange on
	// it (memberlist's TCPTimeout).
	StreamTimeout time.Duration
	// ReconnectInterval is the time between attempts to rejoin one random
	// dead peer, which is how the two sides of a healed partition merge.
	ReconnectInterval time.Duration
	// DeadRetention is how long a Dead or Left peer stays in Members (and,
	// if Dead, keeps being retried) before it is forgotten.
	DeadRetention time.Duration
}

// DefaultConfig returns timing for a production LAN: memberlist's LAN
// defaults but for probes twice as often (every 500 ms, 250 ms for the
// ack: a LAN's round trip is well under a millisecond, and a probe of a
// node busy with 64 clients' load answered in time in every run measured)
// and a shorter suspicion (SuspicionMult 2 instead of 4, so 1 s). A
// crashed node is thus declared dead within about 1.5-2.5 s in a small
// cluster. Partition-leader failover waits for that verdict, and skuldd
// promises a successor within 5 s: with memberlist's own LAN timing the
// first claim a successor served came 3.9-5.8 s after a silent crash, with
// this 2.35-3.40 s (BenchmarkFailover). Lifeguard's awareness still stretches the
// probes and the suspicion on a node that is itself slow, which keeps
// false verdicts rare. ID, Addr and Net are left for the caller.
func DefaultConfig() Config {
	return Config{
		ProbeInterval:           500 * time.Millisecond,
		ProbeTimeout:            250 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 6,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     30 * time.Second,
		RetransmitMult:          4,
		PushPullInterval:        30 * time.Second,
		StreamTimeout:           10 * time.Second,
		ReconnectInterval:       10 * time.Second,
		DeadRetention:           24 * time.Hour,
	}
}

// DefaultLocalConfig returns fast timing for several nodes on one machine,
// as in tests: a crashed node is declared dead within about 1-2 s.
func DefaultLocalConfig() Config {
	return Config{
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          1,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 2,
		AwarenessMaxMultiplier:  3,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     5 * time.Second,
		RetransmitMult:          3,
		PushPullInterval:        2 * time.Second,
		StreamTimeout:           2 * time.Second,
		ReconnectInterval:       500 * time.Millisecond,
		DeadRetention:           time.Minute,
	}
}

// Validate reports every problem with c, or nil.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("member: config: "+format, args...))
	}
	if c.ID == 0 {
		bad("ID must be non-zero")
	}
	if _, err := parseAddr(c.Addr); err != nil {
		bad("Addr: %w", err)
	}
	if len(c.Meta) > MaxMetaSize {
		bad("Meta is %d bytes, over the %d limit", len(c.Meta), MaxMetaSize)
	}
	if c.Net == nil {
		bad("Net is required")
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval},
		{"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval},
		{"GossipToTheDeadTime", c.GossipToTheDeadTime},
		{"PushPullInterval", c.PushPullInterval},
		{"StreamTimeout", c.StreamTimeout},
		{"ReconnectInterval", c.ReconnectInterval},
		{"DeadRetention", c.DeadRetention},
	}
	for _, p := range positive {
		if p.d <= 0 {
			bad("%s must be positive, got %v", p.name, p.d)
		}
	}
	// A probe that waits longer than the interval between probes overlaps
	// the next one, and memberlist's indirect probes get no time at all.
	if c.ProbeTimeout >= c.ProbeInterval && c.ProbeInterval > 0 {
		bad("ProbeTimeout %v must be less than ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	atLeast := []struct {
		name string
		v    int
		min  int
	}{
		{"IndirectChecks", c.IndirectChecks, 0},
		{"SuspicionMult", c.SuspicionMult, 1},
		{"SuspicionMaxTimeoutMult", c.SuspicionMaxTimeoutMult, 1},
		{"AwarenessMaxMultiplier", c.AwarenessMaxMultiplier, 1},
		{"GossipNodes", c.GossipNodes, 1},
		{"RetransmitMult", c.RetransmitMult, 1},
	}
	for _, a := range atLeast {
		if a.v < a.min {
			bad("%s must be at least %d, got %d", a.name, a.min, a.v)
		}
	}
	return errors.Join(errs...)
}

// parseAddr parses a dialable literal "ip:port" and returns it in the
// canonical form memberlist itself uses for addresses (IPv4-mapped IPv6
// unmapped), so that addresses from Config, Join and memberlist compare
// equal.
func parseAddr(s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, errors.New("empty address")
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want a literal ip:port: %w", err)
	}
	ip := ap.Addr().Unmap()
	switch {
	case ip.Zone() != "":
		// memberlist gossips an address as bare IP bytes, so a zone
		// would be lost and the address would not be dialable elsewhere.
		return netip.AddrPort{}, fmt.Errorf("address %q has an IPv6 zone", s)
	case ip.IsUnspecified():
		return netip.AddrPort{}, fmt.Errorf("address %q is a wildcard, peers cannot dial it", s)
	case ip.IsMulticast():
		return netip.AddrPort{}, fmt.Errorf("address %q is multicast", s)
	case ap.Port() == 0:
		return netip.AddrPort{}, fmt.Errorf("address %q has port 0", s)
	}
	return netip.AddrPortFrom(ip, ap.Port()), nil
}

// memberlistConfig builds memberlist's configuration explicitly, field by
// field, so no memberlist default (host name, bind port, resolv.conf,
// compression) leaks in unnoticed.
func (c *Config) memberlistConfig(name string, adv netip.AddrPort, tr *transport,
	d *delegate, logger *log.Logger) *memberlist.Config {
	return &memberlist.Config{
		Name:      name,
		Transport: tr,
		// No label: QUIC's ALPN and the cluster secret already keep
		// clusters apart, and a label costs bytes in every packet.
		Label:                 "",
		SkipInboundLabelCheck: false,
		// Ignored with a Transport; set so nobody wonders.
		BindAddr:      adv.Addr().String(),
		BindPort:      int(adv.Port()),
		AdvertiseAddr: adv.Addr().String(),
		AdvertisePort: int(adv.Port()),
		// Every node runs this same code, so speak the newest protocol:
		// nacks for indirect probes (4) and packet CRCs (5).
		ProtocolVersion:         memberlistProtocolVersion,
		TCPTimeout:              c.StreamTimeout,
		IndirectChecks:          c.IndirectChecks,
		RetransmitMult:          c.RetransmitMult,
		SuspicionMult:           c.SuspicionMult,
		SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		PushPullInterval:        c.PushPullInterval,
		ProbeInterval:           c.ProbeInterval,
		ProbeTimeout:            c.ProbeTimeout,
		// Stream pings are the fallback when packets are lost; over QUIC
		// they share the peer connection, so keep them.
		DisableTcpPings:        false,
		AwarenessMaxMultiplier: c.AwarenessMaxMultiplier,
		GossipInterval:         c.GossipInterval,
		GossipNodes:            c.GossipNodes,
		GossipToTheDeadTime:    c.GossipToTheDeadTime,
		// QUIC encrypts and authenticates; memberlist's own encryption
		// would only add bytes and a second key to manage.
		GossipVerifyIncoming: false,
		GossipVerifyOutgoing: false,
		SecretKey:            nil,
		Keyring:              nil,
		// Packets are a few hundred bytes of msgpack; LZW gains little
		// there and costs an allocation-heavy pass on every probe.
		EnableCompression: false,
		Delegate:          d,
		Events:            d,
		Conflict:          d,
		Alive:             d,
		Ping:              d,
		Merge:             nil,
		// Join refuses host names, so memberlist never resolves one.
		DNSConfigPath:     "",
		LogOutput:         nil,
		Logger:            logger,
		HandoffQueueDepth: handoffQueueDepth,
		UDPBufferSize:     memberlistPacketBudget,
		// 0: a dead node's ID cannot move to another address until
		// memberlist forgets it (GossipToTheDeadTime); Left ones can.
		DeadNodeReclaimTime: 0,
		RequireNodeNames:    false,
		CIDRsAllowed:        nil,
		MetricLabels:        nil,
		QueueCheckInterval:  queueCheckInterval,
	}
}

const (
	// memberlistProtocolVersion is the memberlist protocol this node
	// speaks (memberlist.ProtocolVersionMax in v0.7.0).
	memberlistProtocolVersion = 5
	// handoffQueueDepth bounds memberlist's internal queue of received
	// gossip waiting to be processed; memberlist drops when it is full.
	handoffQueueDepth = 1024
	// queueCheckInterval is how often memberlist checks its broadcast
	// queue depth (and logs if it is deep).
	queueCheckInterval = 30 * time.Second
)
