package faults

import (
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// keyed records an enqueue of task with key "order-1" whose ok reports
// acks replicas and, for a duplicate, the holder.
func (b *builder) keyed(task string, ti, tc int64, typ string, acks int, holder string) {
	b.op(FEnqueue, ti, tc, typ, Event{Task: task, Value: "payload-" + task, Queue: "q", Key: "order-1"}, Event{Acks: acks, Holder: holder})
}

func TestUniqueKeys(t *testing.T) {
	const check = "unique keys"
	runFlagCases(t, []flagCase{
		{name: "a key held by an acknowledged task taken by a new one", check: check, kind: kindKeyTakenTwice, want: 1, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.workedAfter(taskG, 50)
			b.keyed(taskH, 300, 310, OK, 2, "")
			b.workedAfter(taskH, 400)
		}},
		{name: "a hinted enqueue of a held key, its task never claimed (retired at the handover)", check: check, kind: kindKeyTakenTwice, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.workedAfter(taskG, 50)
			b.op(FEnqueue, 300, 310, OK, Event{Task: taskH, Value: "payload-" + taskH, Queue: "q", Key: "order-1"}, Event{Hinted: true})
			b.view(taskH, finalCancelled).Cancelled = &wire.CancelView{At: nodeEpochMs + 400, Reason: wire.RetiredKeyReason + b.views[taskG].ID.String()}
		}},
		{name: "a hinted enqueue of a held key, its task claimed", check: check, kind: kindKeyTakenTwice, want: 1, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.workedAfter(taskG, 50)
			b.op(FEnqueue, 300, 310, OK, Event{Task: taskH, Value: "payload-" + taskH, Queue: "q", Key: "order-1"}, Event{Hinted: true})
			b.workedAfter(taskH, 400)
		}},
		{name: "... after a cancel of the holder was sent: freed", check: check, kind: kindKeyTakenTwice, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.op(FCancel, 50, 60, OK, Event{Task: taskG, Value: "why-G"}, Event{})
			b.cancelledBy(taskG, "why-G", 55)
			b.keyed(taskH, 300, 310, OK, 2, "")
			b.workedAfter(taskH, 400)
		}},
		{name: "... invoked before the first was acknowledged: concurrent", check: check, kind: kindKeyTakenTwice, inject: func(b *builder) {
			b.keyed(taskG, 30, 320, OK, 2, "")
			b.workedAfter(taskG, 350)
			b.keyed(taskH, 300, 310, OK, 2, "")
			b.workedAfter(taskH, 400)
		}},
		{name: "... the first acknowledged by one replica (a stale leader's w=1)", check: check, kind: kindKeyTakenTwice, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 1, "")
			b.workedAfter(taskG, 50)
			b.keyed(taskH, 300, 310, OK, 2, "")
			b.workedAfter(taskH, 400)
		}},
		{name: "a duplicate naming the holder", check: check, kind: kindHolderOtherKey, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.workedAfter(taskG, 50)
			b.keyed(taskH, 300, 310, OK, 2, taskG)
			b.absent = append(b.absent, taskH)
		}},
		{name: "a duplicate naming a task of no enqueue with its key", check: check, kind: kindHolderOtherKey, want: 1, inject: func(b *builder) {
			b.keyed(taskH, 300, 310, OK, 2, taskA)
			b.absent = append(b.absent, taskH)
		}},
		{name: "a duplicate's own id held by a replica", check: "total-queue (dequeue = acknowledged complete)", kind: kindFailedDelivered, want: 1,
			inject: func(b *builder) {
				b.keyed(taskG, 30, 40, OK, 2, "")
				b.workedAfter(taskG, 50)
				b.keyed(taskH, 300, 310, OK, 2, taskG)
				b.view(taskH, stateReady)
			}},
		{name: "a duplicate's holder on no replica", check: "total-queue (dequeue = acknowledged complete)", kind: kindLost, want: 1,
			inject: func(b *builder) {
				b.keyed(taskG, 30, 40, Info, 0, "")
				b.keyed(taskH, 300, 310, OK, 2, taskG)
				b.absent = append(b.absent, taskG, taskH)
			}},
		{name: "a duplicate's holder enqueued in doubt, then completed: known by the duplicate", check: "total-queue (dequeue = acknowledged complete)",
			kind: kindLost, inject: func(b *builder) {
				b.keyed(taskG, 30, 40, Info, 0, "")
				b.keyed(taskH, 300, 310, OK, 2, taskG)
				b.workedAfter(taskG, 400)
				b.absent = append(b.absent, taskH)
			}},
		{name: "a duplicate's ok without the invoke's key", check: "history", kind: kindMalformed, want: 1, inject: func(b *builder) {
			b.op(FEnqueue, 300, 310, OK, Event{Task: taskH, Value: "payload-" + taskH, Queue: "q"}, Event{Acks: 2, Holder: taskA})
		}},
	})
}

func TestRetiredKeys(t *testing.T) {
	const check = "refused ops change nothing"
	runFlagCases(t, []flagCase{
		{name: "retired by its leader, another task of its key named", check: check, kind: kindCancelUnexplained, inject: func(b *builder) {
			b.keyed(taskG, 30, 40, OK, 2, "")
			b.workedAfter(taskG, 50)
			b.keyed(taskH, 30, 45, Info, 0, "")
			b.cancelledBy(taskH, wire.RetiredKeyReason+taskG, 300)
		}},
		{name: "retired, naming a task of another key", check: check, kind: kindCancelUnexplained, want: 1, inject: func(b *builder) {
			b.keyed(taskH, 30, 45, OK, 2, "")
			b.cancelledBy(taskH, wire.RetiredKeyReason+taskA, 300)
		}},
		{name: "retired, naming itself", check: check, kind: kindCancelUnexplained, want: 1, inject: func(b *builder) {
			b.keyed(taskH, 30, 45, OK, 2, "")
			b.cancelledBy(taskH, wire.RetiredKeyReason+taskH, 300)
		}},
	})
}
