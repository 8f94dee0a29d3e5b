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
	// harness does not know are missing).
	Index map[uint64]int
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

// CohortOf returns partition p's cohort's indexes.
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
	if r.Type != OK {
		return nil, fmt.Errorf("node %d: cluster view: %s %s", i, r.Code, r.Err)
	}
	v := &View{From: i, Raw: cr, Index: make(map[uint64]int)}
	for _, m := range cr.Members {
		if idx := topo.IndexOf(m.Addr); idx > 0 {
			v.Index[m.ID] = idx
		}
	}
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
