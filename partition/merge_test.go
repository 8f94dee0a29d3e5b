package partition_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/partition"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// Reference: docs/design.md, "Data model" (state is a CRDT; any two replicas
// merge to the same value), "Operations" and "Guarantees" (replicas
// converge; an acknowledged completion is never followed by a new claim).

// followerCfg is the config of node 2's replica, which must publish no
// heads while it does not lead.
func followerCfg(t *testing.T, s *store.Store) partition.Config {
	cfg := config(s)
	cfg.Self = 2
	cfg.OnHead = func(_ uint16, q string, h partition.Head, ok bool) {
		t.Errorf("follower published head %v %v of queue %s", h, ok, q)
	}
	return cfg
}

func follower(t *testing.T, s *store.Store) *partition.Replica {
	t.Helper()
	return loaded(t, followerCfg(t, s), t0)
}

// merge merges recs at epoch ep and waits for the write; it fails the test
// on any error, per record or not.
func merge(t *testing.T, r *partition.Replica, ep uint64, now int64, recs ...task.Record) {
	t.Helper()
	errs := mergeErrs(t, r, ep, now, recs...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("merge of record %d (%v): %v", i, recs[i].ID, err)
		}
	}
}

// mergeErrs merges recs shipped by the leader of epoch ep, waits, and
// returns the per-record errors.
func mergeErrs(t *testing.T, r *partition.Replica, ep uint64, now int64, recs ...task.Record) []error {
	t.Helper()
	return mergeSrcErrs(t, r, partition.Source{Epoch: ep, Authority: ep}, now, recs...)
}

// mergeSrc merges recs from src and waits; it fails the test on any
// error, per record or not.
func mergeSrc(t *testing.T, r *partition.Replica, src partition.Source, now int64, recs ...task.Record) {
	t.Helper()
	for i, err := range mergeSrcErrs(t, r, src, now, recs...) {
		if err != nil {
			t.Fatalf("merge of record %d (%v): %v", i, recs[i].ID, err)
		}
	}
}

// mergeSrcErrs merges recs from src, waits, and returns the per-record
// errors.
func mergeSrcErrs(t *testing.T, r *partition.Replica, src partition.Source, now int64, recs ...task.Record) []error {
	t.Helper()
	d, errs, err := r.Merge(src, recs, now)
	if err != nil {
		t.Fatalf("merge from %+v: %v", src, err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("merge: wait: %v", err)
	}
	if errs != nil && len(errs) != len(recs) {
		t.Fatalf("merge of %d records returned %d errors", len(recs), len(errs))
	}
	return errs
}

// record reads a task back from the leader.
func record(t *testing.T, r *partition.Replica, id task.ID, withSpec bool, ups ...task.Update) task.Record {
	t.Helper()
	rec, err := r.Record(id, withSpec, ups...)
	if err != nil {
		t.Fatalf("record %v: %v", id, err)
	}
	return rec
}

// dump reads every task of partition 0 from s (not through a replica):
// the spec with payload, the state and the updates.
func dump(t *testing.T, s *store.Store) []task.Record {
	t.Helper()
	var out []task.Record
	err := s.ScanPartition(0, task.ID{}, func(tr store.TaskRecord) (bool, error) {
		sp, err := s.FullSpec(0, tr.Spec.ID)
		if err != nil {
			return false, err
		}
		rec := task.Record{ID: sp.ID, Spec: sp, State: &tr.State}
		err = s.Updates(0, sp.ID, func(u task.Update) bool {
			rec.Updates = append(rec.Updates, u)
			return true
		})
		out = append(out, rec)
		return true, err
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return out
}

// converged checks that two replicas hold the same tasks (spec, state,
// updates) and index them alike.
func converged(t *testing.T, what string, a *partition.Replica, sa *store.Store, b *partition.Replica, sb *store.Store) {
	t.Helper()
	da, db := dump(t, sa), dump(t, sb)
	if len(da) != len(db) {
		t.Fatalf("%s: %d tasks; want %d", what, len(db), len(da))
	}
	for i := range da {
		if !reflect.DeepEqual(da[i], db[i]) {
			t.Fatalf("%s: task %v differs:\n got %s\nwant %s", what, da[i].ID, fmtRecord(db[i]), fmtRecord(da[i]))
		}
	}
	if sa, sb := stats(a), stats(b); !maps.Equal(sa, sb) {
		t.Fatalf("%s: counts %v; want %v", what, sb, sa)
	}
	if ba, bb := sortedIDs(a.Blocked()), sortedIDs(b.Blocked()); !slices.Equal(ba, bb) {
		t.Fatalf("%s: blocked %v; want %v", what, bb, ba)
	}
	checkTree(t, what+": first replica", a, sa)
	checkTree(t, what+": second replica", b, sb)
	if ta, tb := a.TreeSnapshot(), b.TreeSnapshot(); !ta.Equal(tb) {
		t.Fatalf("%s: tree roots %v and %v differ", what, ta.Root(), tb.Root())
	}
}

func fmtRecord(r task.Record) string {
	return fmt.Sprintf("%+v state %+v updates %d", *r.Spec, *r.State, len(r.Updates))
}

// nextID is the smallest id above id: where an export resumes.
func nextID(id task.ID) task.ID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}

// stream is a leader and a follower fed by the records the leader ships.
type stream struct {
	t       *testing.T
	l, f    *partition.Replica
	sl, sf  *store.Store
	shipped []task.Record
}

// ship sends task id's record from the leader to the follower, as the node
// does after a local write, and checks that they agree.
func (s *stream) ship(what string, now int64, id task.ID, withSpec bool, ups ...task.Update) {
	s.t.Helper()
	rec := record(s.t, s.l, id, withSpec, ups...)
	s.shipped = append(s.shipped, rec)
	merge(s.t, s.f, 1, now, rec)
	converged(s.t, what, s.l, s.sl, s.f, s.sf)
}

// shipWrite sends the record an applied write returned, without reading
// the leader's store, once the write is durable: the record must be what
// the leader's store then holds of the task's state (and of the entry the
// write appended), and the follower must converge with the leader.
func (s *stream) shipWrite(what string, now int64, w partition.Write) {
	s.t.Helper()
	if err := w.Wait(); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
	read := record(s.t, s.l, w.Rec.ID, false)
	if w.Rec.State == nil || !read.State.Equal(w.Rec.State) {
		s.t.Fatalf("%s: the write returned state %+v; the store holds %+v", what, w.Rec.State, read.State)
	}
	for _, u := range w.Rec.Updates {
		got, err := s.sl.Update(0, w.Rec.ID, u.Claim, u.Seq)
		if err != nil || string(got) != string(u.Data) {
			s.t.Fatalf("%s: the write returned entry %d/%d %q; the store holds %q (%v)", what, u.Claim, u.Seq, u.Data, got, err)
		}
	}
	s.shipped = append(s.shipped, w.Rec)
	merge(s.t, s.f, 1, now, w.Rec)
	converged(s.t, what, s.l, s.sl, s.f, s.sf)
}

// shipNew sends the records of new tasks, with their specs, in one call.
func (s *stream) shipNew(what string, now int64, ids ...task.ID) {
	s.t.Helper()
	var recs []task.Record
	for _, id := range ids {
		recs = append(recs, record(s.t, s.l, id, true))
	}
	s.shipped = append(s.shipped, recs...)
	merge(s.t, s.f, 1, now, recs...)
	converged(s.t, what, s.l, s.sl, s.f, s.sf)
}

// TestMergeFollowsLeader: a follower fed the leader's record after every
// operation holds and indexes the same tasks; merging the records again,
// in reverse or in any order in one call, converges to the same state.
func TestMergeFollowsLeader(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	s := &stream{t: t, l: leader(t, sl), f: follower(t, sf), sl: sl, sf: sf}
	l := s.l
	a, b, c, d, e := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1), task.MakeID(t0, 1, 2), task.MakeID(t0, 1, 3), task.MakeID(t0, 1, 4)
	specs := []*task.Spec{spec(a, "q", 5, 3), spec(b, "q", 3, 1), spec(c, "q", 1, 3), spec(d, "q", 0, 3), spec(e, "r", 0, 3)}
	specs[2].NotBefore = t0 + 20_000
	specs[3].Deps = []task.ID{a}
	now := t0
	enqueue(t, l, now, specs...)
	s.shipNew("enqueue", now, a, b, c, d, e)

	ga := mustClaim(t, l, "q", now)
	s.ship("claim a", now, a, false)
	for seq, data := range []string{"u0", "u1"} {
		if err := l.Update(a, 0, uint64(seq), []byte(data), now); err != nil {
			t.Fatal(err)
		}
		s.ship("update a", now, a, false, task.Update{Claim: 0, Seq: uint64(seq), Data: []byte(data)})
	}
	if _, err := l.Complete(a, ga.Claim.Index, nil, now+1); err != nil {
		t.Fatal(err)
	}
	s.ship("complete a", now+1, a, false)
	if err := l.DepDone(d, a, now+1); err != nil {
		t.Fatal(err)
	}
	s.ship("dep done", now+1, d, false)

	gb := mustClaim(t, l, "q", now+2) // b: max attempts 1
	s.ship("claim b", now+2, b, false)
	if err := l.Fail(b, gb.Claim.Index, "boom", ptr(int64(0)), now+3); err != nil {
		t.Fatal(err)
	}
	s.ship("fail b: dead", now+3, b, false)
	if err := l.Requeue(b, now+4); err != nil {
		t.Fatal(err)
	}
	s.ship("requeue b", now+4, b, false)
	gb = mustClaim(t, l, "q", now+5)
	s.ship("claim b again", now+5, b, false)
	if err := l.Snooze(b, gb.Claim.Index, 10_000, now+6); err != nil {
		t.Fatal(err)
	}
	s.ship("snooze b", now+6, b, false)

	ge := mustClaim(t, l, "r", now+7)
	s.ship("claim e", now+7, e, false)
	if _, err := l.Renew(e, ge.Claim.Index, now+8, 2*ttl); err != nil {
		t.Fatal(err)
	}
	s.ship("renew e", now+8, e, false)
	gd := mustClaim(t, l, "q", now+9)
	if gd.Spec.ID != d {
		t.Fatalf("claimed %v; want d %v", gd.Spec.ID, d)
	}
	s.ship("claim d", now+9, d, false)

	// Timers run on both replicas alike: b's snooze and c's delay end,
	// d's claim expires; e's renewed claim is still live.
	now = gd.Claim.End + skew
	l.Tick(now)
	s.f.Tick(now)
	converged(t, "tick", l, sl, s.f, sf)
	wantCounts(t, s.f, "q", map[task.Status]int64{task.Completed: 1, task.Ready: 3})
	wantCounts(t, s.f, "r", map[task.Status]int64{task.Claimed: 1})

	// Merging the same records again changes nothing.
	merge(t, s.f, 1, now, s.shipped...)
	converged(t, "repeat", l, sl, s.f, sf)

	// In reverse order, on a fresh replica: a record of a task it lacks
	// is refused until the leader resends it whole (spec and updates: a
	// later write's record carries only that write's updates).
	sf2 := newStore(t)
	f2 := follower(t, sf2)
	byID := map[task.ID]*task.Spec{}
	for _, sp := range specs {
		byID[sp.ID] = sp
	}
	for i := len(s.shipped) - 1; i >= 0; i-- {
		rec := s.shipped[i]
		if errs := mergeErrs(t, f2, 1, now, rec); errs != nil {
			if !errors.Is(errs[0], task.ErrNotFound) || rec.Spec != nil && rec.Full {
				t.Fatalf("reverse merge of %v: %v", rec.ID, errs[0])
			}
			merge(t, f2, 1, now, wholeRecords(t, l, rec.ID)...)
		}
	}
	converged(t, "reverse", l, sl, f2, sf2)

	// Shuffled, all in one call (records of one task meet within it).
	sf3 := newStore(t)
	f3 := follower(t, sf3)
	recs := slices.Clone(s.shipped)
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	var again []task.Record
	for i, err := range mergeErrs(t, f3, 1, now, recs...) {
		switch {
		case err == nil:
		case errors.Is(err, task.ErrNotFound):
			again = append(again, wholeRecords(t, l, recs[i].ID)...)
		default:
			t.Fatalf("shuffled merge of %v: %v", recs[i].ID, err)
		}
	}
	merge(t, f3, 1, now, again...)
	converged(t, "shuffled", l, sl, f3, sf3)
}

// Reference: docs/design.md, "Partition leaders", step 3: a node that promised
// an epoch refuses writes from lower epochs.
func TestMergeFencing(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	cfgF := config(sf)
	cfgF.Self = 2
	l, f := leader(t, sl), loaded(t, cfgF, t0)
	id := task.MakeID(t0, 1, 0)
	enqueue(t, l, t0, spec(id, "q", 0, 3))
	rec := record(t, l, id, true)
	if err := f.Promise(5, 3); err != nil {
		t.Fatal(err)
	}
	if ep, cand := f.Promised(); ep != 5 || cand != 3 {
		t.Errorf("Promised = %d, %d; want 5, 3", ep, cand)
	}
	d, errs, err := f.Merge(partition.Source{Epoch: 4, Authority: 4}, []task.Record{rec}, t0)
	if !errors.Is(err, task.ErrEpoch) || d != nil || errs != nil {
		t.Fatalf("merge at epoch 4 after promising 5 = %v, %v, %v; want ErrEpoch", d, errs, err)
	}
	if _, err := sf.Spec(0, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("fenced merge wrote the task: %v", err)
	}
	wantCounts(t, f, "q", nil)
	merge(t, f, 5, t0, rec)
	wantCounts(t, f, "q", map[task.Status]int64{task.Ready: 1})
	merge(t, f, 6, t0, rec) // a newer epoch is accepted

	// A replica leading at an epoch it never promised fences by it.
	if err := f.Lead(7); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Merge(partition.Source{Epoch: 6, Authority: 6}, []task.Record{rec}, t0); !errors.Is(err, task.ErrEpoch) {
		t.Errorf("merge at epoch 6 on a leader of epoch 7 = %v; want ErrEpoch", err)
	}
}

// Reference: docs/design.md, "Operations", claim: a follower refuses a claim
// for a task it knows to be completed, and says so.
func TestMergeRefusesClaimOnCompleted(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	id := task.MakeID(t0, 1, 0)
	enqueue(t, l, t0, spec(id, "q", 0, 3))
	g := mustClaim(t, l, "q", t0)
	if _, err := l.Complete(id, 0, nil, t0+1); err != nil {
		t.Fatal(err)
	}
	done := record(t, l, id, true)
	merge(t, f, 1, t0+1, done)
	completion := *done.State.Completion

	// A stale leader, which missed the completion, claims the task again.
	// (Its records carry its epoch's stamp: the same line of writes.)
	staleClaim := task.State{Claims: []task.Claim{g.Claim, {Index: 1, Start: t0 + 2, End: t0 + 2 + ttl, Epoch: 1}}, Stamp: 1}
	renewed := g.Claim
	renewed.End += ttl
	cases := []struct {
		name    string
		st      task.State
		refused bool
	}{
		{"new claim", staleClaim, true},
		{"new claim only", task.State{Claims: staleClaim.Claims[1:], Stamp: 1}, true},
		// Known claims, a release: not a claim, nothing to refuse.
		{"known claim renewed", task.State{Claims: []task.Claim{renewed}, Stamp: 1}, false},
		{"release", task.State{Releases: []task.Release{{Claim: 0, At: t0 + 5}}, Stamp: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := storedState(t, sf, id)
			st := tc.st
			errs := mergeErrs(t, f, 1, t0+2, task.Record{ID: id, State: &st})
			if !tc.refused {
				if errs != nil {
					t.Fatalf("merge = %v; want accepted", errs[0])
				}
				return
			}
			if errs == nil || !errors.Is(errs[0], task.ErrCompleted) {
				t.Fatalf("merge = %v; want ErrCompleted", errs)
			}
			var ce *partition.CompletedError
			if !errors.As(errs[0], &ce) || ce.ID != id || ce.Claim != 1 || ce.Completion != completion {
				t.Errorf("refusal = %#v; want task %v, claim 1, completion %+v", ce, id, completion)
			}
			if after := storedState(t, sf, id); !reflect.DeepEqual(after, before) {
				t.Errorf("refused merge changed the state: %+v; want %+v", after, before)
			}
			wantCounts(t, f, "q", map[task.Status]int64{task.Completed: 1})
		})
	}

	// Once the stale leader learns the completion, its record carries both:
	// accepted, and the replicas converge.
	withBoth := staleClaim
	withBoth.Completion = &completion
	merge(t, f, 1, t0+3, task.Record{ID: id, State: &withBoth})
	st := storedState(t, sf, id)
	if len(st.Claims) != 2 || st.Completion == nil || *st.Completion != completion {
		t.Errorf("state after merging claim and completion = %+v", st)
	}
	wantCounts(t, f, "q", map[task.Status]int64{task.Completed: 1})
}

// idIn returns an id of partition part (of partitions), the n-th found.
func idIn(part uint16, partitions int, n int) task.ID {
	for c := uint32(0); ; c++ {
		id := task.MakeID(t0, 1, c)
		if ring.PartitionOf(id[:], partitions) == part {
			if n == 0 {
				return id
			}
			n--
		}
	}
}

// TestMergeRefusals: records come from the network; one that is malformed
// or contradicts what the replica holds is refused alone, and nothing of
// it is written.
func TestMergeRefusals(t *testing.T) {
	s := newStore(t)
	cfg := followerCfg(t, s)
	cfg.Partitions = 4
	f := loaded(t, cfg, t0)
	id := func(n int) task.ID { return idIn(0, 4, n) }
	known := id(0)
	// As the leader of epoch 1 ships it: stamped 1; an update comes with
	// its task's state.
	knownState := task.State{Claims: []task.Claim{{Index: 0, Start: t0, End: t0 + ttl, Epoch: 1}}, Stamp: 1}
	merge(t, f, 1, t0, task.Record{ID: known, Spec: spec(known, "q", 0, 3), State: &knownState,
		Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("x")}}, Full: true})

	withSpec := func(n int, mod func(*task.Spec)) task.Record {
		sp := spec(id(n), "q", 0, 3)
		if mod != nil {
			mod(sp)
		}
		return task.Record{ID: sp.ID, Spec: sp}
	}
	withState := func(n int, st task.State) task.Record {
		r := withSpec(n, nil)
		r.State = &st
		return r
	}
	claims := func(idx ...uint32) []task.Claim {
		var cs []task.Claim
		for _, i := range idx {
			cs = append(cs, task.Claim{Index: i, Start: t0, End: t0 + ttl})
		}
		return cs
	}
	other := spec(known, "q", 7, 3)
	wrong := idIn(1, 4, 0)
	cases := []struct {
		name string
		rec  task.Record
		want error // nil: merged
	}{
		{"new task", withSpec(1, nil), nil},
		{"unknown without spec", task.Record{ID: id(2)}, task.ErrNotFound},
		{"zero id", task.Record{}, task.ErrInvalid},
		{"other partition", task.Record{ID: wrong, Spec: spec(wrong, "q", 0, 3)}, task.ErrInvalid},
		{"spec of another id", task.Record{ID: id(3), Spec: spec(id(4), "q", 0, 3)}, task.ErrInvalid},
		{"claims out of order", withState(5, task.State{Claims: claims(1, 0)}), task.ErrInvalid},
		{"claim index twice", withState(6, task.State{Claims: claims(0, 0)}), task.ErrInvalid},
		{"claim index at the limit", withState(7, task.State{Claims: claims(math.MaxUint32)}), task.ErrInvalid},
		{"releases out of order", withState(8, task.State{Claims: claims(0, 1), Releases: []task.Release{{Claim: 1}, {Claim: 0}}}), task.ErrInvalid},
		{"deps done unsorted", withState(9, task.State{DepsDone: []task.ID{id(11), id(10)}}), task.ErrInvalid},
		{"bad queue", withSpec(12, func(sp *task.Spec) { sp.Queue = "no spaces" }), task.ErrInvalid},
		{"deps unsorted", withSpec(13, func(sp *task.Spec) { sp.Deps = []task.ID{id(11), id(10)} }), task.ErrInvalid},
		{"depends on itself", withSpec(14, func(sp *task.Spec) { sp.Deps = []task.ID{id(14)} }), task.ErrInvalid},
		{"too many deps", withSpec(15, func(sp *task.Spec) {
			for i := range task.MaxDeps + 1 {
				sp.Deps = append(sp.Deps, task.MakeID(1, 1, uint32(i)))
			}
		}), task.ErrInvalid},
		{"other spec under a known id", task.Record{ID: known, Spec: other}, task.ErrConflict},
		{"same spec again", task.Record{ID: known, Spec: spec(known, "q", 0, 3)}, nil},
		{"other payload under a known id", task.Record{ID: known, Spec: func() *task.Spec {
			sp := spec(known, "q", 0, 3)
			sp.Data = []byte("other")
			return sp
		}()}, task.ErrConflict},
		{"new task's spec again", withSpec(1, nil), nil},
		{"new task's spec again, other payload", withSpec(1, func(sp *task.Spec) { sp.Data = []byte("other") }), task.ErrConflict},
		{"update with other data", task.Record{ID: known, State: &knownState, Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("y")}}}, task.ErrConflict},
		{"one key twice in a record", task.Record{ID: known, State: &knownState, Updates: []task.Update{{Claim: 0, Seq: 2, Data: []byte("a")}, {Claim: 0, Seq: 2, Data: []byte("b")}}}, task.ErrConflict},
		{"conflict refuses the whole record", task.Record{ID: known, State: &task.State{Claims: claims(0, 1), Stamp: 1},
			Updates: []task.Update{{Claim: 1, Seq: 0, Data: []byte("new")}, {Claim: 0, Seq: 0, Data: []byte("y")}}}, task.ErrConflict},
		{"new update", task.Record{ID: known, State: &knownState, Updates: []task.Update{{Claim: 0, Seq: 1, Data: []byte("z")}}}, nil},
		{"same update again", task.Record{ID: known, State: &knownState, Updates: []task.Update{{Claim: 0, Seq: 1, Data: []byte("z")}}}, nil},
		{"update merged earlier in the call", task.Record{ID: known, State: &knownState, Updates: []task.Update{{Claim: 0, Seq: 1, Data: []byte("Z")}}}, task.ErrConflict},
	}
	recs := make([]task.Record, len(cases))
	for i, tc := range cases {
		recs[i] = tc.rec
	}
	errs := mergeErrs(t, f, 1, t0, recs...)
	if errs == nil {
		t.Fatal("merge refused nothing")
	}
	for i, tc := range cases {
		if tc.want == nil && errs[i] != nil || tc.want != nil && !errors.Is(errs[i], tc.want) {
			t.Errorf("%s: merge = %v; want %v", tc.name, errs[i], tc.want)
		}
	}

	// Only the merged records were written.
	for n := 2; n <= 15; n++ {
		if _, err := s.Spec(0, id(n)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("refused task %v was written: %v", id(n), err)
		}
	}
	if _, err := s.Spec(0, id(1)); err != nil {
		t.Errorf("new task: %v", err)
	}
	if st := storedState(t, s, known); !reflect.DeepEqual(st, knownState) {
		t.Errorf("known task's state = %+v; want %+v", st, knownState)
	}
	var ups []string
	if err := s.Updates(0, known, func(u task.Update) bool {
		ups = append(ups, fmt.Sprintf("%d/%d=%s", u.Claim, u.Seq, u.Data))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"0/0=x", "0/1=z"}; !slices.Equal(ups, want) {
		t.Errorf("known task's updates = %v; want %v", ups, want)
	}
	if d, err := s.Data(0, known); err != nil || string(d) != "data "+known.String() {
		t.Errorf("known task's payload = %q, %v; want the first", d, err)
	}
	wantCounts(t, f, "q", map[task.Status]int64{task.Ready: 1, task.Claimed: 1})

	// A call whose every record is refused still returns a Durable.
	if errs := mergeErrs(t, f, 1, t0, task.Record{ID: id(2)}); errs == nil || !errors.Is(errs[0], task.ErrNotFound) {
		t.Errorf("all refused: %v", errs)
	}
	// Record of an unknown task, with or without its spec.
	for _, withSpec := range []bool{false, true} {
		if _, err := f.Record(id(2), withSpec); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("Record(unknown, %v) = %v; want ErrNotFound", withSpec, err)
		}
	}
}

// fillLeader enqueues n tasks on l over three queues and drives them into
// every state, with updates on the claimed ones. It returns the time
// reached.
func fillLeader(t *testing.T, l *partition.Replica, n int, rng *rand.Rand) int64 {
	t.Helper()
	now := t0
	var specs []*task.Spec
	for i := range n {
		sp := spec(task.MakeID(t0-int64(rng.IntN(10_000)), 1, uint32(i)), fmt.Sprintf("q%d", i%3), int32(rng.IntN(5)), 2)
		if i%11 == 0 {
			sp.NotBefore = t0 + 3_600_000
		}
		if i%13 == 0 {
			sp.Deps = []task.ID{task.MakeID(1, 2, uint32(i))} // never completes: blocked
		}
		specs = append(specs, sp)
	}
	enqueue(t, l, now, specs...)
	for i := range n * 2 / 5 {
		g := mustClaim(t, l, fmt.Sprintf("q%d", i%3), now)
		id, idx := g.Spec.ID, g.Claim.Index
		for seq := range uint64(i % 4) {
			if err := l.Update(id, idx, seq, fmt.Appendf(nil, "%v/%d/%d", id, idx, seq), now); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		switch i % 5 {
		case 0:
			_, err = l.Complete(id, idx, nil, now)
		case 1:
			err = l.Fail(id, idx, "x", ptr(int64(600_000)), now)
		case 2:
			err = l.Snooze(id, idx, 0, now)
		case 3:
			err = l.Fail(id, idx, "x", ptr(int64(0)), now) // ready again
		case 4:
			if i%2 == 0 { // half stay claimed
				err = waited(l.CancelApply(id, "x", now))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return now
}

// waited waits for an applied write.
func waited(w partition.Write, err error) error {
	if err != nil {
		return err
	}
	return w.Wait()
}

// TestExportMerge: a partition exported in resumable chunks and merged
// into an empty replica yields the same tasks and indexes, which a
// restart rebuilds from the store.
func TestExportMerge(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	const n, chunkSize = 1000, 100
	now := fillLeader(t, l, n, rand.New(rand.NewPCG(7, 8)))
	for q, c := range stats(l) {
		if slices.Contains(c[:], 0) {
			t.Fatalf("queue %s lacks a state for this test: %s", q, fmtCounts(c))
		}
	}

	all := 0
	if err := l.Export(task.ID{}, func(task.Record) (bool, error) { all++; return true, nil }); err != nil || all != n {
		t.Fatalf("export of everything = %d records, %v; want %d", all, err, n)
	}
	var from, last task.ID
	chunks := 0
	for {
		var chunk []task.Record
		err := l.Export(from, func(rec task.Record) (bool, error) {
			chunk = append(chunk, rec)
			return len(chunk) < chunkSize, nil
		})
		if err != nil {
			t.Fatalf("export from %v: %v", from, err)
		}
		if len(chunk) == 0 {
			break
		}
		for _, rec := range chunk {
			if !last.IsZero() && rec.ID.Compare(last) <= 0 {
				t.Fatalf("export returned %v after %v", rec.ID, last)
			}
			if rec.Spec == nil || rec.Spec.Data == nil || rec.State == nil {
				t.Fatalf("exported record %v is not whole: %+v", rec.ID, rec)
			}
			last = rec.ID
		}
		merge(t, f, 1, now, chunk...)
		chunks++
		from = nextID(last)
	}
	if chunks != n/chunkSize {
		t.Errorf("%d chunks; want %d", chunks, n/chunkSize)
	}
	converged(t, "export", l, sl, f, sf)

	// A restart rebuilds the same indexes, which hand out the same tasks.
	f2 := loaded(t, config(sf), now)
	converged(t, "restart", l, sl, f2, sf)
	if err := f2.Lead(2); err != nil {
		t.Fatal(err)
	}
	for q := range 3 {
		name := fmt.Sprintf("q%d", q)
		for {
			g1, g2 := claim(t, l, name, now), claim(t, f2, name, now)
			if g1 == nil || g2 == nil {
				if g1 != g2 {
					t.Fatalf("%s: leader claimed %v, restarted follower %v", name, g1, g2)
				}
				break
			}
			if g1.Spec.ID != g2.Spec.ID || g1.Claim.Index != g2.Claim.Index {
				t.Fatalf("%s: leader claimed %v/%d, restarted follower %v/%d", name, g1.Spec.ID, g1.Claim.Index, g2.Spec.ID, g2.Claim.Index)
			}
		}
	}
}

// replicate ships a task's record as the node does: without the spec,
// and again with it if the follower does not know the task yet.
func replicate(l, f *partition.Replica, id task.ID, now int64, ups ...task.Update) error {
	rec, err := l.Record(id, false, ups...)
	if err != nil {
		return err
	}
	for range 2 {
		d, errs, err := f.Merge(partition.Source{Epoch: 1, Authority: 1}, []task.Record{rec}, now)
		if err != nil {
			return err
		}
		if err := d.Wait(); err != nil {
			return err
		}
		if errs == nil {
			return nil
		}
		if !errors.Is(errs[0], task.ErrNotFound) {
			return errs[0]
		}
		if rec, err = l.Record(id, true, ups...); err != nil {
			return err
		}
	}
	return fmt.Errorf("task %v: still not found with its spec", id)
}

// TestExportConcurrentWrites: an export runs while the leader keeps
// writing and replicating; the follower, fed by both, converges.
func TestExportConcurrentWrites(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l, f := leader(t, sl), follower(t, sf)
	var specs []*task.Spec
	for i := range 500 {
		specs = append(specs, spec(task.MakeID(t0, 1, uint32(i)), "q", int32(i%3), 3))
	}
	enqueue(t, l, t0, specs...)

	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			id := task.MakeID(t0, 1, uint32(1000+i))
			if err := l.Enqueue([]partition.NewTask{{Spec: spec(id, "q", 1, 3)}}, t0); err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			if err := replicate(l, f, id, t0); err != nil {
				t.Errorf("replicate enqueue: %v", err)
				return
			}
			g, err := l.ClaimBest("q", t0, ttl, nil)
			if err != nil || g == nil {
				t.Errorf("claim: %v, %v", g, err)
				return
			}
			u := task.Update{Claim: g.Claim.Index, Seq: 0, Data: []byte("u")}
			if err := l.Update(g.Spec.ID, u.Claim, u.Seq, u.Data, t0); err != nil {
				t.Errorf("update: %v", err)
				return
			}
			if err := replicate(l, f, g.Spec.ID, t0, u); err != nil {
				t.Errorf("replicate claim: %v", err)
				return
			}
		}
	})
	var from task.ID
	for {
		var chunk []task.Record
		if err := l.Export(from, func(rec task.Record) (bool, error) {
			chunk = append(chunk, rec)
			return len(chunk) < 50, nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(chunk) == 0 {
			break
		}
		merge(t, f, 1, t0, chunk...)
		from = nextID(chunk[len(chunk)-1].ID)
	}
	wg.Wait()
	converged(t, "export during writes", l, sl, f, sf)
}

// Reference: docs/design.md, "Partition leaders": a follower that wins the
// handoff serves at once from the indexes it kept, in claim order, and
// honours the claims it installed.
func TestFollowerBecomesLeader(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	l := leader(t, sl)
	var mu sync.Mutex
	var heads []partition.Head
	cfgF := config(sf)
	cfgF.Self = 2
	cfgF.OnHead = func(_ uint16, _ string, h partition.Head, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if ok {
			heads = append(heads, h)
		}
	}
	f := loaded(t, cfgF, t0)
	if err := f.Promise(1, 1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	var specs []*task.Spec
	for i := range 50 {
		specs = append(specs, spec(task.MakeID(t0-int64(rng.IntN(1000)), 1, uint32(i)), "q", int32(rng.IntN(4)), 3))
	}
	enqueue(t, l, t0, specs...)
	for _, sp := range specs {
		merge(t, f, 1, t0, record(t, l, sp.ID, true))
	}
	live := mustClaim(t, l, "q", t0) // the best task, claimed: not claimable on f
	merge(t, f, 1, t0, record(t, l, live.Spec.ID, false))
	done := mustClaim(t, l, "q", t0)
	if _, err := l.Complete(done.Spec.ID, 0, nil, t0); err != nil {
		t.Fatal(err)
	}
	merge(t, f, 1, t0, record(t, l, done.Spec.ID, false))
	mu.Lock()
	if len(heads) != 0 {
		t.Errorf("follower published heads %v", heads)
	}
	mu.Unlock()

	// Handoff to node 2 at epoch 2: f holds all the leader wrote.
	for _, r := range []*partition.Replica{l, f} {
		if err := r.Promise(2, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Lead(2); err != nil {
		t.Fatal(err)
	}
	// The old leader is cut off.
	if _, _, err := f.Merge(partition.Source{Epoch: 1, Authority: 1}, []task.Record{record(t, l, live.Spec.ID, false)}, t0+1); !errors.Is(err, task.ErrEpoch) {
		t.Errorf("merge from the old leader = %v; want ErrEpoch", err)
	}

	var want []partition.Head
	for _, sp := range specs {
		if sp.ID != live.Spec.ID && sp.ID != done.Spec.ID {
			want = append(want, partition.Head{Priority: sp.Priority, ID: sp.ID})
		}
	}
	slices.SortFunc(want, func(a, b partition.Head) int {
		if a.Less(b) {
			return -1
		}
		return 1
	})
	mu.Lock()
	if len(heads) != 1 || heads[0] != want[0] {
		t.Errorf("heads published on Lead = %v; want [%v]", heads, want[0])
	}
	mu.Unlock()
	for i, h := range want {
		g := mustClaim(t, f, "q", t0+1)
		if g.Spec.ID != h.ID || g.Claim.Index != 0 || g.Claim.Epoch != 2 {
			t.Fatalf("claim %d on the new leader = %v %+v; want %v index 0 at epoch 2", i, g.Spec.ID, g.Claim, h.ID)
		}
	}
	noClaim(t, f, "q", t0+1)
	// The installed claim expires at end + skew; then the task is claimed
	// with the next index.
	now := live.Claim.End + skew
	f.Tick(now)
	g := mustClaim(t, f, "q", now)
	if g.Spec.ID != live.Spec.ID || g.Claim.Index != 1 || g.Claim.Epoch != 2 {
		t.Errorf("claim after expiry = %v %+v; want %v index 1 at epoch 2", g.Spec.ID, g.Claim, live.Spec.ID)
	}
}

// TestMergeOnLeader: a leader that merges (anti-entropy) keeps its ready
// index and published heads right.
func TestMergeOnLeader(t *testing.T) {
	var mu sync.Mutex
	var events []string
	s := newStore(t)
	cfg := config(s)
	cfg.OnHead = func(_ uint16, q string, h partition.Head, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf("%s %d %v %v", q, h.Priority, h.ID, ok))
	}
	l := leaderCfg(t, cfg)
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := events
		events = nil
		return out
	}
	low, high := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1)
	enqueue(t, l, t0, spec(low, "q", 1, 3))
	take()

	merge(t, l, 1, t0, task.Record{ID: high, Spec: spec(high, "q", 5, 3)})
	if got, want := take(), []string{fmt.Sprintf("q 5 %v true", high)}; !slices.Equal(got, want) {
		t.Errorf("heads after merging a better task = %v; want %v", got, want)
	}
	// A claim of the head granted elsewhere (merged in) moves the head.
	claimed := task.State{Claims: []task.Claim{{Index: 0, Start: t0, End: t0 + ttl, Epoch: 1}}}
	merge(t, l, 1, t0, task.Record{ID: high, State: &claimed, Full: true})
	if got, want := take(), []string{fmt.Sprintf("q 1 %v true", low)}; !slices.Equal(got, want) {
		t.Errorf("heads after merging a claim of the head = %v; want %v", got, want)
	}
	wantCounts(t, l, "q", map[task.Status]int64{task.Ready: 1, task.Claimed: 1})
	// The merged claim is in the hot path: its holder can complete it.
	if _, err := l.Complete(high, 0, nil, t0+1); err != nil {
		t.Fatalf("complete of a merged claim: %v", err)
	}
	g := mustClaim(t, l, "q", t0+1)
	if g.Spec.ID != low {
		t.Errorf("claimed %v; want %v", g.Spec.ID, low)
	}
	// Updates merged for a claimed task move the next seq on.
	if err := l.Update(low, 0, 0, []byte("a"), t0+1); err != nil {
		t.Fatal(err)
	}
	merge(t, l, 1, t0+1, task.Record{ID: low, State: record(t, l, low, false).State, Updates: []task.Update{{Claim: 0, Seq: 1, Data: []byte("b")}}})
	if err := l.Update(low, 0, 2, []byte("c"), t0+1); err != nil {
		t.Errorf("update after a merged one = %v; want the history to be 2 long", err)
	}
}

// TestRecordEncoding: records travel in wire messages as CBOR with
// integer keys (and as JSON in the HTTP API) and come back whole.
func TestRecordEncoding(t *testing.T) {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	dm, err := cbor.DecOptions{DupMapKey: cbor.DupMapKeyEnforcedAPF, IndefLength: cbor.IndefLengthForbidden}.DecMode()
	if err != nil {
		t.Fatal(err)
	}
	id := task.MakeID(t0, 1, 0)
	sp := spec(id, "q", -3, 2)
	sp.Deps = []task.ID{task.MakeID(1, 1, 1)}
	full := task.Record{
		ID:   id,
		Spec: sp,
		State: &task.State{
			Claims:     []task.Claim{{Index: 0, Start: t0, End: t0 + ttl, Epoch: 4}},
			Releases:   []task.Release{{Claim: 0, At: t0 + 1, Reason: "r"}},
			Completion: &task.Completion{Claim: 0, Seq: 1, At: t0 + 2},
		},
		Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("u")}},
	}
	for _, rec := range []task.Record{full, {ID: id}} {
		b, err := em.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		var keys map[int]cbor.RawMessage
		if err := dm.Unmarshal(b, &keys); err != nil {
			t.Fatalf("record is not a map with integer keys: %v", err)
		}
		if rec.Spec == nil && len(keys) != 1 {
			t.Errorf("a bare record encodes %d keys; want 1 (the id)", len(keys))
		}
		var got task.Record
		if err := dm.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Errorf("cbor round trip = %+v; want %+v", got, rec)
		}
		j, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got = task.Record{}
		if err := json.Unmarshal(j, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Errorf("json round trip = %+v; want %+v", got, rec)
		}
	}
}

// TestShipWithoutReading: the records the node ships without reading the
// store (the state CompleteApply returns; a follower taking the zero
// state of a ready task it indexes without an entry) are the records a
// read gives, and a follower fed them converges with its leader, also
// for a task whose earlier claim failed (its state is stored, so its
// entry stays).
func TestShipWithoutReading(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	s := &stream{t: t, l: leader(t, sl), f: follower(t, sf), sl: sl, sf: sf}
	l := s.l
	a, b := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1)
	now := t0
	enqueue(t, l, now, spec(a, "q", 5, 3), spec(b, "q", 3, 3))
	s.shipNew("enqueue", now, a, b)

	// a: claim (the follower's first state of a), then complete with the
	// state CompleteApply returns.
	ga := mustClaim(t, l, "q", now)
	s.ship("claim a", now, a, false)
	newly, w, err := l.CompleteApply(a, ga.Claim.Index, nil, now+1)
	if err != nil || !newly {
		t.Fatalf("complete a: newly %v, %v", newly, err)
	}
	st := *w.Rec.State
	s.shipWrite("complete a", now+1, w)
	// A repeat returns the same state.
	if newly, again, err := l.CompleteApply(a, ga.Claim.Index, nil, now+2); err != nil || newly || !again.Rec.State.Equal(&st) {
		t.Fatalf("repeated complete: newly %v, record %+v, %v", newly, again.Rec, err)
	} else if err := again.Wait(); err != nil {
		t.Fatal(err)
	}

	// b: a failed claim leaves a stored state; the next claim must merge
	// into it on the follower, not into a zero state.
	gb := mustClaim(t, l, "q", now)
	s.ship("claim b", now, b, false)
	if err := l.Fail(b, gb.Claim.Index, "boom", ptr(int64(0)), now+3); err != nil {
		t.Fatal(err)
	}
	s.ship("fail b", now+3, b, false)
	gb2 := mustClaim(t, l, "q", now+4)
	if gb2.Spec.ID != b || gb2.Claim.Index != 1 {
		t.Fatalf("second claim: %v claim %d", gb2.Spec.ID, gb2.Claim.Index)
	}
	s.ship("claim b again", now+4, b, false)
}

// TestApplyWrites: every leader write returns the record to ship with
// its durability handle (one write pipeline: node ships while the local
// sync runs, and never reads the record back); a follower fed only those
// records converges with the leader after each, repeats included.
func TestApplyWrites(t *testing.T) {
	sl, sf := newStore(t), newStore(t)
	s := &stream{t: t, l: leader(t, sl), f: follower(t, sf), sl: sl, sf: sf}
	l := s.l
	a, b, c := task.MakeID(t0, 1, 0), task.MakeID(t0, 1, 1), task.MakeID(t0, 1, 2)
	now := t0
	dep := spec(c, "q", 1, 3)
	dep.Deps = []task.ID{a}
	enqueue(t, l, now, spec(a, "q", 5, 1), spec(b, "q", 3, 3), dep)
	s.shipNew("enqueue", now, a, b, c)
	must := func(w partition.Write, err error) partition.Write {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	ga := mustClaim(t, l, "q", now)
	s.ship("claim a", now, a, false)
	_, w, err := l.RenewApply(a, ga.Claim.Index, now+1, partition.Lease{TTL: 5000})
	s.shipWrite("renew a", now+1, must(w, err))
	s.shipWrite("update a", now+2, must(l.UpdateApply(a, ga.Claim.Index, 0, []byte("half"), now+2)))
	s.shipWrite("update a again", now+2, must(l.UpdateApply(a, ga.Claim.Index, 0, []byte("half"), now+3)))
	if _, err := l.UpdateApply(a, ga.Claim.Index, 0, []byte("other"), now+3); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("update with other data: %v; want a conflict", err)
	}
	s.shipWrite("fail a: dead after one attempt", now+4, must(l.FailApply(a, ga.Claim.Index, "boom", partition.Retry{}, now+4)))
	s.shipWrite("requeue a", now+5, must(l.RequeueApply(a, now+5)))
	ga = mustClaim(t, l, "q", now+6)
	s.ship("claim a again", now+6, a, false)
	s.shipWrite("snooze a", now+7, must(l.SnoozeApply(a, ga.Claim.Index, 0, now+7)))
	ga = mustClaim(t, l, "q", now+8)
	s.ship("claim a a third time", now+8, a, false)
	_, w, err = l.CompleteApply(a, ga.Claim.Index, nil, now+9)
	s.shipWrite("complete a", now+9, must(w, err))
	s.shipWrite("dep of c done", now+10, must(l.DepDoneApply(c, a, now+10)))
	s.shipWrite("dep of c done again", now+11, must(l.DepDoneApply(c, a, now+11)))
}

// TestClaimMeta: a claim record carrying the spec without payload (Meta)
// is indexed by a follower that holds the task untouched without a store
// lookup, and converges exactly as the plain record does; a Meta that
// does not match what the follower holds is ignored (the follower reads
// its own spec), and a malformed one refuses the record.
func TestClaimMeta(t *testing.T) {
	meta := func(g *partition.Granted) *task.Spec {
		m := *g.Spec
		m.Data = nil
		return &m
	}
	for _, tc := range []struct {
		name string
		// prepare runs after the enqueue was shipped; it may touch the
		// task on both replicas first.
		prepare func(s *stream, id task.ID, now int64)
		// edit changes the Meta the leader would send.
		edit        func(m *task.Spec)
		wantLookups bool // the follower reads from its store
		wantRefused bool
	}{
		{name: "untouched ready task", wantLookups: false},
		{name: "other priority", edit: func(m *task.Spec) { m.Priority++ }, wantLookups: true},
		{name: "other queue", edit: func(m *task.Spec) { m.Queue = "r" }, wantLookups: true},
		{name: "with deps", edit: func(m *task.Spec) { m.Deps = []task.ID{task.MakeID(t0, 9, 9)} }, wantLookups: true},
		{name: "with payload", edit: func(m *task.Spec) { m.Data = []byte("x") }, wantRefused: true},
		{name: "of another task", edit: func(m *task.Spec) { m.ID = task.MakeID(t0, 9, 9) }, wantRefused: true},
		{
			name: "task with a stored state",
			prepare: func(s *stream, id task.ID, now int64) {
				g := mustClaim(s.t, s.l, "q", now)
				s.ship("first claim", now, id, false)
				if err := s.l.Fail(id, g.Claim.Index, "boom", ptr(int64(0)), now+1); err != nil {
					s.t.Fatal(err)
				}
				s.ship("fail", now+1, id, false)
			},
			wantLookups: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl, sf := newStore(t), newStore(t)
			s := &stream{t: t, l: leader(t, sl), f: follower(t, sf), sl: sl, sf: sf}
			a := task.MakeID(t0, 1, 0)
			now := t0
			enqueue(t, s.l, now, spec(a, "q", 5, 3))
			s.shipNew("enqueue", now, a)
			if tc.prepare != nil {
				tc.prepare(s, a, now)
				now += 10
			}
			g := mustClaim(t, s.l, "q", now)
			rec := record(t, s.l, a, false)
			rec.Meta = meta(g)
			if tc.edit != nil {
				tc.edit(rec.Meta)
			}
			before := sf.Lookups()
			errs := mergeErrs(t, s.f, 1, now, rec)
			refused := errs != nil && errs[0] != nil
			if refused != tc.wantRefused {
				t.Fatalf("refused: %v (%v); want %v", refused, errs, tc.wantRefused)
			}
			if refused {
				if !errors.Is(errs[0], task.ErrInvalid) {
					t.Fatalf("refused with %v; want ErrInvalid", errs[0])
				}
				rec.Meta = nil
				merge(t, s.f, 1, now, rec)
			} else if looked := sf.Lookups() > before; looked != tc.wantLookups {
				t.Fatalf("follower looked up the store: %v; want %v", looked, tc.wantLookups)
			}
			converged(t, "claim", s.l, sl, s.f, sf)
			// The follower indexed the claim: the completion that follows
			// merges from its hot cache, and the task is gone from both.
			newly, w, err := s.l.CompleteApply(a, g.Claim.Index, nil, now+2)
			if err != nil || !newly {
				t.Fatalf("complete: newly %v, %v", newly, err)
			}
			if err := w.Wait(); err != nil {
				t.Fatal(err)
			}
			before = sf.Lookups()
			merge(t, s.f, 1, now+2, w.Rec)
			if n := sf.Lookups() - before; n != 0 {
				t.Fatalf("follower looked up the store %d times merging the completion", n)
			}
			converged(t, "complete", s.l, sl, s.f, sf)
		})
	}
}
