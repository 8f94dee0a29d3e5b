package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/skuldd/skuldd/ring"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Replication (DESIGN.md, Operations): a partition's leader applies a
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

// replItem is one partition's records for one follower, and where the
// follower's answer goes.
type replItem struct {
	item wire.ReplicateItem
	// done receives the outcome, tagged with idx: nil, or the item's (or
	// first record's) error. Buffered for every item that shares it: the
	// sender never blocks on it.
	done chan replAck
	idx  int
}

// replAck is one follower's answer to one item.
type replAck struct {
	idx int
	err error
}

// replicator owns the links to followers.
type replicator struct {
	n     *Node
	ctx   context.Context
	mu    sync.Mutex
	links map[uint64]chan *replItem
	wg    sync.WaitGroup

	// Counters for /metrics: items per request is what batching buys.
	requests, items, records, failed atomic.Int64
	// inFlight is the nanoseconds requests spent between being sent and
	// answered: over requests, a follower's round trip as this leader
	// sees it.
	inFlight atomic.Int64

	// The follower side, for /metrics: requests served, and the
	// nanoseconds spent merging them and then waiting for their sync.
	served, mergeNanos, syncNanos atomic.Int64
}

func newReplicator(ctx context.Context, n *Node) *replicator {
	return &replicator{n: n, ctx: ctx, links: make(map[uint64]chan *replItem)}
}

// send queues it for follower to; false when the link's queue is full or
// the node is stopping.
func (rp *replicator) send(to uint64, it *replItem) bool {
	rp.mu.Lock()
	if rp.ctx.Err() != nil {
		rp.mu.Unlock()
		return false
	}
	q := rp.links[to]
	if q == nil {
		q = make(chan *replItem, replQueueLen)
		rp.links[to] = q
		for range replSenders {
			rp.wg.Go(func() { rp.sender(to, q) })
		}
	}
	rp.mu.Unlock()
	select {
	case q <- it:
		return true
	default:
		return false
	}
}

// sender takes batches off a follower's queue and sends them.
func (rp *replicator) sender(to uint64, q chan *replItem) {
	for {
		var first *replItem
		select {
		case <-rp.ctx.Done():
			// Answer what is queued, so no write waits for a sender
			// that is gone.
			for {
				select {
				case it := <-q:
					it.done <- replAck{it.idx, wire.ErrShuttingDown}
				default:
					return
				}
			}
		case first = <-q:
		}
		batch := []*replItem{first}
		size := itemBytes(first)
	drain:
		for len(batch) < replBatchMax && size < replBatchBytes {
			select {
			case it := <-q:
				batch = append(batch, it)
				size += itemBytes(it)
			default:
				break drain
			}
		}
		rp.deliver(to, batch)
	}
}

func (rp *replicator) deliver(to uint64, batch []*replItem) {
	fail := func(err error) {
		rp.failed.Add(1)
		for _, it := range batch {
			it.done <- replAck{it.idx, err}
		}
	}
	addr := rp.n.addrOf(to)
	if addr == "" {
		fail(fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, to))
		return
	}
	req := &wire.ReplicateRequest{Items: make([]wire.ReplicateItem, len(batch))}
	records := 0
	for i, it := range batch {
		req.Items[i] = it.item
		records += len(it.item.Records)
	}
	rp.requests.Add(1)
	rp.items.Add(int64(len(batch)))
	rp.records.Add(int64(records))
	ctx, cancel := context.WithTimeout(rp.ctx, replTimeout)
	defer cancel()
	var resp wire.ReplicateResponse
	sent := time.Now()
	err := rp.n.peers.Call(ctx, addr, wire.OpReplicate, req, &resp)
	rp.inFlight.Add(int64(time.Since(sent)))
	if err != nil {
		fail(err)
		return
	}
	if len(resp.Results) != len(batch) {
		fail(fmt.Errorf("%w: node %d answered %d results for %d items", wire.ErrUnavailable, to, len(resp.Results), len(batch)))
		return
	}
	for i, it := range batch {
		it.done <- replAck{it.idx, resultErr(resp.Results[i])}
	}
}

// resultErr turns an item's result into an error: the item's own, else
// the first record's.
func resultErr(r wire.ReplicateResult) error {
	if r.Code != wire.CodeOK {
		return &wire.Error{Code: r.Code, Msg: r.Err}
	}
	for _, rr := range r.Records {
		if rr.Code != wire.CodeOK {
			return &wire.Error{Code: rr.Code, Msg: rr.Err}
		}
	}
	return nil
}

// wait waits for the senders, after the node's loops were cancelled.
func (rp *replicator) wait() { rp.wg.Wait() }

// followers returns the cohort of part without this node, and the epoch
// this node leads part at (0: it does not lead it, and then a write must
// not be acknowledged: see notLeading).
func (n *Node) followers(part uint16) ([]uint64, uint64) {
	ep := n.parts[part].Epoch()
	if ep == 0 {
		return nil, 0
	}
	var out []uint64
	for _, id := range n.partitionCohort(int(part)) {
		if id != n.id {
			out = append(out, id)
		}
	}
	return out, ep
}

// shipper replicates one write: ship sends the records to the
// followers, finish waits until w replicas (this one included, once local
// is durable) hold them.
type shipper struct {
	n    *Node
	part uint16
	w    int
	// acks receives one answer per follower, in any order.
	acks chan replAck
	// retry rebuilds a follower's records whole, for a follower that
	// answered not-found (see ship).
	retry func() ([]wire.RecordMsg, error)
	to    []uint64
	ep    uint64
	// notLeading: this node did not lead the partition when shipping, so
	// finish fails.
	notLeading bool
}

// ship starts replicating recs of part; whole rebuilds them whole (spec,
// every update) for a follower that answers not-found: it lacks the
// task, or holds an older line of writes than this leader's and takes
// this one in place of it only with every update (partition.Merge). A
// partition without followers costs nothing.
func (n *Node) ship(part uint16, w int, recs []wire.RecordMsg, whole func() ([]wire.RecordMsg, error)) *shipper {
	s := &shipper{n: n, part: part, w: w, retry: whole}
	s.to, s.ep = n.followers(part)
	if s.ep == 0 {
		// Stepped down between the local write and now (a promise to
		// another candidate): nothing here may be acknowledged.
		s.notLeading = true
		return s
	}
	s.acks = make(chan replAck, 2*len(s.to)) // room for a resend each
	for i, f := range s.to {
		if !n.repl.send(f, &replItem{item: wire.ReplicateItem{Part: part, Epoch: s.ep, Records: recs}, done: s.acks, idx: i}) {
			s.acks <- replAck{i, fmt.Errorf("%w: replication queue to node %d is full", wire.ErrUnavailable, f)}
		}
	}
	return s
}

// finish waits for the local write (local) and the followers, and
// returns the number of replicas that hold the write durably, as soon as
// w do. It fails when fewer than w can; a follower that refuses for a
// stale epoch means this node no longer leads (another candidate won a
// promise), and it steps down.
func (s *shipper) finish(ctx context.Context, local partition.Durable) (int, error) {
	if local != nil {
		if err := local.Wait(); err != nil {
			return 0, err
		}
	}
	if s.notLeading {
		return 0, errNotLeading(s.part)
	}
	acks := 1
	if len(s.to) == 0 || acks >= s.w {
		return acks, nil
	}
	var errs []error
	stale := false
	resent := map[int]bool{}
	for waiting := len(s.to); waiting > 0 && acks < s.w; {
		var a replAck
		select {
		case a = <-s.acks:
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			waiting = 0
			continue
		}
		if a.err != nil && errors.Is(a.err, task.ErrNotFound) && s.retry != nil && !resent[a.idx] {
			// The follower missed the task: send it whole, once.
			resent[a.idx] = true
			if recs, err := s.retry(); err == nil && s.n.repl.send(s.to[a.idx], &replItem{item: wire.ReplicateItem{Part: s.part, Epoch: s.ep, Records: recs}, done: s.acks, idx: a.idx}) {
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
	if stale && s.n.parts[s.part].Epoch() == s.ep {
		s.n.log.Warn("partition leadership lost: a follower promised a newer epoch", "partition", s.part, "epoch", s.ep)
		s.n.parts[s.part].Resign()
	}
	return acks, fmt.Errorf("%w: partition %d: %d of %d required replicas hold the write: %v", wire.ErrUnavailable, s.part, acks, s.w, errors.Join(errs...))
}

// replicateTask ships task id's current record (and ups) after a local
// write that is already durable, and waits for w replicas.
func (n *Node) replicateTask(ctx context.Context, id task.ID, w int, ups ...partition.Update) (int, error) {
	part := n.partOf(id)
	w = n.needAcks(part, w)
	to, ep := n.followers(part)
	if ep == 0 {
		return 0, errNotLeading(part)
	}
	if len(to) == 0 {
		return 1, nil
	}
	rec, err := n.parts[part].Record(id, false, ups...)
	if err != nil {
		return 0, err
	}
	return n.ship(part, w, []wire.RecordMsg{recordToWire(rec)}, n.wholeRecord(part, id)).finish(ctx, nil)
}

// wholeRecord returns what rebuilds task id's record whole, for a
// shipper's retry.
func (n *Node) wholeRecord(part uint16, id task.ID) func() ([]wire.RecordMsg, error) {
	return func() ([]wire.RecordMsg, error) {
		recs, err := n.parts[part].Records([]task.ID{id})
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("%w: %s", task.ErrNotFound, id)
		}
		return []wire.RecordMsg{recordToWire(recs[0])}, nil
	}
}

func recordToWire(r partition.Record) wire.RecordMsg {
	m := wire.RecordMsg{ID: r.ID, Spec: r.Spec, State: r.State, Dependents: r.Dependents, Tomb: r.Tomb, Meta: r.Meta, Full: r.Full}
	for _, u := range r.Updates {
		m.Updates = append(m.Updates, wire.UpdateMsg{Claim: u.Claim, Seq: u.Seq, Data: u.Data})
	}
	return m
}

func recordFromWire(m wire.RecordMsg) partition.Record {
	r := partition.Record{ID: m.ID, Spec: m.Spec, State: m.State, Dependents: m.Dependents, Tomb: m.Tomb, Meta: m.Meta, Full: m.Full}
	for _, u := range m.Updates {
		r.Updates = append(r.Updates, partition.Update{Claim: u.Claim, Seq: u.Seq, Data: u.Data})
	}
	return r
}

// serveReplicate is the follower side: merge each item into its replica,
// wait until all are durable (one fsync for the whole request), answer
// per item and record. Items come from peer as the leader of their epoch
// (shipped writes, anti-entropy pushes, repairs, a carry): its word
// replaces this replica's older lines of writes (partition.Source).
func (n *Node) serveReplicate(peer uint64, req *wire.ReplicateRequest) (*wire.ReplicateResponse, error) {
	began := time.Now()
	now := n.now()
	resp := &wire.ReplicateResponse{Results: make([]wire.ReplicateResult, len(req.Items))}
	var durables []partition.Durable
	for i, it := range req.Items {
		res := &resp.Results[i]
		if int(it.Part) >= len(n.parts) {
			res.Code, res.Err = wire.CodeInvalid, fmt.Sprintf("partition %d out of range", it.Part)
			continue
		}
		recs := make([]partition.Record, len(it.Records))
		for j, m := range it.Records {
			recs[j] = recordFromWire(m)
		}
		n.noteDependents(it.Records) // before the edges are written: see depSet
		d, recErrs, err := n.parts[it.Part].Merge(partition.Source{Epoch: it.Epoch, Authority: it.Epoch, From: peer}, recs, now)
		if err != nil {
			we := wire.ToError(err)
			res.Code, res.Err = we.Code, we.Msg
			continue
		}
		if d != nil {
			durables = append(durables, d)
		}
		if recErrs != nil {
			res.Records = make([]wire.Result, len(recErrs))
			for j, e := range recErrs {
				if e != nil {
					we := wire.ToError(e)
					res.Records[j] = wire.Result{Code: we.Code, Err: we.Msg}
				}
			}
		}
	}
	merged := time.Now()
	for _, d := range durables {
		if err := d.Wait(); err != nil {
			return nil, err
		}
	}
	if rp := n.repl; rp != nil {
		rp.served.Add(1)
		rp.mergeNanos.Add(int64(merged.Sub(began)))
		rp.syncNanos.Add(int64(time.Since(merged)))
	}
	return resp, nil
}

// serveExport streams a partition's records from req.From, a page at a
// time, for a node joining the partition's cohort.
func (n *Node) serveExport(ctx context.Context, req *wire.ExportRequest, send func(any) error) error {
	if int(req.Part) >= len(n.parts) {
		return wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	limit := req.Limit
	if limit <= 0 || limit > exportPage {
		limit = exportPage
	}
	r := n.parts[req.Part]
	page := &wire.ExportPage{}
	pageBytes := 0
	// Each page says the epoch this replica leads at once it is read: a
	// receiver takes the page as that leader's word, and only a leader's.
	flush := func() error {
		if page.Epoch = r.Epoch(); page.Epoch == 0 {
			return fmt.Errorf("%w: partition %d: this node does not lead it; copy it from its leader", wire.ErrUnavailable, req.Part)
		}
		return send(page)
	}
	err := r.Export(req.From, func(rec partition.Record) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		page.Records = append(page.Records, recordToWire(rec))
		pageBytes += recordBytes(page.Records[len(page.Records)-1])
		if len(page.Records) == limit || pageBytes >= exportPageBytes {
			pageBytes = 0
			if err := flush(); err != nil {
				return false, err
			}
			page.Records = page.Records[:0]
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(page.Records) > 0 {
		return flush()
	}
	return nil
}

// pullPartition copies partition part from its leader, node src at addr,
// into this node's replica (the transfer to a new cohort member); it
// resumes after the last merged id when a page fails. Each page merges
// as the word of the leader at the epoch the page names (its records
// replace this replica's older lines of writes); a page of a node that
// does not lead, or of an epoch below the one this replica promised, is
// refused.
func (n *Node) pullPartition(ctx context.Context, addr string, src uint64, part uint16) (int, error) {
	var from task.ID
	total := 0
	for attempt := 0; ; attempt++ {
		c, err := n.peers.Get(ctx, addr)
		if err == nil {
			err = wire.NewClient(c).Export(ctx, &wire.ExportRequest{Part: part, From: from, Limit: exportPage}, func(pg *wire.ExportPage) error {
				if len(pg.Records) == 0 {
					return nil
				}
				recs := make([]partition.Record, len(pg.Records))
				for i, m := range pg.Records {
					recs[i] = recordFromWire(m)
				}
				n.noteDependents(pg.Records)
				if pg.Epoch == 0 {
					return fmt.Errorf("%w: partition %d: node %d sent a page without its epoch", wire.ErrUnavailable, part, src)
				}
				d, _, err := n.parts[part].Merge(partition.Source{Epoch: pg.Epoch, Authority: pg.Epoch, From: src}, recs, n.now())
				if err != nil {
					return err
				}
				if d != nil {
					if err := d.Wait(); err != nil {
						return err
					}
				}
				total += len(recs)
				from = nextID(recs[len(recs)-1].ID)
				return nil
			})
		}
		if err == nil {
			return total, nil
		}
		if ctx.Err() != nil || attempt >= transferAttempts {
			return total, fmt.Errorf("transfer of partition %d from %s: %w", part, addr, err)
		}
		n.log.Warn("partition transfer interrupted; resuming", "partition", part, "from", addr, "at", from, "err", err)
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(transferRetryPause):
		}
	}
}

// Transfer retry policy.
const (
	transferAttempts   = 10
	transferRetryPause = 200 * time.Millisecond
)

// nextID returns the smallest id after id.
func nextID(id task.ID) task.ID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}

// partitionCohort returns part's cohort as the registry has it, from the
// copy refreshMeta keeps (requests never copy the metadata group's state).
// The slice is shared: callers must not modify it.
func (n *Node) partitionCohort(part int) []uint64 {
	pl := n.placement.Load()
	if pl == nil || part >= len(pl.cohorts) {
		return nil
	}
	return pl.cohorts[part]
}

// replicateQuietly ships task id's record after a write no client waits
// for (a dependency notice); a failure is logged, and the followers catch
// up with the next write of the task or through anti-entropy.
func (n *Node) replicateQuietly(id task.ID) {
	ctx, cancel := context.WithTimeout(context.Background(), replTimeout)
	defer cancel()
	if _, err := n.replicateTask(ctx, id, 1); err != nil {
		n.log.Debug("replicating a dependency notice", "task", id, "err", err)
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

func recordBytes(r wire.RecordMsg) int {
	n := recordBytesOverhead
	if r.Spec != nil {
		n += len(r.Spec.Data)
	}
	for _, u := range r.Updates {
		n += len(u.Data) + 16
	}
	return n + len(r.Dependents)*task.IDLen
}

// readReplicas reads task id from r replicas of part (0: a majority of
// the cohort; this one, the leader, is always among them) and returns
// the leader's view of it, whole (every update).
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
func (n *Node) readReplicas(ctx context.Context, part uint16, id task.ID, followers []uint64, r int) (wire.TaskView, error) {
	ep := n.parts[part].Epoch()
	if ep == 0 {
		return wire.TaskView{}, errNotLeading(part)
	}
	size := len(followers) + 1
	if r == 0 {
		r = size/2 + 1
	}
	if r > size {
		return wire.TaskView{}, fmt.Errorf("%w: r=%d exceeds the partition's cohort of %d", task.ErrInvalid, r, size)
	}
	type answer struct {
		node uint64
		rec  *partition.Record
		err  error
	}
	answers := make(chan answer, len(followers))
	for _, f := range followers {
		go func() {
			rec, err := n.fetchRecord(ctx, f, part, id)
			answers <- answer{f, rec, err}
		}()
	}
	local, err := n.localRecord(part, id)
	if err != nil {
		return wire.TaskView{}, err
	}
	recs := map[uint64]*partition.Record{n.id: local}
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
			n.log.Warn("stepping down: a follower holds a newer leader's writes", "partition", part, "epoch", ep, "task", id, "stamp", a.rec.State.Stamp, "follower", a.node)
			n.parts[part].Resign()
			return wire.TaskView{}, fmt.Errorf("%w: partition %d: node %d holds writes of epoch %d, above this leader's %d", task.ErrEpoch, part, a.node, a.rec.State.Stamp, ep)
		}
		recs[a.node] = a.rec
		read++
	}
	if read < r {
		return wire.TaskView{}, fmt.Errorf("%w: read %d of %d replicas of partition %d", wire.ErrUnavailable, read, r, part)
	}
	// A tombstone is authoritative (partition/gc.go): the task was
	// collected, and the replicas still holding it missed that.
	if tomb := tombOf(recs); tomb != 0 {
		rec := partition.Record{ID: id, Tomb: tomb}
		for node, r := range recs {
			if r == nil || r.Tomb == 0 {
				n.repairReplica(node, part, ep, rec)
			}
		}
		return wire.TaskView{}, fmt.Errorf("%w: %s (completed and garbage-collected)", task.ErrNotFound, id)
	}
	if local == nil {
		if local, err = n.adoptSpec(part, ep, id, recs); err != nil || local == nil {
			return wire.TaskView{}, cmp.Or(err, fmt.Errorf("%w: %s", task.ErrNotFound, id))
		}
	}
	// Repair whoever is behind (a missing task, another state or other
	// updates). Best effort: a failed repair is retried by the next read
	// or write of the task, or by anti-entropy.
	for node, rec := range recs {
		if node != n.id && !sameRecord(rec, local) {
			n.repairReplica(node, part, ep, *local)
		}
	}
	ups := make([]store.Update, len(local.Updates))
	for i, u := range local.Updates {
		ups[i] = store.Update(u)
	}
	return n.view(local.Spec, local.Spec.Data, local.State, ups, n.now()), nil
}

// localRecord reads task id's whole record from this replica (nil: it
// does not hold it; a Record with Tomb set: it holds its tombstone).
func (n *Node) localRecord(part uint16, id task.ID) (*partition.Record, error) {
	recs, err := n.parts[part].Records([]task.ID{id})
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &recs[0], nil
}

// adoptSpec takes task id, which this leader's replica lacks, from a
// follower's record among recs: its spec (a write without a line of
// writes), not its state. It returns the task as this replica then holds
// it, or nil if no follower held it either.
func (n *Node) adoptSpec(part uint16, ep uint64, id task.ID, recs map[uint64]*partition.Record) (*partition.Record, error) {
	for node, rec := range recs {
		if rec == nil || rec.Spec == nil {
			continue
		}
		d, _, err := n.parts[part].Merge(partition.Source{Epoch: ep, Floor: ep, From: node}, []partition.Record{*rec}, n.now())
		if err != nil {
			return nil, err
		}
		if err := d.Wait(); err != nil {
			return nil, err
		}
		return n.localRecord(part, id)
	}
	return nil, nil
}

// sameRecord reports whether a follower's record holds what the leader's
// does: the same state and updates (nil: the follower lacks the task).
func sameRecord(rec, leader *partition.Record) bool {
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
func (n *Node) repairReplica(node uint64, part uint16, ep uint64, rec partition.Record) {
	if node == n.id { // a tombstone this replica lacks: grow-only
		if d, _, err := n.parts[part].Merge(partition.Source{Epoch: ep, Floor: ep, From: n.id}, []partition.Record{rec}, n.now()); err == nil {
			_ = d.Wait()
		}
		return
	}
	n.repl.send(node, &replItem{item: wire.ReplicateItem{Part: part, Epoch: ep, Records: []wire.RecordMsg{recordToWire(rec)}}, done: make(chan replAck, 1)})
}

// tombOf returns the earliest deletion time among the tombstones in recs
// (0: none).
func tombOf(recs map[uint64]*partition.Record) int64 {
	var at int64
	for _, r := range recs {
		if r != nil && r.Tomb != 0 && (at == 0 || r.Tomb < at) {
			at = r.Tomb
		}
	}
	return at
}

// fetchRecord reads task id's record from node's replica of part (nil:
// that replica does not hold it; a Record with Tomb set: it holds the
// task's tombstone).
func (n *Node) fetchRecord(ctx context.Context, node uint64, part uint16, id task.ID) (*partition.Record, error) {
	addr := n.addrOf(node)
	if addr == "" {
		return nil, fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, node)
	}
	// One record by id (OpAAEFetch answers tombstones too); an export
	// from id would stream the rest of the partition after it.
	var resp wire.AAEFetchResponse
	if err := n.peers.Call(ctx, addr, wire.OpAAEFetch, &wire.AAEFetchRequest{Part: part, IDs: []task.ID{id}}, &resp); err != nil {
		return nil, err
	}
	for _, m := range resp.Records {
		if m.ID == id {
			r := recordFromWire(m)
			return &r, nil
		}
	}
	return nil, nil
}

// errNotLeading fails a write whose partition this node stopped leading
// after applying it: nothing of it may be acknowledged.
func errNotLeading(part uint16) error {
	return fmt.Errorf("%w: partition %d: this node stopped leading it; retry", wire.ErrUnavailable, part)
}

// confirmLeading checks with a majority of part's cohort that this node
// still leads it at the epoch it leads at: each follower gets an empty
// replication item at that epoch, which a replica that promised a newer
// epoch refuses. A refusal steps this node down. It returns nil once a
// majority (this node included) answered yes.
func (n *Node) confirmLeading(ctx context.Context, part uint16) error {
	to, ep := n.followers(part)
	if ep == 0 {
		return errNotLeading(part)
	}
	need := ring.Majority(len(to)+1) - 1 // this node is one
	if need <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, replTimeout)
	defer cancel()
	answers := make(chan error, len(to))
	for _, f := range to {
		go func() {
			addr := n.addrOf(f)
			if addr == "" {
				answers <- fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, f)
				return
			}
			var resp wire.ReplicateResponse
			err := n.peers.Call(ctx, addr, wire.OpReplicate, &wire.ReplicateRequest{Items: []wire.ReplicateItem{{Part: part, Epoch: ep}}}, &resp)
			if err == nil && len(resp.Results) == 1 && resp.Results[0].Code != wire.CodeOK {
				err = &wire.Error{Code: resp.Results[0].Code, Msg: resp.Results[0].Err}
			}
			answers <- err
		}()
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
		if errors.Is(err, task.ErrEpoch) && n.parts[part].ResignAt(ep) {
			n.log.Warn("stepping down: a follower promised a newer epoch", "partition", part, "epoch", ep)
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%w: partition %d: %d of %d followers confirmed epoch %d: %v", wire.ErrUnavailable, part, yes, need, ep, errors.Join(errs...))
}
