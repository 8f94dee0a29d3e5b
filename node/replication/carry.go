package replication

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/epoch"
	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/wire"
)

// The carry: step 6 of the handoffs this node runs (package epoch). It
// compares anti-entropy trees, so its cost follows what differs between
// the replicas, not the partition's size: a takeover of a partition with
// a million tasks moves what its last writes left unequal.
//
// In, from the old cohort's members that promised the new epoch (they
// refuse the old leader from now on, so what they hold is all its
// acknowledged writes and no later one):
//   - the states stamped with the epoch being sealed, from any of them:
//     the old leader's line of writes, every acknowledged one of which is
//     on a majority of the old cohort, so on one of them;
//   - older states only from the sealed members of that epoch (the
//     registry's sealed set): they hold exactly what earlier handoffs
//     carried, where another member may hold an orphan (partition's
//     "Epochs and orphans"). If this node is not sealed itself, their
//     word replaces its own older states, and its older states of tasks
//     they lack are dropped;
//   - specs, reverse edges and tombstones from all (grow-only).
//
// Out: members of the new cohort take this replica's records in place of
// theirs (as any leader's), until their trees equal this one's; those
// members, this node among them, are the new epoch's sealed set, which
// must be a majority of the new cohort before the CAS.

// Carry timing.
const (
	// carryMemberTimeout bounds the carry with one member: a member that
	// does not finish in it is taken as unreachable for the attempt.
	carryMemberTimeout = 30 * time.Second
	// carryGrace is how long the carry out waits for the other members
	// once a majority of the new cohort holds the records: healthy ones
	// are sealed too, while a dead one cannot hold up the handoff.
	carryGrace = 200 * time.Millisecond
	// carryOutRounds bounds the rounds with one member before it counts
	// as not sealed (a member far behind catches up by anti-entropy
	// later, as a follower).
	carryOutRounds = 16
)

// Carry implements epoch.Carrier: it runs the carry of a handoff this
// node runs and returns the new epoch's sealed set.
func (p *Plane) Carry(ctx context.Context, cr epoch.Carry) ([]uint64, error) {
	if err := p.carryIn(ctx, uint16(cr.Part), cr); err != nil {
		return nil, err
	}
	return p.carryOut(ctx, uint16(cr.Part), cr)
}

// carryIn brings the old cohort's promisers' records into this replica,
// by the rules above. It needs the records of a majority of the old
// cohort (this replica counts if it is a member) with a sealed member
// among them.
func (p *Plane) carryIn(ctx context.Context, part uint16, cr epoch.Carry) error {
	if len(cr.Old) == 0 {
		return nil // never led: nothing was written
	}
	legacy := len(cr.Sealed) == 0 // led before sealed sets were kept: every member is trusted
	sealed := func(id uint64) bool { return legacy || slices.Contains(cr.Sealed, id) }
	selfSealed := sealed(p.cfg.Self) && slices.Contains(cr.Old, p.cfg.Self)
	type result struct {
		id  uint64
		err error
	}
	var asked []uint64
	for _, id := range cr.Promised {
		if id != p.cfg.Self {
			asked = append(asked, id)
		}
	}
	results := make(chan result, len(asked))
	for _, id := range asked {
		mode := aaeMode{ep: cr.Epoch, pull: partition.Source{Epoch: cr.Epoch, Floor: cr.Prev, From: id}}
		switch {
		case legacy:
			mode.pull = partition.Source{Epoch: cr.Epoch, From: id}
		case sealed(id) && selfSealed:
			mode.pull = partition.Source{Epoch: cr.Epoch, From: id}
		case sealed(id):
			mode.pull = partition.Source{Epoch: cr.Epoch, Authority: cr.Prev, From: id}
			mode.reset = true
		}
		go func() {
			mctx, cancel := context.WithTimeout(ctx, carryMemberTimeout)
			defer cancel()
			results <- result{id, p.aaeRounds(mctx, part, id, mode)}
		}()
	}
	got := map[uint64]bool{}
	if slices.Contains(cr.Old, p.cfg.Self) {
		got[p.cfg.Self] = true
	}
	var errs []error
	for range asked {
		r := <-results
		if r.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", r.id, r.err))
			continue
		}
		got[r.id] = true
	}
	var from []uint64
	anySealed := false
	for id := range got {
		from = append(from, id)
		anySealed = anySealed || sealed(id)
	}
	if !epoch.HasMajority(cr.Old, from) || !anySealed {
		return fmt.Errorf("%w: partition %d: carried from %v of old cohort %v (sealed %v): %v",
			epoch.ErrNoQuorum, part, from, cr.Old, cr.Sealed, errs)
	}
	return nil
}

// carryOut makes the members of the new cohort hold exactly this
// replica's records and returns those that do (this node included): once
// a majority does, the others get carryGrace.
func (p *Plane) carryOut(ctx context.Context, part uint16, cr epoch.Carry) ([]uint64, error) {
	sealedSet := []uint64{p.cfg.Self}
	var asked []uint64
	for _, id := range cr.Cohort {
		if id != p.cfg.Self {
			asked = append(asked, id)
		}
	}
	if len(asked) == 0 {
		return sealedSet, nil
	}
	type result struct {
		id  uint64
		err error
	}
	results := make(chan result, len(asked))
	octx, cancel := context.WithTimeout(ctx, carryMemberTimeout)
	defer cancel()
	for _, id := range asked {
		go func() { results <- result{id, p.carryTo(octx, part, id, cr.Epoch)} }()
	}
	var grace <-chan time.Time
	var errs []error
wait:
	for range asked {
		select {
		case r := <-results:
			if r.err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", r.id, r.err))
			} else {
				sealedSet = append(sealedSet, r.id)
			}
		case <-grace:
			break wait
		}
		if grace == nil && epoch.HasMajority(cr.Cohort, sealedSet) {
			t := time.NewTimer(carryGrace)
			defer t.Stop()
			grace = t.C
		}
	}
	if !epoch.HasMajority(cr.Cohort, sealedSet) {
		return nil, fmt.Errorf("%w: partition %d: carried to %v of %v: %v", epoch.ErrNoQuorum, part, sealedSet, cr.Cohort, errs)
	}
	slices.Sort(sealedSet)
	return sealedSet, nil
}

// Gather takes into this node's replica of part, which it leads, what
// peer's copy holds that counts: the records that grow without a line of
// writes (specs, reverse edges, tombstones) and states stamped with this
// replica's epoch, one whole anti-entropy pass, pushing nothing. The
// leader runs it before it lets a zombie drop its copy (control's
// ServeRelease): a copy a move left behind holds nothing the handoff did
// not carry, except what it acknowledged alone, an enqueue with w=1
// answered while it still took itself for the leader (paused or cut off
// as others took over). Its states are orphans there and stay out; the
// task itself is the enqueue's, and was acknowledged.
func (p *Plane) Gather(ctx context.Context, part uint16, peer uint64) error {
	ep := p.host.Replica(part).Epoch()
	if ep == 0 {
		return fmt.Errorf("%w: partition %d: this node does not lead it", wire.ErrUnavailable, part)
	}
	mode := aaeMode{ep: ep, pull: partition.Source{Epoch: ep, Floor: ep, From: peer}}
	if err := p.aaeRounds(ctx, part, peer, mode); err != nil {
		return fmt.Errorf("partition %d: gather node %d's copy: %w", part, peer, err)
	}
	return nil
}

// carryTo makes peer's replica hold exactly this one's at ep: it first
// raises peer's promise to ep (an empty item at ep, merged durably), then
// runs leader rounds until its tree equals this replica's. The promise
// comes first so that peer cannot release its copy as a zombie (a
// release is refused once the replica promised an epoch above the one it
// was decided at: partition.Replica.ReleaseAt) after the rounds found it
// equal and before the CAS counts it sealed; a copy released before the
// promise is refilled by the rounds.
func (p *Plane) carryTo(ctx context.Context, part uint16, peer, ep uint64) error {
	if err := p.sendEpoch(ctx, part, peer, ep); err != nil {
		return err
	}
	var cur antientropy.Cursor
	for range carryOutRounds {
		res, err := p.aaeRound(ctx, part, peer, cur, leaderMode(ep, peer))
		if err != nil {
			return err
		}
		if res.InSync {
			return nil
		}
		cur = res.Next
	}
	return fmt.Errorf("%w: partition %d: node %d not in sync after %d rounds", wire.ErrUnavailable, part, peer, carryOutRounds)
}

// sendEpoch sends peer's replica of part an empty item at ep: a replica
// that promised a newer epoch refuses it (task.ErrEpoch); one that
// promised an older takes it as a promise to ep, durably
// (partition.Replica.Merge).
func (p *Plane) sendEpoch(ctx context.Context, part uint16, peer, ep uint64) error {
	addr := p.host.AddrOf(peer)
	if addr == "" {
		return fmt.Errorf("%w: address of node %d unknown", wire.ErrUnavailable, peer)
	}
	var resp wire.ReplicateResponse
	if err := p.host.Peers().Call(ctx, addr, wire.OpReplicate, &wire.ReplicateRequest{Items: []wire.ReplicateItem{{Part: part, Epoch: ep}}}, &resp); err != nil {
		return err
	}
	if len(resp.Results) != 1 {
		return fmt.Errorf("%w: %d results for one item", wire.ErrUnavailable, len(resp.Results))
	}
	return resultErr(resp.Results[0])
}

// aaeRounds runs rounds of mode with peer until one finds the trees equal
// or the rounds have covered every bucket once (antientropy.Result.Passed):
// one whole pass after the promise pulls everything the peer held that
// differed. Unlike the background rounds, it is not bounded per interval:
// a handoff needs the whole exchange. It does not wait for the trees to
// match: differences that mode leaves in place (states below the floor
// from a member that is not sealed; the peer's view of tasks it lacks)
// would keep every round truncated as the cursor wraps around, until
// carryMemberTimeout failed the member.
func (p *Plane) aaeRounds(ctx context.Context, part uint16, peer uint64, mode aaeMode) error {
	buckets := p.host.Replica(part).TreeSnapshot().Shape().Buckets
	var cur antientropy.Cursor
	passed := 0
	for round := 1; ; round++ {
		res, err := p.aaeRound(ctx, part, peer, cur, mode)
		if err != nil {
			return err
		}
		passed += res.Passed
		if res.InSync || passed >= buckets {
			p.log.Debug("carry in", "partition", part, "peer", peer, "rounds", round, "in_sync", res.InSync, "truncated", res.Truncated)
			return nil
		}
		cur = res.Next
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
