package faults

import (
	"reflect"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// testView is node 1's view of members and partitions (the first member
// is node 1 itself).
func testView(topo Topology, members []wire.MemberView, parts []wire.PartitionView) *View {
	v := &View{From: 1, Raw: wire.ClusterResponse{Self: members[0].ID, Members: members, Partitions: parts}}
	v.indexMembers(topo)
	return v
}

// A wiped node's address is the new id's; the old id is gone, and a
// cohort that still names it lacks that replica.
func TestViewWipedMembers(t *testing.T) {
	topo := Topology{Nodes: 3, Bridge: DefaultBridge, Port: DefaultPort}
	addr := func(i int) string { return topo.RelayAddr(i).String() }
	v := testView(topo, []wire.MemberView{
		{ID: 0x11, Addr: addr(1), State: "alive"},
		{ID: 0x22, Addr: addr(2), State: "dead"}, // wiped
		{ID: 0x33, Addr: addr(3), State: "alive"},
		{ID: 0x44, Addr: addr(2), State: "alive"}, // node 2 again, empty
	}, []wire.PartitionView{
		{Partition: 0, Cohort: []uint64{0x11, 0x22, 0x33}, Leader: 0x22},
		{Partition: 1, Cohort: []uint64{0x11, 0x44, 0x33}, Leader: 0x44},
	})
	if got := v.CohortOf(0); !reflect.DeepEqual(got, []int{1, 3}) {
		t.Errorf("cohort of 0 %v; want [1 3] (the old id is no replica)", got)
	}
	if got := v.GoneOf(0); !reflect.DeepEqual(got, []int{2}) {
		t.Errorf("gone of 0 %v; want [2]", got)
	}
	if got := v.CohortOf(1); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Errorf("cohort of 1 %v; want [1 2 3]", got)
	}
	if l := v.LeaderOf(0); l != 0 {
		t.Errorf("partition 0 led by the wiped id: leader %d; want 0 (unknown)", l)
	}
	if err := v.Ready([]int{1, 2, 3}, 2); err == nil {
		t.Errorf("ready with a partition led by a wiped id")
	}

	// Both ids of node 2 dead (it is down again): neither is mapped.
	v = testView(topo, []wire.MemberView{
		{ID: 0x11, Addr: addr(1), State: "alive"},
		{ID: 0x22, Addr: addr(2), State: "dead"},
		{ID: 0x44, Addr: addr(2), State: "dead"},
	}, nil)
	if v.Index[0x22] != 0 || v.Index[0x44] != 0 {
		t.Errorf("tied ids mapped: %v", v.Index)
	}
	// The answering node's own id is its address's, whatever gossip
	// says.
	v = testView(topo, []wire.MemberView{
		{ID: 0x44, Addr: addr(2), State: "suspect"},
		{ID: 0x22, Addr: addr(2), State: "alive"},
	}, nil)
	if v.Index[0x44] != 2 || v.Gone[0x22] != 2 {
		t.Errorf("self not preferred: index %v, gone %v", v.Index, v.Gone)
	}
}

// The cluster is repaired when every cohort is its replicas, none of them
// a wiped node's old id, no move under way, and every metadata voter is
// alive.
func TestViewRepaired(t *testing.T) {
	topo := Topology{Nodes: 3, Bridge: DefaultBridge, Port: DefaultPort}
	addr := func(i int) string { return topo.RelayAddr(i).String() }
	members := []wire.MemberView{
		{ID: 0x11, Addr: addr(1), State: "alive"},
		{ID: 0x22, Addr: addr(2), State: "dead"}, // wiped
		{ID: 0x33, Addr: addr(3), State: "alive"},
		{ID: 0x44, Addr: addr(2), State: "alive"},
	}
	whole := []wire.PartitionView{{Partition: 0, Cohort: []uint64{0x11, 0x44, 0x33}}}
	v := testView(topo, members, whole)
	v.Raw.Raft.Voters = []uint64{0x11, 0x33, 0x44}
	if err := v.Repaired(3); err != nil {
		t.Errorf("whole: %v", err)
	}
	if got := v.Voters(); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Errorf("voters %v; want [1 2 3]", got)
	}
	v.Raw.Raft.Voters = []uint64{0x11, 0x22, 0x33}
	if err := v.Repaired(3); err == nil || !strings.Contains(err.Error(), "0000000000000022") {
		t.Errorf("a wiped voter: %v; want it named", err)
	}
	for name, parts := range map[string][]wire.PartitionView{
		"a cohort of one, as a new cluster starts": {whole[0], {Partition: 1, Cohort: []uint64{0x11}}},
		"a cohort naming a wiped id":               {whole[0], {Partition: 1, Cohort: []uint64{0x11, 0x22, 0x33}}},
		"a move under way (old and new cohort)":    {whole[0], {Partition: 1, Cohort: []uint64{0x11, 0x22, 0x33, 0x44}}},
	} {
		if err := testView(topo, members, parts).Repaired(3); err == nil || !strings.Contains(err.Error(), "1:") {
			t.Errorf("%s: %v; want partition 1 named", name, err)
		}
	}
}
