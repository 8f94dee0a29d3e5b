package faults

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// twoClaims adds task H: claim 0 invoked at t0Ms, claim 1 at t1Ms (each
// answered ok 10 ms later), claim 1 completing it 100 ms after; every
// replica holds both claims as the leaders stamped them.
func twoClaims(b *builder, t0Ms, t1Ms int64) {
	b.enqueue(taskH, 9000, 9010, OK)
	b.claim(taskH, 0, t0Ms, t0Ms+10, OK)
	b.claim(taskH, 1, t1Ms, t1Ms+10, OK)
	b.under(FComplete, taskH, 1, t1Ms+100, t1Ms+110, OK)
	v := b.view(taskH, finalCompleted)
	v.Claims = []wire.ClaimView{claimView(0, t0Ms+5, t0Ms+2005), completed(claimView(1, t1Ms+5, t1Ms+2005), t1Ms+105)}
	v.Attempts = 1
}

// timeLimit gives task's enqueues a time limit of ms, and caps the leases
// its claims' ok answers already recorded report at the claim's start (as
// the task's view holds it) plus the limit, as the leader does.
func timeLimit(b *builder, taskID string, ms int64) {
	starts := map[uint32]int64{}
	for _, cl := range b.views[taskID].Claims {
		starts[cl.Claim] = cl.Start
	}
	for i := range b.events {
		e := &b.events[i]
		switch {
		case e.Type == Invoke && e.F == FEnqueue && e.Task == taskID:
			e.TimeLimitMs = ms
		case e.Type == OK && e.F == FClaim && e.Task == taskID && e.Claim != nil:
			if start, ok := starts[*e.Claim]; ok {
				e.End = min(e.End, start+ms)
			}
		}
	}
	b.views[taskID].TimeLimitMs = ms
}

// setEpoch sets the epoch a claim's ok reported.
func setEpoch(b *builder, taskID string, claim uint32, epoch uint64) {
	for i := range b.events {
		e := &b.events[i]
		if e.Type == OK && e.F == FClaim && e.Task == taskID && *e.Claim == claim {
			e.Epoch = epoch
		}
	}
}

// beyondClock adds a clock fault beyond the bound that moved node's clock
// by offsetMs from startMs to stopMs.
func (b *builder) beyondClock(startMs, stopMs int64, node int, offsetMs int64) {
	const name = NemClockBeyond
	if !slices.Contains(b.run.BeyondBounds, name) {
		b.run.BeyondBounds = append(b.run.BeyondBounds, name)
	}
	detail, _ := json.Marshal(map[string]any{"offsets_ms": []int64{offsetMs}})
	b.events = append(b.events,
		Event{Proc: -1, Type: Nemesis, F: "start", Nemesis: name, Targets: []int{node}, Detail: detail, TNs: startMs * nsPerMs},
		Event{Proc: -1, Type: Nemesis, F: "stop", Nemesis: name, Targets: []int{node}, TNs: stopMs * nsPerMs})
}

// leads records that node led task's partition at epoch.
func (b *builder) leads(taskID string, epoch uint64, node int) {
	b.leaders = append(b.leaders, Leadership{Node: node, Partition: partitionOfTask(taskID, b.run.Partitions), Epoch: epoch, TNs: 0})
}

// supersededByUnseen adds task K: claim 0 granted ok at 10000 (held until
// about 12000), a renew of it at 11000 refused as superseded; claim 1,
// whose claim op came back in doubt, was granted at epoch 2 by node 2 and
// completed (the drain's); only the final records show it.
func supersededByUnseen(b *builder) {
	b.enqueue(taskK, 9000, 9010, OK)
	b.claim(taskK, 0, 10000, 10010, OK)
	b.claim(taskK, 1, 10500, 0, "")
	b.op(FRenew, 11000, 11010, Fail, Event{Task: taskK, Claim: u32(0), TTLMs: 2000}, Event{Code: codeClaimSuperseded})
	b.under(FComplete, taskK, 1, 11500, 11510, OK)
	b.leads(taskK, 2, 2)
	v := b.view(taskK, finalCompleted)
	c1 := completed(claimView(1, 14900, 16900), 15505) // node 2's clock, 4000 ms ahead
	c1.Epoch = 2
	v.Claims = []wire.ClaimView{claimView(0, 10005, 12005), c1}
	v.Attempts = 1
}

// infoClaimsOverlap adds task K: two claims whose claim ops came back in
// doubt; the final records show claim 1 (epoch 2, node 2's) starting
// 595 ms before claim 0's end, beyond the 250 ms bound.
func infoClaimsOverlap(b *builder) {
	b.enqueue(taskK, 9000, 9010, OK)
	b.claim(taskK, 0, 10000, 0, "")
	b.claim(taskK, 1, 10900, 0, "")
	b.under(FComplete, taskK, 1, 11500, 11510, OK)
	b.leads(taskK, 2, 2)
	v := b.view(taskK, finalCompleted)
	c1 := completed(claimView(1, 11005, 13005), 11505)
	c1.Epoch = 2
	v.Claims = []wire.ClaimView{claimView(0, 10005, 11600), c1}
	v.Attempts = 1
}

func TestClaimOverlap(t *testing.T) {
	const check = "claim overlap"
	runFlagCases(t, []flagCase{
		{name: "granted inside another claim's lease", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
		}},
		{name: "granted after the lease and the skew bound", check: check, kind: kindOverlap, inject: func(b *builder) {
			twoClaims(b, 10000, 12300)
		}},
		// The margin is a few ms, not the skew bound: a grant answered 6 ms
		// before ti + L overlaps, one answered 3 ms before does not.
		{name: "answered 6 ms before ti+L: overlap", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11984)
		}},
		{name: "answered 3 ms before ti+L: inside the margin", check: check, kind: kindOverlap, inject: func(b *builder) {
			twoClaims(b, 10000, 11987)
		}},
		{name: "an ok renew extends the window", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 13000)
			b.under(FRenew, taskH, 0, 11500, 11510, OK)
		}},
		// A time limit of 1500 ms ends claim 0's window at 11500 less
		// the margin, whatever its renewals asked.
		{name: "a renewal does not extend past the time limit", check: check, kind: kindOverlap, inject: func(b *builder) {
			twoClaims(b, 10000, 11600)
			b.under(FRenew, taskH, 0, 11000, 11010, OK)
			timeLimit(b, taskH, 1500)
			v := b.views[taskH]
			v.Claims[0].End = v.Claims[0].Start + 1500
		}},
		{name: "within the time limit it does", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11400)
			b.under(FRenew, taskH, 0, 11000, 11010, OK)
			timeLimit(b, taskH, 1500)
			v := b.views[taskH]
			v.Claims[0].End = v.Claims[0].Start + 1500
		}},
		{name: "a refused renew does not", check: check, kind: kindOverlap, inject: func(b *builder) {
			twoClaims(b, 10000, 13000)
			b.under(FRenew, taskH, 0, 11500, 11510, Fail)
		}},
		{name: "an ok fail ends the window", check: check, kind: kindOverlap, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.under(FFail, taskH, 0, 10500, 10510, OK)
			v := b.views[taskH]
			v.Claims[0].End = nodeEpochMs + 10505
			v.Failures = []wire.FailureView{{Claim: 0, At: nodeEpochMs + 10505}}
		}},
		{name: "a refused fail does not", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.under(FFail, taskH, 0, 10500, 10510, Fail)
		}},
		{name: "overlap during a clock fault beyond the bounds on the granting node: excused", check: check, kind: kindOverlap, beyond: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(9000, 10500, testLeader, 5000)
		}},
		// The history that exposed the old rule: a 1,000 ms overlap on a
		// 2 s lease passed because a 50 ms window on a node that granted
		// neither claim touched it.
		{name: "a clock fault on a node that granted neither claim: not excused", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(10900, 10950, 2, 50)
		}},
		{name: "a clock fault on the granting node, over a lease and the bound before both grants: not excused", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(5000, 7000, testLeader, 5000) // 7000 + 2000 + 250 + 252 < 10000
		}},
		{name: "a clock fault on the granting node, ended within a lease and the bound of a grant: excused", check: check, kind: kindOverlap, beyond: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(6000, 8000, testLeader, 5000)
		}},
		{name: "granting node unknown (no leader logged for the epoch): not excused", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			setEpoch(b, taskH, 0, 7)
			setEpoch(b, taskH, 1, 7)
			b.beyondClock(9000, 10500, testLeader, 5000)
		}},
		{name: "overlap away from the fault beyond the bounds: not excused", check: check, kind: kindOverlap, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 11000)
			b.beyondClock(20000, 21000, testLeader, 5000)
		}},
		{name: "refused as superseded while surely held", check: check, kind: kindSupersededWhenHeld, want: 1, inject: func(b *builder) {
			b.op(FRenew, 2500, 2510, Fail, Event{Task: taskF, Claim: u32(0), TTLMs: 2000}, Event{Code: codeClaimSuperseded})
		}},
		{name: "refused as superseded while held, the newer claim granted by a node with its clock beyond the bound: excused", check: check, kind: kindSupersededWhenHeld, beyond: 1, inject: func(b *builder) {
			supersededByUnseen(b)
			b.beyondClock(10800, 11600, 2, 4000)
		}},
		{name: "refused as superseded while held, a clock fault beyond the bound elsewhere: not excused", check: check, kind: kindSupersededWhenHeld, want: 1, inject: func(b *builder) {
			supersededByUnseen(b)
			b.beyondClock(10800, 11600, 3, 4000)
		}},
		{name: "refused as superseded after the window", check: check, kind: kindSupersededWhenHeld, inject: func(b *builder) {
			b.op(FRenew, 4100, 4110, Fail, Event{Task: taskF, Claim: u32(0), TTLMs: 2000}, Event{Code: codeClaimSuperseded})
		}},
	})
}

func TestClaimIDs(t *testing.T) {
	const check = "claim ids"
	runFlagCases(t, []flagCase{
		{name: "one id granted twice", check: check, kind: kindReused, want: 1, inject: func(b *builder) {
			twoClaims(b, 10000, 12300)
			b.claim(taskH, 0, 12300, 12310, OK)
		}},
		{name: "a lower id after a higher one's ok", check: check, kind: kindDecreasing, want: 1, inject: func(b *builder) {
			b.claim(taskF, 0, 6600, 6610, OK)
		}},
		{name: "the epoch falls", check: check, kind: kindEpochRegress, want: 1, inject: func(b *builder) {
			setEpoch(b, taskF, 0, 5)
			setEpoch(b, taskF, 1, 3)
		}},
		{name: "the epoch grows", check: check, kind: kindEpochRegress, inject: func(b *builder) {
			setEpoch(b, taskF, 0, 3)
			setEpoch(b, taskF, 1, 5)
		}},
		{name: "final claim epochs fall", check: check, kind: kindEpochRegress, want: 1, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[0].Epoch, v.Claims[1].Epoch = 4, 2
		}},
		{name: "final claim epochs grow", check: check, kind: kindEpochRegress, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[0].Epoch, v.Claims[1].Epoch = 2, 4
		}},
		{name: "final claims out of order", check: check, kind: kindNotIncr, want: 1, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[0], v.Claims[1] = v.Claims[1], v.Claims[0]
		}},
		// taskF's claim 0 held its lease 2000 ms and expired; claim 1
		// completed 100 ms in.
		{name: "a final lease past the task's time limit", check: check, kind: kindPastLimit, want: 1, inject: func(b *builder) {
			timeLimit(b, taskF, 1500)
		}},
		{name: "final leases within the task's time limit", check: check, kind: kindPastLimit, inject: func(b *builder) {
			timeLimit(b, taskF, 2000)
		}},
		{name: "a renewal answered past the time limit", check: check, kind: kindPastLimit, want: 1, inject: func(b *builder) {
			timeLimit(b, taskA, 4000) // claim 0 started at 25, held to 3005
			b.op(FRenew, 2000, 2010, OK, Event{Task: taskA, Claim: u32(0), TTLMs: 3000}, Event{End: nodeEpochMs + 5000})
		}},
		{name: "a renewal answered at the time limit", check: check, kind: kindPastLimit, inject: func(b *builder) {
			timeLimit(b, taskA, 4000)
			b.op(FRenew, 2000, 2010, OK, Event{Task: taskA, Claim: u32(0), TTLMs: 3000}, Event{End: nodeEpochMs + 4025})
		}},
		{name: "final claim starts 300 ms before the previous end", check: check, kind: kindStartBefore, want: 1, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[1].Start = v.Claims[0].End - 300
		}},
		// Claims of unknown outcome are judged from their records: the
		// old rule excused this whenever the run had any clock fault
		// beyond the bound, which --quick always has.
		{name: "final claims of unknown outcome overlap, a clock fault beyond the bound on another node: not excused", check: check, kind: kindStartBefore, want: 1, inject: func(b *builder) {
			infoClaimsOverlap(b)
			b.beyondClock(2000, 2500, 3, 60000)
		}},
		{name: "final claims of unknown outcome overlap, the granting node's clock beyond the bound then: excused", check: check, kind: kindStartBefore, beyond: 1, inject: func(b *builder) {
			infoClaimsOverlap(b)
			b.beyondClock(10900, 11500, 2, 800) // claim 1's start, read with the offset, is 10205
		}},
		{name: "final claims of unknown outcome overlap, the granting node's clock moved long before: not excused", check: check, kind: kindStartBefore, want: 1, inject: func(b *builder) {
			infoClaimsOverlap(b)
			b.beyondClock(2000, 2500, 2, 60000)
		}},
		{name: "final claim starts within the skew bound of the previous end", check: check, kind: kindStartBefore, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[1].Start = v.Claims[0].End - 200
		}},
		{name: "no replica holds claim 0", check: check, kind: kindGap, want: 1, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims = v.Claims[1:]
		}},
		{name: "two nodes logged leading one epoch", check: check, kind: kindTwoLeaders, want: 1, inject: func(b *builder) {
			b.leads(taskA, testEpoch, 2)
		}},
		{name: "one node logged leading one epoch twice", check: check, kind: kindTwoLeaders, inject: func(b *builder) {
			b.leads(taskA, testEpoch, testLeader)
		}},
		{name: "acknowledged claim on no replica", check: check, kind: kindClaimMissing, want: 1, inject: func(b *builder) {
			v := b.views[taskC]
			v.Claims, v.Failures, v.Attempts = v.Claims[:1], v.Failures[:1], 1
		}},
	})
}

func TestFencing(t *testing.T) {
	const check = "fencing"
	runFlagCases(t, []flagCase{
		{name: "complete under a superseded claim accepted", check: check, kind: kindStale, want: 1, inject: func(b *builder) {
			b.under(FComplete, taskF, 0, 4500, 4510, OK)
		}},
		{name: "renew under a superseded claim accepted", check: check, kind: kindStale, want: 1, inject: func(b *builder) {
			b.under(FRenew, taskF, 0, 4500, 4510, OK)
		}},
		{name: "complete under a superseded claim refused", check: check, kind: kindStale, inject: func(b *builder) {
			b.op(FComplete, 4500, 4510, Fail, Event{Task: taskF, Claim: u32(0)}, Event{Code: codeClaimSuperseded})
		}},
		// The newer claim's op came back in doubt: only the final records
		// show it, started 4305 by its leader's clock.
		{name: "renew under claim 0 accepted after claim 1 started, claim 1 in doubt", check: check, kind: kindStale, want: 1, inject: func(b *builder) {
			b.claimInDoubt(taskF, 1)
			b.under(FRenew, taskF, 0, 4600, 4610, OK)
		}},
		{name: "renew under claim 0 accepted within the skew bound of claim 1's start", check: check, kind: kindStale, inject: func(b *builder) {
			b.claimInDoubt(taskF, 1)
			b.under(FRenew, taskF, 0, 4500, 4510, OK)
		}},
		{name: "renew accepted after a newer claim started, its leader's clock beyond the bound: excused", check: check, kind: kindStale, beyond: 1, inject: func(b *builder) {
			b.claimInDoubt(taskF, 1)
			b.under(FRenew, taskF, 0, 4600, 4610, OK)
			b.beyondClock(4000, 4500, testLeader, 1000)
		}},
		{name: "complete after the sink fenced the claim", check: check, kind: kindSinkFenced, want: 1, inject: func(b *builder) {
			b.effect(taskF, 1, 4340, yes())
			b.effect(taskF, 0, 4350, no())
			b.under(FComplete, taskF, 0, 4360, 4370, OK)
		}},
		{name: "refused after the sink fenced the claim", check: check, kind: kindSinkFenced, inject: func(b *builder) {
			b.effect(taskF, 1, 4340, yes())
			b.effect(taskF, 0, 4350, no())
			b.op(FComplete, 4360, 4370, Fail, Event{Task: taskF, Claim: u32(0)}, Event{Code: codeClaimSuperseded})
		}},
		{name: "sink took an older claim after a newer", check: check, kind: kindSinkRegressed, want: 1, inject: func(b *builder) {
			b.effect(taskF, 1, 4340, yes())
			b.effect(taskF, 0, 4350, yes())
		}},
	})
}

func TestCompletionThenClaim(t *testing.T) {
	const check = "completion then claim"
	runFlagCases(t, []flagCase{
		{name: "claimed after the complete's ok", check: check, kind: kindClaimAfterComplete, want: 1, inject: func(b *builder) {
			b.claim(taskA, 1, 1600, 1610, OK)
		}},
		{name: "a final view holds a claim after the completing one", check: check, kind: kindFinalAfterComplete, want: 1, inject: func(b *builder) {
			v := b.views[taskA]
			v.Claims = append(v.Claims, claimView(1, 3100, 5100))
		}},
		{name: "completed by another claim than the acknowledged", check: check, kind: kindCompletedByOther, want: 1, inject: func(b *builder) {
			v := b.views[taskF]
			v.Claims[0] = completed(v.Claims[0], 3000)
			v.Claims[1].Completed = nil
		}},
	})
}
