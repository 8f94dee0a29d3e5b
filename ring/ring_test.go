package ring

import (
	"fmt"
	"slices"
	"testing"
)

func TestPartitionOfStable(t *testing.T) {
	// The mapping is part of the on-disk format: pin it.
	id := []byte("00000140d20fa086800000019dace3c8ab1f6f82")
	got := PartitionOf(id, 64)
	if again := PartitionOf(id, 64); again != got {
		t.Fatalf("not deterministic: %d then %d", got, again)
	}
	if got != 22 {
		t.Fatalf("PartitionOf changed: got %d; want 22 (the hash is part of the disk format)", got)
	}
}

func TestPartitionOfSpread(t *testing.T) {
	const p, n = 64, 64000
	counts := make([]int, p)
	for i := range n {
		counts[PartitionOf([]byte(fmt.Sprintf("task-%d", i)), p)]++
	}
	for part, c := range counts {
		if c < n/p/2 || c > n/p*2 {
			t.Fatalf("partition %d has %d of %d ids; want near %d", part, c, n, n/p)
		}
	}
}

func TestCohort(t *testing.T) {
	tests := []struct {
		name    string
		members []uint64
		n       int
		want    int
	}{
		{"one node", []uint64{7}, 3, 1},
		{"three nodes", []uint64{1, 2, 3}, 3, 3},
		{"five nodes, n=3", []uint64{1, 2, 3, 4, 5}, 3, 3},
		{"duplicates ignored", []uint64{2, 2, 1}, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Cohort(0, tc.members, tc.n)
			if len(c) != tc.want {
				t.Fatalf("cohort %v: got %d members; want %d", c, len(c), tc.want)
			}
			if !slices.Equal(c, Cohort(0, slices.Clone(tc.members), tc.n)) {
				t.Fatal("cohort not deterministic")
			}
		})
	}
}

func TestCohortMovesLittleOnJoin(t *testing.T) {
	const p = 256
	before := []uint64{1, 2, 3, 4}
	after := []uint64{1, 2, 3, 4, 5}
	moved := 0
	for part := range p {
		a, b := Cohort(part, before, 3), Cohort(part, after, 3)
		for _, n := range a {
			if !slices.Contains(b, n) {
				moved++
			}
		}
	}
	// A fifth node should take about 3/5 of the 256 replicas' worth of
	// seats it can hold: 256*3/5 seats move at most; far fewer than all.
	if moved == 0 || moved > p*3/5+p/8 {
		t.Fatalf("join moved %d replica seats of %d; want about %d", moved, p*3, p*3/5)
	}
}

func TestMajority(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3} {
		if got := Majority(n); got != want {
			t.Fatalf("Majority(%d) = %d; want %d", n, got, want)
		}
	}
}
