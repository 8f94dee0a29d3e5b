package epoch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeVoter is an in-memory cohort: per node, per part, the promised epoch
// and candidate and the claim set. down nodes answer with an error.
type fakeVoter struct {
	mu       sync.Mutex
	promised map[uint64]uint64
	to       map[uint64]uint64
	claims   map[uint64][]Claim
	down     map[uint64]bool
}

func newFakeVoter() *fakeVoter {
	return &fakeVoter{promised: map[uint64]uint64{}, to: map[uint64]uint64{}, claims: map[uint64][]Claim{}, down: map[uint64]bool{}}
}

func (f *fakeVoter) Promise(_ context.Context, node uint64, _ int, epoch, cand uint64) ([]Claim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[node] {
		return nil, fmt.Errorf("node %d down", node)
	}
	p := f.promised[node]
	if epoch < p || epoch == p && f.to[node] != cand {
		return nil, fmt.Errorf("%w: node %d promised %d to %d", ErrRefused, node, p, f.to[node])
	}
	f.promised[node], f.to[node] = epoch, cand
	return slices.Clone(f.claims[node]), nil
}

func (f *fakeVoter) Install(_ context.Context, node uint64, _ int, epoch uint64, cs []Claim) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[node] {
		return fmt.Errorf("node %d down", node)
	}
	if epoch < f.promised[node] {
		return fmt.Errorf("%w: stale install", ErrRefused)
	}
	f.claims[node] = Union(f.claims[node], cs)
	return nil
}

type fakeRegistry struct {
	mu     sync.Mutex
	epoch  uint64
	cohort []uint64
	leader uint64
}

func (r *fakeRegistry) Current(int) (uint64, []uint64, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch, slices.Clone(r.cohort), r.leader, nil
}

func (r *fakeRegistry) CAS(_ context.Context, _ int, prev, next uint64, cohort []uint64, leader uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch != prev {
		return fmt.Errorf("cas conflict: epoch is %d, not %d", r.epoch, prev)
	}
	r.epoch, r.cohort, r.leader = next, slices.Clone(cohort), leader
	return nil
}

func claim(task byte, idx uint32, end int64) Claim {
	var id [20]byte
	id[0] = task
	return Claim{Task: id, Index: idx, Start: 1, End: end}
}

// Reference: DESIGN.md "Partition leaders", steps 1-8 with a one-node
// cohort (the single-node cluster): a majority of one.
func TestRunSingleNode(t *testing.T) {
	v, r := newFakeVoter(), &fakeRegistry{}
	res, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: []uint64{1}}, v, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 1 || r.leader != 1 || r.epoch != 1 {
		t.Fatalf("got epoch %d leader %d; want 1, 1", r.epoch, r.leader)
	}
	res, err = Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: []uint64{1}}, v, r)
	if err != nil || res.Epoch != 2 {
		t.Fatalf("second handoff: epoch %d err %v; want 2", res.Epoch, err)
	}
}

// Steps 6-7: the new leader's claim set is a superset of every claim a
// majority of the old cohort held.
func TestRunCarriesClaims(t *testing.T) {
	v := newFakeVoter()
	r := &fakeRegistry{epoch: 4, cohort: []uint64{1, 2, 3}, leader: 1}
	v.claims[1] = []Claim{claim(1, 0, 100), claim(2, 3, 50)}
	v.claims[2] = []Claim{claim(1, 0, 120)}
	v.down[1] = true // the old leader is gone
	res, err := Run(context.Background(), Handoff{Part: 0, Self: 2, Cohort: []uint64{2, 3, 4}}, v, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 5 || r.leader != 2 {
		t.Fatalf("epoch %d leader %d; want 5, 2", res.Epoch, r.leader)
	}
	// Node 1 is down, so only claims 2 and 3 held reach the new cohort;
	// node 2 had claim (1,0) renewed to 120.
	want := []Claim{claim(1, 0, 120)}
	if !slices.Equal(res.Claims, want) {
		t.Fatalf("claims %v; want %v", res.Claims, want)
	}
	for _, n := range []uint64{3, 4} {
		if !slices.Equal(v.claims[n], want) {
			t.Fatalf("node %d holds %v; want %v", n, v.claims[n], want)
		}
	}
}

func TestRunNeedsBothMajorities(t *testing.T) {
	tests := []struct {
		name string
		old  []uint64
		new  []uint64
		down []uint64
		ok   bool
	}{
		{"old minority down", []uint64{1, 2, 3}, []uint64{1, 2, 3}, []uint64{3}, true},
		{"old majority down", []uint64{1, 2, 3}, []uint64{1, 4, 5}, []uint64{2, 3}, false},
		{"new majority down", []uint64{1, 2, 3}, []uint64{1, 4, 5}, []uint64{4, 5}, false},
		{"first election, empty old cohort", nil, []uint64{1, 2, 3}, []uint64{3}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, r := newFakeVoter(), &fakeRegistry{cohort: tc.old}
			if len(tc.old) > 0 {
				r.epoch = 1
			}
			for _, n := range tc.down {
				v.down[n] = true
			}
			_, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: tc.new}, v, r)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v; want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrNoQuorum) {
				t.Fatalf("err = %v; want ErrNoQuorum", err)
			}
		})
	}
}

// Two candidates racing for the same epoch: at most one wins it.
func TestRunContendedOneWinnerPerEpoch(t *testing.T) {
	for seed := range 50 {
		v := newFakeVoter()
		r := &fakeRegistry{epoch: 1, cohort: []uint64{1, 2, 3}, leader: 1}
		var wg sync.WaitGroup
		results := make([]Result, 3)
		errs := make([]error, 3)
		for i := range 3 {
			wg.Go(func() {
				results[i], errs[i] = Run(context.Background(), Handoff{Part: seed, Self: uint64(i + 1), Cohort: []uint64{1, 2, 3}}, v, r)
			})
		}
		wg.Wait()
		won := map[uint64]int{}
		for i := range 3 {
			if errs[i] == nil {
				won[results[i].Epoch]++
			}
		}
		for e, n := range won {
			if n > 1 {
				t.Fatalf("seed %d: %d candidates won epoch %d", seed, n, e)
			}
		}
	}
}

func TestBackoffBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for attempt := 1; attempt < 20; attempt++ {
		d := Backoff(attempt, 10*time.Millisecond, time.Second, rng)
		if d < 0 || d >= time.Second {
			t.Fatalf("attempt %d: backoff %v out of [0, 1s)", attempt, d)
		}
	}
}

func TestUnionKeepsLatestEnd(t *testing.T) {
	got := Union([]Claim{claim(1, 0, 10), claim(1, 1, 5)}, []Claim{claim(1, 0, 20)}, nil)
	want := []Claim{claim(1, 0, 20), claim(1, 1, 5)}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}
