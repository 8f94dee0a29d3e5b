package replication

import (
	"cmp"
	"context"
	"fmt"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// ReadReplicas reads task id from r replicas of part (0: a majority of
// the cohort; this one, the leader, is always among them) and returns
// the leader's record of it, whole (every update).
//
// The leader's replica is the partition's word: it holds every write
// that counts and no orphan (partition's "Epochs and orphans"), so the
// view is its own, not a merge that could take a superseded leader's
// writes from a follower. The followers are read to learn that none
// holds a newer leader's writes (then this node leads no more: the read
// fails, and the coordinator asks the new leader) and which are behind:
// the leader repairs those with its record. A task only a follower holds
// (an enqueue acknowledged with a small w) is taken from it without its
// state, which no line of writes of this leader vouches for.
func (p *Plane) ReadReplicas(ctx context.Context, part uint16, id task.ID, followers []uint64, r int) (*task.Record, error) {
	ep := p.host.Replica(part).Epoch()
	if ep == 0 {
		return nil, NotLeading(part)
	}
	size := len(followers) + 1
	if r == 0 {
		r = size/2 + 1
	}
	if r > size {
		return nil, fmt.Errorf("%w: r=%d exceeds the partition's cohort of %d", task.ErrInvalid, r, size)
	}
	type answer struct {
		node uint64
		rec  *task.Record
		err  error
	}
	answers := make(chan answer, len(followers))
	for _, f := range followers {
		go func() {
			rec, err := p.fetchRecord(ctx, f, part, id)
			answers <- answer{f, rec, err}
		}()
	}
	local, err := p.localRecord(part, id)
	if err != nil {
		return nil, err
	}
	recs := map[uint64]*task.Record{p.cfg.Self: local}
	read := 1
	for range followers {
		if read >= r {
			break
		}
		a := <-answers
		if a.err != nil {
			continue
		}
		if a.rec != nil && a.rec.State != nil && a.rec.State.Stamp > ep {
			p.log.Warn("stepping down: a follower holds a newer leader's writes", "partition", part, "epoch", ep, "task", id, "stamp", a.rec.State.Stamp, "follower", a.node)
			p.host.Replica(part).Resign()
			return nil, fmt.Errorf("%w: partition %d: node %d holds writes of epoch %d, above this leader's %d", task.ErrEpoch, part, a.node, a.rec.State.Stamp, ep)
		}
		recs[a.node] = a.rec
		read++
	}
	if read < r {
		return nil, fmt.Errorf("%w: read %d of %d replicas of partition %d", wire.ErrUnavailable, read, r, part)
	}
	// A tombstone is authoritative (partition/gc.go): the task was
	// collected, and the replicas still holding it missed that.
	if tomb := tombOf(recs); tomb != 0 {
		rec := task.Record{ID: id, Tomb: tomb}
		for node, r := range recs {
			if r == nil || r.Tomb == 0 {
				p.repairReplica(node, part, ep, rec)
			}
		}
		return nil, fmt.Errorf("%w: %s (completed and garbage-collected)", task.ErrNotFound, id)
	}
	if local == nil {
		if local, err = p.adoptSpec(part, ep, id, recs); err != nil || local == nil {
			return nil, cmp.Or(err, fmt.Errorf("%w: %s", task.ErrNotFound, id))
		}
	}
	// Repair whoever is behind (a missing task, another state or other
	// updates). Best effort: a failed repair is retried by the next read
	// or write of the task, or by anti-entropy.
	for node, rec := range recs {
		if node != p.cfg.Self && !sameRecord(rec, local) {
			p.repairReplica(node, part, ep, *local)
		}
	}
	return local, nil
}

// ReadMissing looks for task id, which this leader's replica of part
// lacks, on the other members of the cohort, and takes its spec from the
// first that holds it (adoptSpec): an enqueue written to the cohort by
// its coordinator (ShipNew) can be acknowledged by W replicas before the
// leader's own copy arrives, or without it. It reports whether this
// replica holds the task now; a leader answers "not found" only after
// asking, so an acknowledged enqueue is never refused as unknown.
func (p *Plane) ReadMissing(ctx context.Context, part uint16, id task.ID) (bool, error) {
	to, ep := p.Followers(part)
	if ep == 0 {
		return false, NotLeading(part)
	}
	if len(to) == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, replTimeout)
	defer cancel()
	type answer struct {
		node uint64
		rec  *task.Record
	}
	answers := make(chan answer, len(to))
	for _, f := range to {
		go func() {
			rec, err := p.fetchRecord(ctx, f, part, id)
			if err != nil {
				rec = nil
			}
			answers <- answer{f, rec}
		}()
	}
	for range to {
		a := <-answers
		if a.rec == nil || a.rec.Spec == nil {
			continue
		}
		local, err := p.adoptSpec(part, ep, id, map[uint64]*task.Record{a.node: a.rec})
		return local != nil, err
	}
	return false, nil
}

// localRecord reads task id's whole record from this replica (nil: it
// does not hold it; a Record with Tomb set: it holds its tombstone).
func (p *Plane) localRecord(part uint16, id task.ID) (*task.Record, error) {
	recs, err := p.host.Replica(part).Records([]task.ID{id})
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &recs[0], nil
}

// adoptSpec takes task id, which this leader's replica lacks, from a
// follower's record among recs: its spec (a write without a line of
// writes), not its state. It returns the task as this replica then holds
// it, or nil if no follower held it either.
func (p *Plane) adoptSpec(part uint16, ep uint64, id task.ID, recs map[uint64]*task.Record) (*task.Record, error) {
	for node, rec := range recs {
		if rec == nil || rec.Spec == nil {
			continue
		}
		d, _, err := p.host.Replica(part).Merge(partition.Source{Epoch: ep, Floor: ep, From: node}, []task.Record{*rec}, p.now())
		if err != nil {
			return nil, err
		}
		if err := d.Wait(); err != nil {
			return nil, err
		}
		return p.localRecord(part, id)
	}
	return nil, nil
}

// sameRecord reports whether a follower's record holds what the leader's
// does: the same state and updates (nil: the follower lacks the task).
func sameRecord(rec, leader *task.Record) bool {
	if rec == nil || rec.State == nil || leader.State == nil || !rec.State.Equal(leader.State) || len(rec.Updates) != len(leader.Updates) {
		return false
	}
	for i, u := range rec.Updates {
		if l := leader.Updates[i]; u.Claim != l.Claim || u.Seq != l.Seq || string(u.Data) != string(l.Data) {
			return false
		}
	}
	return true
}

// repairReplica sends rec, this leader's record at epoch ep, to node's
// replica of part, which takes it in place of its own (the leader's
// word). Best effort: a failed repair is retried by the next read or
// write of the task, or by anti-entropy.
func (p *Plane) repairReplica(node uint64, part uint16, ep uint64, rec task.Record) {
	if node == p.cfg.Self { // a tombstone this replica lacks: grow-only
		if d, _, err := p.host.Replica(part).Merge(partition.Source{Epoch: ep, Floor: ep, From: p.cfg.Self}, []task.Record{rec}, p.now()); err == nil {
			_ = d.Wait()
		}
		return
	}
	p.links.send(node, &replItem{item: wire.ReplicateItem{Part: part, Epoch: ep, Records: []task.Record{rec}}, done: make(chan replAck, 1)})
}

// tombOf returns the first of the tombstones in recs by task.TombLess
// (0: none).
func tombOf(recs map[uint64]*task.Record) int64 {
	var at int64
	for _, r := range recs {
		if r != nil && r.Tomb != 0 && (at == 0 || task.TombLess(r.Tomb, at)) {
			at = r.Tomb
		}
	}
	return at
}

// fetchRecord reads task id's record from node's replica of part (nil:
// that replica does not hold it; a Record with Tomb set: it holds the
// task's tombstone).
func (p *Plane) fetchRecord(ctx context.Context, node uint64, part uint16, id task.ID) (*task.Record, error) {
	addr := p.host.AddrOf(node)
	if addr == "" {
		return nil, fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, node)
	}
	// One record by id (OpAAEFetch answers tombstones too); an export
	// from id would stream the rest of the partition after it.
	var resp wire.AAEFetchResponse
	if err := p.host.Peers().Call(ctx, addr, wire.OpAAEFetch, &wire.AAEFetchRequest{Part: part, IDs: []task.ID{id}}, &resp); err != nil {
		return nil, err
	}
	for _, m := range resp.Records {
		if m.ID == id {
			r := m
			return &r, nil
		}
	}
	return nil, nil
}
