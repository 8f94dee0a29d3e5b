package wire

import (
	"testing"

	"github.com/skuldd/skuldd/task"
)

// TestViewOf: the view shows the derived state, marks the completing
// claim, ends a released claim at its release, shows a cancel, and hides
// each claim's updates after a gap in its sequence.
func TestViewOf(t *testing.T) {
	sp := &task.Spec{ID: task.MakeID(1000, 1, 0), Queue: "q", MaxAttempts: 3}
	st := &task.State{
		Claims:     []task.Claim{{Index: 0, Start: 100, End: 900}, {Index: 1, Start: 1000, End: 5000}},
		Releases:   []task.Release{{Claim: 0, At: 400, Until: 500, Reason: "boom"}},
		Completion: &task.Completion{Claim: 1, Seq: 1, At: 1500},
	}
	ups := []task.Update{{Claim: 0, Seq: 0, Data: []byte("a")}, {Claim: 0, Seq: 2, Data: []byte("hidden")},
		{Claim: 1, Seq: 0, Data: []byte("b")}}
	v := ViewOf(sp, nil, st, ups, 2000, 0)
	if v.State != "completed" || v.Cancelled != nil || v.Attempts != 1 {
		t.Errorf("state %s, cancel %+v, attempts %d; want completed, none, 1", v.State, v.Cancelled, v.Attempts)
	}
	if c := v.Claims[0]; c.End != 400 || c.Completed != nil {
		t.Errorf("claim 0 = %+v; want ended at its release, not completing", c)
	}
	if c := v.Claims[1]; c.Completed == nil || *c.Completed != 1500 {
		t.Errorf("claim 1 = %+v; want completed at 1500", c)
	}
	if len(v.Updates) != 2 || string(v.Updates[0].Data) != "a" || string(v.Updates[1].Data) != "b" {
		t.Errorf("updates %+v; want a (claim 0) and b (claim 1), the gap's entry hidden", v.Updates)
	}
	if len(v.Failures) != 1 || v.Failures[0].Reason != "boom" || v.Data == nil || v.Deps == nil {
		t.Errorf("failures %+v, data %v, deps %v", v.Failures, v.Data, v.Deps)
	}

	st.Completion = &task.Completion{Claim: 2, At: 1500, Cancelled: true, Reason: "obsolete"}
	v = ViewOf(sp, nil, st, nil, 2000, 0)
	if v.State != "cancelled" || v.Cancelled == nil || *v.Cancelled != (CancelView{At: 1500, Reason: "obsolete"}) || v.Claims[1].Completed != nil {
		t.Errorf("cancelled view: state %s, cancel %+v, claim 1 %+v", v.State, v.Cancelled, v.Claims[1])
	}
}
