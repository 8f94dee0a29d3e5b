package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Anti-entropy (docs/design.md, Anti-entropy). Every AAEInterval the leader of
// each partition compares its replica's hash tree with each follower's
// (antientropy.Diff: roots, then the differing subtrees, then the entry
// lists of differing buckets), fetches the records the follower holds
// differently and merges what of them it takes (specs, edges, tombstones,
// and states of its own epoch: leaderMode), and sends the follower its own
// versions of every record that differed, which the follower takes in
// place of older lines of writes; so both end equal, and an orphan on the
// follower is gone (partition's "Epochs and orphans"). Work is bounded per round (antientropy.Limits) and per interval
// (aaeMaxRounds rounds per follower and partition), so a replica far
// behind catches up over several intervals instead of starving clients.

// Anti-entropy bounds.
const (
	// aaeMaxRounds bounds the rounds per partition and follower in one
	// interval: a round that was truncated by its limits runs again at
	// once, up to this many.
	aaeMaxRounds = 8
	// aaeFetchIDs bounds the ids of one fetch request.
	aaeFetchIDs = 256
	// aaeReadIDs is how many records a push reads at a time, between its
	// checks of the batch's size.
	aaeReadIDs = 16
	// aaeMaxBucketEntries bounds one bucket's entry list from a peer.
	aaeMaxBucketEntries = 1 << 22
)

// AAELoop runs anti-entropy rounds for the partitions this node leads.
func (p *Plane) AAELoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.AAEInterval)
	defer t.Stop()
	type link struct {
		part uint16
		peer uint64
	}
	cursors := map[link]antientropy.Cursor{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range p.cfg.Partitions {
			part := uint16(i)
			to, ep := p.Followers(part)
			for _, f := range to {
				l := link{part, f}
				for range aaeMaxRounds {
					res, err := p.aaeRound(ctx, part, f, cursors[l], leaderMode(ep, f))
					if err != nil {
						if errors.Is(err, task.ErrEpoch) && p.host.Replica(part).Epoch() == ep {
							// The follower holds a newer leader's writes
							// or promised a newer epoch: this one is done.
							p.log.Warn("stepping down: anti-entropy met a newer epoch", "partition", part, "epoch", ep, "peer", f, "err", err)
							p.host.Replica(part).Resign()
						}
						if ctx.Err() == nil {
							p.log.Debug("anti-entropy round failed", "partition", part, "peer", f, "err", err)
						}
						break
					}
					cursors[l] = res.Next
					if !res.Truncated {
						break
					}
				}
			}
		}
	}
}

// CatchUp brings into this leader's replica of part what a majority of
// the cohort holds (this replica is one): anti-entropy rounds with the
// followers, all at once, until enough of them ended in sync or with
// their differences repaired. An enqueue written to the cohort directly
// (ShipNew) is acknowledged by W replicas, which need not include the
// leader; after CatchUp every task acknowledged by a majority before it
// began is here. A bulk op that lists the leader's tasks (a group
// cancel) runs it first, so that none is missed.
func (p *Plane) CatchUp(ctx context.Context, part uint16) error {
	to, ep := p.Followers(part)
	if ep == 0 {
		return NotLeading(part)
	}
	need := ring.Majority(len(to)+1) - 1 // this replica is one
	if need <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, replTimeout)
	defer cancel()
	done := make(chan error, len(to))
	for _, f := range to {
		go func() { done <- p.catchUpWith(ctx, part, f, ep) }()
	}
	var errs []error
	for range to {
		err := <-done
		if err == nil {
			if need--; need == 0 {
				return nil
			}
			continue
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%w: partition %d: caught up with too few of its cohort: %v", wire.ErrUnavailable, part, errors.Join(errs...))
}

// catchUpWith runs anti-entropy rounds for part with follower f at ep
// until one ends untruncated.
func (p *Plane) catchUpWith(ctx context.Context, part uint16, f, ep uint64) error {
	var from antientropy.Cursor
	for range aaeMaxRounds {
		res, err := p.aaeRound(ctx, part, f, from, leaderMode(ep, f))
		if err != nil {
			if errors.Is(err, task.ErrEpoch) && p.host.Replica(part).ResignAt(ep) {
				p.log.Warn("stepping down: anti-entropy met a newer epoch", "partition", part, "epoch", ep, "peer", f, "err", err)
			}
			return fmt.Errorf("node %d: %w", f, err)
		}
		if !res.Truncated {
			return nil
		}
		from = res.Next
	}
	return fmt.Errorf("node %d: %d anti-entropy rounds did not end: far behind", f, aaeMaxRounds)
}

// aaeMode is what a round does with the differences it finds
// (partition's "Epochs and orphans").
type aaeMode struct {
	// ep is the epoch the round runs at: pushed records carry it, and the
	// peer takes them as the word of that epoch's leader.
	ep uint64
	// pull is how the peer's records of the differences merge here.
	pull partition.Source
	// push sends this replica's records of the differences to the peer.
	push bool
	// reset drops from this replica, with pull.Authority, the states of
	// the tasks the peer lacks that are stamped below it: the peer holds
	// every such state that counts (a carry from a sealed member).
	reset bool
}

// leaderMode is a leader's round at ep with a follower: the leader takes
// of the follower's records only what is stamped at its own epoch or
// grows without a line of writes (specs, edges, tombstones), and its own
// records replace the follower's.
func leaderMode(ep, peer uint64) aaeMode {
	return aaeMode{ep: ep, pull: partition.Source{Epoch: ep, Floor: ep, From: peer}, push: true}
}

// aaeRound compares part's replica here with peer's and repairs what
// differs, as mode says.
func (p *Plane) aaeRound(ctx context.Context, part uint16, peer uint64, from antientropy.Cursor, mode aaeMode) (antientropy.Result, error) {
	addr := p.host.AddrOf(peer)
	if addr == "" {
		return antientropy.Result{}, fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, peer)
	}
	r := p.host.Replica(part)
	local := r.TreeSnapshot()
	remote := &aaeRemote{p: p, addr: addr, part: part, shape: local.Shape()}
	list := func(_ context.Context, buckets []int) ([][]antientropy.Entry, error) { return r.ListBuckets(buckets) }
	res, err := antientropy.Diff(ctx, local, remote, list, p.cfg.AAE.Limits, from)
	p.stats.AAERounds.Add(1)
	p.stats.AAEBytes.Add(int64(res.Stats.BytesSent + res.Stats.BytesReceived))
	if err != nil {
		return res, err
	}
	if res.InSync {
		p.stats.AAEInSync.Add(1)
		return res, nil
	}
	// Pull what the peer holds differently and merge it here, then push
	// this replica's versions of everything that differed.
	pulled := taskIDs(res.Pull)
	if len(pulled) > 0 {
		if err := p.aaePull(ctx, addr, part, mode.pull, pulled); err != nil {
			return res, err
		}
	}
	if mode.reset {
		if err := p.aaeReset(part, mode.pull, taskIDs(res.Push), pulled); err != nil {
			return res, err
		}
	}
	if !mode.push {
		return res, nil
	}
	ids := make([]task.ID, 0, len(res.Pull)+len(res.Push))
	seen := make(map[task.ID]bool, cap(ids))
	for _, id := range taskIDs(append(res.Push, res.Pull...)) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if err := p.aaePush(ctx, addr, part, mode.ep, ids); err != nil {
		return res, err
	}
	p.log.Debug("anti-entropy repaired", "partition", part, "peer", peer, "pulled", len(res.Pull), "pushed", len(ids))
	return res, nil
}

// aaeReset drops the states stamped below src.Authority of the tasks of
// push (this replica holds them, the peer differs or lacks them) that
// the peer lacks (not in pulled): src's word is that no such state
// counts. Each becomes the zero state without updates; its spec stays.
func (p *Plane) aaeReset(part uint16, src partition.Source, push, pulled []task.ID) error {
	had := make(map[task.ID]bool, len(pulled))
	for _, id := range pulled {
		had[id] = true
	}
	var recs []task.Record
	for _, id := range push {
		if !had[id] {
			recs = append(recs, task.Record{ID: id, State: &task.State{}, Full: true})
		}
	}
	if len(recs) == 0 {
		return nil
	}
	d, _, err := p.host.Replica(part).Merge(src, recs, p.now())
	if err != nil {
		return err
	}
	return d.Wait()
}

// aaePull fetches ids' records of part from the node at addr and merges
// each response here as it comes, as src: memory is bounded by a response
// (an export page), not by the round. A record stamped above src.Epoch
// fails the pull with task.ErrEpoch: a newer leader wrote it.
func (p *Plane) aaePull(ctx context.Context, addr string, part uint16, src partition.Source, ids []task.ID) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), aaeFetchIDs)]
		var resp wire.AAEFetchResponse
		if err := p.host.Peers().Call(ctx, addr, wire.OpAAEFetch, &wire.AAEFetchRequest{Part: part, IDs: chunk}, &resp); err != nil {
			return err
		}
		if resp.Done <= 0 || resp.Done > len(chunk) {
			return fmt.Errorf("%w: fetch answered %d of %d ids", wire.ErrUnavailable, resp.Done, len(chunk))
		}
		ids = ids[resp.Done:]
		if len(resp.Records) == 0 {
			continue
		}
		recs := make([]task.Record, len(resp.Records))
		for i, m := range resp.Records {
			recs[i] = m
		}
		p.host.NoteDependents(resp.Records) // before the edges are written: see depSet
		d, errs, err := p.host.Replica(part).Merge(src, recs, p.now())
		if err != nil {
			return err
		}
		if err := d.Wait(); err != nil {
			return err
		}
		p.stats.AAEPulled.Add(int64(len(recs)))
		for _, e := range errs {
			if errors.Is(e, task.ErrEpoch) {
				return fmt.Errorf("partition %d: pull: %w", part, e)
			}
		}
	}
	return nil
}

// aaePush sends this replica's records of ids to the node at addr, read a
// few at a time and sent in requests bounded like replication batches, at
// this leader's epoch.
func (p *Plane) aaePush(ctx context.Context, addr string, part uint16, ep uint64, ids []task.ID) error {
	var pending []task.Record
	size := 0
	for len(ids) > 0 || len(pending) > 0 {
		for len(ids) > 0 && len(pending) < replBatchMax && size < replBatchBytes {
			chunk := ids[:min(len(ids), aaeReadIDs)]
			ids = ids[len(chunk):]
			recs, err := p.host.Replica(part).Records(chunk)
			if err != nil {
				return err
			}
			for _, r := range recs {
				m := r
				pending = append(pending, m)
				size += recordBytes(m)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		item := wire.ReplicateItem{Part: part, Epoch: ep, Records: pending}
		p.stats.AAEPushed.Add(int64(len(pending)))
		pending, size = nil, 0
		var resp wire.ReplicateResponse
		cctx, cancel := context.WithTimeout(ctx, replTimeout)
		err := p.host.Peers().Call(cctx, addr, wire.OpReplicate, &wire.ReplicateRequest{Items: []wire.ReplicateItem{item}}, &resp)
		cancel()
		if err != nil {
			return err
		}
		if len(resp.Results) != 1 {
			return fmt.Errorf("%w: %d results for one item", wire.ErrUnavailable, len(resp.Results))
		}
		if r := resp.Results[0]; r.Code != wire.CodeOK {
			return &wire.Error{Code: r.Code, Msg: r.Err}
		}
		// Per-record refusals (a claim on a task the peer knows completed)
		// are the CRDT doing its job: the peer keeps the completion, and
		// this side learns it when it pulls the record next round.
	}
	return nil
}

// aaeRemote is a peer's replica of a partition, over the peer protocol.
type aaeRemote struct {
	p     *Plane
	addr  string
	part  uint16
	shape antientropy.Shape
}

func (a *aaeRemote) Nodes(ctx context.Context, level int, idx []int) ([]antientropy.Digest, error) {
	body := antientropy.NodesRequest{Shape: a.shape, Level: level, Idx: idx}.Append(nil)
	var resp wire.AAEResponse
	if err := a.p.host.Peers().Call(ctx, a.addr, wire.OpAAENodes, &wire.AAERequest{Part: a.part, Body: body}, &resp); err != nil {
		return nil, err
	}
	return antientropy.DecodeDigests(resp.Body, len(idx))
}

func (a *aaeRemote) Buckets(ctx context.Context, buckets []int) ([][]antientropy.Entry, error) {
	body := antientropy.BucketsRequest{Shape: a.shape, Buckets: buckets}.Append(nil)
	var resp wire.AAEBucketsResponse
	if err := a.p.host.Peers().Call(ctx, a.addr, wire.OpAAEBuckets, &wire.AAERequest{Part: a.part, Body: body}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Lists) != len(buckets) {
		return nil, fmt.Errorf("%w: %d lists for %d buckets", antientropy.ErrMalformed, len(resp.Lists), len(buckets))
	}
	out := make([][]antientropy.Entry, len(buckets))
	for i, l := range resp.Lists {
		es, err := antientropy.DecodeEntries(l, aaeMaxBucketEntries)
		if err != nil {
			return nil, err
		}
		out[i] = es
	}
	return out, nil
}

// serveAAENodes answers a peer's request for tree digests.
func (p *Plane) serveAAENodes(r *wire.AAERequest) (*wire.AAEResponse, error) {
	if int(r.Part) >= p.cfg.Partitions {
		return nil, fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	req, err := antientropy.DecodeNodesRequest(r.Body)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "anti-entropy: %v", err)
	}
	ds, err := p.host.Replica(r.Part).AnswerNodes(req)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "anti-entropy: %v", err)
	}
	return &wire.AAEResponse{Body: antientropy.AppendDigests(nil, ds)}, nil
}

// serveAAEBuckets answers a peer's request for bucket entry lists.
func (p *Plane) serveAAEBuckets(r *wire.AAERequest) (*wire.AAEBucketsResponse, error) {
	if int(r.Part) >= p.cfg.Partitions {
		return nil, fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	req, err := antientropy.DecodeBucketsRequest(r.Body)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "anti-entropy: %v", err)
	}
	if len(req.Buckets) > p.cfg.AAE.Limits.BucketsPerRound {
		return nil, wire.Errorf(wire.CodeInvalid, "anti-entropy: %d buckets in one request, limit %d", len(req.Buckets), p.cfg.AAE.Limits.BucketsPerRound)
	}
	lists, err := p.host.Replica(r.Part).AnswerBuckets(req)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "anti-entropy: %v", err)
	}
	resp := &wire.AAEBucketsResponse{Lists: make([][]byte, len(lists))}
	for i, es := range lists {
		antientropy.SortEntries(es)
		resp.Lists[i] = antientropy.AppendEntries(nil, es)
	}
	return resp, nil
}

// serveAAEFetch answers a peer's request for whole records, stopping
// early to stay inside a frame.
func (p *Plane) serveAAEFetch(r *wire.AAEFetchRequest) (*wire.AAEFetchResponse, error) {
	if int(r.Part) >= p.cfg.Partitions {
		return nil, fmt.Errorf("%w: partition %d out of range", task.ErrInvalid, r.Part)
	}
	if len(r.IDs) == 0 || len(r.IDs) > aaeFetchIDs {
		return nil, fmt.Errorf("%w: %d ids in one fetch, limit %d", task.ErrInvalid, len(r.IDs), aaeFetchIDs)
	}
	// One id at a time, so the response stops before it outgrows a page
	// (and a frame): it always carries at least the first record.
	resp := &wire.AAEFetchResponse{}
	size := 0
	for _, id := range r.IDs {
		recs, err := p.host.Replica(r.Part).Records([]task.ID{id})
		if err != nil {
			return nil, err
		}
		grow := 0
		ms := make([]task.Record, len(recs))
		for i, rec := range recs {
			ms[i] = rec
			grow += recordBytes(ms[i])
		}
		if resp.Done > 0 && size+grow > exportPageBytes {
			break
		}
		resp.Records = append(resp.Records, ms...)
		size += grow
		resp.Done++
	}
	return resp, nil
}

// taskIDs converts anti-entropy ids (raw id bytes) to task ids.
func taskIDs(ids []antientropy.ID) []task.ID {
	out := make([]task.ID, len(ids))
	for i, id := range ids {
		out[i] = task.ID(id)
	}
	return out
}

// AAEView is the anti-entropy counters for ctl cluster.
func (p *Plane) AAEView() *wire.AAEView {
	v := &wire.AAEView{
		Rounds: p.stats.AAERounds.Load(), InSync: p.stats.AAEInSync.Load(),
		Pulled: p.stats.AAEPulled.Load(), Pushed: p.stats.AAEPushed.Load(), Bytes: p.stats.AAEBytes.Load(),
	}
	for part := range p.cfg.Partitions {
		v.TreeBytes += int64(p.host.Replica(uint16(part)).TreeBytes())
	}
	return v
}
