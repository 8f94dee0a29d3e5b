package control

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/member"
)

func TestPlanHandOff(t *testing.T) {
	const self, a, b = 1, 2, 3
	alive := map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	aDead := map[uint64]member.State{self: member.Alive, a: member.Dead, b: member.Alive}
	allDead := map[uint64]member.State{self: member.Alive, a: member.Dead, b: member.Suspect}
	for _, tc := range []struct {
		name    string
		p       Placed
		leading bool
		named   bool
		states  map[uint64]member.State
		to      uint64 // 0: no hand-off
		failed  int
	}{
		{"leads: the first other live member", Placed{Leader: self, Cohort: []uint64{self, a, b}}, true, false, alive, a, 0},
		{"leads, the first other dead", Placed{Leader: self, Cohort: []uint64{self, a, b}}, true, false, aDead, b, 0},
		{"leads, none alive", Placed{Leader: self, Cohort: []uint64{self, a, b}}, true, false, allDead, 0, 1},
		{"leads a cohort of one", Placed{Leader: self, Cohort: []uint64{self}}, true, false, alive, 0, 0},
		{"leads, the registry lags", Placed{Leader: a, Cohort: []uint64{a, self, b}}, true, false, alive, a, 0},
		{"named, not leading", Placed{Leader: self, Cohort: []uint64{self, b}}, false, true, alive, b, 0},
		{"named but not asked for", Placed{Leader: self, Cohort: []uint64{self, b}}, false, false, alive, 0, 0},
		{"neither", Placed{Leader: a, Cohort: []uint64{a, self}}, false, true, alive, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, failed := PlanHandOff(HandOffInput{Self: self, Partitions: []Placed{tc.p}, Leading: []bool{tc.leading}, Named: tc.named, States: tc.states})
			if failed != tc.failed {
				t.Fatalf("failed %d, want %d", failed, tc.failed)
			}
			if tc.to == 0 {
				if len(plan) != 0 {
					t.Fatalf("plan %+v; want none", plan)
				}
				return
			}
			if len(plan) != 1 || plan[0].Part != 0 || plan[0].To != tc.to || !slices.Equal(plan[0].Cohort, tc.p.Cohort) {
				t.Fatalf("plan %+v; want partition 0 to node %d with cohort %v", plan, tc.to, tc.p.Cohort)
			}
		})
	}
}
