package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// View is a node's GET /v1/cluster, with skuldd's 64-bit node ids mapped
// to the harness's node indexes (by address).
type View struct {
	// From is the node that answered.
	From int
	Raw  wire.ClusterResponse
	// Index maps node ids to indexes (1-based; ids of addresses the
	// harness does not know are missing). An address holds one id at a
	// time: see Gone.
	Index map[uint64]int
	// Gone maps to their index the ids of members whose address another
	// member now holds: a wiped node starts again empty under a new id,
	// and its old id stays in the registry, dead for good. A cohort that
	// names one of them lacks that replica (CohortOf leaves it out).
	Gone map[uint64]int
}

// memberRank orders the states of members that share an address: the
// address belongs to the member most alive. "unknown" is a registry
// member gossip has not heard of.
func memberRank(state string) int {
	switch state {
	case "alive":
		return 4
	case "suspect":
		return 3
	case "unknown":
		return 2
	case "dead":
		return 1
	}
	return 0 // left, or a state this harness does not know
}

// indexMembers fills v.Index and v.Gone from the members' addresses. The
// answering node's own id is its address's for sure; otherwise the member
// in the best state holds it, and when two tie (both ids of a wiped node
// that is down again) neither is mapped: the harness cannot tell which is
// the current one, and a wrong guess would aim a nemesis at the wrong
// process or take a dead replica for a live one.
func (v *View) indexMembers(topo Topology) {
	v.Index, v.Gone = make(map[uint64]int), make(map[uint64]int)
	better := func(a, b wire.MemberView) int {
		switch {
		case a.ID == v.Raw.Self:
			return 1
		case b.ID == v.Raw.Self:
			return -1
		}
		return memberRank(a.State) - memberRank(b.State)
	}
	holder := map[int]wire.MemberView{}
	tied := map[int]bool{}
	byIndex := map[int][]uint64{}
	for _, m := range v.Raw.Members {
		i := topo.IndexOf(m.Addr)
		if i == 0 {
			continue
		}
		byIndex[i] = append(byIndex[i], m.ID)
		cur, seen := holder[i]
		switch c := better(m, cur); {
		case !seen || c > 0:
			holder[i], tied[i] = m, false
		case c == 0:
			tied[i] = true
		}
	}
	for i, ids := range byIndex {
		for _, id := range ids {
			switch {
			case tied[i]:
			case id == holder[i].ID:
				v.Index[id] = i
			default:
				v.Gone[id] = i
			}
		}
	}
}

// Node returns the index of node id, or 0.
func (v *View) Node(id uint64) int { return v.Index[id] }

// Alive returns the indexes of the members the answering node sees alive.
func (v *View) Alive() []int {
	var out []int
	for _, m := range v.Raw.Members {
		if m.State == "alive" {
			if i := v.Index[m.ID]; i > 0 {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out
}

// RaftLeader returns the metadata group's leader's index, or 0.
func (v *View) RaftLeader() int { return v.Index[v.Raw.Raft.Leader] }

// Partition returns partition p's view.
func (v *View) Partition(p int) (wire.PartitionView, bool) {
	for _, pv := range v.Raw.Partitions {
		if pv.Partition == p {
			return pv, true
		}
	}
	return wire.PartitionView{}, false
}

// LeaderOf returns partition p's leader's index, or 0.
func (v *View) LeaderOf(p int) int {
	pv, ok := v.Partition(p)
	if !ok {
		return 0
	}
	return v.Index[pv.Leader]
}

// GoneOf returns the indexes whose old ids (Gone) partition p's cohort
// still names: replicas wiped and not yet replaced.
func (v *View) GoneOf(p int) []int {
	pv, _ := v.Partition(p)
	var out []int
	for _, id := range pv.Cohort {
		if i := v.Gone[id]; i > 0 {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// Cohorts returns every partition's cohort (CohortOf).
func (v *View) Cohorts() map[int][]int {
	out := make(map[int][]int, len(v.Raw.Partitions))
	for _, pv := range v.Raw.Partitions {
		out[pv.Partition] = v.CohortOf(pv.Partition)
	}
	return out
}

// CohortOf returns partition p's cohort's indexes: the live ids' (an id
// in Gone, or one the harness cannot place, is left out).
func (v *View) CohortOf(p int) []int {
	pv, _ := v.Partition(p)
	var out []int
	for _, id := range pv.Cohort {
		if i := v.Index[id]; i > 0 {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// clusterCallTimeout bounds one GET /v1/cluster: the node answers from
// memory, so a longer wait means it is stopped or cut off.
const clusterCallTimeout = 2 * time.Second

// FetchView asks node i for its view of the cluster.
func FetchView(ctx context.Context, api *API, topo Topology, i int) (*View, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
	defer cancel()
	var cr wire.ClusterResponse
	r := api.Do(ctx, i, http.MethodGet, "/v1/cluster", nil, &cr)
	if !r.Read() {
		return nil, fmt.Errorf("node %d: cluster view: %s %s", i, r.Code, r.Err)
	}
	v := &View{From: i, Raw: cr}
	v.indexMembers(topo)
	return v, nil
}

// AnyView asks the nodes all at once and returns the view of the first
// of them (in the order given) that answers, so a stopped or cut-off node
// costs no more than one call's timeout.
func AnyView(ctx context.Context, api *API, topo Topology, nodes []int) (*View, error) {
	if len(nodes) == 0 {
		return nil, errors.New("no node to ask")
	}
	views := make([]*View, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, i := range nodes {
		wg.Go(func() { views[k], errs[k] = FetchView(ctx, api, topo, i) })
	}
	wg.Wait()
	for k := range nodes {
		if errs[k] == nil {
			return views[k], nil
		}
	}
	return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

// Ready reports why node i's view is not of a serving cluster of want
// (every node in want alive, a metadata leader, every partition led by a
// live member), or nil.
func (v *View) Ready(want []int, partitions int) error {
	alive := v.Alive()
	for _, w := range want {
		if !slices.Contains(alive, w) {
			return fmt.Errorf("node %d sees alive %v; want %v", v.From, alive, want)
		}
	}
	if v.RaftLeader() == 0 {
		return fmt.Errorf("node %d sees no metadata leader", v.From)
	}
	if len(v.Raw.Partitions) != partitions {
		return fmt.Errorf("node %d sees %d partitions; want %d", v.From, len(v.Raw.Partitions), partitions)
	}
	var leaderless []string
	for _, pv := range v.Raw.Partitions {
		l := v.Index[pv.Leader]
		if l == 0 || !slices.Contains(alive, l) {
			leaderless = append(leaderless, fmt.Sprint(pv.Partition))
		}
	}
	if len(leaderless) > 0 {
		return fmt.Errorf("node %d sees partitions without a live leader: %s", v.From, strings.Join(leaderless, ","))
	}
	return nil
}

// Voters returns the indexes of the metadata group's voters (those the
// view can place: not Gone, not tied).
func (v *View) Voters() []int {
	var out []int
	for _, id := range v.Raw.Raft.Voters {
		if i := v.Index[id]; i > 0 {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// Repaired reports why the view does not show a cluster whole again after
// replicas were lost for good, or nil: every partition's cohort is want
// live members (CohortOf; more is a move under way, old and new cohort
// together while the new members copy) and none a wiped node's old id, and
// every voter of the metadata group is a live member (a wiped voter stays
// a voter until skuldd replaces it, after its dead voter grace).
func (v *View) Repaired(want int) error {
	var short []string
	for _, pv := range v.Raw.Partitions {
		if c, gone := v.CohortOf(pv.Partition), v.GoneOf(pv.Partition); len(c) != want || len(gone) > 0 {
			short = append(short, fmt.Sprintf("%d:%v", pv.Partition, c))
		}
	}
	if len(short) > 0 {
		return fmt.Errorf("node %d sees cohorts not of %d live members: %s", v.From, want, strings.Join(short, " "))
	}
	alive := v.Alive()
	for _, id := range v.Raw.Raft.Voters {
		if i := v.Index[id]; i == 0 || !slices.Contains(alive, i) {
			return fmt.Errorf("node %d sees voter %016x of the metadata group not alive (voters %v)", v.From, id, v.Voters())
		}
	}
	return nil
}

// WaitRepaired waits until a view from one of nodes shows the cluster
// whole (View.Repaired), or bound passes: then it returns the last reason.
func WaitRepaired(ctx context.Context, api *API, topo Topology, nodes []int, want int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		v, err := AnyView(ctx, api, topo, nodes)
		if err == nil {
			err = v.Repaired(want)
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not repaired after %v: %w", bound, err)
		}
		if err := sleepCtx(ctx, readyPoll); err != nil {
			return err
		}
	}
}

// readyPoll is how often WaitReady asks again.
const readyPoll = 250 * time.Millisecond

// WaitReady waits until every node of want answers with a ready view
// (View.Ready), or bound passes: then it returns the last reason.
func WaitReady(ctx context.Context, api *API, topo Topology, want []int, partitions int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var last error
	for {
		last = nil
		for _, i := range want {
			v, err := FetchView(ctx, api, topo, i)
			if err == nil {
				err = v.Ready(want, partitions)
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %w", bound, last)
		}
		if err := sleepCtx(ctx, readyPoll); err != nil {
			return err
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
