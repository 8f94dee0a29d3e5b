package coord

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/skuldd/skuldd/wire"
)

// FanPlan is a cluster-wide op's plan from one snapshot of the partition
// registry: the partitions this node serves and those each other leader
// must. INVARIANT: every partition of Leaders is in exactly one of Mine
// and the Others' Parts (on a coordinator; a forwarded request plans no
// Others).
type FanPlan struct {
	// Leaders is the snapshot the plan was made from, for a later check
	// that the registry did not move meanwhile (Changed).
	Leaders []uint64
	// Mine are the partitions this node serves, in order.
	Mine []uint16
	// Others are the other leaders and their partitions, by node id.
	Others []FanPeer
}

// FanPeer is another leader and the partitions it must serve.
type FanPeer struct {
	ID    uint64
	Parts []uint16
}

// PlanFan plans a cluster-wide op at node self from leaders, the leader
// of each partition (0: none). A coordinator (forwarded false) plans
// every partition. A forwarded request serves the partitions its
// coordinator named, which must be exactly those leaders says self leads:
// if they differ, one registry is behind, and serving either set could
// miss a partition or serve one twice. Each refusal wraps
// wire.ErrUnavailable: the registry moves on, and a retry succeeds.
func PlanFan(leaders []uint64, self uint64, forwarded bool, named []uint16) (*FanPlan, error) {
	if len(leaders) == 0 {
		return nil, fmt.Errorf("%w: no partition registry yet; retry", wire.ErrUnavailable)
	}
	plan := &FanPlan{Leaders: slices.Clone(leaders)}
	peers := map[uint64]int{} // leader -> index in Others
	for p, leader := range leaders {
		part := uint16(p)
		switch {
		case leader == 0:
			return nil, fmt.Errorf("%w: partition %d has no leader right now; retry", wire.ErrUnavailable, p)
		case leader == self:
			plan.Mine = append(plan.Mine, part)
		case !forwarded:
			i, ok := peers[leader]
			if !ok {
				i = len(plan.Others)
				peers[leader] = i
				plan.Others = append(plan.Others, FanPeer{ID: leader})
			}
			plan.Others[i].Parts = append(plan.Others[i].Parts, part)
		}
	}
	if forwarded && !sameParts(named, plan.Mine) {
		return nil, fmt.Errorf("%w: the coordinator's registry and this node's differ on the partitions it leads (asked for %v, leads %v); retry",
			wire.ErrUnavailable, named, plan.Mine)
	}
	slices.SortFunc(plan.Others, func(a, b FanPeer) int { return cmp.Compare(a.ID, b.ID) })
	return plan, nil
}

// sameParts reports whether named, in any order, is the set mine (sorted,
// distinct).
func sameParts(named, mine []uint16) bool {
	if len(named) != len(mine) {
		return false
	}
	s := slices.Clone(named)
	slices.Sort(s)
	return slices.Equal(s, mine)
}

// Changed reports whether the registry moved on from the plan's snapshot:
// a write op that acted by the plan may have missed a partition that
// changed hands meanwhile.
func (p *FanPlan) Changed(leaders []uint64) bool { return !slices.Equal(p.Leaders, leaders) }
