package faults

import (
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// placed records an enqueue sent without id (Mix.Placed) of task's
// payload: its ok (typ OK) names task.
func (b *builder) placed(task string, ti, tc int64, typ string) {
	out := Event{}
	if typ == OK {
		out = Event{Task: task, Acks: 2}
	}
	b.op(FEnqueue, ti, tc, typ, Event{Placed: true, Value: "payload-" + task, Queue: "q"}, out)
}

// claimShowing records an ok claim of task that shows payload's data.
func (b *builder) claimShowing(task, payload string, claim uint32, ti, tc int64) {
	b.op(FClaim, ti, tc, OK, Event{Queue: "q", TTLMs: b.run.TTLMs},
		Event{Task: task, Claim: u32(claim), Epoch: testEpoch, End: nodeEpochMs + tc + b.run.TTLMs, Value: payload})
}

// TestPlacedEnqueues: an enqueue sent without id is known by the id its
// ok names, or, in doubt or refused, by its payload where a claim or a
// final read shows it; what the checkers require of it is then what
// they require of any enqueue. So is a hinted one's (acks 0).
func TestPlacedEnqueues(t *testing.T) {
	const byComplete = "total-queue (dequeue = acknowledged complete)"
	const byClaim = "total-queue (dequeue = ok claim)"
	runFlagCases(t, []flagCase{
		{name: "placed, acknowledged, never completed: lost", check: byComplete, kind: kindLost, want: 1, inject: func(b *builder) {
			b.placed(taskG, 30, 40, OK)
			b.view(taskG, stateReady)
		}},
		{name: "placed, acknowledged, completed: not lost", check: byComplete, kind: kindLost, inject: func(b *builder) {
			b.placed(taskG, 30, 40, OK)
			b.claimShowing(taskG, "payload-"+taskG, 0, 100, 110)
			b.under(FComplete, taskG, 0, 200, 210, OK)
			b.view(taskG, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 205)}
		}},
		{name: "placed, refused, claimed under the id its payload shows", check: byComplete, kind: kindFailedDelivered, want: 1, inject: func(b *builder) {
			b.placed(taskG, 30, 40, Fail)
			b.claimShowing(taskG, "payload-"+taskG, 0, 100, 110)
		}},
		{name: "placed, refused, held by replicas (a final read shows its payload)", check: byComplete, kind: kindFailedDelivered, want: 1, inject: func(b *builder) {
			b.placed(taskG, 30, 40, Fail)
			b.view(taskG, stateReady)
		}},
		{name: "placed, in doubt, claimed and completed: expected", check: byComplete, kind: kindUnexpected, inject: func(b *builder) {
			b.placed(taskG, 30, 40, Info)
			b.claimShowing(taskG, "payload-"+taskG, 0, 100, 110)
			b.under(FComplete, taskG, 0, 200, 210, OK)
			b.view(taskG, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 205)}
		}},
		{name: "placed, acknowledged, its payload claimed under another id: unexpected", check: byClaim, kind: kindUnexpected, want: 1, inject: func(b *builder) {
			b.placed(taskG, 30, 40, OK)
			b.claimShowing(taskG, "payload-"+taskG, 0, 100, 110)
			b.claimShowing(taskH, "payload-"+taskG, 0, 120, 130)
		}},
		{name: "hinted, acknowledged, on no replica: lost", check: byComplete, kind: kindLost, want: 1, inject: func(b *builder) {
			b.op(FEnqueue, 30, 40, OK, Event{Task: taskG, Value: "payload-" + taskG, Queue: "q"}, Event{Hinted: true})
			b.absent = append(b.absent, taskG)
		}},
		{name: "placed, acknowledged, its ok names no task", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FEnqueue, 30, 40, OK, Event{Placed: true, Value: "payload-x", Queue: "q"}, Event{Acks: 2})
		}},
	})
}
