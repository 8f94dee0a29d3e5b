package raftgroup

import (
	"context"
	"fmt"

	"github.com/skuldd/skuldd/internal/version"
)

// The cluster version (package internal/version) lives in Meta: a cluster
// founded by a build starts at its Config.FoundingVersion; one founded
// before versions existed holds 0, which is version.Base. It only grows,
// by Raise, which the caller proposes once it checked that every member's
// build supports the new version (the members' builds are not in the
// state: a Base build cannot read a command that would report them, so
// the node asks its peers instead; docs/design.md, Versions).
//
// What a version adds is refused at apply, too, while the state is below
// it: the log is what every replica shares, and an entry a lagging
// proposer put there before the raise must be refused the same way
// everywhere.

// Version is the cluster version m runs.
func (m Meta) Version() version.V { return version.Of(m.ClusterVersion) }

// Raise sets the cluster version to v. It fails with ErrInvalid unless v
// is above the current version.
func (g *Group) Raise(ctx context.Context, v version.V) error {
	r, err := g.propose(ctx, command{Op: opRaise, ClusterVersion: uint32(v)})
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("raftgroup: %w", r.err)
	}
	return nil
}

// RemoveMember forgets member id for good: it leaves the registry and
// its id joins Removed, so it can never register again (raft's rule: an
// id names one node for all time). It needs version.MemberRemoval (a
// *version.NotYetError before), and fails with ErrInvalid while a
// partition's cohort still names id (its partitions move first) or when
// Removed is full. found reports whether id was a member.
func (g *Group) RemoveMember(ctx context.Context, id uint64) (found bool, err error) {
	if err := version.MemberRemoval.Check(g.Meta().Version()); err != nil {
		return false, fmt.Errorf("raftgroup: remove member %d: %w", id, err)
	}
	r, err := g.propose(ctx, command{Op: opRemoveMember, Remove: id})
	if err != nil {
		return false, err
	}
	return r.found, r.err
}

func applyRaise(m *Meta, v uint32) (result, bool) {
	cur := m.Version()
	if version.V(v) <= cur {
		return result{err: fmt.Errorf("%w: raise the cluster version to %d: it runs %d", ErrInvalid, v, cur)}, false
	}
	m.ClusterVersion = v
	return result{}, true
}

func applyRemoveMember(m *Meta, id uint64) (result, bool) {
	if err := version.MemberRemoval.Check(m.Version()); err != nil {
		return result{err: fmt.Errorf("remove member %d: %w", id, err)}, false
	}
	if _, ok := m.Members[id]; !ok {
		return result{}, false
	}
	if len(m.Removed) >= MaxMembers {
		return result{err: fmt.Errorf("%w: remove member %d: %d removed already, limit %d", ErrInvalid, id, len(m.Removed), MaxMembers)}, false
	}
	for p, info := range m.Partitions {
		for _, c := range info.Cohort {
			if c == id {
				return result{err: fmt.Errorf("%w: remove member %d: partition %d's cohort %v still names it", ErrInvalid, id, p, info.Cohort)}, false
			}
		}
	}
	delete(m.Members, id)
	delete(m.Retiring, id)
	if m.Removed == nil {
		m.Removed = make(map[uint64]bool)
	}
	m.Removed[id] = true
	return result{found: true}, true
}

// Retire marks member id as retiring (on) or not: placement moves its
// partitions to the other members while it still runs (ctl
// decommission). It needs version.MemberRemoval. found reports whether id
// is a member.
func (g *Group) Retire(ctx context.Context, id uint64, on bool) (found bool, err error) {
	if err := version.MemberRemoval.Check(g.Meta().Version()); err != nil {
		return false, fmt.Errorf("raftgroup: retire member %d: %w", id, err)
	}
	r, err := g.propose(ctx, command{Op: opRetire, Retire: &retireRecord{ID: id, On: on}})
	if err != nil {
		return false, err
	}
	return r.found, r.err
}

func applyRetire(m *Meta, r *retireRecord) (result, bool) {
	if err := version.MemberRemoval.Check(m.Version()); err != nil {
		return result{err: fmt.Errorf("retire member %d: %w", r.ID, err)}, false
	}
	if _, ok := m.Members[r.ID]; !ok {
		return result{}, false
	}
	if m.Retiring[r.ID] == r.On {
		return result{found: true}, false
	}
	if r.On {
		if m.Retiring == nil {
			m.Retiring = make(map[uint64]bool)
		}
		m.Retiring[r.ID] = true
	} else {
		delete(m.Retiring, r.ID)
	}
	return result{found: true}, true
}
