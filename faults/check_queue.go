package faults

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/wire"
)

// Total-queue (TESTING.md section 1.5 and 6.1), keyed by task id: ids are
// client-chosen and an enqueue's retries reuse its id, so sets of ids stand
// where Jepsen has multisets of values (a retry must not count as a second
// attempt, which would hide a duplicate).
//
//   - attempted: ids of every enqueue invoke; acknowledged: ids with an ok
//     enqueue; known: ids the history shows exist, acknowledged or with
//     any later op (claim, renew, update, complete, fail, snooze, cancel)
//     that came back ok, whatever their enqueue's outcome.
//   - dequeued: with dequeue = complete, the distinct (task, claim) of ok
//     completes; with dequeue = claim, the ok claims.
//   - lost: a known id whose task, after the harness's drain, is missing
//     from every final read or is in none of them in the state the
//     dequeue leads to. A task dead after max_attempts or cancelled, or
//     blocked forever behind one, was handled as designed and is counted,
//     not lost.
//   - unexpected: dequeues of ids never attempted.
//   - duplicated: dequeues beyond the first per id; recovered: dequeued ids
//     whose enqueues all came back fail or info. Neither fails the run
//     (at-least-once).
//   - failed-but-delivered: an id whose enqueues all came back fail, whose
//     task exists anywhere (a final read found it, or an op on it succeeded).

// Anomaly kinds of the total-queue checks.
const (
	kindLost            = "lost"
	kindUnexpected      = "unexpected"
	kindFailedDelivered = "failed-but-delivered"
)

// Final states of a task across the replicas that hold it.
const (
	finalMissing   = "missing"
	finalCompleted = "completed"
	finalDead      = "dead"
	finalCancelled = "cancelled"
	finalBlocked   = "blocked"
	finalPending   = "pending" // ready, claimed or delayed
)

// finalState merges a task's final views: completed if any replica says
// so (a completion is set forever), then cancelled (as final), then dead,
// then blocked.
func (t *taskHist) finalState() string {
	views := t.found()
	if len(views) == 0 {
		return finalMissing
	}
	state := finalPending
	for _, r := range views {
		switch s := r.view.State; {
		case s == finalCompleted:
			return finalCompleted
		case s == finalCancelled:
			state = finalCancelled
		case s == finalDead && state != finalCancelled:
			state = finalDead
		case s == finalBlocked && state == finalPending:
			state = finalBlocked
		}
	}
	return state
}

// deps returns a task's dependencies as the history enqueued them, so
// that a checker judging by them cannot be misled by what the replicas
// hold (a bug that dropped a task's deps on every replica would make it
// look free to run); the idempotent-enqueue check holds the views' deps
// to the enqueues'. Every enqueue of an id sends the same deps (else that
// check counts a harness defect); the first that may have applied
// stands. Only for a task the history never enqueued do the final views
// say.
func (t *taskHist) deps() []string {
	for _, e := range t.enqueues {
		if e.mayHaveApplied() {
			return e.inv.Deps
		}
	}
	if len(t.enqueues) > 0 {
		return t.enqueues[0].inv.Deps
	}
	for _, r := range t.found() {
		return viewDeps(r.view)
	}
	return nil
}

// viewDeps returns a view's dependencies as hex ids.
func viewDeps(v *wire.TaskView) []string {
	out := make([]string, 0, len(v.Deps))
	for _, d := range v.Deps {
		out = append(out, d.String())
	}
	return out
}

// blockedForever reports whether a task is blocked behind a dead or
// cancelled dependency (a cancel satisfies no dependency), directly or
// through other blocked ones: it can never run, as designed, so it is not
// lost.
func (h *history) blockedForever(id string, memo map[string]bool) bool {
	if v, ok := memo[id]; ok {
		return v
	}
	memo[id] = false // deps are older ids, so no cycle; this guards anyway
	t := h.tasks[id]
	if t == nil || t.finalState() != finalBlocked {
		return false
	}
	for _, d := range t.deps() {
		dt := h.tasks[d]
		if dt == nil {
			continue
		}
		if s := dt.finalState(); s == finalDead || s == finalCancelled || h.blockedForever(d, memo) {
			memo[id] = true
			return true
		}
	}
	return false
}

// enqueueTally is what the history says of one task's existence.
type enqueueTally struct {
	attempted bool
	acked     bool
	ackAt     int64 // the first ok enqueue's time
	// acks is the first ok's acks (0: not recorded): how many replicas
	// held the task when it was acknowledged.
	acks int
	// hinted: the first ok answered "hinted" (the node held the task
	// until it could reach its cohort).
	hinted bool
	// spread: hinted although its enqueue did not ask for a hint: an
	// id-less enqueue whose cohort failed the write in flight, kept as
	// hints on W nodes (node/coord's spread). (A queue set to hint would
	// count here too; the workload sets none.)
	spread bool
	// allFailed: every attempt came back fail, so the task must not exist.
	allFailed bool
	// known: the history proves the task exists, by an ok enqueue or an
	// ok op on it (a claim granting it, a renew, update, complete, fail,
	// snooze or cancel acknowledged): such a task must survive as an
	// acknowledged enqueue must, whatever its enqueue's outcome (an
	// enqueue in doubt whose task was then worked is as real as one
	// acknowledged). knownBy is the first such ok op, knownAt its time.
	known   bool
	knownAt int64
	knownBy *op
}

func (t *taskHist) tally() enqueueTally {
	e := enqueueTally{attempted: len(t.enqueues) > 0, allFailed: len(t.enqueues) > 0}
	for _, o := range t.enqueues {
		if o.ok() && !e.acked {
			e.acked, e.ackAt, e.acks, e.hinted = true, o.tc, o.out.Acks, o.out.Hinted
			e.spread = o.out.Hinted && !o.inv.Hint
		}
		if o.typ != Fail {
			e.allFailed = false
		}
	}
	for _, ops := range t.allOps() {
		for _, o := range ops {
			if o.ok() && (!e.known || o.tc < e.knownAt) {
				e.known, e.knownAt, e.knownBy = true, o.tc, o
			}
		}
	}
	return e
}

// allOps lists the task's ops by kind: its enqueues first.
func (t *taskHist) allOps() [][]*op {
	return [][]*op{t.enqueues, t.grants, t.renews, t.updates, t.completes, t.fails, t.snoozes, t.cancels, t.keyHolds}
}

// exists reports whether anything shows the task exists: a replica holds
// it, or an operation on it other than its enqueue succeeded.
func (t *taskHist) exists() (bool, []int64) {
	if rs := t.found(); len(rs) > 0 {
		return true, nil
	}
	for _, ops := range t.allOps()[1:] {
		for _, o := range ops {
			if o.ok() {
				return true, o.events()
			}
		}
	}
	return false, nil
}

// queueCounts are the figures both total-queue checks report.
type queueCounts struct {
	attempted, acked, ok, duplicated, recovered, dead, cancelled, blocked int64
	// knownOnly counts the tasks known to exist only by a later op (their
	// enqueues came back in doubt or refused).
	knownOnly int64
	// The lost tasks (within the bounds and beyond) by what the final
	// reads found: no replica holds them (the data is gone), a replica
	// holds them but the dequeue never reached them (stuck, e.g. in a
	// partition that has no leader again), or no read answered.
	lostGone, lostHeld, lostUnread int64
	// fewAcks counts the tasks acknowledged while fewer than a majority
	// of replicas held them (a w below a majority), lostFewAcks those of
	// them lost: the measure of what w buys.
	fewAcks, lostFewAcks int64
	// hinted counts the tasks acknowledged as hinted, lostHinted those
	// of them lost.
	hinted, lostHinted int64
	// spread counts those of hinted whose enqueue did not ask for a
	// hint (enqueueTally.spread), lostSpread those of them lost.
	spread, lostSpread int64
	// majority is a majority of the run's N.
	majority int
}

func newQueueCounts(h *history) queueCounts {
	return queueCounts{majority: majority(max(h.in.Run.Replicas, 1))}
}

// write sets the figures; dead ones only where the dequeue is the
// complete (a dead task was always claimed).
func (q *queueCounts) write(c *Check, withDead bool) {
	c.count("attempted", q.attempted)
	c.count("acknowledged", q.acked)
	c.count("known by a later op only (enqueue in doubt or refused)", q.knownOnly)
	c.count("ok", q.ok)
	c.count("duplicated", q.duplicated)
	c.count("recovered", q.recovered)
	if withDead {
		c.count("dead (max_attempts)", q.dead)
	}
	c.count("cancelled", q.cancelled)
	c.count("blocked behind a dead or cancelled dependency", q.blocked)
	c.count("lost: on no replica", q.lostGone)
	c.count("lost: held, never dequeued", q.lostHeld)
	c.count("lost: no final read answered", q.lostUnread)
	c.count("acknowledged held by fewer than a majority", q.fewAcks)
	c.count("lost: acknowledged held by fewer than a majority", q.lostFewAcks)
	c.count("acknowledged as hinted", q.hinted)
	c.count("lost: acknowledged as hinted", q.lostHinted)
	c.count("acknowledged as hinted without asking (spread on W nodes)", q.spread)
	c.count("lost: acknowledged as hinted without asking", q.lostSpread)
}

// countLost files a lost task under what its final reads found.
func (q *queueCounts) countLost(t *taskHist, e enqueueTally) {
	if e.acks > 0 && e.acks < q.majority {
		q.lostFewAcks++
	}
	if e.hinted {
		q.lostHinted++
	}
	if e.spread {
		q.lostSpread++
	}
	switch {
	case len(t.found()) > 0:
		q.lostHeld++
	case slices.ContainsFunc(t.reads, func(r taskRead) bool { return r.read.Err == "" }):
		q.lostGone++
	default:
		q.lostUnread++
	}
}

func checkQueueByComplete(h *history) *Check {
	c := newCheck("total-queue (dequeue = acknowledged complete)",
		"every task known to exist (its enqueue or a later op on it acknowledged) is completed in the final state (or dead, or cancelled); nothing unattempted is completed; no definitely failed enqueue exists",
		kindLost, kindUnexpected, kindFailedDelivered)
	q := newQueueCounts(h)
	memo := map[string]bool{}
	c.count("completed without an acknowledged complete", 0)
	for _, id := range h.ids {
		t := h.tasks[id]
		e := t.tally()
		claims := map[uint32]bool{}
		for _, o := range t.completes {
			if o.ok() {
				claims[o.claim] = true
				if !e.attempted {
					c.flag(kindUnexpected, "", o.tc, Example{Task: id, Claims: []uint32{o.claim}, TNs: []int64{o.tc}, Events: o.events(), Detail: "completed, never enqueued"})
				}
			}
		}
		q.count(e, len(claims))
		state := t.finalState()
		if e.known && state != finalCompleted {
			h.lostOrHandled(c, &q, t, e, state, memo)
		}
		if e.acked && state == finalCompleted && len(claims) == 0 {
			c.add("completed without an acknowledged complete", 1)
		}
		if e.allFailed {
			if ok, evs := t.exists(); ok {
				c.flag(kindFailedDelivered, "", t.enqueues[0].tc, Example{Task: id, Events: append(t.enqueues[0].events(), evs...),
					TNs: []int64{t.enqueues[0].ti}, Detail: "every enqueue came back fail, yet the task exists"})
			}
		}
	}
	q.write(c, true)
	writeRedeliveries(h, c)
	return c
}

// count tallies one task's dequeues.
func (q *queueCounts) count(e enqueueTally, dequeues int) {
	if e.attempted {
		q.attempted++
	}
	if e.acked {
		q.acked++
		if e.acks > 0 && e.acks < q.majority {
			q.fewAcks++
		}
		if e.hinted {
			q.hinted++
		}
		if e.spread {
			q.spread++
		}
	}
	if e.known && !e.acked {
		q.knownOnly++
	}
	if dequeues > 0 && e.attempted {
		q.ok++
		if !e.acked {
			q.recovered++
		}
	}
	if dequeues > 1 {
		q.duplicated += int64(dequeues - 1)
	}
}

// lostOrHandled files a known task that the dequeue did not reach: dead,
// cancelled and blocked-forever tasks were handled as designed; anything
// else is lost. A fault that loses data beyond the bounds after the task
// was known to exist excuses it.
func (h *history) lostOrHandled(c *Check, q *queueCounts, t *taskHist, e enqueueTally, state string, memo map[string]bool) {
	switch {
	case state == finalDead:
		q.dead++
		return
	case state == finalCancelled:
		q.cancelled++
		return
	case state == finalBlocked && h.blockedForever(t.id, memo):
		q.blocked++
		return
	}
	q.countLost(t, e)
	detail := t.statesDetail()
	if !e.acked {
		detail = fmt.Sprintf("known by its %s's ok (enqueue never acknowledged); %s", e.knownBy.f, detail)
	}
	why := h.beyondLoss(t.id, e.knownAt, h.tEnd)
	if why == "" && state == finalBlocked {
		why = h.blockedBeyond(t, e.knownAt, map[string]bool{})
	}
	c.flag(kindLost, why, e.knownAt,
		Example{Task: t.id, TNs: []int64{e.knownAt}, Events: e.knownBy.events(), Detail: detail})
}

// blockedBeyond says whether a blocked task waits on a dependency that
// faults beyond the bounds can explain never completing: one not completed
// whose own loss they explain (beyond, from its acknowledgement, or from
// the dependent's, at which the dependency existed), directly or behind
// its own dependencies. A wipe of the dependency's partition then leaves
// the dependent blocked for good although nothing near it was lost; its
// loss is the dependency's, and so is the excuse. A dependency completed,
// or one whose loss is within the bounds, excuses nothing.
func (h *history) blockedBeyond(t *taskHist, ackAt int64, seen map[string]bool) excuse {
	for _, d := range t.deps() {
		dt := h.tasks[d]
		if dt == nil || seen[d] || dt.finalState() == finalCompleted {
			continue
		}
		seen[d] = true
		from := ackAt
		if de := dt.tally(); de.known {
			from = min(from, de.knownAt)
		}
		why := h.beyondLoss(d, from, h.tEnd)
		if why == "" && dt.finalState() == finalBlocked {
			why = h.blockedBeyond(dt, from, seen)
		}
		if why != "" {
			return excuse(fmt.Sprintf("dependency %s lost: %s", d, why))
		}
	}
	return ""
}

// statesDetail says what each replica's final read found: the states and
// the nodes that show them, the replicas that lack the task, the reads
// that failed.
func (t *taskHist) statesDetail() string {
	nodes := map[string][]int{}
	var keys []string
	for _, r := range t.reads {
		k := "not found"
		switch {
		case r.view != nil:
			k = r.view.State
		case r.read.Err != "":
			k = "read failed (" + truncate(r.read.Err) + ")"
		}
		if nodes[k] == nil {
			keys = append(keys, k)
		}
		nodes[k] = append(nodes[k], r.read.Node)
	}
	if len(keys) == 0 {
		return "no final read"
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s on %v", k, nodes[k])
	}
	return "final reads: " + strings.Join(parts, ", ")
}

func checkQueueByClaim(h *history) *Check {
	c := newCheck("total-queue (dequeue = ok claim)",
		"every task known to exist was claimed (or is cancelled, or blocked behind a dead or cancelled dependency); nothing unattempted is claimed",
		kindLost, kindUnexpected)
	q := newQueueCounts(h)
	memo := map[string]bool{}
	for _, id := range h.ids {
		t := h.tasks[id]
		e := t.tally()
		if !e.attempted {
			for _, g := range t.grants {
				c.flag(kindUnexpected, "", g.tc, Example{Task: id, Claims: []uint32{g.claim}, TNs: []int64{g.tc}, Events: g.events(), Detail: "claimed, never enqueued"})
			}
		}
		q.count(e, len(t.grants))
		if !e.known || len(t.grants) > 0 {
			continue
		}
		// Claims the history saw only as info still show in the views.
		claimed := false
		for _, r := range t.found() {
			claimed = claimed || len(r.view.Claims) > 0
		}
		if !claimed {
			h.lostOrHandled(c, &q, t, e, t.finalState(), memo)
		}
	}
	q.write(c, false)
	writeRedeliveries(h, c)
	return c
}

// writeRedeliveries counts ok claims of a task after an earlier one, split
// by whether the claim before was released (fail, snooze: the workload
// asked for it) or, as far as the history shows, expired.
func writeRedeliveries(h *history, c *Check) {
	var total, afterRelease int64
	for _, id := range h.ids {
		t := h.tasks[id]
		if len(t.grants) < 2 {
			continue
		}
		released := map[uint32]bool{}
		for _, o := range append(append([]*op(nil), t.fails...), t.snoozes...) {
			if o.mayHaveApplied() {
				released[o.claim] = true
			}
		}
		for _, g := range t.grants[1:] {
			total++
			if g.claim > 0 && released[g.claim-1] {
				afterRelease++
			}
		}
	}
	c.count("redeliveries", total)
	c.count("redeliveries after fail or snooze", afterRelease)
	c.count("redeliveries after expiry", total-afterRelease)
}
