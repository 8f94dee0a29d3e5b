package coord

import (
	"time"

	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// keyPart returns the partition of queue's tasks with unique key key.
func (p *Plane) keyPart(queue, key string) uint16 {
	return ring.KeyPartition(queue, key, p.cfg.Partitions)
}

// keyedIDTries bounds the draws of keyedID: each hits the key's partition
// with probability 1/P, so 64·P draws miss with probability e^-64.
const keyedIDTries = 64

// StampIDs prepares an enqueue for its attempts (node/retrying): each
// task without an id gets a new one, marked fresh (EnqueueTask.FreshID),
// and the marks on the others are cleared, as are the Hinted marks: both
// are a node's word, never a client's. Every enqueue that reaches
// Coordinator's Enqueue has passed here: that face trusts the marks.
func (p *Plane) StampIDs(req *wire.EnqueueRequest) error {
	if err := p.h.Serving(); err != nil {
		return err
	}
	req.Taken = time.Now()
	for i := range req.Tasks {
		t := &req.Tasks[i]
		t.FreshID, t.Hinted, t.Drawn = false, false, false
		if t.ID == nil {
			id := p.newID(t, req.W)
			t.ID, t.FreshID, t.Drawn = &id, true, true
		}
	}
	return nil
}

// newID returns a new id for et, enqueued with w: of its key's
// partition when it has a key, else of a partition that can take it
// (placeID).
func (p *Plane) newID(et *wire.EnqueueTask, w int) task.ID {
	if et.Key == "" {
		return p.placeID(w)
	}
	want := p.keyPart(et.Queue, et.Key)
	id := p.ids.Next()
	for range keyedIDTries * p.cfg.Partitions {
		if p.partOf(id) == want {
			return id
		}
		id = p.ids.Next()
	}
	// Not reached in practice; newTask refuses an id of another
	// partition, so a miss cannot break the key's uniqueness.
	return id
}

// Placement of id-less tasks (docs/design.md, Operations: placement and
// hints). Ids carry no meaning beyond order, so skipping some costs
// nothing.
const (
	// localIDTries is how many draws placeID spends looking for a
	// partition this node leads before it takes any placeable one; with
	// this node leading a fraction f of the partitions it misses with
	// probability (1-f)^tries.
	localIDTries = 32
	// placeTries bounds all of placeID's draws: with a fraction g of the
	// partitions placeable it finds none with probability (1-g)^tries.
	placeTries = 256
)

// placeID returns a new task id for a task that has neither id nor key,
// of a partition whose cohort has enough reachable members to take a
// write of w (placeable), and preferably of one this node leads: the
// leader then holds the task at once (claimable without anti-entropy),
// and the tasks of a partition's leader land in it, so clients spread
// over the nodes spread tasks over the partitions. When no partition is
// placeable the id is any: its write then fails in doubt.
func (p *Plane) placeID(w int) task.ID {
	var fallback task.ID
	for i := range placeTries {
		id := p.ids.Next()
		part := p.partOf(id)
		if !p.placeable(part, w) {
			continue
		}
		if i >= localIDTries || p.leads(part) {
			return id
		}
		if fallback.IsZero() {
			fallback = id
		}
	}
	if !fallback.IsZero() {
		return fallback
	}
	return p.ids.Next()
}

// placeable reports whether enough members of part's cohort to take a
// write of w are reachable from here: this node, and the others that
// gossip holds alive and whose last replication request, if recent, was
// answered.
func (p *Plane) placeable(part uint16, w int) bool {
	need := p.repl.NeedAcks(part, w)
	up := 0
	for _, id := range p.h.Cohort(int(part)) {
		if id == p.cfg.Self || p.h.Alive(id) && p.repl.Reachable(id) {
			up++
		}
	}
	return up >= need
}

// Placeable is placeable for node/hints: whether a hint of part can be
// handed over now.
func (p *Plane) Placeable(part uint16, w int) bool { return p.placeable(part, w) }

// leaderOutOfReach reports whether part's leader, as the registry names
// it, is not this node and cannot be counted on to answer now: none
// is known, gossip does not hold it alive, or a replication request to
// it went unanswered (replication.Plane.Reachable).
func (p *Plane) leaderOutOfReach(part uint16) bool {
	ls := p.h.Leaders()
	if int(part) >= len(ls) || ls[part] == 0 {
		return true
	}
	l := ls[part]
	return l != p.cfg.Self && !(p.h.Alive(l) && p.repl.Reachable(l))
}
