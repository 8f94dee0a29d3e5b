package partition_test

import (
	"bytes"
	"testing"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/task"
)

// TestFreshSpecCache checks that a leader claims the fresh tasks it
// enqueued without reading their specs from the store, as far as its
// cache has room, and that every claim returns the stored spec whether or
// not it came from the cache.
func TestFreshSpecCache(t *testing.T) {
	const tasks = 5
	for _, tc := range []struct {
		name  string
		bytes int64
		// between runs after the enqueue, before the claims.
		between func(t *testing.T, r *partition.Replica)
		// wantLookups is the number of store reads the claims make.
		wantLookups uint64
	}{
		{name: "room for all", bytes: 1 << 20, wantLookups: 0},
		{name: "disabled", bytes: 0, wantLookups: tasks},
		// Each spec here is charged about 240 bytes: the first two
		// enqueued fit, the later ones wait for room.
		{name: "room for two", bytes: 500, wantLookups: tasks - 2},
		{
			name: "led again after resigning", bytes: 1 << 20, wantLookups: tasks,
			between: func(t *testing.T, r *partition.Replica) {
				r.Resign()
				if err := r.Promise(2, 1); err != nil {
					t.Fatal(err)
				}
				if err := r.Lead(2); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			cfg := config(s)
			cfg.Fresh = partition.NewFreshBudget(tc.bytes)
			r := leaderCfg(t, cfg)
			want := map[task.ID]*task.Spec{}
			var specs []*task.Spec
			for i := range tasks {
				sp := spec(task.MakeID(t0, 1, uint32(i)), "q", 0, 3)
				sp.Key = "" // the room is sized for specs without one
				want[sp.ID] = sp
				specs = append(specs, sp)
			}
			enqueue(t, r, t0, specs...)
			if tc.between != nil {
				tc.between(t, r)
			}
			before := s.Lookups()
			var granted []*partition.Granted
			for range tasks {
				granted = append(granted, mustClaim(t, r, "q", t0+1))
			}
			if got := s.Lookups() - before; got != tc.wantLookups {
				t.Errorf("claims read the store %d times; want %d", got, tc.wantLookups)
			}
			for _, g := range granted {
				sp := want[g.Spec.ID]
				if sp == nil {
					t.Fatalf("claimed %v, which was not enqueued", g.Spec.ID)
				}
				if !partition.SameTask(g.Spec, sp) || !bytes.Equal(g.Spec.Data, sp.Data) {
					t.Errorf("claim of %v returned spec %+v; want %+v", sp.ID, g.Spec, sp)
				}
				delete(want, sp.ID)
			}
		})
	}
}

// TestFreshSpecCacheReclaim checks that a task claimed again (after a
// fail) gets its full spec from the store: the first claim took its cache
// entry.
func TestFreshSpecCacheReclaim(t *testing.T) {
	s := newStore(t)
	cfg := config(s)
	cfg.Fresh = partition.NewFreshBudget(1 << 20)
	r := leaderCfg(t, cfg)
	sp := spec(task.MakeID(t0, 1, 0), "q", 0, 3)
	enqueue(t, r, t0, sp)
	g := mustClaim(t, r, "q", t0+1)
	if err := r.Fail(sp.ID, g.Claim.Index, "again", ptr(int64(0)), t0+2); err != nil {
		t.Fatal(err)
	}
	before := s.Lookups()
	g = mustClaim(t, r, "q", t0+3)
	if s.Lookups() == before {
		t.Error("the second claim read nothing from the store; its spec should have left the cache with the first")
	}
	if !bytes.Equal(g.Spec.Data, sp.Data) {
		t.Errorf("second claim's payload %q; want %q", g.Spec.Data, sp.Data)
	}
}

// TestFreshSpecLeavesWhenNotReady checks that a fresh task leaves the
// cache when it stops being ready without a claim of this replica: a
// completion (and the claim it ends) merged in from another replica, or a
// tombstone of a collection elsewhere. Otherwise its entry would hold room
// until the replica stops leading.
func TestFreshSpecLeavesWhenNotReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  func(id task.ID) task.Record
	}{
		{"completed elsewhere", func(id task.ID) task.Record {
			return task.Record{ID: id, State: &task.State{
				Claims:     []task.Claim{{Index: 0, Start: t0, End: t0 + 60_000, Epoch: 1}},
				Completion: &task.Completion{Claim: 0, At: t0 + 1},
			}, Full: true}
		}},
		{"collected elsewhere", func(id task.ID) task.Record {
			return task.Record{ID: id, Tomb: t0 + 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			cfg := config(s)
			cfg.Fresh = partition.NewFreshBudget(1 << 20)
			r := leaderCfg(t, cfg)
			gone := spec(task.MakeID(t0, 1, 0), "q", 0, 3)
			kept := spec(task.MakeID(t0, 1, 1), "q", 0, 3)
			enqueue(t, r, t0, gone, kept)
			both := r.FreshBytes()
			if both <= 0 || cfg.Fresh.Used() != both {
				t.Fatalf("FreshBytes = %d, budget used %d after two enqueues; want them cached", both, cfg.Fresh.Used())
			}
			merge(t, r, 1, t0+1, tc.rec(gone.ID))
			one := r.FreshBytes()
			if one <= 0 || one >= both || cfg.Fresh.Used() != one {
				t.Fatalf("FreshBytes = %d, budget used %d; want the other task's share of %d", one, cfg.Fresh.Used(), both)
			}
			g := claim(t, r, "q", t0+2)
			if g.Spec.ID != kept.ID || !bytes.Equal(g.Spec.Data, kept.Data) {
				t.Errorf("claimed %v; want %v with its payload", g.Spec.ID, kept.ID)
			}
			if n := r.FreshBytes(); n != 0 || cfg.Fresh.Used() != 0 {
				t.Errorf("FreshBytes = %d, budget used %d after claiming the last fresh task; want 0", n, cfg.Fresh.Used())
			}
		})
	}
}
