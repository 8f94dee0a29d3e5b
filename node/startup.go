package node

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// What Start brings up before it serves: the store, the id generator, the
// sockets, the partitions (the metadata group is node/membership's).

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
			OnMove:     n.metrics.CountMove,
			OnClaimEnd: n.countClaimEnd,
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
