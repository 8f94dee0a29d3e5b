package task_test

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/skuldd/skuldd/task"
)

func TestStatusNames(t *testing.T) {
	for s := range task.Status(task.NumStatus) {
		got, err := task.ParseStatus(s.String())
		if err != nil || got != s {
			t.Errorf("ParseStatus(%q) = %v, %v; want %v", s.String(), got, err, s)
		}
	}
	if _, err := task.ParseStatus("Ready"); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("ParseStatus(Ready) = %v; want ErrInvalid", err)
	}
	if got := task.Status(200).String(); got != "status(200)" {
		t.Errorf("String of an unknown status = %q", got)
	}
}

// TestMergeProperties checks the CRDT laws on random states.
// Reference: docs/design.md, "Data model": any two replicas merge to the same
// value; completion is set forever and the earliest wins.
func TestMergeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	buf := make([]byte, 200)
	for range 2000 {
		for i := range buf {
			buf[i] = byte(rng.UintN(256))
		}
		src := &byteSource{b: buf}
		checkMerge(t, genState(src), genState(src), genState(src))
	}
}

func TestMergeCases(t *testing.T) {
	a := task.State{
		Claims:     []task.Claim{{Index: 0, Start: 10, End: 20, Epoch: 1}},
		Releases:   []task.Release{{Claim: 0, At: 15, Until: 30, Reason: "x"}},
		Completion: &task.Completion{Claim: 1, Seq: 3, At: 50},
	}
	b := task.State{
		Claims:      []task.Claim{{Index: 0, Start: 10, End: 25, Epoch: 2}, {Index: 1, Start: 40, End: 60}},
		Releases:    []task.Release{{Claim: 0, At: 14, Snooze: true, Until: 20}},
		Completion:  &task.Completion{Claim: 1, Seq: 2, At: 49},
		RequeueBase: 1,
	}
	m := merged(a, b)
	want := task.State{
		Claims:      []task.Claim{{Index: 0, Start: 10, End: 25, Epoch: 2}, {Index: 1, Start: 40, End: 60}},
		Releases:    []task.Release{{Claim: 0, At: 14, Snooze: true, Until: 20}},
		Completion:  &task.Completion{Claim: 1, Seq: 2, At: 49},
		RequeueBase: 1,
	}
	if !sameState(m, want) {
		t.Errorf("merge = %+v; want %+v", m, want)
	}
	// Completion is absorbing: merging a state without one keeps it.
	m.Merge(&task.State{Claims: []task.Claim{{Index: 2, Start: 70, End: 80}}})
	if m.Completion == nil || *m.Completion != *want.Completion {
		t.Errorf("completion after merge with an open state = %+v; want %+v", m.Completion, want.Completion)
	}
	// The merged completion does not alias the argument's.
	b.Completion.At = 1
	if m.Completion.At != 49 {
		t.Error("merged completion aliases its input")
	}
}

// Reference: docs/design.md, "Data model", derived state, and "Partition
// leaders": a claim expires for the leader only at end + skew bound.
func TestDerive(t *testing.T) {
	const skew = 100
	dep1, dep2 := task.MakeID(1, 1, 1), task.MakeID(1, 1, 2)
	spec := func(mod func(*task.Spec)) *task.Spec {
		sp := &task.Spec{ID: task.MakeID(10, 1, 0), Queue: "q", MaxAttempts: 3}
		if mod != nil {
			mod(sp)
		}
		return sp
	}
	claim := func(idx uint32, start, end int64) task.Claim {
		return task.Claim{Index: idx, Start: start, End: end, Epoch: 1}
	}
	expired3 := []task.Claim{claim(0, 100, 200), claim(1, 300, 400), claim(2, 500, 600)}
	cases := []struct {
		name    string
		spec    *task.Spec
		st      task.State
		now     int64
		want    task.Status
		wantDue int64
	}{
		{"fresh", spec(nil), task.State{}, 1000, task.Ready, 0},
		{"not before in future", spec(func(s *task.Spec) { s.NotBefore = 2000 }), task.State{}, 1999, task.Delayed, 2000},
		{"not before reached", spec(func(s *task.Spec) { s.NotBefore = 2000 }), task.State{}, 2000, task.Ready, 0},
		{"deps pending", spec(func(s *task.Spec) { s.Deps = []task.ID{dep1, dep2} }), task.State{DepsDone: []task.ID{dep1}}, 1000, task.Blocked, 0},
		{"deps done", spec(func(s *task.Spec) { s.Deps = []task.ID{dep1, dep2} }), task.State{DepsDone: []task.ID{dep1, dep2}}, 1000, task.Ready, 0},
		{"blocked before delayed", spec(func(s *task.Spec) { s.Deps = []task.ID{dep1}; s.NotBefore = 5000 }), task.State{}, 1000, task.Blocked, 0},
		{"claimed", spec(nil), task.State{Claims: []task.Claim{claim(0, 1000, 2000)}}, 1500, task.Claimed, 2000 + skew},
		{"claimed past end, within skew", spec(nil), task.State{Claims: []task.Claim{claim(0, 1000, 2000)}}, 2000 + skew - 1, task.Claimed, 2000 + skew},
		{"claim expired at end+skew", spec(nil), task.State{Claims: []task.Claim{claim(0, 1000, 2000)}}, 2000 + skew, task.Ready, 0},
		{"failed, delayed until Until", spec(nil), task.State{
			Claims:   []task.Claim{claim(0, 1000, 2000)},
			Releases: []task.Release{{Claim: 0, At: 1500, Until: 3000}},
		}, 1600, task.Delayed, 3000},
		{"failed, ready at Until", spec(nil), task.State{
			Claims:   []task.Claim{claim(0, 1000, 2000)},
			Releases: []task.Release{{Claim: 0, At: 1500, Until: 3000}},
		}, 3000, task.Ready, 0},
		{"snoozed, delayed", spec(nil), task.State{
			Claims:   []task.Claim{claim(0, 1000, 2000)},
			Releases: []task.Release{{Claim: 0, At: 1500, Snooze: true, Until: 4000}},
		}, 1600, task.Delayed, 4000},
		{"max attempts by expiry", spec(nil), task.State{Claims: expired3}, 1000, task.Dead, 0},
		{"max attempts by fail", spec(nil), task.State{
			Claims:   expired3,
			Releases: []task.Release{{Claim: 2, At: 550, Until: 5000}},
		}, 1000, task.Dead, 0},
		{"snooze is not an attempt", spec(nil), task.State{
			Claims:   expired3,
			Releases: []task.Release{{Claim: 2, At: 550, Snooze: true, Until: 900}},
		}, 1000, task.Ready, 0},
		{"all snoozed never dead", spec(func(s *task.Spec) { s.MaxAttempts = 1 }), task.State{
			Claims: expired3,
			Releases: []task.Release{
				{Claim: 0, At: 150, Snooze: true}, {Claim: 1, At: 350, Snooze: true}, {Claim: 2, At: 550, Snooze: true},
			},
		}, 1000, task.Ready, 0},
		{"live claim at last attempt is claimed", spec(nil), task.State{
			Claims: []task.Claim{claim(0, 100, 200), claim(1, 300, 400), claim(2, 900, 2000)},
		}, 1000, task.Claimed, 2000 + skew},
		{"last attempt expires dead", spec(nil), task.State{
			Claims: []task.Claim{claim(0, 100, 200), claim(1, 300, 400), claim(2, 900, 2000)},
		}, 2000 + skew, task.Dead, 0},
		{"dead before blocked", spec(func(s *task.Spec) { s.Deps = []task.ID{dep1} }), task.State{Claims: expired3}, 1000, task.Dead, 0},
		{"no max attempts never dead", spec(func(s *task.Spec) { s.MaxAttempts = 0 }), task.State{Claims: expired3}, 1000, task.Ready, 0},
		{"requeue makes ready", spec(nil), task.State{Claims: expired3, RequeueBase: 3}, 1000, task.Ready, 0},
		{"requeue ignores the retry delay of earlier claims", spec(nil), task.State{
			Claims:      expired3,
			Releases:    []task.Release{{Claim: 2, At: 550, Until: 1_000_000}},
			RequeueBase: 3,
		}, 1000, task.Ready, 0},
		{"requeue keeps the enqueue delay", spec(func(s *task.Spec) { s.NotBefore = 2000 }), task.State{
			Claims: expired3, RequeueBase: 3,
		}, 1000, task.Delayed, 2000},
		{"requeue base counts later claims", spec(func(s *task.Spec) { s.MaxAttempts = 2 }), task.State{Claims: expired3, RequeueBase: 1}, 1000, task.Dead, 0},
		{"completed", spec(nil), task.State{
			Claims:     []task.Claim{claim(0, 1000, 2000)},
			Completion: &task.Completion{Claim: 0, Seq: 0, At: 1500},
		}, 1600, task.Completed, 0},
		{"completed beats dead", spec(nil), task.State{
			Claims:     expired3,
			Completion: &task.Completion{Claim: 2, Seq: 0, At: 550},
		}, 1000, task.Completed, 0},
		{"completing claim is not an attempt", spec(func(s *task.Spec) { s.MaxAttempts = 1 }), task.State{
			Claims:     []task.Claim{claim(0, 100, 200)},
			Completion: &task.Completion{Claim: 0, At: 150},
		}, 1000, task.Completed, 0},
		{"cancelled while claimed", spec(nil), task.State{
			Claims:     []task.Claim{claim(0, 1000, 2000)},
			Completion: &task.Completion{Claim: 1, At: 1500, Cancelled: true},
		}, 1600, task.Cancelled, 0},
		{"cancelled beats dead", spec(nil), task.State{
			Claims:     expired3,
			Completion: &task.Completion{Claim: 3, At: 900, Cancelled: true},
		}, 1000, task.Cancelled, 0},
		{"a fail with no retry is dead at its first attempt", spec(nil), task.State{
			Claims:   []task.Claim{claim(0, 1000, 2000)},
			Releases: []task.Release{{Claim: 0, At: 1500, Until: 1500, NoRetry: true}},
		}, 1600, task.Dead, 0},
		{"a fail with no retry without max attempts is dead", spec(func(s *task.Spec) { s.MaxAttempts = 0 }), task.State{
			Claims:   []task.Claim{claim(0, 1000, 2000)},
			Releases: []task.Release{{Claim: 0, At: 1500, Until: 1500, NoRetry: true}},
		}, 1600, task.Dead, 0},
		{"a requeue forgets a fail with no retry", spec(nil), task.State{
			Claims:      []task.Claim{claim(0, 1000, 2000)},
			Releases:    []task.Release{{Claim: 0, At: 1500, Until: 1500, NoRetry: true}},
			RequeueBase: 1,
		}, 1600, task.Ready, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.st.Clone()
			got, due := task.Derive(tc.spec, &tc.st, tc.now, skew)
			if got != tc.want || due != tc.wantDue {
				t.Errorf("Derive at %d = %v, %d; want %v, %d", tc.now, got, due, tc.want, tc.wantDue)
			}
			if !reflect.DeepEqual(before, tc.st) {
				t.Error("Derive changed the state")
			}
		})
	}
}

func TestAttempts(t *testing.T) {
	st := task.State{
		Claims: []task.Claim{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}},
		Releases: []task.Release{
			{Claim: 1, Snooze: true},
			{Claim: 2, Reason: "boom"},
		},
	}
	if got := st.Attempts(false); got != 3 {
		t.Errorf("Attempts(false) = %d; want 3 (claims 0, 2, 3)", got)
	}
	if got := st.Attempts(true); got != 2 {
		t.Errorf("Attempts(true) = %d; want 2 (the live claim 3 does not count)", got)
	}
	st.Requeue()
	if st.RequeueBase != 4 || st.Attempts(false) != 0 {
		t.Errorf("after requeue: base %d, attempts %d; want 4, 0", st.RequeueBase, st.Attempts(false))
	}
	// Requeue never lowers the base.
	st.RequeueBase = 9
	st.Requeue()
	if st.RequeueBase != 9 {
		t.Errorf("requeue lowered the base to %d", st.RequeueBase)
	}
}

func TestAddClaimPanicsOnGap(t *testing.T) {
	var st task.State
	st.AddClaim(task.Claim{Index: 0})
	defer func() {
		if recover() == nil {
			t.Error("AddClaim with index 2 after 0 did not panic")
		}
	}()
	st.AddClaim(task.Claim{Index: 2})
}

// fenceState is a task with two claims; claim 1 is the latest and runs
// [1000, 2000).
func fenceState() task.State {
	return task.State{Claims: []task.Claim{
		{Index: 0, Start: 0, End: 500, Epoch: 1},
		{Index: 1, Start: 1000, End: 2000, Epoch: 1},
	}}
}

// Reference: docs/design.md, "Fencing": only the task's latest claim may renew,
// update, snooze, fail or complete it.
func TestRenew(t *testing.T) {
	completed := fenceState()
	completed.Completion = &task.Completion{Claim: 1, Seq: 0, At: 1500}
	failed := fenceState()
	failed.Releases = []task.Release{{Claim: 1, At: 1500}}
	cases := []struct {
		name    string
		st      task.State
		idx     uint32
		now     int64
		ttl     int64
		limit   int64 // the task's time limit
		wantEnd int64
		wantErr error
	}{
		{"grows end", fenceState(), 1, 1500, 1000, 0, 2500, nil},
		{"never shrinks end", fenceState(), 1, 1500, 10, 0, 2000, nil},
		{"just before end", fenceState(), 1, 1999, 1000, 0, 2999, nil},
		{"refused at end", fenceState(), 1, 2000, 1000, 0, 0, task.ErrClaimExpired},
		{"refused after end", fenceState(), 1, 2050, 1000, 0, 0, task.ErrClaimExpired},
		{"superseded", fenceState(), 0, 100, 1000, 0, 0, task.ErrClaimSuperseded},
		{"never granted", fenceState(), 2, 1500, 1000, 0, 0, task.ErrNoSuchClaim},
		{"no claims", task.State{}, 0, 1500, 1000, 0, 0, task.ErrNoSuchClaim},
		{"completed", completed, 1, 1500, 1000, 0, 0, task.ErrCompleted},
		{"ended by fail", failed, 1, 1500, 1000, 0, 0, task.ErrClaimEnded},
		// The claim started at 1000: a 1800 ms limit ends it at 2800.
		{"within the time limit", fenceState(), 1, 1500, 1000, 1800, 2500, nil},
		{"capped at the time limit", fenceState(), 1, 1900, 1000, 1800, 2800, nil},
		{"at the time limit: alive, not grown", fenceState(), 1, 1500, 1000, 1000, 2000, nil},
		{"refused past the time limit", fenceState(), 1, 2100, 1000, 1000, 0, task.ErrTimeLimit},
		{"an expiry before the limit stays an expiry", fenceState(), 1, 2100, 1000, 5000, 0, task.ErrClaimExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.st.Clone()
			c, err := tc.st.Renew(&task.Spec{TimeLimit: tc.limit}, tc.idx, tc.now, tc.ttl)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Renew = %+v, %v; want %v", c, err, tc.wantErr)
			}
			if err != nil {
				if !reflect.DeepEqual(before, tc.st) {
					t.Error("a refused renew changed the state")
				}
				return
			}
			latest, _ := tc.st.Latest()
			if c.End != tc.wantEnd || latest.End != tc.wantEnd || c.Index != tc.idx {
				t.Errorf("Renew = %+v (stored end %d); want end %d", c, latest.End, tc.wantEnd)
			}
		})
	}
}

func TestCheckUpdate(t *testing.T) {
	cases := []struct {
		name      string
		idx       uint32
		seq, next uint64
		wantDup   bool
		wantErr   error
	}{
		{"next", 1, 3, 3, false, nil},
		{"first", 1, 0, 0, false, nil},
		{"retry", 1, 1, 3, true, nil},
		{"gap", 1, 4, 3, false, task.ErrSeq},
		{"superseded", 0, 0, 0, false, task.ErrClaimSuperseded},
		{"never granted", 5, 0, 0, false, task.ErrNoSuchClaim},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := fenceState()
			dup, err := st.CheckUpdate(tc.idx, tc.seq, tc.next)
			if dup != tc.wantDup || !errors.Is(err, tc.wantErr) {
				t.Errorf("CheckUpdate = %v, %v; want %v, %v", dup, err, tc.wantDup, tc.wantErr)
			}
		})
	}
}

func TestComplete(t *testing.T) {
	failed := fenceState()
	failed.Releases = []task.Release{{Claim: 1, At: 1500}}
	cases := []struct {
		name      string
		st        task.State
		idx       uint32
		seq, next uint64
		now       int64
		wantDone  bool
		wantErr   error
	}{
		{"complete", fenceState(), 1, 2, 2, 1500, true, nil},
		{"expired but not superseded", fenceState(), 1, 0, 0, 9000, true, nil},
		{"seq gap", fenceState(), 1, 3, 2, 1500, false, task.ErrSeq},
		{"seq behind", fenceState(), 1, 1, 2, 1500, false, task.ErrSeq},
		{"superseded", fenceState(), 0, 0, 0, 1500, false, task.ErrClaimSuperseded},
		{"never granted", fenceState(), 2, 0, 0, 1500, false, task.ErrNoSuchClaim},
		{"after fail", failed, 1, 0, 0, 1500, false, task.ErrClaimEnded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.st.Clone()
			done, err := tc.st.Complete(tc.idx, tc.seq, tc.next, tc.now)
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) {
				t.Fatalf("Complete = %v, %v; want %v, %v", done, err, tc.wantDone, tc.wantErr)
			}
			if err != nil {
				if !reflect.DeepEqual(before, tc.st) {
					t.Error("a refused completion changed the state")
				}
				return
			}
			want := task.Completion{Claim: tc.idx, Seq: tc.seq, At: tc.now}
			if tc.st.Completion == nil || *tc.st.Completion != want {
				t.Errorf("completion = %+v; want %+v", tc.st.Completion, want)
			}
		})
	}

	// Repeats: the same (claim, seq) is idempotent, even later and with a
	// different next; the same claim at another seq conflicts; another
	// claim finds the task completed.
	st := fenceState()
	if done, err := st.Complete(1, 2, 2, 1500); !done || err != nil {
		t.Fatalf("Complete = %v, %v", done, err)
	}
	first := st.Clone()
	if done, err := st.Complete(1, 2, 5, 1700); done || err != nil {
		t.Errorf("repeat Complete = %v, %v; want false, nil", done, err)
	}
	if !reflect.DeepEqual(first, st) {
		t.Errorf("repeat changed the state: %+v -> %+v", first, st)
	}
	for _, c := range []struct {
		idx  uint32
		seq  uint64
		want error
	}{{1, 3, task.ErrConflict}, {1, 1, task.ErrConflict}, {0, 2, task.ErrCompleted}, {2, 2, task.ErrCompleted}} {
		if done, err := st.Complete(c.idx, c.seq, c.seq, 1700); done || !errors.Is(err, c.want) {
			t.Errorf("Complete(%d, %d) after completion = %v, %v; want %v", c.idx, c.seq, done, err, c.want)
		}
	}
	// Every other operation sees the completion.
	if _, err := st.Renew(&task.Spec{}, 1, 1600, 100); !errors.Is(err, task.ErrCompleted) {
		t.Errorf("Renew after complete = %v; want ErrCompleted", err)
	}
	if _, err := st.CheckUpdate(1, 2, 2); !errors.Is(err, task.ErrCompleted) {
		t.Errorf("CheckUpdate after complete = %v; want ErrCompleted", err)
	}
	if _, err := st.End(1, task.Release{At: 1600}); !errors.Is(err, task.ErrCompleted) {
		t.Errorf("End after complete = %v; want ErrCompleted", err)
	}
}

// TestCancel: a cancel supersedes the live claim (every write of it is
// refused with ErrCancelled, and no other error), repeats idempotently
// whatever its reason, and is refused on a completed task.
func TestCancel(t *testing.T) {
	st := fenceState() // claim 1 live over [1000, 2000)
	if done, err := st.Cancel(1500, "operator"); !done || err != nil {
		t.Fatalf("Cancel = %v, %v; want true, nil", done, err)
	}
	want := task.Completion{Claim: 2, At: 1500, Cancelled: true, Reason: "operator"}
	if st.Completion == nil || *st.Completion != want {
		t.Fatalf("completion = %+v; want %+v (the next claim index: the cancel supersedes claim 1)", st.Completion, want)
	}
	if got, _ := task.Derive(&task.Spec{MaxAttempts: 3}, &st, 1600, 0); got != task.Cancelled {
		t.Errorf("Derive after cancel = %v; want cancelled", got)
	}
	first := st.Clone()
	if done, err := st.Cancel(1700, "again"); done || err != nil {
		t.Errorf("repeat Cancel = %v, %v; want false, nil", done, err)
	}
	if !reflect.DeepEqual(first, st) {
		t.Errorf("a repeated cancel changed the state: %+v -> %+v", first, st)
	}
	for name, op := range map[string]func() error{
		"Renew":    func() error { _, err := st.Renew(&task.Spec{}, 1, 1600, 100); return err },
		"Update":   func() error { _, err := st.CheckUpdate(1, 0, 0); return err },
		"Complete": func() error { _, err := st.Complete(1, 0, 0, 1600); return err },
		"Fail":     func() error { _, err := st.End(1, task.Release{At: 1600}); return err },
		"Snooze":   func() error { _, err := st.End(1, task.Release{At: 1600, Snooze: true}); return err },
	} {
		if err := op(); !errors.Is(err, task.ErrCancelled) || errors.Is(err, task.ErrCompleted) {
			t.Errorf("%s after cancel = %v; want ErrCancelled only", name, err)
		}
	}
	if !reflect.DeepEqual(first, st) {
		t.Errorf("refused writes changed a cancelled state: %+v -> %+v", first, st)
	}

	completed := fenceState()
	if _, err := completed.Complete(1, 0, 0, 1500); err != nil {
		t.Fatal(err)
	}
	before := completed.Clone()
	if done, err := completed.Cancel(1600, ""); done || !errors.Is(err, task.ErrCompleted) {
		t.Errorf("Cancel of a completed task = %v, %v; want false, ErrCompleted", done, err)
	}
	if !reflect.DeepEqual(before, completed) {
		t.Error("a refused cancel changed the state")
	}

	// Never claimed: the cancel takes claim index 0.
	var fresh task.State
	if _, err := fresh.Cancel(10, ""); err != nil || fresh.Completion.Claim != 0 {
		t.Errorf("Cancel of an unclaimed task = %v, %+v; want claim index 0", err, fresh.Completion)
	}
}

func TestEnd(t *testing.T) {
	fail := task.Release{At: 1500, Until: 3000, Reason: "boom"}
	snooze := task.Release{At: 1500, Snooze: true, Until: 4000}
	noRetry := task.Release{At: 1500, Until: 1500, Reason: "bad input", NoRetry: true}
	cases := []struct {
		name       string
		first      *task.Release // an earlier End of claim 1, if any
		idx        uint32
		r          task.Release
		wantDone   bool
		wantErr    error
		wantRecord task.Release // the release stored for idx afterwards
	}{
		{"fail", nil, 1, fail, true, nil, withClaim(fail, 1)},
		{"snooze", nil, 1, snooze, true, nil, withClaim(snooze, 1)},
		{"fail twice", &fail, 1, task.Release{At: 1600, Until: 9000}, false, nil, withClaim(fail, 1)},
		{"snooze twice", &snooze, 1, task.Release{At: 1600, Snooze: true}, false, nil, withClaim(snooze, 1)},
		{"snooze after fail", &fail, 1, snooze, false, task.ErrClaimEnded, withClaim(fail, 1)},
		{"fail after snooze", &snooze, 1, fail, false, task.ErrClaimEnded, withClaim(snooze, 1)},
		// A fail with no retry after a plain one would change nothing:
		// refused, not acknowledged. The other way round is a repeat.
		{"no-retry fail after a fail", &fail, 1, task.Release{At: 1600, NoRetry: true}, false, task.ErrClaimEnded, withClaim(fail, 1)},
		{"fail after a no-retry fail", &noRetry, 1, fail, false, nil, withClaim(noRetry, 1)},
		{"no-retry fail twice", &noRetry, 1, noRetry, false, nil, withClaim(noRetry, 1)},
		{"superseded", nil, 0, fail, false, task.ErrClaimSuperseded, task.Release{}},
		{"never granted", nil, 7, fail, false, task.ErrNoSuchClaim, task.Release{}},
		// Claim 1 ends at 2000: after that its expiry counted an attempt,
		// and a snooze would take it back; a fail still may end it.
		{"snooze after the end", nil, 1, task.Release{At: 2000, Snooze: true}, false, task.ErrClaimExpired, task.Release{}},
		{"fail after the end", nil, 1, task.Release{At: 2500}, true, nil, task.Release{Claim: 1, At: 2500}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := fenceState()
			if tc.first != nil {
				if done, err := st.End(1, *tc.first); !done || err != nil {
					t.Fatalf("first End = %v, %v", done, err)
				}
			}
			before := st.Clone()
			done, err := st.End(tc.idx, tc.r)
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) {
				t.Fatalf("End = %v, %v; want %v, %v", done, err, tc.wantDone, tc.wantErr)
			}
			if !done && !reflect.DeepEqual(before, st) {
				t.Errorf("End without effect changed the state: %+v -> %+v", before, st)
			}
			got, ok := st.ReleaseOf(1)
			if tc.wantRecord == (task.Release{}) {
				if ok {
					t.Errorf("claim 1 has release %+v; want none", got)
				}
				return
			}
			if !ok || got != tc.wantRecord {
				t.Errorf("release of claim 1 = %+v, %v; want %+v", got, ok, tc.wantRecord)
			}
		})
	}
}

func withClaim(r task.Release, idx uint32) task.Release {
	r.Claim = idx
	return r
}

func TestStateEqual(t *testing.T) {
	a := task.State{Claims: []task.Claim{{Index: 0, Start: 1, End: 2}}, Completion: &task.Completion{Claim: 0, Seq: 1, At: 3}}
	b := a.Clone()
	if !a.Equal(&b) {
		t.Fatal("a clone differs")
	}
	cases := []func(*task.State){
		func(s *task.State) { s.Claims[0].End = 9 },
		func(s *task.State) { s.Completion = nil },
		func(s *task.State) { s.Completion = &task.Completion{Claim: 0, Seq: 2, At: 3} },
		func(s *task.State) { s.Releases = []task.Release{{Claim: 0}} },
		func(s *task.State) { s.DepsDone = []task.ID{{1}} },
		func(s *task.State) { s.RequeueBase = 1 },
	}
	for i, f := range cases {
		c := a.Clone()
		f(&c)
		if a.Equal(&c) || c.Equal(&a) {
			t.Errorf("case %d: changed state reads equal", i)
		}
	}
}

// TestTombs: a tombstone's sign says how its task ended; merges keep the
// earliest deletion, the cancelled one on a tie.
func TestTombs(t *testing.T) {
	c, d := task.TombOf(500, true), task.TombOf(500, false)
	if task.TombTime(c) != 500 || task.TombTime(d) != 500 || !task.TombCancelled(c) || task.TombCancelled(d) {
		t.Fatalf("TombOf(500) = %d cancelled, %d completed", c, d)
	}
	for _, tc := range []struct {
		a, b int64
		want bool
	}{
		{c, d, true}, {d, c, false}, {task.TombOf(400, false), c, true}, {c, task.TombOf(400, false), false}, {d, d, false},
	} {
		if got := task.TombLess(tc.a, tc.b); got != tc.want {
			t.Errorf("TombLess(%d, %d) = %v; want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestStateName: a delayed task's state is named by what sets its
// not-before time: its enqueue delay, a snooze or a failure; other
// statuses keep their names.
func TestStateName(t *testing.T) {
	claims := []task.Claim{{Index: 0, Start: 100, End: 200}, {Index: 1, Start: 300, End: 400}}
	for _, tc := range []struct {
		name      string
		notBefore int64
		st        task.State
		status    task.Status
		want      string
	}{
		{"enqueue delay", 5000, task.State{}, task.Delayed, "delayed"},
		{"snoozed", 0, task.State{Claims: claims[:1], Releases: []task.Release{{Claim: 0, At: 150, Snooze: true, Until: 5000}}},
			task.Delayed, task.StateSnoozed},
		{"failed", 0, task.State{Claims: claims[:1], Releases: []task.Release{{Claim: 0, At: 150, Until: 5000}}},
			task.Delayed, task.StateRetrying},
		{"the later delay names it", 0, task.State{Claims: claims, Releases: []task.Release{
			{Claim: 0, At: 150, Until: 9000}, {Claim: 1, At: 350, Snooze: true, Until: 5000}}},
			task.Delayed, task.StateRetrying},
		{"an enqueue delay past the snooze", 9000, task.State{Claims: claims[:1], Releases: []task.Release{{Claim: 0, At: 150, Snooze: true, Until: 5000}}},
			task.Delayed, "delayed"},
		{"a requeue forgets earlier delays", 0, task.State{Claims: claims, RequeueBase: 1,
			Releases: []task.Release{{Claim: 0, At: 150, Until: 9000}, {Claim: 1, At: 350, Snooze: true, Until: 5000}}},
			task.Delayed, task.StateSnoozed},
		{"not delayed", 0, task.State{}, task.Ready, "ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &task.Spec{NotBefore: tc.notBefore}
			if got := task.StateName(sp, &tc.st, tc.status); got != tc.want {
				t.Fatalf("StateName = %q; want %q", got, tc.want)
			}
			if st, err := task.ParseStatus(tc.want); err != nil || st != tc.status {
				t.Fatalf("ParseStatus(%q) = %v, %v; want %v", tc.want, st, err, tc.status)
			}
		})
	}
}

// TestCancelUnder: a cancel by a claim's holder is fenced like a fail:
// only the latest claim, not ended, may cancel; a repeat is a no-op.
func TestCancelUnder(t *testing.T) {
	failed := fenceState()
	failed.Releases = []task.Release{{Claim: 1, At: 1500}}
	completed := fenceState()
	completed.Completion = &task.Completion{Claim: 1, At: 1500}
	cancelled := fenceState()
	cancelled.Completion = &task.Completion{Claim: 2, At: 1500, Cancelled: true}
	for _, tc := range []struct {
		name     string
		st       task.State
		idx      uint32
		wantDone bool
		wantErr  error
	}{
		{"the latest claim", fenceState(), 1, true, nil},
		{"a superseded claim", fenceState(), 0, false, task.ErrClaimSuperseded},
		{"a claim ended by a fail", failed, 1, false, task.ErrClaimEnded},
		{"a completed task", completed, 1, false, task.ErrCompleted},
		{"a repeat", cancelled, 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.st.Clone()
			done, err := tc.st.CancelUnder(tc.idx, 1600, "handler")
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) {
				t.Fatalf("CancelUnder = %v, %v; want %v, %v", done, err, tc.wantDone, tc.wantErr)
			}
			if !done && !reflect.DeepEqual(before, tc.st) {
				t.Fatalf("a refused or repeated cancel changed the state: %+v -> %+v", before, tc.st)
			}
		})
	}
}
