package partition

import (
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// The replica's side of anti-entropy (docs/design.md, "Anti-entropy"): the
// node compares this replica's hash tree with a peer's (antientropy.Diff)
// and repairs what differs with whole records. These methods answer both
// sides of that exchange; the tree itself is kept by every write (see
// Replica.tree and digest.go).

// TreeSnapshot returns a copy of the replica's hash tree, taken under the
// lock: the tree to Diff against a peer (Diff must not run under the
// lock). It costs one allocation of about TreeBytes.
func (r *Replica) TreeSnapshot() *antientropy.Tree {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tree.Clone()
}

// Root returns the root of the replica's hash tree: it changes with every
// record the replica's content gains or changes.
func (r *Replica) Root() antientropy.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tree.Root()
}

// TreeBytes returns the memory of the replica's hash tree, for metrics. It
// depends on the shape only, never on the number of tasks, and does not
// take the lock: the tree's size never changes after New.
func (r *Replica) TreeBytes() int { return r.tree.Bytes() }

// AnswerNodes answers a peer's request for digests of the tree
// (antientropy.DecodeNodesRequest decodes it; antientropy.AppendDigests
// encodes the answer). It copies a few digests under the lock; a request
// of another shape fails with antientropy.ErrShape.
func (r *Replica) AnswerNodes(req antientropy.NodesRequest) ([]antientropy.Digest, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tree.Answer(req, make([]antientropy.Digest, 0, len(req.Idx)))
}

// AnswerBuckets answers a peer's request for the entries of some buckets
// (antientropy.DecodeBucketsRequest decodes it; encode each list with
// antientropy.AppendEntries): ListBuckets, after checking that the peer's
// shape is this tree's (antientropy.ErrShape otherwise). The caller
// bounds len(req.Buckets) by its own Limits.BucketsPerRound before
// calling: the cost of a listing grows with it.
func (r *Replica) AnswerBuckets(req antientropy.BucketsRequest) ([][]antientropy.Entry, error) {
	if s := r.tree.Shape(); req.Shape != s {
		return nil, fmt.Errorf("%w: peer has %d buckets of fan-out %d, partition %d has %d of %d",
			antientropy.ErrShape, req.Shape.Buckets, req.Shape.Fanout, r.cfg.Part, s.Buckets, s.Fanout)
	}
	return r.ListBuckets(req.Buckets)
}

// ListBuckets lists, for each bucket of buckets (strictly increasing, each
// in [0, Shape.Buckets)), every task of the partition in that bucket with
// its task digest (the XOR of its items), and every tombstoned id in that
// bucket with antientropy.TombItem as its digest, sorted by id: the replica's
// antientropy.ListFunc, and what a peer's bucket request is answered with.
//
// The listing is consistent with the tree at one instant: it reads one
// store snapshot taken under r.mu, and the tree equals the XOR of the
// items of the records in any snapshot taken under r.mu (every write
// updates the tree before releasing it). The work itself runs outside
// the lock, so writes go on meanwhile.
//
// Cost: one pass over the partition's ids (the keys of the spec range,
// no payload) hashing each to its bucket, then a seek per listed task in
// each range and its whole record read and hashed, payload included. So
// about ((tasks + tombstones) x one bucket hash) + (listed records' bytes): a request
// for b of B buckets reads about b/B of the partition's payloads. Memory
// is the listed entries (antientropy.EntryLen bytes each, plus the ids).
func (r *Replica) ListBuckets(buckets []int) (_ [][]antientropy.Entry, err error) {
	shape := r.tree.Shape()
	slot := make(map[int]int, len(buckets)) // bucket -> index in buckets
	for i, b := range buckets {
		if b < 0 || b >= shape.Buckets {
			return nil, fmt.Errorf("%w: bucket %d outside [0, %d)", antientropy.ErrShape, b, shape.Buckets)
		}
		if i > 0 && b <= buckets[i-1] {
			return nil, fmt.Errorf("%w: bucket %d after %d: not strictly increasing", antientropy.ErrMalformed, b, buckets[i-1])
		}
		slot[b] = i
	}
	snap := r.snapshot()
	defer closeSnapshot(snap, &err)
	var ids []task.ID
	err = snap.TaskIDs(r.cfg.Part, func(id task.ID) (bool, error) {
		if _, ok := slot[shape.BucketOf(id)]; ok {
			ids = append(ids, id)
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: list buckets: %w", r.cfg.Part, err)
	}
	out := make([][]antientropy.Entry, len(buckets))
	err = snap.ExportTasks(r.cfg.Part, ids, func(t store.TaskExport) (bool, error) {
		i := slot[shape.BucketOf(t.Spec.ID)]
		out[i] = append(out[i], antientropy.Entry{ID: t.Spec.ID, Digest: exportDigest(&t)})
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: list buckets: %w", r.cfg.Part, err)
	}
	// Tombstoned ids, with their one item (gc.go); never also a task.
	tombs := false
	err = snap.Tombs(r.cfg.Part, task.ID{}, func(id task.ID, _ int64) (bool, error) {
		if i, ok := slot[shape.BucketOf(id)]; ok {
			out[i] = append(out[i], antientropy.Entry{ID: id, Digest: antientropy.TombItem(id)})
			tombs = true
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: list buckets: %w", r.cfg.Part, err)
	}
	if tombs {
		for _, es := range out {
			slices.SortFunc(es, func(a, b antientropy.Entry) int { return task.ID(a.ID).Compare(b.ID) })
		}
	}
	return out, nil
}

// snapshot takes a store snapshot under r.mu: it holds exactly the
// records the tree sums at that instant.
func (r *Replica) snapshot() *store.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Store.NewSnapshot()
}

// Records returns the whole records (spec with payload, merged state,
// every update, every dependent) of the tasks of ids that this partition
// holds, in id order, and task.Record{ID, Tomb} for those it holds a
// tombstone of (gc.go); other ids are skipped, repeats ignored.
// They are what anti-entropy pulls from a peer or pushes to it, and
// Merge takes them: merging a whole record is idempotent, and a replica
// that merged a peer's records of every id Diff reported (and the peer
// this replica's) has the same tree as the peer.
//
// It reads one store snapshot, without the lock: any version of a record
// is fine to send, the receiver merges CRDTs. Its cost and memory follow
// the records' bytes, payloads included: the caller bounds len(ids) (Diff
// bounds them by Limits.IDsPerRound; a sender with large payloads asks in
// smaller chunks).
func (r *Replica) Records(ids []task.ID) (_ []task.Record, err error) {
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, task.ID.Compare)
	sorted = slices.Compact(sorted)
	snap := r.cfg.Store.NewSnapshot()
	defer closeSnapshot(snap, &err)
	recs := make([]task.Record, 0, len(sorted))
	err = snap.ExportTasks(r.cfg.Part, sorted, func(t store.TaskExport) (bool, error) {
		recs = append(recs, exportRecord(t))
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: records: %w", r.cfg.Part, err)
	}
	// The ids not held as tasks may be tombstoned: their record is the
	// tombstone (gc.go), so anti-entropy spreads it.
	if len(recs) < len(sorted) {
		n := len(recs)
		for _, id := range sorted {
			if _, held := slices.BinarySearchFunc(recs[:n], id, func(r task.Record, id task.ID) int { return r.ID.Compare(id) }); held {
				continue
			}
			at, found, err := snap.Tomb(r.cfg.Part, id)
			if err != nil {
				return nil, fmt.Errorf("partition %d: records: %w", r.cfg.Part, err)
			}
			if found {
				recs = append(recs, task.Record{ID: id, Tomb: at})
			}
		}
		if len(recs) > n {
			slices.SortFunc(recs, func(a, b task.Record) int { return a.ID.Compare(b.ID) })
		}
	}
	return recs, nil
}

// closeSnapshot closes snap, reporting its error in *err if none is there.
func closeSnapshot(snap *store.Snapshot, err *error) {
	if cerr := snap.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

// exportRecord turns a stored task into a whole Record.
func exportRecord(t store.TaskExport) task.Record {
	rec := task.Record{ID: t.Spec.ID, Spec: t.Spec, State: &t.State, Dependents: t.Dependents, Full: true}
	if len(t.Updates) > 0 {
		rec.Updates = t.Updates
	}
	return rec
}
