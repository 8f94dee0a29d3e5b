package raftgroup

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func shardOp(kind ShardOpKind, member string) ShardOp {
	return ShardOp{Kind: kind, Set: "w", Member: member, TTLMs: 10_000}
}

// TestShardGenerations: three members join (one generation each, the
// first active at once, the others once the active members stopped);
// one expires and the two left keep their indexes where they can; a
// renewal from a gone member changes nothing.
func TestShardGenerations(t *testing.T) {
	m := initialised(1)
	apply := func(op ShardOp) ShardSet {
		t.Helper()
		r, _ := applyShards(&m, op)
		if r.err != nil {
			t.Fatalf("%v %s: %v", op.Kind, op.Member, r.err)
		}
		if err := m.check(); err != nil {
			t.Fatalf("%v %s: %v", op.Kind, op.Member, err)
		}
		return r.shards
	}
	s := apply(shardOp(ShardJoin, "a"))
	if s.Active.Gen != 1 || s.Active.Assign["a"] != 0 || s.Pending != nil {
		t.Fatalf("first join: %+v", s)
	}
	s = apply(shardOp(ShardJoin, "b"))
	if s.Active.Gen != 1 || s.Pending == nil || s.Pending.Gen != 2 || s.Pending.Count != 2 {
		t.Fatalf("second join: active %+v pending %+v; want gen 2 pending on a", s.Active, s.Pending)
	}
	s = apply(shardOp(ShardJoin, "c"))
	if s.Pending.Gen != 3 || s.Pending.Count != 3 || !reflect.DeepEqual(s.Pending.Assign, map[string]uint32{"a": 0, "b": 1, "c": 2}) {
		t.Fatalf("third join: pending %+v", s.Pending)
	}
	renew := shardOp(ShardRenew, "a")
	renew.Stopped = 1
	s = apply(renew)
	if s.Active.Gen != 3 || s.Pending != nil {
		t.Fatalf("a stopped gen 1: active %+v pending %+v; want gen 3 active", s.Active, s.Pending)
	}
	// b expires: a and c stop gen 3; c keeps... index 2 is out of a
	// count of 2, so c takes the free index 1; a keeps 0.
	exp := shardOp(ShardExpire, "b")
	exp.Beat = 5 // not the beat b has: a renewal came in between
	if r, changed := applyShards(&m, exp); !errors.Is(r.err, ErrShardMember) || changed {
		t.Fatalf("expiry at a stale beat: %v, %v", r.err, changed)
	}
	exp.Beat = 0
	s = apply(exp)
	if s.Pending == nil || !reflect.DeepEqual(s.Pending.Assign, map[string]uint32{"a": 0, "c": 1}) {
		t.Fatalf("after b's expiry: pending %+v", s.Pending)
	}
	for _, id := range []string{"a", "c"} {
		r := shardOp(ShardRenew, id)
		r.Stopped = 3
		s = apply(r)
	}
	if s.Active.Gen != 4 || s.Pending != nil {
		t.Fatalf("after both stopped: %+v / %+v", s.Active, s.Pending)
	}
	if r, _ := applyShards(&m, shardOp(ShardRenew, "b")); !errors.Is(r.err, ErrShardMember) {
		t.Fatalf("renew of an expired member: %v", r.err)
	}
	apply(shardOp(ShardLeave, "a"))
	s = apply(shardOp(ShardLeave, "c"))
	if _, ok := m.Shards["w"]; ok || len(s.Members) != 0 {
		t.Fatalf("every member gone: %+v still held", m.Shards["w"])
	}
}

// TestShardCommandRoundTrip: a shard op survives the log's encoding.
func TestShardCommandRoundTrip(t *testing.T) {
	rec := shardOpRecord(ShardOp{Kind: ShardRenew, Set: "w", Member: "m1", TTLMs: 3000, Info: "x", Stopped: 4, Beat: 2})
	cmd := &command{Op: opShards, Shards: &rec}
	b, err := encodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCommand(b)
	if err != nil || !reflect.DeepEqual(&got, cmd) {
		t.Fatalf("got %+v, %v; want %+v", got, err, cmd)
	}
}

// TestShardsNeverShareAnIndex drives random joins, renewals, leaves and
// expiries, with members that work exactly as the client does (on the
// active generation they are in, while none is pending and they have not
// stopped it; they stop before they say so, and before they leave or
// expire), and checks after every step that no two working members hold
// one index and that, once nothing is pending and everyone renewed, every
// index is worked on.
func TestShardsNeverShareAnIndex(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := initialised(1)
		type worker struct {
			view    ShardSet
			working bool
			index   uint32
			gen     uint64
		}
		ws := map[string]*worker{}
		next := 0
		step := func(op ShardOp) {
			r, _ := applyShards(&m, op)
			if err := m.check(); err != nil {
				t.Fatalf("seed %d: %v: %v", seed, op, err)
			}
			w := ws[op.Member]
			if r.err != nil {
				if op.Kind == ShardRenew && errors.Is(r.err, ErrShardMember) {
					delete(ws, op.Member) // expired under it: it stopped at its lease's end
				}
				return
			}
			if op.Kind == ShardLeave || op.Kind == ShardExpire {
				delete(ws, op.Member)
				return
			}
			w.view = r.shards
			if i, ok := w.view.Active.Index(op.Member); ok && w.view.Pending == nil && w.view.Members[op.Member].Stopped < w.view.Active.Gen && !w.working {
				w.working, w.index, w.gen = true, i, w.view.Active.Gen
			}
		}
		renewAll := func() {
			for _, id := range slices.Sorted(maps.Keys(ws)) {
				w := ws[id]
				op := ShardOp{Kind: ShardRenew, Set: "w", Member: id}
				if w.view.Pending != nil {
					w.working = false
					op.Stopped = w.view.Active.Gen
				}
				step(op)
			}
		}
		for range 300 {
			switch k := rng.IntN(10); {
			case k < 2 && len(ws) < 8:
				id := fmt.Sprintf("m%d", next)
				next++
				ws[id] = &worker{}
				step(ShardOp{Kind: ShardJoin, Set: "w", Member: id, TTLMs: 10_000})
			case len(ws) == 0:
			case k < 8:
				id := pick(rng, ws)
				w := ws[id]
				op := ShardOp{Kind: ShardRenew, Set: "w", Member: id}
				if w.view.Pending != nil {
					w.working = false // it stops, then says so
					op.Stopped = w.view.Active.Gen
				}
				step(op)
			case k < 9:
				id := pick(rng, ws)
				ws[id].working = false
				step(ShardOp{Kind: ShardLeave, Set: "w", Member: id})
			default:
				id := pick(rng, ws)
				ws[id].working = false // its lease ran out on its clock first
				step(ShardOp{Kind: ShardExpire, Set: "w", Member: id, Beat: m.Shards["w"].Members[id].Beat})
			}
			held := map[uint32]string{}
			for id, w := range ws {
				if !w.working {
					continue
				}
				if other, ok := held[w.index]; ok {
					t.Fatalf("seed %d: %s (gen %d) and %s both work on index %d", seed, id, w.gen, other, w.index)
				}
				held[w.index] = id
			}
		}
		// Liveness: with the members renewing, the pending generation
		// takes effect and every index has its worker.
		for range 3 {
			renewAll()
		}
		set := m.Shards["w"]
		if len(ws) == 0 {
			continue
		}
		if set.Pending != nil || int(set.Active.Count) != len(ws) {
			t.Fatalf("seed %d: after renewals: active %+v pending %+v, %d members", seed, set.Active, set.Pending, len(ws))
		}
		for id, w := range ws {
			if !w.working || w.gen != set.Active.Gen || w.index != set.Active.Assign[id] {
				t.Fatalf("seed %d: member %s: %+v; active %+v", seed, id, w, set.Active)
			}
		}
	}
}

func pick[V any](rng *rand.Rand, m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	return keys[rng.IntN(len(keys))]
}
