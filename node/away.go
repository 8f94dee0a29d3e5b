package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/store"
)

// Garbage collection runs in node/replication (each leader's passes, the
// tombstones' expiry); here are the client op, which runs a pass on every
// leader, and the guard against a node back from longer than the
// tombstones last (checkAway).

// aliveInterval is how often a node records that it is up, so that a
// restart can tell how long it was away (checkAway).
const aliveInterval = time.Minute

// ErrAwayTooLong refuses to start a node that was down longer than half
// the tombstone horizon.
var ErrAwayTooLong = errors.New("this node was away too long for the tombstone horizon")

// checkAway refuses to start a node of a multi-node cluster that was down
// longer than half the TombstoneHorizon with task data or hints: its
// replicas and hints may hold tasks the others collected and whose
// tombstones they have since dropped, and anti-entropy or a handover
// would bring those back. It runs once the metadata is loaded and before
// the partitions are.
func (n *Node) checkAway() error {
	at, found, err := n.store.Alive()
	if err != nil || !found {
		return err
	}
	// Tombstones written just after the node left expire a horizon
	// later: a node back after more than half of it could find them gone
	// before anti-entropy brings them, so half is the limit.
	away := time.Duration(n.now()-at) * time.Millisecond
	if away <= n.cfg.TombstoneHorizon/2 {
		return nil
	}
	if m := n.raft.Meta(); len(m.Members) <= 1 {
		return nil // no peer to bring anything back to
	}
	// Hints are copies of tasks too: one that another holder handed over
	// long ago (node/coord's spread) would bring back a task collected
	// meanwhile. Unlike task data, a hint may exist nowhere else.
	hints := 0
	if err := n.store.Hints(func(store.Hint) bool { hints++; return true }); err != nil {
		return err
	}
	if hints > 0 {
		return fmt.Errorf("node: %w: down for %v (since %s), more than half the horizon %v, holding %d hints (enqueues it kept "+
			"for cohorts it could not reach; some may exist nowhere else): one another node handed over may have been "+
			"collected and its tombstones soon dropped, and would come back. If no task was collected meanwhile, start it "+
			"with --tombstone-horizon above %v to hand them over",
			ErrAwayTooLong, away.Round(time.Second), time.UnixMilli(at).UTC().Format(time.RFC3339),
			n.cfg.TombstoneHorizon, hints, 2*(away.Round(time.Hour)+time.Hour))
	}
	for p := range n.cfg.Partitions {
		has, err := n.store.HasTasks(uint16(p))
		if err != nil {
			return err
		}
		if has {
			return fmt.Errorf("node: %w: down for %v (since %s), more than half the horizon %v: its copies may hold "+
				"tasks the cluster garbage-collected and soon has no tombstones of, which would come back. Move the data dir "+
				"%s away and start the node empty with --join (its peers hold every acknowledged write); or, if no task was "+
				"collected meanwhile, start it with --tombstone-horizon above %v",
				ErrAwayTooLong, away.Round(time.Second), time.UnixMilli(at).UTC().Format(time.RFC3339),
				n.cfg.TombstoneHorizon, n.cfg.DataDir, 2*(away.Round(time.Hour)+time.Hour))
		}
	}
	return nil
}

// aliveLoop records, now and every aliveInterval, that the node is up.
func (n *Node) aliveLoop(ctx context.Context) {
	t := time.NewTicker(aliveInterval)
	defer t.Stop()
	for {
		if err := n.store.PutAlive(n.now()); err != nil {
			n.log.Warn("recording that the node is up failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
