package faults

import (
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// groupEnqueue records an enqueue of task into group "grp" whose ok
// answer reports acks replicas.
func (b *builder) groupEnqueue(task string, ti, tc int64, typ string, acks int) {
	b.op(FEnqueue, ti, tc, typ, Event{Task: task, Value: "payload-" + task, Queue: "q", Group: "grp"}, Event{Acks: acks})
}

// groupCancel records a cancel of group "grp" with reason "why-grp".
func (b *builder) groupCancel(ti, tc int64, typ string) {
	b.op(FGroupCancel, ti, tc, typ, Event{Group: "grp", Value: "why-grp"}, Event{})
}

// cancelledBy makes every replica hold task cancelled with reason.
func (b *builder) cancelledBy(task, reason string, atMs int64) {
	b.view(task, finalCancelled).Cancelled = &wire.CancelView{At: nodeEpochMs + atMs, Reason: reason}
}

// workedAfter records a claim of task at ti and its complete, ok, 100 ms
// later, and makes the final views completed by it.
func (b *builder) workedAfter(task string, ti int64) {
	b.claim(task, 0, ti, ti+10, OK)
	b.effect(task, 0, ti+90, yes())
	b.under(FComplete, task, 0, ti+100, ti+110, OK)
	b.view(task, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, ti+5, ti+2005), ti+105)}
}

// TestGroupCancels: a group cancel counts, for each task of its group, as
// a cancel of that task whose outcome depends on whether the task was
// surely open at every leader while the group cancel ran.
func TestGroupCancels(t *testing.T) {
	runFlagCases(t, []flagCase{
		{name: "an acknowledged group cancel, a task of it acknowledged before by a majority, not cancelled", check: "convergence", kind: kindCancelUndone, want: 1,
			inject: func(b *builder) {
				b.groupEnqueue(taskG, 30, 40, OK, 2)
				b.groupCancel(100, 110, OK)
				b.workedAfter(taskG, 200)
			}},
		{name: "... and claimed after it", check: "completion then claim", kind: kindClaimAfterComplete, want: 1, inject: func(b *builder) {
			b.groupEnqueue(taskG, 30, 40, OK, 2)
			b.groupCancel(100, 110, OK)
			b.workedAfter(taskG, 200)
		}},
		{name: "... acknowledged by one replica only (a stale leader's w=1): in doubt", check: "completion then claim", kind: kindClaimAfterComplete,
			inject: func(b *builder) {
				b.groupEnqueue(taskG, 30, 40, OK, 1)
				b.groupCancel(100, 110, OK)
				b.workedAfter(taskG, 200)
			}},
		{name: "... enqueued while the group cancel ran: in doubt", check: "completion then claim", kind: kindClaimAfterComplete, inject: func(b *builder) {
			b.groupEnqueue(taskG, 90, 105, OK, 2)
			b.groupCancel(100, 110, OK)
			b.workedAfter(taskG, 200)
		}},
		{name: "... completed by a complete sent before the group cancel's ok: skipped", check: "convergence", kind: kindCancelUndone, inject: func(b *builder) {
			b.groupEnqueue(taskG, 30, 40, OK, 2)
			b.claim(taskG, 0, 50, 60, OK)
			b.effect(taskG, 0, 95, yes())
			b.groupCancel(100, 110, OK)
			b.under(FComplete, taskG, 0, 105, 115, OK)
			b.view(taskG, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 55, 2055), 108)}
		}},
		{name: "a complete under an old claim sent after an acknowledged group cancel and accepted", check: "fencing", kind: kindStale, want: 1,
			inject: func(b *builder) {
				b.groupEnqueue(taskG, 30, 40, OK, 2)
				b.claim(taskG, 0, 50, 60, OK)
				b.effect(taskG, 0, 115, yes())
				b.groupCancel(100, 110, OK)
				b.under(FComplete, taskG, 0, 120, 130, OK)
				b.view(taskG, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 55, 2055), 125)}
			}},
		{name: "a group cancel in doubt, a task of it then worked", check: "completion then claim", kind: kindClaimAfterComplete, inject: func(b *builder) {
			b.groupEnqueue(taskG, 30, 40, OK, 2)
			b.groupCancel(100, 110, Info)
			b.workedAfter(taskG, 200)
		}},
		{name: "a task enqueued after the group cancel's ok, cancelled with its reason", check: "refused ops change nothing", kind: kindRefusedCancel, want: 1,
			inject: func(b *builder) {
				b.groupCancel(100, 110, OK)
				b.groupEnqueue(taskG, 200, 210, OK, 2)
				b.cancelledBy(taskG, "why-grp", 205)
			}},
		{name: "a task enqueued while the group cancel ran, cancelled with its reason", check: "refused ops change nothing", kind: kindRefusedCancel,
			inject: func(b *builder) {
				b.groupEnqueue(taskG, 100, 120, OK, 2)
				b.groupCancel(100, 110, OK)
				b.cancelledBy(taskG, "why-grp", 105)
			}},
		// The simulation's virtual clock stands still while requests
		// run: the history's order decides (found by seed 777000).
		{name: "all at one instant: a task enqueued before the group cancel, cancelled with its reason", check: "refused ops change nothing",
			kind: kindRefusedCancel, inject: func(b *builder) {
				b.groupEnqueue(taskG, 100, 100, OK, 1)
				b.groupCancel(100, 100, OK)
				b.cancelledBy(taskG, "why-grp", 100)
			}},
		{name: "all at one instant: a task enqueued after the group cancel, cancelled with its reason", check: "refused ops change nothing",
			kind: kindRefusedCancel, want: 1, inject: func(b *builder) {
				b.groupCancel(100, 100, OK)
				b.groupEnqueue(taskG, 100, 100, OK, 1)
				b.cancelledBy(taskG, "why-grp", 100)
			}},
		{name: "a task cancelled by a group cancel that came back fail", check: "refused ops change nothing", kind: kindRefusedCancel, want: 1,
			inject: func(b *builder) {
				b.groupEnqueue(taskG, 30, 40, OK, 2)
				b.groupCancel(100, 110, Fail)
				b.cancelledBy(taskG, "why-grp", 105)
			}},
		{name: "a task of another group cancelled with a group cancel's reason", check: "refused ops change nothing", kind: kindCancelUnexplained, want: 1,
			inject: func(b *builder) {
				b.op(FEnqueue, 30, 40, OK, Event{Task: taskG, Value: "payload-" + taskG, Queue: "q", Group: "other"}, Event{Acks: 2})
				b.groupCancel(100, 110, OK)
				b.cancelledBy(taskG, "why-grp", 105)
			}},
		{name: "a group cancel without its group", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FGroupCancel, 100, 110, OK, Event{Value: "why"}, Event{})
		}},
		{name: "a group cancel without its reason", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FGroupCancel, 100, 110, OK, Event{Group: "grp"}, Event{})
		}},
	})
}
