package faults

import (
	"slices"
	"testing"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// outcomeOf sets the outcome of the ops of f under claim of task (all of
// them) to typ.
func (b *builder) outcomeOf(f, task string, claim uint32, typ string) {
	procs := map[int]bool{}
	for _, e := range b.events {
		if e.Type == Invoke && e.F == f && e.Task == task && e.Claim != nil && *e.Claim == claim {
			procs[e.Proc] = true
		}
	}
	for i := range b.events {
		if e := &b.events[i]; e.Type != Invoke && e.F == f && procs[e.Proc] {
			e.Type = typ
		}
	}
}

// claimInDoubt turns the ok of task's claim into an info outcome, which
// names neither the task nor the claim.
func (b *builder) claimInDoubt(task string, claim uint32) {
	for i := range b.events {
		if e := &b.events[i]; e.Type == OK && e.F == FClaim && e.Task == task && *e.Claim == claim {
			*e = Event{Proc: e.Proc, Type: Info, F: FClaim, TNs: e.TNs, Code: "timeout"}
		}
	}
}

// dropOps deletes the ops of f under claim of task, invokes and outcomes.
func (b *builder) dropOps(f, task string, claim uint32) {
	procs := map[int]bool{}
	for _, e := range b.events {
		if e.Type == Invoke && e.F == f && e.Task == task && e.Claim != nil && *e.Claim == claim {
			procs[e.Proc] = true
		}
	}
	b.events = slices.DeleteFunc(b.events, func(e Event) bool { return e.F == f && procs[e.Proc] })
}

// cancelled adds task G, enqueued ok and cancelled by a cancel with
// reason "why-G" whose outcome is typ; every replica holds it cancelled
// with the reason given.
func cancelled(b *builder, typ, reason string) {
	b.enqueue(taskG, 30, 40, OK)
	b.op(FCancel, 100, 110, typ, Event{Task: taskG, Value: "why-G"}, Event{})
	b.view(taskG, finalCancelled).Cancelled = &wire.CancelView{At: nodeEpochMs + 105, Reason: reason}
}

func TestRefused(t *testing.T) {
	const check = "refused ops change nothing"
	runFlagCases(t, []flagCase{
		{name: "completed by a claim whose complete came back fail", check: check, kind: kindRefusedComplete, want: 1, inject: func(b *builder) {
			b.outcomeOf(FComplete, taskD, 0, Fail)
		}},
		{name: "completed by a claim whose complete came back in doubt", check: check, kind: kindRefusedComplete, inject: func(b *builder) {
			b.outcomeOf(FComplete, taskD, 0, Info)
		}},
		{name: "completed by a claim under which no complete was sent", check: check, kind: kindCompletionUnexplained, want: 1, inject: func(b *builder) {
			b.dropOps(FComplete, taskD, 0)
		}},
		{name: "completed, yet no claim marked as the completing one", check: check, kind: kindCompletionNoClaim, want: 1, inject: func(b *builder) {
			b.views[taskD].Claims[0].Completed = nil
		}},
		{name: "completed, with no claims at all", check: check, kind: kindCompletionNoClaim, want: 1, inject: func(b *builder) {
			b.views[taskD].Claims = []wire.ClaimView{}
		}},
		{name: "completed on one replica only, no claim marked there", check: check, kind: kindCompletionNoClaim, want: 1, inject: func(b *builder) {
			b.onNode(taskA, 3).Claims[0].Completed = nil
		}},
		{name: "cancelled, no claim marked (a cancel completes none)", check: check, kind: kindCompletionNoClaim, inject: func(b *builder) {
			cancelled(b, OK, "why-G")
		}},
		{name: "released as a fail whose fail came back fail", check: check, kind: kindRefusedFail, want: 1, inject: func(b *builder) {
			b.outcomeOf(FFail, taskC, 1, Fail)
		}},
		{name: "released as a snooze whose snooze came back fail", check: check, kind: kindRefusedSnooze, want: 1, inject: func(b *builder) {
			snoozeThenDead(b)
			b.outcomeOf(FSnooze, taskK, 0, Fail)
		}},
		{name: "released as a fail with no fail sent", check: check, kind: kindReleaseUnexplained, want: 1, inject: func(b *builder) {
			b.dropOps(FFail, taskC, 1)
		}},
		{name: "a fail with no_retry whose only fail said without", check: check, kind: kindReleaseUnexplained, want: 1, inject: func(b *builder) {
			b.views[taskC].Failures[1].NoRetry = true
		}},
		{name: "a plain fail explained only by a fail with no_retry", check: check, kind: kindReleaseUnexplained, want: 1, inject: func(b *builder) {
			noRetryDead(b)
			b.outcomeOf(FFail, taskK, 0, Info)
			b.views[taskK].Failures[0].NoRetry = false
		}},
		{name: "a fail with no_retry that came back fail", check: check, kind: kindRefusedFail, want: 1, inject: func(b *builder) {
			noRetryDead(b)
			b.outcomeOf(FFail, taskK, 0, Fail)
		}},
		{name: "a snooze of a claim answered ok, with no snooze sent", check: check, kind: kindReleaseUnexplained, want: 1, inject: func(b *builder) {
			snoozeThenDead(b)
			b.dropOps(FSnooze, taskK, 0)
		}},
		{name: "a snooze of a claim never answered (the node's release)", check: check, kind: kindReleaseUnexplained, inject: func(b *builder) {
			unansweredThenClaim(b, true)
		}},
		{name: "a lease longer than its grant, its only renew refused", check: check, kind: kindRefusedRenew, want: 1, inject: func(b *builder) {
			b.under(FRenew, taskF, 0, 3000, 3010, Fail)
			b.views[taskF].Claims[0].End = nodeEpochMs + 4200
		}},
		{name: "a lease longer than its grant, no renew sent", check: check, kind: kindLeaseUnexplained, want: 1, inject: func(b *builder) {
			b.views[taskF].Claims[0].End = nodeEpochMs + 4200
		}},
		{name: "a lease longer than its grant, a renew in doubt", check: check, kind: kindRefusedRenew, inject: func(b *builder) {
			b.under(FRenew, taskF, 0, 3000, 3010, Info)
			b.views[taskF].Claims[0].End = nodeEpochMs + 4200
		}},
		{name: "a lease as long as its ok renew said", check: check, kind: kindLeaseUnexplained, inject: func(b *builder) {
			b.op(FRenew, 2100, 2110, OK, Event{Task: taskF, Claim: u32(0), TTLMs: 2000}, Event{End: nodeEpochMs + 4200})
			b.views[taskF].Claims[0].End = nodeEpochMs + 4200
		}},
		{name: "cancelled by a cancel that came back fail", check: check, kind: kindRefusedCancel, want: 1, inject: func(b *builder) {
			cancelled(b, Fail, "why-G")
		}},
		{name: "cancelled by a cancel acknowledged", check: check, kind: kindRefusedCancel, inject: func(b *builder) {
			cancelled(b, OK, "why-G")
		}},
		{name: "cancelled for a reason no cancel gave", check: check, kind: kindCancelUnexplained, want: 1, inject: func(b *builder) {
			cancelled(b, OK, "why-not")
		}},
	})
}

// The lost tasks include every task the history shows to exist, not only
// those whose enqueue was acknowledged: the history that exposed it is an
// enqueue in doubt, then a claim, update and complete acknowledged, and the
// task on no replica.
func TestKnownTasks(t *testing.T) {
	gone := func(b *builder) {
		b.enqueue(taskG, 30, 40, Info)
		b.claim(taskG, 0, 100, 110, OK)
		b.update(taskG, 0, 0, "g0", 120, 130, OK)
		b.under(FComplete, taskG, 0, 200, 210, OK)
		b.absent = append(b.absent, taskG)
	}
	runFlagCases(t, []flagCase{{name: "enqueue in doubt, worked ok, on no replica: lost", check: "total-queue (dequeue = acknowledged complete)",
		kind: kindLost, want: 1, inject: gone}})
	for _, check := range []string{"total-queue (dequeue = acknowledged complete)", "total-queue (dequeue = ok claim)"} {
		t.Run(check, func(t *testing.T) {
			runFlagCases(t, []flagCase{
				{name: "enqueue in doubt, claim in doubt, renewed ok, on no replica: lost", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
					b.enqueue(taskG, 30, 40, Info)
					b.claim(taskG, 0, 100, 0, "")
					b.under(FRenew, taskG, 0, 300, 310, OK)
					b.absent = append(b.absent, taskG)
				}},
				{name: "enqueue in doubt, nothing acknowledged, on no replica: not lost", check: check, kind: kindLost, inject: func(b *builder) {
					b.enqueue(taskG, 30, 40, Info)
					b.absent = append(b.absent, taskG)
				}},
				{name: "enqueue in doubt, cancelled ok, cancelled everywhere: handled", check: check, kind: kindLost, inject: func(b *builder) {
					cancelled(b, OK, "why-G")
					b.events[len(b.events)-3].Type = Info // the enqueue's outcome
				}},
			})
		})
	}
}

func TestCancels(t *testing.T) {
	runFlagCases(t, []flagCase{
		{name: "acknowledged cancel undone", check: "convergence", kind: kindCancelUndone, want: 1, inject: func(b *builder) {
			cancelled(b, OK, "why-G")
			b.onNode(taskG, 2).State = stateReady
		}},
		{name: "an op under a claim accepted after an acknowledged cancel", check: "fencing", kind: kindStale, want: 1, inject: func(b *builder) {
			b.op(FCancel, 4320, 4330, OK, Event{Task: taskF, Value: "why-F"}, Event{})
		}},
		{name: "claimed after an acknowledged cancel", check: "completion then claim", kind: kindClaimAfterComplete, want: 1, inject: func(b *builder) {
			b.op(FCancel, 3000, 3010, OK, Event{Task: taskF, Value: "why-F"}, Event{})
		}},
		{name: "a cancel in doubt before a claim", check: "completion then claim", kind: kindClaimAfterComplete, inject: func(b *builder) {
			b.op(FCancel, 3000, 3010, Info, Event{Task: taskF, Value: "why-F"}, Event{})
		}},
		{name: "a dependent of a cancelled task blocked for good: not lost", check: "total-queue (dequeue = acknowledged complete)", kind: kindLost, inject: func(b *builder) {
			cancelled(b, OK, "why-G")
			b.enqueue(taskH, 50, 60, OK, taskG)
			b.view(taskH, finalBlocked).Deps = []task.ID{b.views[taskG].ID}
		}},
		{name: "a cancelled task with max_attempts used is not dead", check: "attempt accounting", kind: kindNotDead, inject: func(b *builder) {
			cancelled(b, OK, "why-G")
			b.claim(taskG, 0, 45, 55, OK)
			b.under(FFail, taskG, 0, 60, 65, OK)
			v := b.views[taskG]
			v.Attempts, v.MaxAttempts = 1, 1
			v.Claims = []wire.ClaimView{claimView(0, 50, 62)}
			v.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 62}}
		}},
	})
}
