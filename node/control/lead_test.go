package control

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/ring"
)

func TestPlanElection(t *testing.T) {
	const self, a, b = 1, 2, 3
	const partitions, replicas = 8, 2
	members := []uint64{b, self, a} // the registry's map order: any
	sorted := []uint64{self, a, b}
	// ringLed are the partitions ring gives this node to lead.
	var ringLed []int
	for p := range partitions {
		if ring.Cohort(p, sorted, replicas)[0] == self {
			ringLed = append(ringLed, p)
		}
	}
	if len(ringLed) == 0 || len(ringLed) == partitions {
		t.Fatalf("ring gives node %d partitions %v of %d: the test needs some, not all", self, ringLed, partitions)
	}
	placedHere := raftgroup.PartitionInfo{Epoch: 3, Leader: self, Cohort: []uint64{self, b}}
	placedThere := raftgroup.PartitionInfo{Epoch: 3, Leader: a, Cohort: []uint64{a, self}}
	for _, tc := range []struct {
		name     string
		registry []raftgroup.PartitionInfo
		want     map[int][]uint64 // partition: cohort
	}{
		{"never placed: ring's", nil, ringCohorts(ringLed, sorted, replicas)},
		{"placed here: the registry's cohort", fill(partitions, placedHere), everyPart(partitions, placedHere.Cohort)},
		{"placed elsewhere: none", fill(partitions, placedThere), map[int][]uint64{}},
		{"the registry shorter than the partitions", []raftgroup.PartitionInfo{placedThere}, ringCohorts(slices.DeleteFunc(slices.Clone(ringLed), func(p int) bool { return p == 0 }), sorted, replicas)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanElection(ElectionInput{Self: self, Partitions: partitions, Registry: tc.registry, Members: members, Replicas: replicas})
			got := map[int][]uint64{}
			for _, e := range plan {
				got[e.Part] = e.Cohort
			}
			if len(got) != len(tc.want) {
				t.Fatalf("plan %+v; want %v", plan, tc.want)
			}
			for p, c := range tc.want {
				if !slices.Equal(got[p], c) {
					t.Fatalf("partition %d: cohort %v, want %v (plan %+v)", p, got[p], c, plan)
				}
			}
		})
	}
}

func fill(n int, pi raftgroup.PartitionInfo) []raftgroup.PartitionInfo {
	out := make([]raftgroup.PartitionInfo, n)
	for i := range out {
		out[i] = pi
	}
	return out
}

func everyPart(n int, cohort []uint64) map[int][]uint64 {
	out := map[int][]uint64{}
	for p := range n {
		out[p] = cohort
	}
	return out
}

func ringCohorts(parts []int, members []uint64, replicas int) map[int][]uint64 {
	out := map[int][]uint64{}
	for _, p := range parts {
		out[p] = ring.Cohort(p, members, replicas)
	}
	return out
}
