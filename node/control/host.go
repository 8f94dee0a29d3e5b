package control

import (
	"context"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/node/peer"
	"github.com/skuldd/skuldd/raftgroup"
)

// Host is the rest of the node as the control plane sees it: node
// implements it over its replicas, its metadata group, gossip, its peer
// pool and the replication data plane. Every method is safe for
// concurrent use. Control calls it from StartClock on, when the metadata
// group, gossip, the peer pool and the replicas all exist, and from the
// peer-op handlers, which node serves once the replicas are loaded.
type Host interface {
	Replicas
	Cluster
	DataPlane
	Lifecycle
}

// Replicas is this node's partition replicas and the claim fence beside
// them.
type Replicas interface {
	// Partitions is how many partitions the node holds a replica of.
	Partitions() int
	// Replica is this node's replica of part, 0 <= part < Partitions().
	Replica(part int) Replica
	// HasTasks reports whether the store holds tasks of part.
	HasTasks(part uint16) (bool, error)
	// Fence stops (on) or lets again (off) part's heads serve claims, and
	// reports whether that changed anything.
	Fence(part uint16, on bool) bool
	// Fenced reports whether part is fenced.
	Fenced(part uint16) bool
}

// Replica is one partition replica as the control plane drives it
// (partition.Replica).
type Replica interface {
	// Epoch is the epoch this replica leads at; 0: it does not lead.
	Epoch() uint64
	// Promised is the highest epoch promised, and to whom.
	Promised() (ep, candidate uint64)
	// Promise vows to refuse writes below ep, for candidate.
	Promise(ep, candidate uint64) error
	// Lead makes the replica lead at ep (won by a handoff).
	Lead(ep uint64) error
	// Resign stops leading; ResignAt only if it still leads at ep.
	Resign()
	ResignAt(ep uint64) bool
	// Root is the root of the replica's anti-entropy tree.
	Root() antientropy.Digest
	// ReleaseAt drops the replica's data (a zombie's) if its root is
	// still root (partition.Replica.ReleaseAt).
	ReleaseAt(registry uint64, root antientropy.Digest) error
}

// Cluster is what this node knows of the others and how it reaches them.
type Cluster interface {
	// Group is the metadata group.
	Group() Group
	// Gossip is gossip's membership; nil before it started.
	Gossip() Gossip
	// Peers is the pool of peer connections.
	Peers() *peer.Pool
	// AddrOf is the address of node id, or "" when unknown.
	AddrOf(id uint64) string
	// Placement is the registry's placement as node's cache last saw it;
	// false before the cluster config is applied.
	Placement() (Placement, bool)
}

// Group is the metadata raft group (raftgroup.Group): the partition
// registry and the shape of the group.
type Group interface {
	Meta() raftgroup.Meta
	Leader() uint64
	CAS(ctx context.Context, c raftgroup.CAS) error
	Config() (voters, learners []uint64)
	ApplyConfStep(ctx context.Context, s raftgroup.ConfStep) error
}

// Gossip is gossip's view of the members (member.Member).
type Gossip interface {
	Members() []member.Peer
	Lookup(id uint64) (addr string, state member.State, ok bool)
}

// Placement is every partition's registry entry, indexed by partition.
// The slices are shared: never modified.
type Placement struct {
	Cohorts [][]uint64
	Leaders []uint64 // 0: none
	Epochs  []uint64
}

// DataPlane is the replication data plane, which leadership drives but
// does not own.
type DataPlane interface {
	// Carry is the handoff's carry (epoch.Carrier).
	epoch.Carrier
	// Pull copies part from node from, at addr, into this replica, and
	// returns how many records it merged.
	Pull(ctx context.Context, addr string, from uint64, part uint16) (int, error)
	// Gather takes into this replica of part, which this node leads, what
	// node from's copy holds that counts (replication.Plane.Gather).
	Gather(ctx context.Context, part uint16, from uint64) error
}

// Lifecycle is the node's life as control sees it.
type Lifecycle interface {
	// Departing: the node hands its partitions off and stops; it takes
	// no leadership any more.
	Departing() bool
	// TimersDue makes the partitions' timers run at the next tick (they
	// were held while the clock was not trusted).
	TimersDue()
	// Exit asks the process to stop (ExitOnDrift).
	Exit(err error)
	// Led tells the node it now leads part, at a new epoch: the notices
	// that completions sent the old leader about the partition's blocked
	// tasks may be lost, so the node re-checks those soon.
	Led(part uint16)
}
