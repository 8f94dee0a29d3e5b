package control

import (
	"maps"
	"slices"
	"testing"
)

func TestZombie(t *testing.T) {
	const self, a, b = 1, 2, 3
	for _, tc := range []struct {
		name    string
		cohort  []uint64
		leader  uint64
		leading bool
		want    bool
	}{
		{"out of the cohort, another leads", []uint64{a, b}, a, false, true},
		{"in the cohort", []uint64{a, self}, a, false, false},
		{"no placement yet", nil, a, false, false},
		{"no leader", []uint64{a, b}, 0, false, false},
		{"the registry names this node", []uint64{a, b}, self, false, false},
		{"this replica still leads", []uint64{a, b}, a, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Zombie(self, tc.cohort, tc.leader, tc.leading); got != tc.want {
				t.Fatalf("Zombie = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanZombies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       ZombieCandidate
		outAt   map[uint16]uint64
		release bool
		next    map[uint16]uint64
	}{
		{"first seen: wait for a second look", ZombieCandidate{Zombie: true, Holds: true, Epoch: 5}, nil, false, map[uint16]uint64{3: 5}},
		{"seen at the same epoch: release", ZombieCandidate{Zombie: true, Holds: true, Epoch: 5}, map[uint16]uint64{3: 5}, true, map[uint16]uint64{3: 5}},
		{"the cohort changed since: look again", ZombieCandidate{Zombie: true, Holds: true, Epoch: 6}, map[uint16]uint64{3: 5}, false, map[uint16]uint64{3: 6}},
		{"no zombie any more: forget", ZombieCandidate{Holds: true, Epoch: 5}, map[uint16]uint64{3: 5}, false, map[uint16]uint64{}},
		{"nothing held: forget", ZombieCandidate{Zombie: true, Epoch: 5}, map[uint16]uint64{3: 5}, false, map[uint16]uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Part = 3
			release, next := PlanZombies([]ZombieCandidate{p}, tc.outAt)
			if got := slices.Equal(release, []uint16{3}); got != tc.release {
				t.Fatalf("release %v; want partition 3 released: %v", release, tc.release)
			}
			if !maps.Equal(next, tc.next) {
				t.Fatalf("out-at %v; want %v", next, tc.next)
			}
		})
	}
}
