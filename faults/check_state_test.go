package faults

import (
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

func TestUpdates(t *testing.T) {
	const check = "updates"
	visible := func(b *builder, seq uint64, data string) {
		v := b.views[taskA]
		v.Updates = append(v.Updates, wire.UpdateView{Claim: 0, Seq: seq, Data: []byte(data)})
	}
	runFlagCases(t, []flagCase{
		{name: "acknowledged update on no replica", check: check, kind: kindUpdateMissing, want: 1, inject: func(b *builder) {
			b.views[taskA].Updates = nil
		}},
		{name: "visible with other data", check: check, kind: kindUpdateData, want: 1, inject: func(b *builder) {
			b.views[taskA].Updates[0].Data = []byte("zz")
		}},
		{name: "failed update visible", check: check, kind: kindUpdateFailedSeen, want: 1, inject: func(b *builder) {
			b.update(taskA, 0, 1, "a1", 60, 70, Fail)
			visible(b, 1, "a1")
		}},
		{name: "info update visible", check: check, kind: kindUpdateFailedSeen, inject: func(b *builder) {
			b.update(taskA, 0, 1, "a1", 60, 70, Info)
			visible(b, 1, "a1")
		}},
		{name: "failed, then retried with info, visible", check: check, kind: kindUpdateFailedSeen, inject: func(b *builder) {
			b.update(taskA, 0, 1, "a1", 60, 70, Fail)
			b.update(taskA, 0, 1, "a1", 80, 90, Info)
			visible(b, 1, "a1")
		}},
		{name: "never sent, visible", check: check, kind: kindUpdateUnexpected, want: 1, inject: func(b *builder) {
			visible(b, 1, "x")
		}},
	})
}

func TestUpdatesMissingOnSomeReplicasDiverges(t *testing.T) {
	b := base()
	b.onNode(taskA, 3).Updates = nil
	r := Analyze(b.input())
	if a := findAnomaly(t, findCheck(t, r, "updates"), kindUpdateMissing); a.Count != 0 {
		t.Errorf("an update on 2 of 3 replicas flagged missing %d times; want 0 (it is divergence)", a.Count)
	}
	if a := findAnomaly(t, findCheck(t, r, "convergence"), kindDiverged); a.Count != 1 || !strings.Contains(a.Examples[0].Detail, "updates") {
		t.Errorf("divergence %+v; want 1 naming updates", a)
	}
}

// dependent adds task G, depending on dep, claimed at claimMs and
// completed; every replica holds it completed.
func dependent(b *builder, dep string, claimMs int64) {
	b.enqueue(taskG, 30, 40, OK, dep)
	b.claim(taskG, 0, claimMs, claimMs+10, OK)
	b.under(FComplete, taskG, 0, claimMs+100, claimMs+110, OK)
	v := b.view(taskG, finalCompleted)
	var did task.ID
	if err := did.UnmarshalText([]byte(dep)); err != nil {
		panic(err)
	}
	v.Deps = []task.ID{did}
	v.Claims = []wire.ClaimView{completed(claimView(0, claimMs+5, claimMs+2005), claimMs+105)}
}

func TestDependencyOrder(t *testing.T) {
	const check = "dependency order"
	runFlagCases(t, []flagCase{
		{name: "claimed before the dependency's complete was invoked", check: check, kind: kindDepOrder, want: 1, inject: func(b *builder) {
			dependent(b, taskA, 1000)
		}},
		{name: "claim answered after the complete's invoke", check: check, kind: kindDepOrder, inject: func(b *builder) {
			dependent(b, taskA, 1495)
		}},
		{name: "an info complete counts from its invoke", check: check, kind: kindDepOrder, inject: func(b *builder) {
			b.enqueue(taskK, 30, 40, OK)
			b.claim(taskK, 0, 100, 110, OK)
			b.under(FComplete, taskK, 0, 900, 3000, Info)
			b.view(taskK, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 905)}
			dependent(b, taskK, 1000)
		}},
		// A bug that dropped a task's deps on every replica: the views
		// show none, the history enqueued one.
		{name: "claimed before its dependency completed, the deps gone from every replica", check: check, kind: kindDepOrder, want: 1, inject: func(b *builder) {
			dependent(b, taskA, 1000)
			b.views[taskG].Deps = nil
		}},
		{name: "a failed complete does not count", check: check, kind: kindDepOrder, want: 1, inject: func(b *builder) {
			b.enqueue(taskK, 30, 40, OK)
			b.claim(taskK, 0, 100, 110, OK)
			b.under(FComplete, taskK, 0, 900, 910, Fail)
			b.under(FComplete, taskK, 0, 1100, 1110, OK)
			b.view(taskK, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 1105)}
			dependent(b, taskK, 1000)
		}},
	})
}

// snoozeThenDead adds task K: claim 0 snoozed, claims 1 and 2 failed:
// dead with 2 attempts, as the snooze does not count.
func snoozeThenDead(b *builder) {
	b.enqueue(taskK, 30, 40, OK)
	b.claim(taskK, 0, 100, 110, OK)
	b.under(FSnooze, taskK, 0, 200, 210, OK)
	b.claim(taskK, 1, 300, 310, OK)
	b.under(FFail, taskK, 1, 400, 410, OK)
	b.claim(taskK, 2, 500, 510, OK)
	b.under(FFail, taskK, 2, 600, 610, OK)
	v := b.view(taskK, finalDead)
	v.Claims = []wire.ClaimView{claimView(0, 105, 205), claimView(1, 305, 405), claimView(2, 505, 605)}
	v.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 205, Snooze: true}, {Claim: 1, At: nodeEpochMs + 405}, {Claim: 2, At: nodeEpochMs + 605}}
	v.Attempts = 2
}

// noRetryDead adds task K: claim 0 failed with no_retry, acknowledged:
// dead at its first attempt.
func noRetryDead(b *builder) {
	b.enqueue(taskK, 30, 40, OK)
	b.claim(taskK, 0, 100, 110, OK)
	b.op(FFail, 200, 210, OK, Event{Task: taskK, Claim: u32(0), NoRetry: true}, Event{})
	v := b.view(taskK, finalDead)
	v.Claims = []wire.ClaimView{claimView(0, 105, 205)}
	v.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 205, NoRetry: true}}
	v.Attempts = 1
}

func TestAttempts(t *testing.T) {
	const check = "attempt accounting"
	runFlagCases(t, []flagCase{
		{name: "snoozes are not attempts", check: check, kind: kindDeadEarly, inject: snoozeThenDead},
		{name: "dead with fewer ended claims than max_attempts", check: check, kind: kindDeadEarly, want: 1, inject: func(b *builder) {
			snoozeThenDead(b)
			b.views[taskK].Failures[1].Snooze = true
			b.views[taskK].Attempts = 1
			b.under(FSnooze, taskK, 1, 395, 398, Info) // the snooze may be why
		}},
		{name: "ready with max_attempts used", check: check, kind: kindNotDead, want: 1, inject: func(b *builder) {
			b.views[taskC].State = stateReady
		}},
		{name: "claimed with max_attempts used is live, not dead", check: check, kind: kindNotDead, inject: func(b *builder) {
			v := b.onNode(taskC, 3)
			v.State, v.Attempts = stateClaimed, 1
		}},
		{name: "attempts above the ended claims", check: check, kind: kindOverCounted, want: 1, inject: func(b *builder) {
			b.views[taskF].Attempts = 2
		}},
		{name: "granted with max_attempts used", check: check, kind: kindClaimedDead, want: 1, inject: func(b *builder) {
			b.claim(taskC, 2, 700, 710, OK)
			for i := range b.events {
				if e := &b.events[i]; e.Type == OK && e.F == FClaim && e.Task == taskC && *e.Claim == 2 {
					e.Attempts = 2
				}
			}
			v := b.views[taskC]
			v.Claims = append(v.Claims, claimView(2, 705, 2705))
			v.Failures = append(v.Failures, wire.FailureView{Claim: 2, At: nodeEpochMs + 800})
			v.Claims[2].End = nodeEpochMs + 800
			v.Attempts = 3
		}},
		{name: "granted after max_attempts claims ended, though the ok says fewer", check: check, kind: kindClaimedDead, want: 1, inject: func(b *builder) {
			b.claim(taskC, 2, 700, 710, OK)
			v := b.views[taskC]
			v.Claims = append(v.Claims, claimView(2, 705, 800))
			v.Failures = append(v.Failures, wire.FailureView{Claim: 2, At: nodeEpochMs + 800})
			v.Attempts = 3
		}},
		{name: "granted after a snoozed and a failed claim", check: check, kind: kindClaimedDead, inject: snoozeThenDead},
		{name: "granted after a claim the node released unanswered (a snooze only the final state shows)", check: check, kind: kindClaimedDead, inject: func(b *builder) {
			unansweredThenClaim(b, true)
		}},
		{name: "granted after a claim that ended unanswered and unreleased", check: check, kind: kindClaimedDead, want: 1, inject: func(b *builder) {
			unansweredThenClaim(b, false)
		}},
		{name: "acknowledged fail on no replica", check: check, kind: kindReleaseMissing, want: 1, inject: func(b *builder) {
			v := b.views[taskC]
			v.Failures = v.Failures[:1]
		}},
		{name: "acknowledged fail recorded as a snooze", check: check, kind: kindReleaseKind, want: 1, inject: func(b *builder) {
			b.views[taskC].Failures[1].Snooze = true
		}},
		// The snoozes are checked apart from the fails: a case each.
		{name: "acknowledged snooze on no replica", check: check, kind: kindReleaseMissing, want: 1, inject: func(b *builder) {
			snoozeThenDead(b)
			v := b.views[taskK]
			v.Failures = v.Failures[1:]
		}},
		{name: "acknowledged snooze recorded as a fail", check: check, kind: kindReleaseKind, want: 1, inject: func(b *builder) {
			snoozeThenDead(b)
			b.views[taskK].Failures[0].Snooze = false
		}},
		{name: "dead at once after a fail with no_retry", check: check, kind: kindDeadEarly, inject: noRetryDead},
		{name: "a fail with no_retry, yet ready", check: check, kind: kindNoRetryLive, want: 1, inject: func(b *builder) {
			noRetryDead(b)
			b.views[taskK].State = stateReady
		}},
		{name: "a fail with no_retry, then cancelled", check: check, kind: kindNoRetryLive, inject: func(b *builder) {
			noRetryDead(b)
			b.views[taskK].State = finalCancelled
		}},
		{name: "acknowledged fail with no_retry recorded without it", check: check, kind: kindNoRetryLost, want: 1, inject: func(b *builder) {
			noRetryDead(b)
			b.views[taskK].Failures[0].NoRetry = false
		}},
		{name: "acknowledged fail recorded with no_retry", check: check, kind: kindNoRetryLost, want: 1, inject: func(b *builder) {
			b.views[taskC].Failures[1].NoRetry = true
		}},
		{name: "granted after an acknowledged fail with no_retry", check: check, kind: kindClaimedDead, want: 1, inject: func(b *builder) {
			noRetryDead(b)
			b.claim(taskK, 1, 300, 310, OK)
			v := b.views[taskK]
			v.Claims = append(v.Claims, claimView(1, 305, 400))
		}},
	})
}

// setConverged replaces the converged phase by phase name at atMs.
func setConverged(b *builder, name string, atMs int64) {
	b.events = slices.DeleteFunc(b.events, func(e Event) bool { return e.Type == Phase && e.F == phaseConverged })
	if name != "" {
		b.phase(name, atMs)
	}
}

func TestConvergence(t *testing.T) {
	const check = "convergence"
	runFlagCases(t, []flagCase{
		{name: "a replica misses a claim", check: check, kind: kindDiverged, want: 1, inject: func(b *builder) {
			v := b.onNode(taskF, 2)
			v.Claims = v.Claims[1:]
			v.Attempts = 0
		}},
		{name: "claimed on one clock, dead on another", check: check, kind: kindDiverged, inject: func(b *builder) {
			v := b.onNode(taskC, 3)
			v.State, v.Attempts = stateClaimed, 1
		}},
		{name: "ready on one replica, dead on another", check: check, kind: kindDiverged, want: 1, inject: func(b *builder) {
			b.onNode(taskC, 3).State = stateReady
		}},
		{name: "acknowledged completion undone", check: check, kind: kindResurrected, want: 1, inject: func(b *builder) {
			b.onNode(taskA, 2).State = stateReady
		}},
		{name: "converged within 2 aae + 5 s", check: check, kind: kindSlow, inject: func(b *builder) {
			setConverged(b, phaseConverged, 5000+7000)
		}},
		{name: "converged later than 2 aae + 5 s", check: check, kind: kindSlow, want: 1, inject: func(b *builder) {
			setConverged(b, phaseConverged, 5000+7001)
		}},
		{name: "not converged", check: check, kind: kindNotConverged, want: 1, inject: func(b *builder) {
			setConverged(b, phaseNotConverged, 20000)
		}},
		{name: "no converged phase: a note, not a failure", check: check, kind: kindNotConverged, inject: func(b *builder) {
			setConverged(b, "", 0)
		}},
	})
}

func TestIdempotentEnqueue(t *testing.T) {
	const check = "idempotent enqueue"
	runFlagCases(t, []flagCase{
		{name: "replicas hold other payloads under one id", check: check, kind: kindIDDisagree, want: 1, inject: func(b *builder) {
			b.onNode(taskA, 2).Data = []byte("other")
		}},
		{name: "payload of no enqueue of the id", check: check, kind: kindIDForeign, want: 1, inject: func(b *builder) {
			b.views[taskA].Data = []byte("other")
		}},
		{name: "queue of no enqueue of the id", check: check, kind: kindIDForeign, want: 1, inject: func(b *builder) {
			b.views[taskA].Queue = "elsewhere"
		}},
		{name: "deps of no enqueue of the id", check: check, kind: kindIDForeign, want: 1, inject: func(b *builder) {
			b.views[taskB].Deps = []task.ID{b.views[taskC].ID}
		}},
		{name: "replicas hold other deps under one id", check: check, kind: kindIDDisagree, want: 1, inject: func(b *builder) {
			b.onNode(taskB, 3).Deps = []task.ID{b.views[taskA].ID, b.views[taskC].ID}
		}},
		{name: "a retried enqueue is one task", check: check, kind: kindIDForeign, inject: func(b *builder) {
			b.enqueue(taskA, 11, 12, OK)
		}},
		{name: "one payload under two ids", check: check, kind: kindPayloadTwice, want: 1, inject: func(b *builder) {
			b.enqueue(taskG, 30, 40, Info)
			b.events[len(b.events)-2].Value = "payload-" + taskA
			v := b.view(taskG, finalCompleted)
			v.Data = []byte("payload-" + taskA)
			b.claim(taskG, 0, 100, 110, OK)
			b.under(FComplete, taskG, 0, 200, 210, OK)
			v.Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 205)}
		}},
	})
}

// unansweredThenClaim rewrites task C (max_attempts 2): claim 0 failed;
// claim 1 was granted by a node that never answered (no event of it);
// claim 2 is granted. The final view shows claim 1 snoozed (released
// unanswered, costing no attempt) if released.
func unansweredThenClaim(b *builder, released bool) {
	procs := map[int]bool{}
	for _, e := range b.events {
		if e.Task == taskC && e.Claim != nil && *e.Claim == 1 {
			procs[e.Proc] = true // the claim's ok, the fail's invoke
		}
	}
	b.events = slices.DeleteFunc(b.events, func(e Event) bool { return procs[e.Proc] })
	b.claim(taskC, 2, 700, 710, OK)
	b.under(FFail, taskC, 2, 790, 800, OK)
	v := b.views[taskC]
	v.Claims = []wire.ClaimView{claimView(0, 105, 205), claimView(1, 305, 305), claimView(2, 705, 800)}
	v.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 205}, {Claim: 1, At: nodeEpochMs + 305, Snooze: released}, {Claim: 2, At: nodeEpochMs + 800}}
	v.Attempts = 2
}
