package control

import (
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/member"
)

func TestPlanFailover(t *testing.T) {
	const self, a, b = 1, 2, 3
	cohort := []uint64{a, self, b}
	now := time.Unix(1000, 0)
	grace := 2 * time.Second
	alive := map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	with := func(m map[uint64]member.State, id uint64, st member.State) map[uint64]member.State {
		out := map[uint64]member.State{}
		for k, v := range m {
			out[k] = v
		}
		if st == 0 {
			delete(out, id)
		} else {
			out[id] = st
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		p      Partition
		states map[uint64]member.State
		absent map[uint64]time.Time
		take   bool
	}{
		{"named leader, not leading: lead", Partition{Leader: self, Epoch: 4}, alive, nil, true},
		{"named leader, leading", Partition{Leader: self, Epoch: 4, Leading: true}, alive, nil, false},
		{"named leader, own handoff running", Partition{Leader: self, Epoch: 4, Handoff: true}, alive, nil, false},
		{"named leader, promised a newer epoch to another", Partition{Leader: self, Epoch: 4, Promised: 5, PromisedTo: b}, alive, nil, false},
		{"named leader, promised a newer epoch to itself", Partition{Leader: self, Epoch: 4, Promised: 5, PromisedTo: self}, alive, nil, true},
		{"leader alive", Partition{Leader: a, Epoch: 4}, alive, nil, false},
		{"leader suspect", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Suspect), nil, false},
		{"leader dead, self its successor", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Dead), nil, true},
		{"leader left, self its successor", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Left), nil, true},
		{"leader dead, another succeeds", Partition{Leader: b, Epoch: 4, Cohort: []uint64{b, a, self}}, with(alive, b, member.Dead), nil, false},
		{"leader unknown, first seen", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), nil, false},
		{"leader unknown, within grace", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), map[uint64]time.Time{a: now.Add(-grace / 2)}, false},
		{"leader unknown, past grace", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), map[uint64]time.Time{a: now.Add(-grace)}, true},
		{"cut off: most of the cohort dead", Partition{Leader: a, Epoch: 4}, with(with(alive, a, member.Dead), b, member.Dead), nil, false},
		{"no leader yet", Partition{Leader: 0}, alive, nil, false},
		{"not in the cohort", Partition{Leader: a, Epoch: 4, Cohort: []uint64{a, b, 9}}, with(alive, a, member.Dead), nil, false},
		{"a takeover already running", Partition{Leader: a, Epoch: 4, Running: true}, with(alive, a, member.Dead), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Part = 3
			if p.Cohort == nil {
				p.Cohort = cohort
			}
			plan, _ := PlanFailover(FailoverInput{Self: self, Partitions: []Partition{p}, States: tc.states, AbsentSince: tc.absent, Now: now, DeadGrace: grace})
			if got := len(plan) == 1; got != tc.take {
				t.Fatalf("plan %+v; want a takeover: %v", plan, tc.take)
			}
			if tc.take && (plan[0].Part != 3 || plan[0].Old != p.Leader || !slices.Equal(plan[0].Cohort, p.Cohort)) {
				t.Fatalf("takeover %+v; want partition 3 from %d with cohort %v", plan[0], p.Leader, p.Cohort)
			}
		})
	}
}

// The absent-since map starts a leader's clock when gossip first lacks
// it, keeps it while it stays unknown, and forgets it once gossip knows
// it again.
func TestPlanFailoverAbsence(t *testing.T) {
	const self, a, b = 1, 2, 3
	p := Partition{Part: 0, Leader: a, Epoch: 2, Cohort: []uint64{a, self, b}}
	states := map[uint64]member.State{self: member.Alive, b: member.Alive}
	t0 := time.Unix(1000, 0)
	in := FailoverInput{Self: self, Partitions: []Partition{p}, States: states, Now: t0, DeadGrace: time.Second}
	plan, absent := PlanFailover(in)
	if len(plan) != 0 || !absent[a].Equal(t0) {
		t.Fatalf("first plan %+v, absent %v; want none, and a absent since t0", plan, absent)
	}
	in.AbsentSince, in.Now = absent, t0.Add(time.Second)
	if plan, absent = PlanFailover(in); len(plan) != 1 || !absent[a].Equal(t0) {
		t.Fatalf("after the grace: plan %+v, absent %v; want the takeover, a still absent since t0", plan, absent)
	}
	in.AbsentSince, in.States = absent, map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	if plan, absent = PlanFailover(in); len(plan) != 0 || len(absent) != 0 {
		t.Fatalf("a back: plan %+v, absent %v; want nothing", plan, absent)
	}
}
