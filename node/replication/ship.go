package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Replication (docs/design.md, Operations): a partition's leader applies a
// write to its own replica, ships the task's record to the other members
// of the cohort, and acknowledges once W replicas hold it durably (its own
// sync counts as one). Records are CRDT states, so shipping the state as
// it is after the write (which includes the write) is idempotent and
// order-free: a follower that gets two of them in any order ends equal.
//
// One link per follower node batches the records of every partition the
// follower serves into one OpReplicate request: many writes per frame and
// per follower fsync, not a round trip per write per replica.

// Replication limits.
const (
	// replQueueLen is the per-follower queue of items waiting to be sent;
	// when it is full the write counts that follower as not answering.
	replQueueLen = 8192
	// replBatchMax bounds the items of one OpReplicate request.
	replBatchMax = 512
	// replBatchBytes bounds the payload bytes of one OpReplicate request,
	// well inside a frame (wire.DefaultMaxFrame).
	replBatchBytes = 4 << 20
	// exportPageBytes bounds the payload bytes of one export page.
	exportPageBytes = 4 << 20
	// replSenders is the number of requests in flight per follower. One:
	// while a request waits for the follower's merge and fsync, the
	// writes that arrive queue, and the next request takes them all.
	// Measured with 64 clients on 3 nodes (skuldd_replication_* metrics):
	// 4 in flight carried 4.3 writes per request, 2 carried 7, 1 carries
	// 12, and the CPU per replicated write fell by 7% from 4 to 1 (each
	// request costs both ends packets, a decode and goroutine wake-ups).
	replSenders = 1
	// replTimeout bounds one OpReplicate request.
	replTimeout = 5 * time.Second
	// exportPage is the number of records per page of a partition
	// transfer.
	exportPage = 256
)

// Followers returns the cohort of part without this node, and the epoch
// this node leads part at (0: it does not lead it, and then a write must
// not be acknowledged: see NotLeading).
func (p *Plane) Followers(part uint16) ([]uint64, uint64) {
	ep := p.host.Replica(part).Epoch()
	if ep == 0 {
		return nil, 0
	}
	var out []uint64
	for _, id := range p.host.Cohort(int(part)) {
		if id != p.cfg.Self {
			out = append(out, id)
		}
	}
	return out, ep
}

// Shipment replicates one write: Ship sends the records to the
// followers, Finish waits until w replicas (this one included, once local
// is durable) hold them.
type Shipment struct {
	p    *Plane
	part uint16
	w    int
	// acks receives one answer per follower, in any order.
	acks chan replAck
	// retry rebuilds a follower's records whole, for a follower that
	// answered not-found (see Ship).
	retry func() ([]task.Record, error)
	to    []uint64
	ep    uint64
	// notLeading: this node did not lead the partition when shipping, so
	// Finish fails.
	notLeading bool
	// direct: an enqueue's new tasks sent by their coordinator (ShipNew),
	// not a leader's write: no epoch is at stake. held says whether this
	// node writes them too, and so counts as one replica.
	direct, held bool
}

// Ship starts replicating recs of part; whole rebuilds them whole (spec,
// every update) for a follower that answers not-found: it lacks the
// task, or holds an older line of writes than this leader's and takes
// this one in place of it only with every update (partition.Merge). A
// partition without followers costs nothing.
func (p *Plane) Ship(part uint16, w int, recs []task.Record, whole func() ([]task.Record, error)) *Shipment {
	s := &Shipment{p: p, part: part, w: w, retry: whole}
	s.to, s.ep = p.Followers(part)
	if s.ep == 0 {
		// Stepped down between the local write and now (a promise to
		// another candidate): nothing here may be acknowledged.
		s.notLeading = true
		return s
	}
	s.acks = make(chan replAck, 2*len(s.to)) // room for a resend each
	for i, f := range s.to {
		if !p.links.send(f, &replItem{item: wire.ReplicateItem{Part: part, Epoch: s.ep, Records: recs}, done: s.acks, idx: i}) {
			s.acks <- replAck{i, fmt.Errorf("%w: replication queue to node %d is full", wire.ErrUnavailable, f)}
		}
	}
	return s
}

// ShipNew starts writing an enqueue's new tasks of part (recs: specs
// alone, of tasks without key or deps) to every member of the cohort but
// this node, as their coordinator (wire.ReplicateItem.Direct): no leader
// is needed, so an enqueue does not wait for a failover. held says that
// this node is a member and writes them itself (partition.EnqueueDirect),
// so its durable write counts as one of the w replicas Finish waits for.
// The leader learns of the tasks from its own copy of this write, or, if
// that copy is lost, from anti-entropy or a read on a miss (ReadMissing).
func (p *Plane) ShipNew(part uint16, w int, recs []task.Record) *Shipment {
	s := &Shipment{p: p, part: part, w: w, direct: true}
	for _, id := range p.host.Cohort(int(part)) {
		if id == p.cfg.Self {
			s.held = true
		} else {
			s.to = append(s.to, id)
		}
	}
	s.acks = make(chan replAck, len(s.to))
	for i, f := range s.to {
		if !p.links.send(f, &replItem{item: wire.ReplicateItem{Part: part, Records: recs, Direct: true}, done: s.acks, idx: i}) {
			s.acks <- replAck{i, fmt.Errorf("%w: replication queue to node %d is full", wire.ErrUnavailable, f)}
		}
	}
	return s
}

// Held reports whether this node is a member of the cohort a ShipNew
// wrote to, which must then write the tasks itself.
func (s *Shipment) Held() bool { return s.held }

// Finish waits for the local write (local) and the followers, and
// returns the number of replicas that hold the write durably, as soon as
// w do. It fails when fewer than w can; a follower that refuses for a
// stale epoch means this node no longer leads (another candidate won a
// promise), and it steps down.
func (s *Shipment) Finish(ctx context.Context, local partition.Durable) (int, error) {
	return s.FinishBy(ctx, local, time.Time{})
}

// FinishBy is Finish whose wait for the followers also ends at by (the
// zero time: only with ctx), as at a deadline of ctx
// (context.DeadlineExceeded). It costs no timer when the wait is over
// before it blocks, as it is on one node or once w replicas answered:
// a context with a deadline per write cost an enqueue on one node about
// a tenth of its CPU.
func (s *Shipment) FinishBy(ctx context.Context, local partition.Durable, by time.Time) (int, error) {
	if local != nil {
		if err := local.Wait(); err != nil {
			return 0, err
		}
	}
	if s.notLeading {
		return 0, NotLeading(s.part)
	}
	acks := 1
	if s.direct && !s.held {
		acks = 0
	}
	if acks >= s.w {
		return acks, nil
	}
	var errs []error
	stale := false
	resent := map[int]bool{}
	var expired <-chan time.Time // by's timer, made when a wait first blocks
	for waiting := len(s.to); waiting > 0 && acks < s.w; {
		var a replAck
		select {
		case a = <-s.acks:
		default:
			if expired == nil && !by.IsZero() {
				t := time.NewTimer(time.Until(by))
				defer t.Stop()
				expired = t.C
			}
			select {
			case a = <-s.acks:
			case <-ctx.Done():
				errs = append(errs, ctx.Err())
				waiting = 0
				continue
			case <-expired:
				errs = append(errs, context.DeadlineExceeded)
				waiting = 0
				continue
			}
		}
		if a.err != nil && errors.Is(a.err, task.ErrNotFound) && s.retry != nil && !resent[a.idx] {
			// The follower missed the task: send it whole, once.
			resent[a.idx] = true
			if recs, err := s.retry(); err == nil && s.p.links.send(s.to[a.idx], &replItem{item: wire.ReplicateItem{Part: s.part, Epoch: s.ep, Records: recs}, done: s.acks, idx: a.idx}) {
				continue
			}
		}
		waiting--
		if a.err == nil {
			acks++
			continue
		}
		if errors.Is(a.err, task.ErrEpoch) {
			stale = true
		}
		errs = append(errs, fmt.Errorf("node %d: %w", s.to[a.idx], a.err))
	}
	if acks >= s.w {
		return acks, nil
	}
	if stale && !s.direct && s.p.host.Replica(s.part).Epoch() == s.ep {
		s.p.log.Warn("partition leadership lost: a follower promised a newer epoch", "partition", s.part, "epoch", s.ep)
		s.p.host.Replica(s.part).Resign()
	}
	return acks, fmt.Errorf("%w: partition %d: %d of %d required replicas hold the write: %v", wire.ErrUnavailable, s.part, acks, s.w, errors.Join(errs...))
}

// Replicate ships an applied write's record to the followers of part
// while its local sync runs, and waits until w replicas (0: a majority of
// the cohort) hold it durably, this one included: the one write pipeline
// of every leader op that changes one task.
func (p *Plane) Replicate(ctx context.Context, part uint16, w int, wr partition.Write) (int, error) {
	return p.Ship(part, p.NeedAcks(part, w), []task.Record{wr.Rec}, p.WholeRecord(part, wr.Rec.ID)).Finish(ctx, wr.Durable)
}

// WholeRecord returns what rebuilds task id's record whole, for a
// Shipment's retry.
func (p *Plane) WholeRecord(part uint16, id task.ID) func() ([]task.Record, error) {
	whole := p.WholeRecords(part, []task.Record{{ID: id}})
	return func() ([]task.Record, error) {
		recs, err := whole()
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("%w: %s", task.ErrNotFound, id)
		}
		return recs[:1], nil
	}
}

// WholeRecords returns what rebuilds the records recs whole, from this
// replica (those it holds), for a Shipment's retry: a follower that
// lacks a line of a task shipped in part asks for it whole.
func (p *Plane) WholeRecords(part uint16, recs []task.Record) func() ([]task.Record, error) {
	return func() ([]task.Record, error) {
		ids := make([]task.ID, len(recs))
		for i := range recs {
			ids[i] = recs[i].ID
		}
		return p.host.Replica(part).Records(ids)
	}
}

// ReplicateQuietly replicates an applied write no client waits for (a
// dependency notice, the release of an unanswered claim): it waits for
// the local sync only, and a failure is logged; the followers catch up
// with the next write of the task or through anti-entropy.
func (p *Plane) ReplicateQuietly(part uint16, wr partition.Write) {
	ctx, cancel := context.WithTimeout(context.Background(), replTimeout)
	defer cancel()
	if _, err := p.Replicate(ctx, part, 1, wr); err != nil {
		p.log.Debug("replicating a write no client waits for", "partition", part, "task", wr.Rec.ID, "err", err)
	}
}

// itemBytes estimates an item's encoded size: its payloads and updates
// dominate.
func itemBytes(it *replItem) int {
	n := 0
	for _, r := range it.item.Records {
		n += recordBytes(r)
	}
	return n
}

// recordBytesOverhead is a generous bound on a record's fixed fields.
const recordBytesOverhead = 256

func recordBytes(r task.Record) int {
	n := recordBytesOverhead
	if r.Spec != nil {
		n += len(r.Spec.Data)
	}
	for _, u := range r.Updates {
		n += len(u.Data) + 16
	}
	return n + len(r.Dependents)*task.IDLen
}

// NotLeading fails a write whose partition this node stopped leading
// after applying it: nothing of it may be acknowledged.
func NotLeading(part uint16) error {
	return fmt.Errorf("%w: partition %d: this node stopped leading it; retry", wire.ErrUnavailable, part)
}

// ConfirmLeading checks with a majority of part's cohort that this node
// still leads it at the epoch it leads at: each follower gets an empty
// replication item at that epoch, which a replica that promised a newer
// epoch refuses. A refusal steps this node down. It returns nil once a
// majority (this node included) answered yes.
func (p *Plane) ConfirmLeading(ctx context.Context, part uint16) error {
	to, ep := p.Followers(part)
	if ep == 0 {
		return NotLeading(part)
	}
	need := ring.Majority(len(to)+1) - 1 // this node is one
	if need <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, replTimeout)
	defer cancel()
	answers := make(chan error, len(to))
	for _, f := range to {
		go func() { answers <- p.sendEpoch(ctx, part, f, ep) }()
	}
	yes := 0
	var errs []error
	for range to {
		err := <-answers
		if err == nil {
			if yes++; yes >= need {
				return nil
			}
			continue
		}
		if errors.Is(err, task.ErrEpoch) && p.host.Replica(part).ResignAt(ep) {
			p.log.Warn("stepping down: a follower promised a newer epoch", "partition", part, "epoch", ep)
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%w: partition %d: %d of %d followers confirmed epoch %d: %v", wire.ErrUnavailable, part, yes, need, ep, errors.Join(errs...))
}
