package replication

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The follower side of replication, and partition transfers: a
// follower merges what a leader sends as that leader's word; a new cohort
// member copies a partition from its leader page by page.

// serveReplicate is the follower side: merge each item into its replica,
// wait until all are durable (one fsync for the whole request), answer
// per item and record. Items come from peer as the leader of their epoch
// (shipped writes, anti-entropy pushes, repairs, a carry): its word
// replaces this replica's older lines of writes (partition.Source).
func (p *Plane) serveReplicate(peer uint64, req *wire.ReplicateRequest) (*wire.ReplicateResponse, error) {
	began := time.Now()
	now := p.now()
	resp := &wire.ReplicateResponse{Results: make([]wire.ReplicateResult, len(req.Items))}
	var durables []partition.Durable
	for i, it := range req.Items {
		res := &resp.Results[i]
		if int(it.Part) >= p.cfg.Partitions {
			res.Code, res.Err = wire.CodeInvalid, fmt.Sprintf("partition %d out of range", it.Part)
			continue
		}
		if it.Direct {
			d, err := p.serveDirect(it)
			if err != nil {
				we := wire.ToError(err)
				res.Code, res.Err = we.Code, we.Msg
				continue
			}
			durables = append(durables, d)
			continue
		}
		recs := make([]task.Record, len(it.Records))
		for j, m := range it.Records {
			recs[j] = m
		}
		p.host.NoteDependents(it.Records) // before the edges are written: see depSet
		d, recErrs, err := p.host.Replica(it.Part).Merge(partition.Source{Epoch: it.Epoch, Authority: it.Epoch, From: peer}, recs, now)
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
	var syncErr error
	for _, d := range durables {
		// Every one waited on, even after an error (store.Pending).
		if err := d.Wait(); err != nil && syncErr == nil {
			syncErr = err
		}
	}
	if syncErr != nil {
		return nil, syncErr
	}
	p.stats.Served.Add(1)
	p.stats.MergeNanos.Add(int64(merged.Sub(began)))
	p.stats.SyncNanos.Add(int64(time.Since(merged)))
	return resp, nil
}

// serveDirect takes an enqueue's new tasks from their coordinator
// (wire.ReplicateItem.Direct). Only a member of the partition's cohort,
// as this node's registry has it, takes them: an acknowledgment from
// another node would count toward W for a copy no leader reads.
func (p *Plane) serveDirect(it wire.ReplicateItem) (partition.Durable, error) {
	if !slices.Contains(p.host.Cohort(int(it.Part)), p.cfg.Self) {
		return nil, fmt.Errorf("%w: partition %d: this node is not in its cohort", wire.ErrUnavailable, it.Part)
	}
	return p.host.Replica(it.Part).EnqueueDirect(it.Records, p.now())
}

// serveExport streams a partition's records from req.From, a page at a
// time, for a node joining the partition's cohort.
func (p *Plane) serveExport(ctx context.Context, req *wire.ExportRequest, send func(any) error) error {
	if int(req.Part) >= p.cfg.Partitions {
		return wire.Errorf(wire.CodeInvalid, "partition %d out of range", req.Part)
	}
	limit := req.Limit
	if limit <= 0 || limit > exportPage {
		limit = exportPage
	}
	r := p.host.Replica(req.Part)
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
	err := r.Export(req.From, func(rec task.Record) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		page.Records = append(page.Records, rec)
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

// PullPartition copies partition part from its leader, node src at addr,
// into this node's replica (the transfer to a new cohort member); it
// resumes after the last merged id when a page fails. Each page merges
// as the word of the leader at the epoch the page names (its records
// replace this replica's older lines of writes); a page of a node that
// does not lead, or of an epoch below the one this replica promised, is
// refused.
func (p *Plane) PullPartition(ctx context.Context, addr string, src uint64, part uint16) (int, error) {
	var from task.ID
	total := 0
	for attempt := 0; ; attempt++ {
		c, err := p.host.Peers().Get(ctx, addr)
		if err == nil {
			err = wire.NewClient(c).Export(ctx, &wire.ExportRequest{Part: part, From: from, Limit: exportPage}, func(pg *wire.ExportPage) error {
				if len(pg.Records) == 0 {
					return nil
				}
				recs := make([]task.Record, len(pg.Records))
				for i, m := range pg.Records {
					recs[i] = m
				}
				p.host.NoteDependents(pg.Records)
				if pg.Epoch == 0 {
					return fmt.Errorf("%w: partition %d: node %d sent a page without its epoch", wire.ErrUnavailable, part, src)
				}
				d, _, err := p.host.Replica(part).Merge(partition.Source{Epoch: pg.Epoch, Authority: pg.Epoch, From: src}, recs, p.now())
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
		p.log.Warn("partition transfer interrupted; resuming", "partition", part, "from", addr, "at", from, "err", err)
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
