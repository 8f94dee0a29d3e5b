package raftgroup

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/store"
)

// Defaults. With 100ms ticks a follower starts an election after 1-2s
// without hearing from the leader (raft randomises the timeout in
// [ElectionTicks, 2*ElectionTicks) ticks), and the leader heartbeats every
// tick.
const (
	DefaultTickInterval    = 100 * time.Millisecond
	DefaultElectionTicks   = 10
	DefaultHeartbeatTicks  = 1
	DefaultSnapshotEntries = 1000
	// DefaultSnapshotCatchUpEntries is how many applied entries stay in
	// the log after a snapshot, so a follower a little behind catches up
	// from the log instead of needing the whole snapshot.
	DefaultSnapshotCatchUpEntries = 100

	// localTickInterval is the tick of DefaultLocalConfig: elections in
	// 100-200ms, for tests and single-box clusters.
	localTickInterval = 10 * time.Millisecond
)

// Config configures a Group. Zero durations, tick counts and
// SnapshotEntries take the defaults of DefaultConfig.
type Config struct {
	// NodeID is this node's raft id: non-zero and never reused, even after
	// the node left (raft doc.go: "An ID represents a unique node in a
	// cluster for all time").
	NodeID uint64
	// Peers are the voters when bootstrapping a brand-new group; ignored
	// when the store already holds raft state. {NodeID} for a one-node
	// cluster. Empty means "join": wait to be added by an existing group.
	Peers []uint64
	// TickInterval is the duration of one raft tick.
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks; it must be greater
	// than HeartbeatTicks (raft: "ElectionTick must be greater than
	// HeartbeatTick"; in practice about 10x).
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks.
	HeartbeatTicks int
	// SnapshotEntries is the number of entries applied since the last
	// snapshot that triggers a new snapshot and log compaction.
	SnapshotEntries uint64
	// SnapshotCatchUpEntries is how many applied entries a compaction
	// keeps (0: DefaultSnapshotCatchUpEntries).
	SnapshotCatchUpEntries uint64
	// Store persists the raft log, hard state and snapshots. The caller
	// owns it: Close the Group before closing the Store.
	Store *store.Store
	// Transport carries raft messages to other nodes. It may be nil only
	// when Peers is exactly {NodeID}.
	Transport Transport
	// Logger receives the group's and raft's logs; default slog.Default().
	Logger *slog.Logger
	// FoundingVersion is the cluster version a cluster founded by this
	// group's Init starts at (0: version.Max, this build's highest). Tests
	// set it lower to play a node of an older build.
	FoundingVersion version.V
}

// DefaultConfig returns the production defaults; the caller sets NodeID,
// Peers, Store and Transport.
func DefaultConfig() Config {
	return Config{
		TickInterval:    DefaultTickInterval,
		ElectionTicks:   DefaultElectionTicks,
		HeartbeatTicks:  DefaultHeartbeatTicks,
		SnapshotEntries: DefaultSnapshotEntries,
		Logger:          slog.Default(),
	}
}

// DefaultLocalConfig is DefaultConfig with a 10ms tick, for tests and
// clusters on one machine.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.TickInterval = localTickInterval
	return c
}

// fill replaces zero fields with the defaults.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.TickInterval == 0 {
		c.TickInterval = d.TickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = d.ElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = d.HeartbeatTicks
	}
	if c.FoundingVersion == 0 {
		c.FoundingVersion = version.Max
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = d.SnapshotEntries
	}
	if c.SnapshotCatchUpEntries == 0 {
		c.SnapshotCatchUpEntries = DefaultSnapshotCatchUpEntries
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
}

// Validate checks the fields and how they relate. It does not fill
// defaults: New does that first.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.NodeID == 0 {
		bad("node id must be non-zero")
	}
	if c.TickInterval <= 0 {
		bad("tick interval %v must be positive", c.TickInterval)
	}
	if c.HeartbeatTicks <= 0 {
		bad("heartbeat ticks %d must be positive", c.HeartbeatTicks)
	}
	if c.ElectionTicks <= c.HeartbeatTicks {
		bad("election ticks %d must be greater than heartbeat ticks %d", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.SnapshotEntries == 0 {
		bad("snapshot entries must be positive")
	}
	if c.Store == nil {
		bad("no store")
	}
	for i, p := range c.Peers {
		if p == 0 {
			bad("peer id 0")
		} else if slices.Contains(c.Peers[:i], p) {
			bad("peer %d listed twice", p)
		}
	}
	if len(c.Peers) > 0 && !slices.Contains(c.Peers, c.NodeID) {
		bad("peers %v do not include this node %d", c.Peers, c.NodeID)
	}
	if c.Transport == nil && !(len(c.Peers) == 1 && c.Peers[0] == c.NodeID) {
		bad("no transport, but peers are %v, not just this node %d", c.Peers, c.NodeID)
	}
	if len(errs) > 0 {
		return fmt.Errorf("raftgroup: config: %w", errors.Join(errs...))
	}
	return nil
}
