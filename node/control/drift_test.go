package control

import (
	"testing"

	"github.com/skuldd/skuldd/clock"
)

func TestPlanDrift(t *testing.T) {
	drifting := clock.Drift{Drifting: true, Peers: 2}
	started := clock.Drift{Drifting: true, Changed: true, Peers: 2}
	back := clock.Drift{Changed: true, Peers: 2}
	fine := clock.Drift{Peers: 2}
	for _, tc := range []struct {
		name string
		in   DriftInput
		want DriftPlan
	}{
		{"in bounds", DriftInput{Verdict: fine}, DriftPlan{Checked: true}},
		{"no peer yet", DriftInput{Verdict: clock.Drift{}}, DriftPlan{}},
		{"no peer, alone", DriftInput{Verdict: clock.Drift{}, Alone: true}, DriftPlan{Checked: true}},
		{"starts drifting, leads: stand by, hand off", DriftInput{Verdict: started, Leads: true}, DriftPlan{Checked: true, StandBy: true, HandOff: true}},
		{"starts drifting, leads nothing", DriftInput{Verdict: started}, DriftPlan{Checked: true, StandBy: true}},
		{"starts drifting, exit on drift", DriftInput{Verdict: started, Leads: true, ExitOnDrift: true}, DriftPlan{Checked: true, StandBy: true, Exit: true}},
		{"still drifting, leads again: hand off", DriftInput{Verdict: drifting, Leads: true}, DriftPlan{Checked: true, HandOff: true}},
		{"still drifting, a hand-off runs", DriftInput{Verdict: drifting, Leads: true, HandingOff: true}, DriftPlan{Checked: true}},
		{"back in bounds: resume", DriftInput{Verdict: back}, DriftPlan{Checked: true, Resume: true}},
		{"back in bounds, leads: no hand-off", DriftInput{Verdict: back, Leads: true}, DriftPlan{Checked: true, Resume: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanDrift(tc.in); got != tc.want {
				t.Fatalf("PlanDrift = %+v, want %+v", got, tc.want)
			}
		})
	}
}
