package node

import (
	"context"
	"fmt"

	"github.com/skuldd/skuldd/node/coord"
	"github.com/skuldd/skuldd/node/retrying"
	"github.com/skuldd/skuldd/wire"
)

// The client API is the coordinator plane's (node/coord); node builds it
// at Start, over coordHost, and hands its faces to the servers: clients
// reach its Coordinator face behind node/retrying and the request
// metrics, peers its Forwarded face.

// coordConfig is the coordinator plane's part of the node's
// configuration (validated with it).
func (n *Node) coordConfig() coord.Config {
	c := n.cfg
	return coord.Config{
		Self: n.id, Partitions: c.Partitions, MaxBatch: c.MaxBatch, MaxPayload: c.MaxPayload,
		MaxTTL: c.MaxTTL, MaxWait: c.MaxWait, MaxDelay: c.MaxDelay, DefaultTTL: c.DefaultTTL,
		DefaultMaxAttempts: c.DefaultMaxAttempts, SkewBound: c.SkewBound, HintWait: c.HintWait,
		ClaimOrderSlack: c.ClaimOrderSlack, Retention: c.Retention,
		CallTimeout: peerCallTimeout, DialTimeout: peerDialTimeout, Clock: n.clock, Log: n.log,
	}
}

// startCoord builds the coordinator plane and its faces, once every plane
// it acts through exists; client ops are served from then on (each still
// refuses until the node is ready).
func (n *Node) startCoord() error {
	c, err := coord.New(n.coordConfig(), coord.Planes{
		Parts: n.parts, Store: n.store, Repl: n.repl, Deps: n.deps, Hints: n.hints, Queues: n.queues,
		Heads: n.heads, Summaries: &n.sums, Schedules: n.sched, Shards: n.shards, IDs: n.ids, Peers: n.peers,
	}, coordHost{n})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// The guard is outermost: a refused request is counted nowhere and
	// costs no retry.
	client := n.access.Guard(n.metrics.Meter(retrying.New(retryHost{c.Coordinator(), c, n})), adminAPI{n})
	n.coord.Store(c)
	n.api.Store(&apiFaces{
		client:        client,
		clientHandler: wire.ServiceHandler(client),
		peerHandler:   wire.ServiceHandler(c.Forwarded()),
	})
	return nil
}

// coordPlane returns the coordinator plane, or why there is none yet.
func (n *Node) coordPlane() (*coord.Plane, error) {
	if c := n.coord.Load(); c != nil {
		return c, nil
	}
	return nil, errStarting
}

// retryHost is the coordinator plane as node/retrying's Host: its
// Coordinator face, each op tried once.
type retryHost struct {
	wire.Service
	c *coord.Plane
	n *Node
}

func (h retryHost) Stopping() bool                          { return h.n.stopping.Load() }
func (h retryHost) StampIDs(req *wire.EnqueueRequest) error { return h.c.StampIDs(req) }
func (h retryHost) Unreachable(need retrying.Need) error    { return h.n.unreachable(need) }

// coordHost is the node as the coordinator plane sees it (coord.Host).
type coordHost struct{ n *Node }

var _ coord.Host = coordHost{}

func (h coordHost) Serving() error { return h.n.serving() }

func (h coordHost) Stopping() bool           { return h.n.stopping.Load() }
func (h coordHost) Stopped() <-chan struct{} { return h.n.stopc }
func (h coordHost) Go(f func())              { h.n.wg.Go(f) }
func (h coordHost) Leaders() []uint64        { return h.n.leaders() }
func (h coordHost) Cohort(part int) []uint64 { return h.n.partitionCohort(part) }
func (h coordHost) CohortSize() int          { return int(h.n.cohort.Load()) }
func (h coordHost) Alive(id uint64) bool     { return h.n.ms.Alive(id) }
func (h coordHost) AddrOf(id uint64) string  { return h.n.ms.AddrOf(id) }
func (h coordHost) Drifting() (bool, string) { return h.n.drifting() }
func (h coordHost) ErrDrifting() error       { return h.n.errDrifting() }
func (h coordHost) CatchUp()                 { h.n.catchUp() }

func (h coordHost) Leave(ctx context.Context) (*wire.LeaveResponse, error) {
	return h.n.Leave(ctx)
}

func (h coordHost) Cluster(context.Context) (*wire.ClusterResponse, error) {
	return h.n.clusterView()
}
