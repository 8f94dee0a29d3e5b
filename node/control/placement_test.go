package control

import (
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/ring"
)

func TestPlanPlacement(t *testing.T) {
	const a, b, c, d = 1, 2, 3, 4
	const replicas = 3
	now := time.Unix(1000, 0)
	settle := 5 * time.Second
	members := []uint64{a, b, c, d}
	alive := []uint64{a, b, c, d}
	states := func(down map[uint64]member.State) map[uint64]member.State {
		out := map[uint64]member.State{a: member.Alive, b: member.Alive, c: member.Alive, d: member.Alive}
		for id, st := range down {
			out[id] = st
		}
		return out
	}
	// placed is partition p as ring places it over live.
	placed := func(p int, live []uint64) Placed {
		w := ring.Cohort(p, live, replicas)
		return Placed{Leader: w[0], Cohort: w}
	}
	want := ring.Cohort(0, alive, replicas)
	other := slices.DeleteFunc(slices.Clone(members), func(id uint64) bool { return slices.Contains(want, id) })[0]
	misplaced := Placed{Leader: want[0], Cohort: []uint64{want[0], want[1], other}}
	for _, tc := range []struct {
		name      string
		states    map[uint64]member.State
		lastAlive []uint64
		since     time.Duration // how long the live set has been lastAlive
		part      Placed
		moving    map[int]bool
		maxMoves  int
		move      bool
		// newAlive: the plan restarts the settle clock now.
		newAlive bool
	}{
		{"placed", states(nil), alive, settle, placed(0, alive), nil, maxMoves, false, false},
		{"misplaced: move", states(nil), alive, settle, misplaced, nil, maxMoves, true, false},
		{"ring's cohort, another leader: move back", states(nil), alive, settle, Placed{Leader: want[1], Cohort: want}, nil, maxMoves, true, false},
		{"cohort in another order, ring's leader", states(nil), alive, settle, Placed{Leader: want[0], Cohort: []uint64{want[0], want[2], want[1]}}, nil, maxMoves, false, false},
		{"not settled yet", states(nil), alive, settle / 2, misplaced, nil, maxMoves, false, false},
		{"live set changed: settle again", states(nil), []uint64{a, b, c}, settle, misplaced, nil, maxMoves, false, true},
		{"a member suspect", states(map[uint64]member.State{other: member.Suspect}), slices.Sorted(slices.Values(want)), settle, misplaced, nil, maxMoves, false, false},
		{"leader not alive: failover first", states(map[uint64]member.State{want[0]: member.Dead}), slices.DeleteFunc(slices.Clone(alive), func(id uint64) bool { return id == want[0] }), settle, misplaced, nil, maxMoves, false, false},
		{"no leader yet", states(nil), alive, settle, Placed{}, nil, maxMoves, false, false},
		{"moving already", states(nil), alive, settle, misplaced, map[int]bool{0: true}, maxMoves, false, false},
		{"as many moving as allowed", states(nil), alive, settle, misplaced, map[int]bool{5: true, 6: true}, 2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanPlacement(PlacementInput{
				Members: members, States: tc.states, Partitions: []Placed{tc.part}, Replicas: replicas,
				Moving: tc.moving, MaxMoves: tc.maxMoves, LastAlive: tc.lastAlive, LastChange: now.Add(-tc.since),
				Now: now, Settle: settle,
			})
			if got := len(plan.Moves) == 1; got != tc.move {
				t.Fatalf("moves %+v; want a move: %v", plan.Moves, tc.move)
			}
			if tc.move {
				mv := plan.Moves[0]
				wantTo := ring.Cohort(0, plan.Alive, replicas)
				if mv.Part != 0 || mv.Leader != tc.part.Leader || !slices.Equal(mv.From, tc.part.Cohort) || !slices.Equal(mv.To, wantTo) {
					t.Fatalf("move %+v; want partition 0 led by %d from %v to %v", mv, tc.part.Leader, tc.part.Cohort, wantTo)
				}
			}
			if restarted := plan.LastChange.Equal(now); restarted != tc.newAlive {
				t.Fatalf("settle clock restarted: %v, want %v (alive %v)", restarted, tc.newAlive, plan.Alive)
			}
		})
	}
}

// Moves are bounded over one plan too, and the partitions moving already
// count.
func TestPlanPlacementBoundsMoves(t *testing.T) {
	const a, b, c = 1, 2, 3
	now := time.Unix(1000, 0)
	states := map[uint64]member.State{a: member.Alive, b: member.Alive, c: member.Alive}
	parts := make([]Placed, 10)
	for p := range parts {
		parts[p] = Placed{Leader: a, Cohort: []uint64{a}} // every one misplaced with 3 replicas
	}
	plan := PlanPlacement(PlacementInput{
		Members: []uint64{c, a, b}, States: states, Partitions: parts, Replicas: 3,
		Moving: map[int]bool{9: true}, MaxMoves: 4, LastAlive: []uint64{a, b, c}, LastChange: now.Add(-time.Minute),
		Now: now, Settle: time.Second,
	})
	if len(plan.Moves) != 3 {
		t.Fatalf("%d moves: want 3 (4 allowed, 1 running)", len(plan.Moves))
	}
	for i, mv := range plan.Moves {
		if mv.Part != i {
			t.Fatalf("move %d is of partition %d: want the partitions in order", i, mv.Part)
		}
	}
}

// TestPlanPlacementRetiring: a retiring member's partition moves to
// ring's cohort over the others, led by its current leader (the retiring
// one too); once placed without it, it stays; a member not in the cohort
// retiring moves nothing.
func TestPlanPlacementRetiring(t *testing.T) {
	const replicas = 3
	members := []uint64{1, 2, 3, 4}
	states := map[uint64]member.State{1: member.Alive, 2: member.Alive, 3: member.Alive, 4: member.Alive}
	now := time.Unix(1000, 0)
	cur := ring.Cohort(0, members, replicas)
	for _, retire := range members {
		others := slices.DeleteFunc(slices.Clone(members), func(id uint64) bool { return id == retire })
		in := PlacementInput{
			Members: members, States: states, Retiring: map[uint64]bool{retire: true},
			Partitions: []Placed{{Leader: cur[0], Cohort: cur}}, Replicas: replicas, MaxMoves: maxMoves,
			LastAlive: members, LastChange: now.Add(-time.Minute), Now: now, Settle: time.Second,
		}
		plan := PlanPlacement(in)
		want := ring.Cohort(0, others, replicas)
		if !slices.Contains(cur, retire) {
			if len(plan.Moves) != 0 {
				t.Fatalf("retiring %d, not in cohort %v: moves %+v", retire, cur, plan.Moves)
			}
			continue
		}
		if len(plan.Moves) != 1 || plan.Moves[0].Leader != cur[0] || !slices.Equal(plan.Moves[0].To, want) {
			t.Fatalf("retiring %d of %v: moves %+v, want one led by %d to %v", retire, cur, plan.Moves, cur[0], want)
		}
		in.Partitions = []Placed{{Leader: want[0], Cohort: want}}
		if plan := PlanPlacement(in); len(plan.Moves) != 0 {
			t.Fatalf("placed without %d: moves %+v", retire, plan.Moves)
		}
	}
}
