package raftgroup

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// PlanVoters keeps an odd number of voters, at most MaxVoters, replaces
// voters dead past grace and never plans what could not commit (docs/design.md,
// Topology: "up to 5 voters (the rest are learners)").
func TestPlanVoters(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	grace := DefaultDeadGrace
	recent := now.Add(-grace / 2) // dead within grace
	long := now.Add(-2 * grace)   // dead past grace
	exactly := now.Add(-grace)    // dead exactly DeadGrace: not past it
	ids := func(v ...uint64) []uint64 { return v }
	up := func(v ...uint64) map[uint64]bool {
		m := map[uint64]bool{}
		for _, id := range v {
			m[id] = true
		}
		return m
	}
	step := func(k ConfKind, id uint64) ConfStep { return ConfStep{k, id} }
	for _, tc := range []struct {
		name      string
		voters    []uint64
		learners  []uint64
		alive     map[uint64]bool
		deadSince map[uint64]time.Time
		policy    VoterPolicy
		want      []ConfStep
	}{
		{name: "one node", voters: ids(1), alive: up(1)},
		{name: "second node joins as a learner", voters: ids(1), alive: up(1, 2),
			want: []ConfStep{step(ConfAddLearner, 2)}},
		{name: "two nodes keep one voter", voters: ids(1), learners: ids(2), alive: up(1, 2)},
		{name: "joiners are added in id order", voters: ids(1), alive: up(1, 5, 3, 2),
			want: []ConfStep{step(ConfAddLearner, 2), step(ConfAddLearner, 3), step(ConfAddLearner, 5)}},
		{name: "three nodes: promote the lowest learner", voters: ids(1), learners: ids(3, 2), alive: up(1, 2, 3),
			want: []ConfStep{step(ConfPromote, 2)}},
		{name: "three nodes: then the next", voters: ids(1, 2), learners: ids(3), alive: up(1, 2, 3),
			want: []ConfStep{step(ConfPromote, 3)}},
		{name: "three voters", voters: ids(1, 2, 3), alive: up(1, 2, 3)},
		{name: "four nodes keep three voters", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 2, 3, 4)},
		{name: "five nodes: promote", voters: ids(1, 2, 3), learners: ids(4, 5), alive: up(1, 2, 3, 4, 5),
			want: []ConfStep{step(ConfPromote, 4)}},
		{name: "five nodes: promote the second", voters: ids(1, 2, 3, 4), learners: ids(5), alive: up(1, 2, 3, 4, 5),
			want: []ConfStep{step(ConfPromote, 5)}},
		{name: "six nodes keep five voters", voters: ids(1, 2, 3, 4, 5), learners: ids(6), alive: up(1, 2, 3, 4, 5, 6)},
		{name: "a voter change comes before joiners", voters: ids(1), learners: ids(2, 3), alive: up(1, 2, 3, 4),
			want: []ConfStep{step(ConfPromote, 2), step(ConfAddLearner, 4)}},
		{name: "a dead learner is not promoted", voters: ids(1), learners: ids(2, 3), alive: up(1, 2)},
		{name: "a dead learner is not removed", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 2, 3),
			deadSince: map[uint64]time.Time{4: long}},
		{name: "an even cap acts as the odd one below", voters: ids(1, 2, 3), learners: ids(4, 5), alive: up(1, 2, 3, 4, 5),
			policy: VoterPolicy{MaxVoters: 4}},
		{name: "a lowered cap demotes the highest live voter", voters: ids(1, 2, 3, 4, 5), alive: up(1, 2, 3, 4, 5),
			policy: VoterPolicy{MaxVoters: 3}, want: []ConfStep{step(ConfDemote, 5)}},
		{name: "two live voters without a learner shrink to one", voters: ids(1, 2), alive: up(1, 2),
			want: []ConfStep{step(ConfDemote, 2)}},
		{name: "four voters: a down one is demoted first", voters: ids(1, 2, 3, 4), alive: up(1, 2, 4),
			deadSince: map[uint64]time.Time{3: recent}, want: []ConfStep{step(ConfDemote, 3)}},

		{name: "dead voter within grace: no change", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 2, 4),
			deadSince: map[uint64]time.Time{3: recent}},
		{name: "dead voter at exactly the grace: no change", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 2, 4),
			deadSince: map[uint64]time.Time{3: exactly}},
		{name: "dead voter of unknown age counts as within grace", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 2, 4)},
		{name: "absent from alive means dead", voters: ids(1, 2, 3), learners: ids(4),
			alive:     map[uint64]bool{1: true, 2: true, 3: false, 4: true},
			deadSince: map[uint64]time.Time{3: long}, want: []ConfStep{step(ConfPromote, 4)}},
		{name: "dead voter past grace: its replacement is promoted first", voters: ids(1, 2, 3), learners: ids(5, 4),
			alive: up(1, 2, 4, 5), deadSince: map[uint64]time.Time{3: long}, want: []ConfStep{step(ConfPromote, 4)}},
		{name: "dead voter past grace: then it is demoted", voters: ids(1, 2, 3, 4), learners: ids(5),
			alive: up(1, 2, 4, 5), deadSince: map[uint64]time.Time{3: long}, want: []ConfStep{step(ConfDemote, 3)}},
		{name: "replaced: done", voters: ids(1, 2, 4), learners: ids(3, 5),
			alive: up(1, 2, 4, 5), deadSince: map[uint64]time.Time{3: long}},
		{name: "five voters, one dead past grace, one learner: replace", voters: ids(1, 2, 3, 4, 5), learners: ids(6),
			alive: up(1, 2, 3, 4, 6), deadSince: map[uint64]time.Time{5: long}, want: []ConfStep{step(ConfPromote, 6)}},
		{name: "six voters, one dead: demote it", voters: ids(1, 2, 3, 4, 5, 6),
			alive: up(1, 2, 3, 4, 6), deadSince: map[uint64]time.Time{5: long}, want: []ConfStep{step(ConfDemote, 5)}},

		{name: "no learner: three voters with one dead stay", voters: ids(1, 2, 3), alive: up(1, 2),
			deadSince: map[uint64]time.Time{3: long}},
		{name: "no learner: five voters with one dead stay", voters: ids(1, 2, 3, 4, 5), alive: up(1, 2, 3, 4),
			deadSince: map[uint64]time.Time{5: long}},
		{name: "no learner: five voters with two dead shrink to three", voters: ids(1, 2, 3, 4, 5), alive: up(1, 3, 5),
			deadSince: map[uint64]time.Time{2: long, 4: long}, want: []ConfStep{step(ConfDemote, 2)}},
		{name: "no learner: then the other dead one", voters: ids(1, 3, 4, 5), learners: ids(2), alive: up(1, 3, 5),
			deadSince: map[uint64]time.Time{2: long, 4: long}, want: []ConfStep{step(ConfDemote, 4)}},
		{name: "no live majority: nothing can commit", voters: ids(1, 2, 3), learners: ids(4), alive: up(1, 4, 5),
			deadSince: map[uint64]time.Time{2: long, 3: long}},
		{name: "half alive is no majority", voters: ids(1, 2), learners: ids(3), alive: up(1, 3),
			deadSince: map[uint64]time.Time{2: long}},
		{name: "one live voter of one", voters: ids(1), learners: ids(2), alive: up(1)},
		{name: "the only voter dead: nothing", voters: ids(1), learners: ids(2), alive: up(2),
			deadSince: map[uint64]time.Time{1: long}},
		{name: "zero ids are ignored", voters: ids(1), alive: up(0, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanVoters(tc.voters, tc.learners, tc.alive, tc.deadSince, now, tc.policy)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v; want %v", got, tc.want)
			}
			voterChanges := 0
			for _, s := range got {
				if s.Kind != ConfAddLearner {
					voterChanges++
				}
			}
			if voterChanges > 1 {
				t.Errorf("%d voter changes planned at once: %v", voterChanges, got)
			}
		})
	}
}

// Applying the plan step by step converges on the target shape and
// stops there: 1 to 7 live nodes end with 1, 1, 3, 3, 5, 5, 5 voters.
func TestPlanVotersConverges(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for n := 1; n <= 7; n++ {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			voters, learners := []uint64{1}, []uint64(nil)
			alive := map[uint64]bool{}
			for id := uint64(1); id <= uint64(n); id++ {
				alive[id] = true
			}
			for round := 0; ; round++ {
				if round > 20 {
					t.Fatalf("no fixed point after %d rounds: voters %v learners %v", round, voters, learners)
				}
				steps := PlanVoters(voters, learners, alive, nil, now, VoterPolicy{})
				if len(steps) == 0 {
					break
				}
				voters, learners = applySteps(t, voters, learners, steps)
			}
			want := min(oddFloor(n), DefaultMaxVoters)
			if len(voters) != want || len(voters)+len(learners) != n {
				t.Errorf("got voters %v learners %v; want %d voters of %d members", voters, learners, want, n)
			}
		})
	}
}

// PlanVoters is deterministic: map iteration order and the order of the
// input slices do not change its answer.
func TestPlanVotersDeterministic(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	alive := map[uint64]bool{1: true, 2: true, 4: true, 7: true, 8: true, 9: true, 6: true}
	dead := map[uint64]time.Time{3: now.Add(-time.Hour)}
	want := PlanVoters([]uint64{1, 2, 3}, []uint64{4, 5, 6}, alive, dead, now, VoterPolicy{})
	if len(want) == 0 || want[0] != (ConfStep{ConfPromote, 4}) {
		t.Fatalf("plan %v; want promote 4 first", want)
	}
	for range 50 {
		got := PlanVoters([]uint64{3, 1, 2}, []uint64{6, 4, 5}, alive, dead, now, VoterPolicy{})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v; want %v", got, want)
		}
	}
}

// applySteps applies a plan to a configuration, as the group would.
func applySteps(t *testing.T, voters, learners []uint64, steps []ConfStep) ([]uint64, []uint64) {
	t.Helper()
	set := map[uint64]confRole{}
	for _, id := range voters {
		set[id] = roleVoter
	}
	for _, id := range learners {
		set[id] = roleLearner
	}
	for _, s := range steps {
		switch s.Kind {
		case ConfAddLearner:
			set[s.ID] = roleLearner
		case ConfPromote:
			set[s.ID] = roleVoter
		case ConfDemote:
			set[s.ID] = roleLearner
		case ConfRemove:
			delete(set, s.ID)
		default:
			t.Fatalf("unknown step %v", s)
		}
	}
	voters, learners = nil, nil
	for id, r := range set {
		if r == roleVoter {
			voters = append(voters, id)
		} else {
			learners = append(learners, id)
		}
	}
	return sortedIDs(voters), sortedIDs(learners)
}
