package faults

import (
	"testing"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Extra tasks the injections add.
var (
	taskG = id(0x10)
	taskH = id(0x11)
	taskK = id(0x12)
	taskX = id(0x99) // never enqueued
)

// beyondFault adds a fault the run declares beyond the bounds.
func (b *builder) beyondFault(name string, startMs, stopMs int64) {
	b.run.BeyondBounds = append(b.run.BeyondBounds, name)
	b.nemesis(name, startMs, stopMs)
}

// ackedReady adds task G: enqueue acknowledged, never claimed, ready on
// every replica.
func ackedReady(b *builder) {
	b.enqueue(taskG, 30, 40, OK)
	b.view(taskG, stateReady)
}

func TestTotalQueueByComplete(t *testing.T) {
	const check = "total-queue (dequeue = acknowledged complete)"
	runFlagCases(t, []flagCase{
		{name: "acknowledged, never completed: lost", check: check, kind: kindLost, want: 1, inject: ackedReady},
		{name: "acknowledged, on no replica: lost", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			b.enqueue(taskG, 30, 40, OK)
			b.absent = append(b.absent, taskG)
		}},
		{name: "blocked behind a completed dependency: lost", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			b.enqueue(taskH, 30, 40, OK, taskA)
			b.view(taskH, finalBlocked).Deps = []task.ID{b.views[taskA].ID}
		}},
		{name: "blocked behind a dead dependency: not lost", check: check, kind: kindLost, inject: func(b *builder) {
			b.enqueue(taskH, 30, 40, OK, taskC)
			b.view(taskH, finalBlocked).Deps = []task.ID{b.views[taskC].ID}
		}},
		{name: "lost after a data-losing fault beyond the bounds: excused", check: check, kind: kindLost, beyond: 1, inject: func(b *builder) {
			ackedReady(b)
			b.beyondFault("majority-loss", 1000, 2000)
		}},
		{name: "lost across a clock fault beyond the bounds: not excused", check: check, kind: kindLost, want: 1, inject: func(b *builder) {
			ackedReady(b)
			b.beyondFault("clock-skew", 1000, 2000)
		}},
		{name: "completed, never enqueued: unexpected", check: check, kind: kindUnexpected, want: 1, inject: func(b *builder) {
			b.under(FComplete, taskX, 0, 100, 110, OK)
		}},
		{name: "enqueue failed, task held by replicas", check: check, kind: kindFailedDelivered, want: 1, inject: func(b *builder) {
			b.view(taskE, stateReady)
			b.absent = nil
		}},
		{name: "enqueue failed, task claimed", check: check, kind: kindFailedDelivered, want: 1, inject: func(b *builder) {
			b.claim(taskE, 0, 100, 110, OK)
		}},
		{name: "enqueue failed, then retried ok: not flagged", check: check, kind: kindFailedDelivered, inject: func(b *builder) {
			b.enqueue(taskE, 20, 30, OK)
			b.claim(taskE, 0, 100, 110, OK)
			b.under(FComplete, taskE, 0, 200, 210, OK)
			b.view(taskE, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 205)}
			b.absent = nil
		}},
	})
}

func TestTotalQueueByClaim(t *testing.T) {
	const check = "total-queue (dequeue = ok claim)"
	runFlagCases(t, []flagCase{
		{name: "acknowledged, never claimed: lost", check: check, kind: kindLost, want: 1, inject: ackedReady},
		{name: "claimed only by an info claim (the view shows it): not lost", check: check, kind: kindLost, inject: func(b *builder) {
			b.enqueue(taskG, 30, 40, OK)
			b.claim(taskG, 0, 100, 110, Info)
			b.under(FComplete, taskG, 0, 200, 210, OK)
			b.view(taskG, finalCompleted).Claims = []wire.ClaimView{completed(claimView(0, 105, 2105), 205)}
		}},
		{name: "blocked behind a dead dependency: not lost", check: check, kind: kindLost, inject: func(b *builder) {
			b.enqueue(taskH, 30, 40, OK, taskC)
			b.view(taskH, finalBlocked).Deps = []task.ID{b.views[taskC].ID}
		}},
		{name: "claimed, never enqueued: unexpected", check: check, kind: kindUnexpected, want: 1, inject: func(b *builder) {
			b.claim(taskX, 0, 100, 110, OK)
		}},
	})
}

// The lost tasks are counted by what the final reads found, and those
// acknowledged by fewer than a majority (acks 1 of N=3) apart.
func TestLostCounts(t *testing.T) {
	b := base()
	ackedReady(b)                // held by every replica
	b.enqueue(taskH, 30, 40, OK) // on no replica
	b.absent = append(b.absent, taskH)
	b.events[len(b.events)-1].Acks = 1
	b.enqueue(taskK, 30, 40, OK) // unread
	b.absent = append(b.absent, taskK)
	b.events[len(b.events)-1].Acks = 3
	in := b.input()
	for i := range in.Finals {
		if in.Finals[i].Task == taskK {
			in.Finals[i].Err = "timeout"
		}
	}
	c := findCheck(t, Analyze(in), "total-queue (dequeue = acknowledged complete)")
	for name, want := range map[string]int64{"lost: on no replica": 1, "lost: held, never dequeued": 1, "lost: no final read answered": 1,
		"acknowledged held by fewer than a majority": 1, "lost: acknowledged held by fewer than a majority": 1} {
		if got := countOf(t, c, name); got != want {
			t.Errorf("%s = %d; want %d", name, got, want)
		}
	}
}

// An enqueue answered hinted although it did not ask for a hint (an
// id-less enqueue spread on W nodes) is counted apart, and so is its
// loss.
func TestSpreadCounts(t *testing.T) {
	b := base()
	ackedReady(b)
	b.enqueue(taskH, 30, 40, OK) // hinted without asking, then lost
	b.events[len(b.events)-1].Hinted = true
	b.absent = append(b.absent, taskH)
	b.enqueue(taskK, 30, 40, OK) // asked, hinted, lost
	b.events[len(b.events)-2].Hint = true
	b.events[len(b.events)-1].Hinted = true
	b.absent = append(b.absent, taskK)
	c := findCheck(t, Analyze(b.input()), "total-queue (dequeue = acknowledged complete)")
	for name, want := range map[string]int64{"acknowledged as hinted": 2, "lost: acknowledged as hinted": 2,
		"acknowledged as hinted without asking (spread on W nodes)": 1, "lost: acknowledged as hinted without asking": 1} {
		if got := countOf(t, c, name); got != want {
			t.Errorf("%s = %d; want %d", name, got, want)
		}
	}
}
