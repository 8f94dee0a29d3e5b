package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// What Start brings up before it serves: the store, the id generator, the
// sockets, the metadata group, the partitions.

// idReserveAhead is how far past an id's millisecond the node records
// that its ids may reach: one synced write per this much time of issuing.
const idReserveAhead = 2 * time.Second

// startIDs starts the id generator past every id this node may have
// issued before (the reservation it recorded), and makes it record
// reservations from now on. Never issue an id twice, even if the clock was
// set back across a restart: a reissued id would conflict with, or for a
// forwarded fresh id overwrite, the task that holds it, in any partition.
func (n *Node) startIDs() error {
	n.ids = task.NewIDGen(n.id, n.clock)
	ms, found, err := n.store.IDReservation()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if found {
		n.ids.After(task.MakeID(ms, n.id, math.MaxUint32))
	}
	n.ids.Reserve(func(ms int64) error {
		err := n.store.PutIDReservation(ms)
		if err != nil {
			n.log.Error("recording the id reservation failed", "err", err)
		}
		return err
	}, idReserveAhead.Milliseconds())
	return nil
}

func (n *Node) openStore() error {
	dir := filepath.Join(n.cfg.DataDir, "store")
	sc := store.DefaultConfig(dir)
	sc.Logger = n.cfg.Logger
	// No hold until the pressure watch finds the CPU contended.
	sc.WALMinSyncInterval = 0
	sc.NoWALZeroAhead = n.cfg.NoWALZeroAhead
	if n.cfg.StoreFS != nil {
		sc.FS = n.cfg.StoreFS
	}
	s, err := store.Open(sc)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.store = s
	meta, err := s.NodeMeta()
	switch {
	case errors.Is(err, store.ErrNotFound):
		meta = store.NodeMeta{NodeID: newNodeID(), CreatedAt: clock.UnixMilli(n.clock)}
	case err != nil:
		return fmt.Errorf("node: read identity: %w", err)
	}
	if len(meta.ResetKey) != len(n.resetKey) {
		meta.ResetKey = make([]byte, len(n.resetKey))
		_, _ = rand.Read(meta.ResetKey)
		if err := s.PutNodeMeta(meta); err != nil {
			return fmt.Errorf("node: save identity: %w", err)
		}
	}
	copy(n.resetKey[:], meta.ResetKey)
	n.id = meta.NodeID
	return nil
}

// newNodeID returns a random non-zero id. Node ids are durable and never
// reused (raft requires it), so they are random rather than derived from an
// address.
func newNodeID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]) >> 1; id != 0 {
			return id // kept below 2^63 so it survives JSON number decoders
		}
	}
}

// bind opens UDP (QUIC) and TCP (HTTP) on one port number. With port 0,
// UDP picks the port and TCP takes the same number.
func (n *Node) bind() error {
	udp, err := net.ListenPacket("udp", n.cfg.Bind)
	if err != nil {
		return fmt.Errorf("node: bind udp %s: %w", n.cfg.Bind, err)
	}
	n.udp = udp
	host, _, _ := net.SplitHostPort(n.cfg.Bind)
	port := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
	addr := net.JoinHostPort(host, port)
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node: bind tcp %s: %w", addr, err)
	}
	n.tcp = tcp
	n.addr = addr
	if a := n.cfg.Advertise; a != "" {
		ahost, aport, _ := net.SplitHostPort(a)
		if aport == "0" {
			aport = port
		}
		n.addr = net.JoinHostPort(ahost, aport)
	} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		n.addr = net.JoinHostPort(hostIP(), port)
		n.log.Info("advertising a host address for the wildcard bind (set --advertise to choose)", "addr", n.addr)
	}
	return nil
}

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

func (n *Node) startRaft(ctx context.Context) error {
	rc := raftgroup.DefaultConfig()
	rc.NodeID = n.id
	// With a join list a node with no raft state waits to be added by the
	// cluster; without one it founds a cluster of one. A node with raft
	// state ignores Peers and comes back as what it was.
	if len(n.cfg.Join) == 0 {
		rc.Peers = []uint64{n.id}
	}
	rc.TickInterval = n.cfg.RaftTick
	rc.Store = n.store
	rc.Transport = n.raftTr
	rc.Logger = n.cfg.Logger // the group adds the node id itself
	g, err := raftgroup.New(rc)
	if err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	if err := g.Start(); err != nil {
		return fmt.Errorf("node: raft start: %w", err)
	}
	n.raft = g
	// Fresh: this node never took part in the metadata group (no raft
	// state). Not "no config applied yet": a restarted node applies its
	// committed entries again after Start returns, and one that took
	// itself for new would wait to be admitted through its join list,
	// which may be a node restarting too, that waits for it.
	fresh := !g.Restored()
	close(n.raftReady)
	// Gossip first: a restarted member finds its peers' addresses there
	// and in the registry it kept.
	n.gossipJoin()
	if fresh && len(n.cfg.Join) > 0 {
		if _, err := n.join(ctx); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := g.WaitLeader(ctx); err != nil {
		return fmt.Errorf("node: waiting for a metadata leader: %w", err)
	}
	var cc raftgroup.ClusterConfig
	if joined := fresh && len(n.cfg.Join) > 0; joined {
		c, err := n.waitConfig(ctx)
		if err != nil {
			return err
		}
		cc = *c
	} else {
		// Founding, or restarting: Init is idempotent and refuses flags
		// that disagree with the cluster's fixed P and N.
		cc, err = g.Init(ctx, raftgroup.ClusterConfig{
			ClusterID:  newClusterID(),
			Partitions: n.cfg.Partitions,
			Replicas:   n.cfg.Replicas,
			CreatedAt:  clock.UnixMilli(n.clock),
		})
		if err != nil {
			return fmt.Errorf("node: cluster config (the partition and replica counts are fixed when the cluster is created): %w", err)
		}
	}
	// A joiner takes the cluster's P and N, whatever its flags say.
	n.cfg.Partitions, n.cfg.Replicas = cc.Partitions, cc.Replicas
	if mem, ok := g.Meta().Members[n.id]; !ok || mem.Addr != n.addr {
		if err := g.PutMember(ctx, raftgroup.Member{ID: n.id, Addr: n.addr, Since: clock.UnixMilli(n.clock)}); err != nil {
			return fmt.Errorf("node: register: %w", err)
		}
	}
	n.log.Info("metadata group ready", "cluster", cc.ClusterID, "partitions", cc.Partitions, "replicas", cc.Replicas)
	return nil
}

// waitConfig waits until this node applied the cluster config (a joiner
// gets it from the metadata leader's log or snapshot).
func (n *Node) waitConfig(ctx context.Context) (*raftgroup.ClusterConfig, error) {
	for {
		ch := n.raft.Changed()
		if c := n.raft.Meta().Config; c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: waiting for the cluster config from the metadata group: %w", ctx.Err())
		case <-ch:
		}
	}
}

func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// loadPartitions creates the replicas and rebuilds their indexes from the
// store, on as many goroutines as there are CPUs.
func (n *Node) loadPartitions() error {
	n.parts = make([]*partition.Replica, n.cfg.Partitions)
	// One claim cache budget for all the replicas: only those this node
	// leads fill it, and which those are changes with the cluster.
	n.fresh = partition.NewFreshBudget(n.cfg.FreshSpecBytes)
	for p := range n.parts {
		n.parts[p] = partition.New(partition.Config{
			Part:       uint16(p),
			Partitions: n.cfg.Partitions,
			Self:       n.id,
			Store:      n.store,
			SkewBound:  n.cfg.SkewBound,
			TreeShape:  n.cfg.AAE.Shape,
			RetryBase:  n.cfg.RetryBase,
			RetryMax:   n.cfg.RetryMax,
			Logger:     n.log,
			OnHead:     n.heads.Set,
			OnTimer:    n.noteTimer,
			Fresh:      n.fresh,
		})
	}
	now := clock.UnixMilli(n.clock)
	work := make(chan *partition.Replica, len(n.parts))
	for _, r := range n.parts {
		work <- r
	}
	close(work)
	errs := make(chan error, len(n.parts))
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for r := range work {
				if err := r.Load(now); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}
