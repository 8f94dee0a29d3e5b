package control

import (
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/member"
)

func TestPlanFailover(t *testing.T) {
	const self, a, b = 1, 2, 3
	const part = 3
	cohort := []uint64{a, self, b}
	now := time.Unix(1000, 0)
	grace, pgrace := 2*time.Second, 5*time.Second
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
	// promisedAway is the registry naming this node at epoch 4 while its
	// replica promised epoch 5 to b; since says since when.
	promisedAway := Partition{Leader: self, Epoch: 4, Promised: 5, PromisedTo: b}
	since := func(d time.Duration) map[int]time.Time { return map[int]time.Time{part: now.Add(-d)} }
	with2 := func(p Partition, f func(*Partition)) Partition { f(&p); return p }
	for _, tc := range []struct {
		name     string
		p        Partition
		states   map[uint64]member.State
		absent   map[uint64]time.Time
		promised map[int]time.Time
		why      TakeoverWhy // 0: no takeover
	}{
		{"named leader, not leading: lead", Partition{Leader: self, Epoch: 4}, alive, nil, nil, TakeoverNamed},
		{"named leader, leading", Partition{Leader: self, Epoch: 4, Leading: true}, alive, nil, nil, 0},
		{"named leader, own handoff running", Partition{Leader: self, Epoch: 4, Handoff: true}, alive, nil, nil, 0},
		{"named leader, promised a newer epoch to another", promisedAway, alive, nil, nil, 0},
		{"named leader, promised to another, within the promise grace", promisedAway, alive, nil, since(pgrace / 2), 0},
		// The regression (seeds 194, 754 under load): the candidate this
		// node promised to never finished, and the partition stayed
		// without a leader for good.
		{"named leader, promised to another, past the promise grace: take it back", promisedAway, alive, nil, since(pgrace), TakeoverAbandoned},
		{"promised away past the grace, to a candidate now dead", promisedAway, with(alive, b, member.Dead), nil, since(pgrace), TakeoverAbandoned},
		{"promised away past the grace, cut off", promisedAway, with(with(alive, a, member.Dead), b, member.Dead), nil, since(pgrace), 0},
		{"promised away past the grace, own handoff running", with2(promisedAway, func(p *Partition) { p.Handoff = true }), alive, nil, since(pgrace), 0},
		{"promised away past the grace, a takeover already running", with2(promisedAway, func(p *Partition) { p.Running = true }), alive, nil, since(pgrace), 0},
		{"promised away past the grace, leading again", with2(promisedAway, func(p *Partition) { p.Leading = true }), alive, nil, since(pgrace), 0},
		{"named leader, promised a newer epoch to itself", Partition{Leader: self, Epoch: 4, Promised: 5, PromisedTo: self}, alive, nil, nil, TakeoverNamed},
		{"named leader, promised the registry's epoch to another", Partition{Leader: self, Epoch: 4, Promised: 4, PromisedTo: b}, alive, nil, nil, TakeoverNamed},
		{"leader alive", Partition{Leader: a, Epoch: 4}, alive, nil, nil, 0},
		{"leader suspect", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Suspect), nil, nil, 0},
		{"leader dead, self its successor", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Dead), nil, nil, TakeoverDead},
		{"leader left, self its successor", Partition{Leader: a, Epoch: 4}, with(alive, a, member.Left), nil, nil, TakeoverDead},
		{"leader dead, another succeeds", Partition{Leader: b, Epoch: 4, Cohort: []uint64{b, a, self}}, with(alive, b, member.Dead), nil, nil, 0},
		{"leader unknown, first seen", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), nil, nil, 0},
		{"leader unknown, within grace", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), map[uint64]time.Time{a: now.Add(-grace / 2)}, nil, 0},
		{"leader unknown, past grace", Partition{Leader: a, Epoch: 4}, with(alive, a, 0), map[uint64]time.Time{a: now.Add(-grace)}, nil, TakeoverDead},
		{"cut off: most of the cohort dead", Partition{Leader: a, Epoch: 4}, with(with(alive, a, member.Dead), b, member.Dead), nil, nil, 0},
		{"no leader yet", Partition{Leader: 0}, alive, nil, nil, 0},
		{"not in the cohort", Partition{Leader: a, Epoch: 4, Cohort: []uint64{a, b, 9}}, with(alive, a, member.Dead), nil, nil, 0},
		{"a takeover already running", Partition{Leader: a, Epoch: 4, Running: true}, with(alive, a, member.Dead), nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Part = part
			if p.Cohort == nil {
				p.Cohort = cohort
			}
			plan := PlanFailover(FailoverInput{
				Self: self, Partitions: []Partition{p}, States: tc.states, AbsentSince: tc.absent, PromisedSince: tc.promised,
				Now: now, DeadGrace: grace, PromiseGrace: pgrace,
			})
			if got := len(plan.Takeovers) == 1; got != (tc.why != 0) {
				t.Fatalf("plan %+v; want a takeover: %v", plan.Takeovers, tc.why != 0)
			}
			if tc.why != 0 {
				if tk := plan.Takeovers[0]; tk.Part != part || tk.Old != p.Leader || !slices.Equal(tk.Cohort, p.Cohort) || tk.Why != tc.why {
					t.Fatalf("takeover %+v; want partition %d from %d with cohort %v, why %d", tk, part, p.Leader, p.Cohort, tc.why)
				}
			}
		})
	}
}

// The promised-since map starts a partition's clock when it is first
// seen promised away, keeps it across plans (a newer promise to the
// candidate's retry does not restart it), and forgets it once the
// partition is led or promised to this node's own handoff, so that the
// next candidate gets the whole grace again.
func TestPlanFailoverPromisedAway(t *testing.T) {
	const self, a, b = 1, 2, 3
	const part = 0
	away := Partition{Part: part, Leader: self, Epoch: 4, Cohort: []uint64{self, a, b}, Promised: 5, PromisedTo: a}
	states := map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	t0 := time.Unix(1000, 0)
	const grace = 3 * time.Second
	in := FailoverInput{Self: self, Partitions: []Partition{away}, States: states, Now: t0, DeadGrace: time.Second, PromiseGrace: grace}
	step := func(now time.Time, p Partition) FailoverPlan {
		in.Now, in.Partitions = now, []Partition{p}
		plan := PlanFailover(in)
		in.AbsentSince, in.PromisedSince = plan.AbsentSince, plan.PromisedSince
		return plan
	}
	if plan := step(t0, away); len(plan.Takeovers) != 0 || !plan.PromisedSince[part].Equal(t0) {
		t.Fatalf("first seen: %+v; want no takeover, promised away since t0", plan)
	}
	retried := away
	retried.Promised = 7 // the candidate retried above a refusal
	if plan := step(t0.Add(grace-time.Millisecond), retried); len(plan.Takeovers) != 0 || !plan.PromisedSince[part].Equal(t0) {
		t.Fatalf("just within the grace: %+v; want no takeover, still since t0", plan)
	}
	plan := step(t0.Add(grace), retried)
	if len(plan.Takeovers) != 1 || plan.Takeovers[0].Why != TakeoverAbandoned || !plan.PromisedSince[part].Equal(t0) {
		t.Fatalf("at the grace: %+v; want the takeover of an abandoned promise", plan)
	}
	// The takeover's handoff promised the partition to this node: the
	// clock stops.
	own := away
	own.Promised, own.PromisedTo, own.Handoff = 8, self, true
	if plan := step(t0.Add(grace+time.Second), own); len(plan.Takeovers) != 0 || len(plan.PromisedSince) != 0 {
		t.Fatalf("own handoff: %+v; want nothing, and the clock forgotten", plan)
	}
	// Another candidate wins this node's promise: it gets the whole grace.
	t1 := t0.Add(time.Hour)
	again := away
	again.Promised, again.PromisedTo = 9, b
	if plan := step(t1, again); len(plan.Takeovers) != 0 || !plan.PromisedSince[part].Equal(t1) {
		t.Fatalf("promised away again: %+v; want no takeover, since t1", plan)
	}
	if plan := step(t1.Add(grace/2), again); len(plan.Takeovers) != 0 {
		t.Fatalf("within the new grace: %+v; want no takeover", plan)
	}
	// The candidate won: the registry names it, and the clock is dropped.
	won := again
	won.Leader, won.Epoch = b, 9
	if plan := step(t1.Add(grace), won); len(plan.Takeovers) != 0 || len(plan.PromisedSince) != 0 {
		t.Fatalf("the candidate won: %+v; want nothing, and the clock forgotten", plan)
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
	plan := PlanFailover(in)
	if len(plan.Takeovers) != 0 || !plan.AbsentSince[a].Equal(t0) {
		t.Fatalf("first plan %+v; want none, and a absent since t0", plan)
	}
	in.AbsentSince, in.Now = plan.AbsentSince, t0.Add(time.Second)
	if plan = PlanFailover(in); len(plan.Takeovers) != 1 || !plan.AbsentSince[a].Equal(t0) {
		t.Fatalf("after the grace: plan %+v; want the takeover, a still absent since t0", plan)
	}
	in.AbsentSince, in.States = plan.AbsentSince, map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	if plan = PlanFailover(in); len(plan.Takeovers) != 0 || len(plan.AbsentSince) != 0 {
		t.Fatalf("a back: plan %+v; want nothing", plan)
	}
}

// A candidate that said it gave up its handoff at or above the epoch this
// node promised it (OpAbandoned) is not waited for: the partition is
// taken back at once. One that asked above what it said (a retry after
// it spoke) gets the grace again.
func TestPlanFailoverToldAbandoned(t *testing.T) {
	const self, a, b = 1, 2, 3
	states := map[uint64]member.State{self: member.Alive, a: member.Alive, b: member.Alive}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		abandoned uint64
		take      bool
	}{
		{"nothing said", 0, false},
		{"gave up at the epoch promised", 5, true},
		{"gave up above it", 6, true},
		{"gave up below it: a later attempt", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Partition{Part: 0, Leader: self, Epoch: 4, Cohort: []uint64{self, a, b}, Promised: 5, PromisedTo: a, Abandoned: tc.abandoned}
			plan := PlanFailover(FailoverInput{Self: self, Partitions: []Partition{p}, States: states, Now: t0, DeadGrace: time.Second, PromiseGrace: time.Hour})
			took := len(plan.Takeovers) == 1 && plan.Takeovers[0].Why == TakeoverAbandoned
			if took != tc.take || len(plan.Takeovers) > 1 {
				t.Fatalf("plan %+v; want a takeover of the abandoned promise: %v", plan.Takeovers, tc.take)
			}
			if !plan.PromisedSince[0].Equal(t0) {
				t.Fatalf("promised away since %v; want t0 either way", plan.PromisedSince[0])
			}
		})
	}
}
