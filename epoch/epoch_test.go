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

// fakeVoter is an in-memory cohort: per node the promised epoch and
// candidate. down nodes answer with an error.
type fakeVoter struct {
	mu       sync.Mutex
	promised map[uint64]uint64
	to       map[uint64]uint64
	down     map[uint64]bool
}

func newFakeVoter() *fakeVoter {
	return &fakeVoter{promised: map[uint64]uint64{}, to: map[uint64]uint64{}, down: map[uint64]bool{}}
}

func (f *fakeVoter) Promise(_ context.Context, node uint64, part int, epoch, cand uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[node] {
		return fmt.Errorf("node %d down", node)
	}
	p := f.promised[node]
	if epoch < p || epoch == p && f.to[node] != cand {
		return &RefusedError{Part: part, Promised: p, To: f.to[node]}
	}
	f.promised[node], f.to[node] = epoch, cand
	return nil
}

// fakeCarrier records each carry and seals the new cohort's members that
// are not down (all of them unless told otherwise).
type fakeCarrier struct {
	mu      sync.Mutex
	v       *fakeVoter
	carries []Carry
}

func (c *fakeCarrier) Carry(_ context.Context, cr Carry) ([]uint64, error) {
	c.mu.Lock()
	c.carries = append(c.carries, cr)
	c.mu.Unlock()
	c.v.mu.Lock()
	defer c.v.mu.Unlock()
	var sealed []uint64
	for _, n := range cr.Cohort {
		if !c.v.down[n] {
			sealed = append(sealed, n)
		}
	}
	return sealed, nil
}

type fakeRegistry struct {
	mu  sync.Mutex
	cur Current
}

func (r *fakeRegistry) Current(int) (Current, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cur
	c.Cohort, c.Sealed = slices.Clone(c.Cohort), slices.Clone(c.Sealed)
	return c, nil
}

func (r *fakeRegistry) CAS(_ context.Context, _ int, prev, next uint64, cohort []uint64, leader uint64, sealed []uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.Epoch != prev {
		return fmt.Errorf("cas conflict: epoch is %d, not %d", r.cur.Epoch, prev)
	}
	r.cur = Current{Epoch: next, Cohort: slices.Clone(cohort), Leader: leader, Sealed: slices.Clone(sealed)}
	return nil
}

// Reference: docs/design.md "Partition leaders", steps 1-8 with a one-node
// cohort (the single-node cluster): a majority of one.
func TestRunSingleNode(t *testing.T) {
	v, r := newFakeVoter(), &fakeRegistry{}
	c := &fakeCarrier{v: v}
	res, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: []uint64{1}}, v, c, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 1 || r.cur.Leader != 1 || r.cur.Epoch != 1 || !slices.Equal(r.cur.Sealed, []uint64{1}) {
		t.Fatalf("got %+v; want epoch 1, leader 1, sealed [1]", r.cur)
	}
	res, err = Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: []uint64{1}}, v, c, r)
	if err != nil || res.Epoch != 2 {
		t.Fatalf("second handoff: epoch %d err %v; want 2", res.Epoch, err)
	}
}

// Step 6 gets what it needs: the old cohort's promisers (only them) and
// the registry's sealed set; step 7 records the members the carry sealed.
func TestRunCarriesFromPromisersAndSeals(t *testing.T) {
	v := newFakeVoter()
	r := &fakeRegistry{cur: Current{Epoch: 4, Cohort: []uint64{1, 2, 3}, Leader: 1, Sealed: []uint64{1, 3}}}
	c := &fakeCarrier{v: v}
	v.down[1] = true // the old leader is gone
	res, err := Run(context.Background(), Handoff{Part: 7, Self: 2, Cohort: []uint64{2, 3, 4}}, v, c, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.carries) != 1 {
		t.Fatalf("%d carries; want 1", len(c.carries))
	}
	got := c.carries[0]
	want := Carry{Part: 7, Epoch: 5, Prev: 4, Old: []uint64{1, 2, 3}, Promised: []uint64{2, 3}, Sealed: []uint64{1, 3}, Cohort: []uint64{2, 3, 4}, Self: 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("carry %+v; want %+v", got, want)
	}
	if res.Epoch != 5 || r.cur.Leader != 2 || !slices.Equal(r.cur.Sealed, []uint64{2, 3, 4}) {
		t.Fatalf("registry %+v; want epoch 5, leader 2, sealed [2 3 4]", r.cur)
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
			v, r := newFakeVoter(), &fakeRegistry{cur: Current{Cohort: tc.old}}
			if len(tc.old) > 0 {
				r.cur.Epoch = 1
			}
			for _, n := range tc.down {
				v.down[n] = true
			}
			_, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: tc.new}, v, &fakeCarrier{v: v}, r)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v; want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrNoQuorum) {
				t.Fatalf("err = %v; want ErrNoQuorum", err)
			}
		})
	}
}

// A carry that cannot seal a majority of the new cohort must not become
// the registry's epoch: the next handoff could miss what it carried.
func TestRunCarryMustSealMajority(t *testing.T) {
	v := newFakeVoter()
	r := &fakeRegistry{cur: Current{Epoch: 2, Cohort: []uint64{1, 2, 3}, Leader: 1, Sealed: []uint64{1, 2, 3}}}
	c := carrierFunc(func(Carry) ([]uint64, error) { return []uint64{1}, nil })
	_, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: []uint64{1, 2, 3}}, v, c, r)
	if !errors.Is(err, ErrNoQuorum) || r.cur.Epoch != 2 {
		t.Fatalf("err %v, registry epoch %d; want ErrNoQuorum and epoch 2", err, r.cur.Epoch)
	}
}

type carrierFunc func(Carry) ([]uint64, error)

func (f carrierFunc) Carry(_ context.Context, c Carry) ([]uint64, error) { return f(c) }

// Issue 20, third defect: a takeover abandoned after its promises (node 9
// won promises for epoch 8 from a majority and never completed its CAS)
// must not block the partition for good. A candidate refused at epoch 8
// asks above it and wins; a refusal always names the epoch to pass.
func TestRunAboveAbandonedPromise(t *testing.T) {
	v := newFakeVoter()
	r := &fakeRegistry{cur: Current{Epoch: 7, Cohort: []uint64{1, 2, 3}, Leader: 1, Sealed: []uint64{1, 2, 3}}}
	for _, n := range []uint64{1, 2} {
		v.promised[n], v.to[n] = 8, 9
	}
	h := Handoff{Part: 7, Self: 3, Cohort: []uint64{1, 2, 3}}
	_, err := Run(context.Background(), h, v, &fakeCarrier{v: v}, r)
	var re *RefusedError
	if !errors.As(err, &re) || re.Promised != 8 || !errors.Is(err, ErrRefused) {
		t.Fatalf("first attempt: %v; want a refusal naming epoch 8", err)
	}
	if r.cur.Epoch != 7 {
		t.Fatalf("registry at %d after a refused attempt", r.cur.Epoch)
	}
	h = Next(h, err)
	res, err := Run(context.Background(), h, v, &fakeCarrier{v: v}, r)
	if err != nil {
		t.Fatalf("second attempt above the refusal: %v", err)
	}
	if res.Epoch != 9 || r.cur.Leader != 3 {
		t.Fatalf("won epoch %d, leader %d; want 9, 3", res.Epoch, r.cur.Leader)
	}
}

// A failed attempt says which epoch it asked promises of, whatever step
// failed after the registry was read: voters may hold promises of it
// (the caller tells the registry's leader when it gives up, which such a
// promise keeps from leading).
func TestRunFailedSaysEpochAsked(t *testing.T) {
	cohort := []uint64{1, 2, 3}
	for _, tc := range []struct {
		name  string
		setup func(v *fakeVoter, r *fakeRegistry) Carrier
	}{
		{"promises refused", func(v *fakeVoter, r *fakeRegistry) Carrier {
			v.promised[2], v.to[2], v.promised[3], v.to[3] = 5, 9, 5, 9
			return &fakeCarrier{v: v}
		}},
		{"carry seals too few", func(v *fakeVoter, r *fakeRegistry) Carrier {
			return carrierFunc(func(Carry) ([]uint64, error) { return []uint64{1}, nil })
		}},
		{"cas conflict", func(v *fakeVoter, r *fakeRegistry) Carrier {
			return carrierFunc(func(cr Carry) ([]uint64, error) {
				r.mu.Lock()
				r.cur.Epoch, r.cur.Leader = 6, 2 // another candidate won meanwhile
				r.mu.Unlock()
				return cr.Cohort, nil
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newFakeVoter()
			r := &fakeRegistry{cur: Current{Epoch: 4, Cohort: cohort, Leader: 2, Sealed: cohort}}
			res, err := Run(context.Background(), Handoff{Part: 0, Self: 1, Cohort: cohort}, v, tc.setup(v, r), r)
			if err == nil || res.Epoch != 5 {
				t.Fatalf("Run = %+v, %v; want an error and epoch 5 asked", res, err)
			}
		})
	}
}

// Two candidates racing for the same epoch: at most one wins it, and with
// Next between attempts every candidate eventually stops being refused.
func TestRunContendedOneWinnerPerEpoch(t *testing.T) {
	for seed := range 50 {
		v := newFakeVoter()
		r := &fakeRegistry{cur: Current{Epoch: 1, Cohort: []uint64{1, 2, 3}, Leader: 1}}
		var wg sync.WaitGroup
		results := make([]Result, 3)
		errs := make([]error, 3)
		for i := range 3 {
			wg.Go(func() {
				results[i], errs[i] = Run(context.Background(), Handoff{Part: seed, Self: uint64(i + 1), Cohort: []uint64{1, 2, 3}}, v, &fakeCarrier{v: v}, r)
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
