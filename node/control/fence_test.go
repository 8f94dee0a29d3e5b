package control

import (
	"testing"
	"time"

	"github.com/skuldd/skuldd/member"
)

func TestPlanFence(t *testing.T) {
	const self, a, b = 1, 2, 3
	cohort := []uint64{self, a, b}
	now := time.Unix(1000, 0)
	settle := time.Second
	all := map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	cut := map[uint64]member.State{self: member.Alive, a: member.Dead, b: member.Dead}
	suspect := map[uint64]member.State{self: member.Alive, a: member.Suspect, b: member.Dead}
	for _, tc := range []struct {
		name   string
		p      FencePartition
		states map[uint64]member.State
		back   map[uint16]time.Time
		// step: the step wanted, if any; backNext: whether the partition
		// stays in the back-since map, since when.
		step     *FenceStep
		backNext *time.Time
	}{
		{"leads, majority", FencePartition{Leads: true, Cohort: cohort}, all, nil, nil, nil},
		{"leads, cut off: fence", FencePartition{Leads: true, Cohort: cohort}, cut, nil, &FenceStep{On: true, Why: FenceCutOff}, nil},
		{"fenced, still cut off: fence again", FencePartition{Leads: true, Cohort: cohort, Fenced: true}, cut, map[uint16]time.Time{7: now.Add(-time.Hour)}, &FenceStep{On: true, Why: FenceCutOff}, nil},
		{"a suspect member counts", FencePartition{Leads: true, Cohort: cohort}, suspect, nil, nil, nil},
		{"fenced, majority back: wait", FencePartition{Leads: true, Cohort: cohort, Fenced: true}, all, nil, nil, &now},
		{"fenced, majority back within settle", FencePartition{Leads: true, Cohort: cohort, Fenced: true}, all, map[uint16]time.Time{7: now.Add(-settle / 2)}, nil, ptr(now.Add(-settle / 2))},
		{"fenced, majority back for settle: lift", FencePartition{Leads: true, Cohort: cohort, Fenced: true}, all, map[uint16]time.Time{7: now.Add(-settle)}, &FenceStep{Why: FenceBack}, nil},
		{"fenced, no longer leads: lift", FencePartition{Cohort: cohort, Fenced: true}, cut, map[uint16]time.Time{7: now}, &FenceStep{Why: FenceNotLeading}, nil},
		{"not leading, not fenced", FencePartition{}, cut, map[uint16]time.Time{7: now}, nil, nil},
		{"leads with no cohort yet", FencePartition{Leads: true}, cut, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Part = 7
			steps, back := PlanFence(FenceInput{Partitions: []FencePartition{p}, States: tc.states, BackSince: tc.back, Now: now, Settle: settle})
			switch {
			case tc.step == nil && len(steps) != 0:
				t.Fatalf("steps %+v; want none", steps)
			case tc.step != nil && (len(steps) != 1 || steps[0] != FenceStep{Part: 7, On: tc.step.On, Why: tc.step.Why}):
				t.Fatalf("steps %+v; want %+v of partition 7", steps, *tc.step)
			}
			since, kept := back[7]
			if kept != (tc.backNext != nil) || kept && !since.Equal(*tc.backNext) {
				t.Fatalf("back since %v (kept %v); want %v", since, kept, tc.backNext)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
