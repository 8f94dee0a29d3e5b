package control

import "testing"

// TestRetiringVoter: a retiring voter is demoted when the other live
// voters commit without it; not while they would not, nor when it is the
// only voter.
func TestRetiringVoter(t *testing.T) {
	all := map[uint64]bool{1: true, 2: true, 3: true}
	for _, tc := range []struct {
		name     string
		voters   []uint64
		retiring map[uint64]bool
		alive    map[uint64]bool
		want     uint64
	}{
		{"none retiring", []uint64{1, 2, 3}, nil, all, 0},
		{"one of three", []uint64{1, 2, 3}, map[uint64]bool{3: true}, all, 3},
		{"one of two", []uint64{1, 3}, map[uint64]bool{3: true}, all, 3},
		{"the only voter", []uint64{3}, map[uint64]bool{3: true}, all, 0},
		{"the others down", []uint64{1, 2, 3}, map[uint64]bool{3: true}, map[uint64]bool{1: true}, 0},
		{"a learner retiring", []uint64{1, 2, 3}, map[uint64]bool{4: true}, all, 0},
	} {
		got, ok := RetiringVoter(tc.voters, tc.retiring, tc.alive)
		if got != tc.want || ok != (tc.want != 0) {
			t.Errorf("%s: %d %v, want %d", tc.name, got, ok, tc.want)
		}
	}
}
