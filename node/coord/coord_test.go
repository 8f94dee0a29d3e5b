package coord

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

func TestPlanFan(t *testing.T) {
	const self = 7
	for _, tc := range []struct {
		name      string
		leaders   []uint64
		forwarded bool
		named     []uint16
		want      *FanPlan // nil: unavailable
	}{
		{name: "no registry", leaders: nil},
		{name: "a partition without a leader", leaders: []uint64{7, 0, 9}},
		{name: "all here", leaders: []uint64{7, 7}, want: &FanPlan{Mine: []uint16{0, 1}}},
		{name: "spread, peers by id, parts in order", leaders: []uint64{9, 7, 3, 9, 7, 3},
			want: &FanPlan{Mine: []uint16{1, 4}, Others: []FanPeer{{ID: 3, Parts: []uint16{2, 5}}, {ID: 9, Parts: []uint16{0, 3}}}}},
		{name: "nothing here", leaders: []uint64{9, 3},
			want: &FanPlan{Others: []FanPeer{{ID: 3, Parts: []uint16{1}}, {ID: 9, Parts: []uint16{0}}}}},
		{name: "forwarded, named as led", leaders: []uint64{9, 7, 3, 7}, forwarded: true, named: []uint16{3, 1},
			want: &FanPlan{Mine: []uint16{1, 3}}},
		{name: "forwarded, one left out", leaders: []uint64{9, 7, 3, 7}, forwarded: true, named: []uint16{1}},
		{name: "forwarded, one more", leaders: []uint64{9, 7, 3, 7}, forwarded: true, named: []uint16{1, 2, 3}},
		{name: "forwarded, another set of the same size", leaders: []uint64{9, 7, 3, 7}, forwarded: true, named: []uint16{0, 1}},
		{name: "forwarded, a repeat", leaders: []uint64{9, 7, 3, 7}, forwarded: true, named: []uint16{1, 1}},
		{name: "forwarded to a node that leads nothing now", leaders: []uint64{9, 3}, forwarded: true, named: []uint16{0}},
		{name: "forwarded, nothing led, nothing named", leaders: []uint64{9, 3}, forwarded: true, want: &FanPlan{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanFan(tc.leaders, self, tc.forwarded, tc.named)
			if tc.want == nil {
				if !errors.Is(err, wire.ErrUnavailable) {
					t.Fatalf("PlanFan = %+v, %v; want unavailable", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Leaders = tc.leaders
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PlanFan = %+v; want %+v", got, tc.want)
			}
			// Every partition exactly once, on a coordinator.
			if !tc.forwarded {
				seen := map[uint16]int{}
				for _, p := range got.Mine {
					seen[p]++
				}
				for _, o := range got.Others {
					for _, p := range o.Parts {
						seen[p]++
					}
				}
				for p := range tc.leaders {
					if seen[uint16(p)] != 1 {
						t.Errorf("partition %d planned %d times", p, seen[uint16(p)])
					}
				}
			}
			if got.Changed(tc.leaders) {
				t.Error("Changed on the snapshot itself")
			}
			if !got.Changed(append([]uint64{1}, tc.leaders...)) {
				t.Error("not Changed on another registry")
			}
		})
	}
}

func TestSplitEnqueue(t *testing.T) {
	id := func(n byte) task.ID { var i task.ID; i[0] = n; return i }
	a, b, c, d := id(1), id(2), id(3), id(4)
	for _, tc := range []struct {
		name   string
		tasks  []EnqueueTask
		want   EnqueueSplit
		remote bool
	}{
		{name: "all here", tasks: []EnqueueTask{{ID: a}, {ID: b}},
			want: EnqueueSplit{Order: []string{""}, Tasks: map[string][]int{"": {0, 1}}}},
		{name: "two routes, order of first task", tasks: []EnqueueTask{{ID: a, Route: "n2"}, {ID: b}, {ID: c, Route: "n2"}},
			want: EnqueueSplit{Order: []string{"n2", ""}, Tasks: map[string][]int{"n2": {0, 2}, "": {1}}}, remote: true},
		{name: "a dep on the same route: parallel", tasks: []EnqueueTask{{ID: a, Route: "n2"}, {ID: b}, {ID: c, Route: "n2", Deps: []task.ID{a}}},
			want: EnqueueSplit{Order: []string{"n2", ""}, Tasks: map[string][]int{"n2": {0, 2}, "": {1}}}, remote: true},
		{name: "a dep on another route: sequential", tasks: []EnqueueTask{{ID: a, Route: "n2"}, {ID: b, Deps: []task.ID{a}}},
			want: EnqueueSplit{Order: []string{"n2", ""}, Tasks: map[string][]int{"n2": {0}, "": {1}}, Sequential: true}, remote: true},
		{name: "a dep outside the request: parallel", tasks: []EnqueueTask{{ID: a, Route: "n2", Deps: []task.ID{d}}, {ID: b, Deps: []task.ID{d}}},
			want: EnqueueSplit{Order: []string{"n2", ""}, Tasks: map[string][]int{"n2": {0}, "": {1}}}, remote: true},
		{name: "a dep later in the request: not an order this split enforces", tasks: []EnqueueTask{{ID: a, Deps: []task.ID{b}}, {ID: b, Route: "n2"}},
			want: EnqueueSplit{Order: []string{"", "n2"}, Tasks: map[string][]int{"": {0}, "n2": {1}}}, remote: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SplitEnqueue(tc.tasks)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("SplitEnqueue = %+v; want %+v", got, tc.want)
			}
			if got.Remote() != tc.remote {
				t.Errorf("Remote = %v; want %v", got.Remote(), tc.remote)
			}
		})
	}
}

func TestDirectWrite(t *testing.T) {
	dep := []task.ID{{1}}
	for _, tc := range []struct {
		name                    string
		key                     string
		deps                    []task.ID
		fresh, leaderOutOfReach bool
		want                    bool
	}{
		{name: "fresh id", fresh: true, want: true},
		{name: "client id, leader reachable"},
		{name: "client id, leader out of reach", leaderOutOfReach: true, want: true},
		{name: "fresh id with a key", key: "k", fresh: true},
		{name: "key, leader out of reach", key: "k", leaderOutOfReach: true},
		{name: "deps, fresh, leader out of reach", deps: dep, fresh: true, leaderOutOfReach: true},
	} {
		if got := DirectWrite(tc.key, tc.deps, tc.fresh, tc.leaderOutOfReach); got != tc.want {
			t.Errorf("%s: DirectWrite = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestRouteTask(t *testing.T) {
	dep := []task.ID{{1}}
	noLeader := fmt.Errorf("%w: partition 3 has no leader right now; retry", wire.ErrUnavailable)
	refused := fmt.Errorf("%w: no such queue", task.ErrInvalid)
	for _, tc := range []struct {
		name                    string
		key                     string
		deps                    []task.ID
		fresh, outOfReach, hint bool
		leader                  string
		lookupErr               error
		want                    string
		wantErr                 error
		wantLookup              bool
	}{
		{name: "fresh id: written here, no lookup", fresh: true, want: RouteHere},
		{name: "client id, leader out of reach: written here", outOfReach: true, want: RouteHere},
		{name: "client id: its leader", leader: "n2", want: "n2", wantLookup: true},
		{name: "client id led here", leader: RouteHere, want: RouteHere, wantLookup: true},
		{name: "key: its leader, even fresh", key: "k", fresh: true, leader: "n2", want: "n2", wantLookup: true},
		{name: "deps: its leader, even out of reach", deps: dep, fresh: true, outOfReach: true, leader: "n3", want: "n3", wantLookup: true},
		{name: "no leader, no hint: fails", key: "k", lookupErr: noLeader, wantErr: wire.ErrUnavailable, wantLookup: true},
		{name: "no leader, hint: hinted here", key: "k", hint: true, lookupErr: noLeader, want: RouteHint, wantLookup: true},
		{name: "no leader, hint, deps: fails (a dependent is never hinted)", deps: dep, hint: true, lookupErr: noLeader, wantErr: wire.ErrUnavailable, wantLookup: true},
		{name: "a refusal stays one, hint or not", key: "k", hint: true, lookupErr: refused, wantErr: task.ErrInvalid, wantLookup: true},
		{name: "deadline, hint: hinted here", key: "k", hint: true, lookupErr: context.DeadlineExceeded, want: RouteHint, wantLookup: true},
		{name: "key, hint, leader out of reach: hinted here at once, no lookup", key: "k", hint: true, outOfReach: true, leader: "n2", want: RouteHint},
		{name: "key, no hint, leader out of reach: still its leader", key: "k", outOfReach: true, leader: "n2", want: "n2", wantLookup: true},
	} {
		looked := false
		got, err := RouteTask(tc.key, tc.deps, tc.fresh, tc.outOfReach, tc.hint, func() (string, error) {
			looked = true
			return tc.leader, tc.lookupErr
		})
		switch {
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: err = %v; want %v", tc.name, err, tc.wantErr)
		case tc.wantErr == nil && (err != nil || got != tc.want):
			t.Errorf("%s: RouteTask = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if looked != tc.wantLookup {
			t.Errorf("%s: looked the leader up: %v; want %v", tc.name, looked, tc.wantLookup)
		}
	}
}

func TestPlanForward(t *testing.T) {
	const leaderWait, hintWait = 500 * time.Millisecond, 2 * time.Second
	dep := []task.ID{{1}}
	plain := EnqueueTask{}
	keyed := EnqueueTask{Key: "k"}
	dependent := EnqueueTask{Deps: dep}
	for _, tc := range []struct {
		name        string
		tasks       []EnqueueTask
		hint, asked bool
		hintLeft    time.Duration
		want        ForwardPlan
	}{
		{name: "plain: the leader briefly, then written here", tasks: []EnqueueTask{plain, plain},
			want: ForwardPlan{Wait: leaderWait, Fallback: true}},
		{name: "plain, hint asked: the same, and the hint asked for here", tasks: []EnqueueTask{plain}, hint: true, asked: true, hintLeft: hintWait,
			want: ForwardPlan{Wait: leaderWait, Fallback: true, Hint: true}},
		{name: "plain, hinted, little hint wait left: no longer than that", tasks: []EnqueueTask{plain}, hint: true, asked: true, hintLeft: 200 * time.Millisecond,
			want: ForwardPlan{Wait: 200 * time.Millisecond, Fallback: true, Hint: true}},
		{name: "keyed: the leader as long as the request", tasks: []EnqueueTask{keyed}},
		{name: "keyed, hinted by its queue: what is left of the hint wait, then hinted here", tasks: []EnqueueTask{keyed, plain}, hint: true, hintLeft: 1500 * time.Millisecond,
			want: ForwardPlan{Wait: 1500 * time.Millisecond, Fallback: true, Hint: true}},
		{name: "keyed, hinted, hint wait over: a moment, never unbounded", tasks: []EnqueueTask{keyed}, hint: true, asked: true, hintLeft: -time.Second,
			want: ForwardPlan{Wait: minForwardWait, Fallback: true, Hint: true}},
		{name: "a dependent: the leader only, hint or not", tasks: []EnqueueTask{plain, dependent}, hint: true, asked: true, hintLeft: hintWait,
			want: ForwardPlan{Hint: true}},
	} {
		if got := PlanForward(tc.tasks, tc.hint, tc.asked, leaderWait, tc.hintLeft); got != tc.want {
			t.Errorf("%s: PlanForward = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

// A forward's error as this node's client sees it: a peer that is
// stopping is a peer out of reach (retried, written or hinted here),
// never this node stopping; other errors pass as they came.
func TestForwardErr(t *testing.T) {
	stopping := &wire.Error{Code: wire.CodeShuttingDown, Msg: "shutting down"}
	for _, tc := range []struct {
		name     string
		in       error
		code     wire.Code
		stopping bool // still reads as this node stopping
		hintable bool
	}{
		{"ok", nil, wire.CodeOK, false, false},
		{"peer stopping, over the wire", stopping, wire.CodeUnavailable, false, true},
		{"peer stopping, in process", fmt.Errorf("x: %w", wire.ErrShuttingDown), wire.CodeUnavailable, false, true},
		{"unavailable", &wire.Error{Code: wire.CodeUnavailable, Msg: "no quorum"}, wire.CodeUnavailable, false, true},
		{"not found", &wire.Error{Code: wire.CodeNotFound, Msg: "no task"}, wire.CodeNotFound, false, false},
		{"deadline", context.DeadlineExceeded, wire.CodeTimeout, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := forwardErr(wire.OpEnqueue, "10.0.0.1:7000", tc.in)
			if tc.in == nil {
				if err != nil {
					t.Fatalf("nil became %v", err)
				}
				return
			}
			if c := wire.CodeOf(err); c != tc.code {
				t.Errorf("code %v; want %v (%v)", c, tc.code, err)
			}
			if s := errors.Is(err, wire.ErrShuttingDown); s != tc.stopping {
				t.Errorf("reads as stopping: %v; want %v (%v)", s, tc.stopping, err)
			}
			if h := hintable(err); h != tc.hintable {
				t.Errorf("hintable %v; want %v", h, tc.hintable)
			}
		})
	}
}

// A spread asks the nodes alive other than itself, those outside the
// cohort that failed the write first, suspects last, each group rotated
// by the partition.
func TestSpreadOrder(t *testing.T) {
	all := []uint64{5, 1, 4, 2, 3, 3}
	yes := func(uint64) bool { return true }
	no := func(uint64) bool { return false }
	for _, tc := range []struct {
		name           string
		self           uint64
		part           uint16
		cohort         []uint64
		alive, suspect func(uint64) bool
		want           []uint64
	}{
		{"outside first", 1, 0, []uint64{1, 2, 3}, yes, no, []uint64{4, 5, 2, 3}},
		{"rotated by part", 1, 1, []uint64{1, 2, 3}, yes, no, []uint64{5, 4, 3, 2}},
		{"self outside the cohort", 4, 0, []uint64{1, 2, 3}, yes, no, []uint64{5, 1, 2, 3}},
		{"dead left out", 1, 0, []uint64{1, 2, 3}, func(id uint64) bool { return id != 4 && id != 2 }, no, []uint64{5, 3}},
		{"suspects last", 1, 0, []uint64{1, 2, 3}, yes, func(id uint64) bool { return id == 4 || id == 2 }, []uint64{5, 3, 4, 2}},
		{"none alive", 1, 0, []uint64{1, 2, 3}, no, no, nil},
		{"alone in its cohort", 1, 0, []uint64{1}, yes, no, []uint64{2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SpreadOrder(tc.self, tc.part, tc.cohort, all, tc.alive, tc.suspect)
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("SpreadOrder = %v; want %v", got, tc.want)
			}
		})
	}
}
