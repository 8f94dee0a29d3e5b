package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/wire"
)

// Anomaly kinds of the update check.
const (
	kindUpdateMissing    = "acknowledged update missing"
	kindUpdateData       = "update visible with other data"
	kindUpdateFailedSeen = "failed update visible"
	kindUpdateUnexpected = "update never attempted visible"
)

// updKey names a progress entry of a task.
type updKey struct {
	claim uint32
	seq   uint64
}

func checkUpdates(h *history) *Check {
	c := newCheck("updates",
		"every ok update (claim, seq) is visible, with its data, in a final view of its task; every visible entry was sent by an update that came back ok or info",
		kindUpdateMissing, kindUpdateData, kindUpdateFailedSeen, kindUpdateUnexpected)
	var acked, unread int64
	for _, id := range h.ids {
		t := h.tasks[id]
		views := t.found()
		sent := map[updKey][]*op{}
		for _, o := range t.updates {
			k := updKey{o.claim, *o.inv.Seq}
			sent[k] = append(sent[k], o)
		}
		visible := map[updKey][]taskRead{}
		for _, r := range views {
			for _, u := range r.view.Updates {
				k := updKey{u.Claim, u.Seq}
				visible[k] = append(visible[k], r)
			}
		}
		for _, o := range t.updates {
			if !o.ok() {
				continue
			}
			acked++
			if len(views) == 0 {
				unread++ // the task itself is lost or unread: total-queue's
				continue
			}
			h.ackedUpdate(c, t, o, visible[updKey{o.claim, *o.inv.Seq}])
		}
		for k, rs := range visible {
			h.visibleUpdate(c, t, k, rs, sent[k])
		}
	}
	c.count("acknowledged updates", acked)
	c.count("acknowledged updates of tasks no replica holds", unread)
	return c
}

// ackedUpdate checks one ok update against the views that show its key.
func (h *history) ackedUpdate(c *Check, t *taskHist, o *op, rs []taskRead) {
	ex := Example{Task: t.id, Claims: []uint32{o.claim}, TNs: []int64{o.tc}, Events: o.events()}
	if len(rs) == 0 {
		ex.Detail = fmt.Sprintf("seq %d in none of %d replicas' views", *o.inv.Seq, len(t.found()))
		c.flag(kindUpdateMissing, h.beyond(t.id, o.tc, h.tEnd), o.tc, ex)
		return
	}
	for _, r := range rs {
		for _, u := range r.view.Updates {
			if u.Claim == o.claim && u.Seq == *o.inv.Seq && string(u.Data) != o.inv.Value {
				ex.Nodes = []int{r.read.Node}
				ex.Detail = fmt.Sprintf("seq %d sent %q, visible %q", u.Seq, truncate(o.inv.Value), truncate(string(u.Data)))
				c.flag(kindUpdateData, "", o.tc, ex)
				return
			}
		}
	}
}

// visibleUpdate checks that a visible entry came from an update that took
// effect or may have: the workload's updates are the only writers.
func (h *history) visibleUpdate(c *Check, t *taskHist, k updKey, rs []taskRead, sent []*op) {
	ex := Example{Task: t.id, Claims: []uint32{k.claim}, TNs: []int64{rs[0].read.TNs}}
	for _, r := range rs {
		ex.Nodes = append(ex.Nodes, r.read.Node)
	}
	slices.Sort(ex.Nodes)
	if len(sent) == 0 {
		ex.Detail = fmt.Sprintf("seq %d was never sent", k.seq)
		c.flag(kindUpdateUnexpected, "", rs[0].read.TNs, ex)
		return
	}
	for _, o := range sent {
		if o.mayHaveApplied() {
			return
		}
		ex.Events = append(ex.Events, o.events()...)
	}
	ex.Detail = fmt.Sprintf("seq %d: every update came back fail", k.seq)
	c.flag(kindUpdateFailedSeen, "", sent[0].tc, ex)
}

// Anomaly kinds of the dependency check.
const kindDepOrder = "claimed before a dependency's completion"

func checkDeps(h *history) *Check {
	c := newCheck("dependency order",
		"no ok claim of a task is answered before every dependency's first complete that came back ok or info was invoked",
		kindDepOrder)
	var checked, unverifiable int64
	for _, id := range h.ids {
		t := h.tasks[id]
		if len(t.grants) == 0 {
			continue
		}
		for _, d := range t.deps() {
			dt := h.tasks[d]
			if dt == nil || len(dt.enqueues) == 0 {
				unverifiable++ // enqueued outside the history: nothing to judge by
				continue
			}
			checked++
			done, doneOp := tNever, (*op)(nil)
			for _, o := range dt.completes {
				if o.mayHaveApplied() && o.ti < done {
					done, doneOp = o.ti, o
				}
			}
			for _, g := range t.grants {
				if g.tc >= done {
					continue
				}
				ex := Example{Task: id, Claims: []uint32{g.claim}, TNs: []int64{g.ti, g.tc}, Events: g.events(),
					Detail: fmt.Sprintf("dependency %s never completed", d)}
				if doneOp != nil {
					ex.TNs = append(ex.TNs, doneOp.ti)
					ex.Events = append(ex.Events, doneOp.events()...)
					ex.Detail = fmt.Sprintf("dependency %s: first complete invoked %s after the claim's ok", d, fmtMs(done-g.tc))
				}
				c.flag(kindDepOrder, "", g.tc, ex)
			}
		}
	}
	c.count("dependency edges checked", checked)
	c.count("dependency edges to tasks outside the history", unverifiable)
	return c
}

// Anomaly kinds of the attempt-accounting check.
const (
	kindDeadEarly      = "dead before max_attempts"
	kindNotDead        = "not dead at max_attempts"
	kindOverCounted    = "attempts over the claims that ended"
	kindClaimedDead    = "claimed with max_attempts used"
	kindReleaseMissing = "acknowledged fail or snooze missing"
	kindReleaseKind    = "fail and snooze confused"
	kindNoRetryLost    = "fail's no_retry not as sent"
	kindNoRetryLive    = "failed with no retry, not dead"
)

// Task states as views name them.
const (
	stateReady    = "ready"
	stateClaimed  = "claimed"
	stateDelayed  = "delayed"
	stateSnoozed  = "snoozed"
	stateRetrying = "retrying"
)

func checkAttempts(h *history) *Check {
	c := newCheck("attempt accounting",
		"a dead view has at least max_attempts claims that ended without completion or snooze, or a fail with no_retry; a view is dead once attempts reach max_attempts, and once a fail with no_retry ended a claim; attempts never exceed the ended claims; no claim is granted once max_attempts are used or after an acknowledged fail with no_retry; ok fails and snoozes are in the final state as such, no_retry included",
		kindDeadEarly, kindNotDead, kindOverCounted, kindClaimedDead, kindReleaseMissing, kindReleaseKind, kindNoRetryLost, kindNoRetryLive)
	var dead int64
	for _, id := range h.ids {
		t := h.tasks[id]
		views := t.found()
		if t.finalState() == finalDead {
			dead++
		}
		var flags taskFlags
		for _, r := range views {
			attemptsOfView(&flags, t, r)
		}
		flags.flush(c)
		if limit := h.maxAttempts(t); limit > 0 {
			h.grantsWithinLimit(c, t, limit, views)
		}
		if len(views) > 0 {
			h.releases(c, t, views)
		}
	}
	c.count("dead tasks", dead)
	return c
}

// grantsWithinLimit flags a claim granted once max_attempts were used,
// by the attempts its ok reported or by what the history proves: claim
// ids are dense, so a grant of claim k shows claims 0..k-1 existed and
// ended (none completed, or k would not exist), and each is an attempt
// unless a snooze of it took effect or may have, or a final view shows it
// snoozed: a node releases as a snooze each claim it granted and never
// answered (the client never saw it, so the history cannot), and such a
// claim costs no attempt. (The workload never requeues, which would reset
// the count.) No claim follows an acknowledged fail with no_retry either:
// the task was dead from then on.
func (h *history) grantsWithinLimit(c *Check, t *taskHist, limit uint32, views []taskRead) {
	for _, f := range t.fails {
		if !f.ok() || !f.inv.NoRetry {
			continue
		}
		for _, g := range t.grants {
			if g.claim > f.claim {
				c.flag(kindClaimedDead, "", g.tc, Example{Task: t.id, Claims: []uint32{f.claim, g.claim}, TNs: []int64{f.tc, g.tc},
					Events: append(f.events(), g.events()...), Detail: fmt.Sprintf("claim %d granted after claim %d's acknowledged fail with no_retry", g.claim, f.claim)})
			}
		}
	}
	snoozed := map[uint32]bool{}
	for _, o := range t.snoozes {
		if o.mayHaveApplied() {
			snoozed[o.claim] = true
		}
	}
	for _, r := range views {
		for _, f := range r.view.Failures {
			if f.Snooze {
				snoozed[f.Claim] = true
			}
		}
	}
	for _, g := range t.grants {
		var ended uint32
		for k := uint32(0); k < g.claim; k++ {
			if !snoozed[k] {
				ended++
			}
		}
		if g.out.Attempts < limit && ended < limit {
			continue
		}
		c.flag(kindClaimedDead, h.beyond(t.id, 0, g.tc), g.tc, Example{Task: t.id, Claims: []uint32{g.claim}, TNs: []int64{g.tc}, Events: g.events(),
			Detail: fmt.Sprintf("max_attempts %d; the ok reported %d attempts, the history proves %d", limit, g.out.Attempts, ended)})
	}
}

// attemptsOfView checks one view's accounting against its own claims:
// the claims that ended without completion or snooze are the attempts,
// less the latest while it is live.
func attemptsOfView(flags *taskFlags, t *taskHist, r taskRead) {
	v := r.view
	snoozed := map[uint32]bool{}
	noRetry := false // the workload never requeues, so one ends the task
	for _, f := range v.Failures {
		if f.Snooze {
			snoozed[f.Claim] = true
		}
		noRetry = noRetry || f.NoRetry
	}
	var ended uint32
	for i, cl := range v.Claims {
		live := v.State == stateClaimed && i == len(v.Claims)-1
		if cl.Completed == nil && !snoozed[cl.Claim] && !live {
			ended++
		}
	}
	ex := Example{Task: t.id, Nodes: []int{r.read.Node}, TNs: []int64{r.read.TNs}}
	switch {
	case noRetry && v.State != finalDead && v.State != finalCancelled:
		ex.Detail = fmt.Sprintf("%s after a fail with no_retry", v.State)
		flags.add(kindNoRetryLive, "", r.read.TNs, ex, r.read.Node)
	case v.State == finalDead && !noRetry && (v.MaxAttempts == 0 || ended < v.MaxAttempts):
		ex.Detail = fmt.Sprintf("dead with %d ended claims, max_attempts %d", ended, v.MaxAttempts)
		flags.add(kindDeadEarly, "", r.read.TNs, ex, r.read.Node)
	case v.MaxAttempts > 0 && v.Attempts >= v.MaxAttempts && !slices.Contains([]string{finalDead, finalCompleted, finalCancelled, stateClaimed}, v.State):
		ex.Detail = fmt.Sprintf("%s with %d attempts of %d", v.State, v.Attempts, v.MaxAttempts)
		flags.add(kindNotDead, "", r.read.TNs, ex, r.read.Node)
	}
	if v.Attempts > ended {
		ex.Detail = fmt.Sprintf("attempts %d, ended claims %d", v.Attempts, ended)
		flags.add(kindOverCounted, "", r.read.TNs, ex, r.read.Node)
	}
}

// maxAttempts is a task's limit: its views', else its enqueue's, else the
// run's; 0 if unknown or unlimited.
func (h *history) maxAttempts(t *taskHist) uint32 {
	for _, r := range t.found() {
		return r.view.MaxAttempts
	}
	for _, e := range t.enqueues {
		if e.inv.MaxAttempts > 0 {
			return e.inv.MaxAttempts
		}
	}
	return h.in.Run.MaxAttempts
}

// releases checks every ok fail and snooze against the views' failures.
// The merge keeps a claim's earliest release, so a mismatch is flagged
// only when no op of the other kind on that claim may have taken effect.
func (h *history) releases(c *Check, t *taskHist, views []taskRead) {
	mayHave := func(ops []*op, claim uint32) bool {
		return slices.ContainsFunc(ops, func(o *op) bool { return o.claim == claim && o.mayHaveApplied() })
	}
	// otherFail: another fail of o's claim, with the other no_retry, may
	// have taken effect first (the merge keeps the earliest release).
	otherFail := func(o *op) bool {
		return slices.ContainsFunc(t.fails, func(f *op) bool {
			return f != o && f.claim == o.claim && f.inv.NoRetry != o.inv.NoRetry && f.mayHaveApplied()
		})
	}
	check := func(o *op, snooze bool, other []*op) {
		var flags taskFlags
		defer flags.flush(c)
		for _, r := range views {
			i := slices.IndexFunc(r.view.Failures, func(f wire.FailureView) bool { return f.Claim == o.claim })
			ex := Example{Task: t.id, Claims: []uint32{o.claim}, Nodes: []int{r.read.Node}, TNs: []int64{o.tc, r.read.TNs}, Events: o.events()}
			switch {
			case i < 0:
				ex.Detail = o.f + " acknowledged, claim not released"
				flags.add(kindReleaseMissing, h.beyond(t.id, o.tc, h.tEnd), o.tc, ex, r.read.Node)
			case r.view.Failures[i].Snooze != snooze && !mayHave(other, o.claim):
				ex.Detail = fmt.Sprintf("%s acknowledged, view says snooze=%v", o.f, r.view.Failures[i].Snooze)
				flags.add(kindReleaseKind, "", o.tc, ex, r.read.Node)
			case !snooze && !r.view.Failures[i].Snooze && r.view.Failures[i].NoRetry != o.inv.NoRetry && !otherFail(o):
				ex.Detail = fmt.Sprintf("fail with no_retry=%v acknowledged, view says no_retry=%v", o.inv.NoRetry, r.view.Failures[i].NoRetry)
				flags.add(kindNoRetryLost, "", o.tc, ex, r.read.Node)
			}
		}
	}
	for _, o := range t.fails {
		if o.ok() {
			check(o, false, t.snoozes)
		}
	}
	for _, o := range t.snoozes {
		if o.ok() {
			check(o, true, t.fails)
		}
	}
}

// Anomaly kinds of the convergence check.
const (
	kindNotConverged = "not converged"
	kindSlow         = "converged later than the goal"
	kindDiverged     = "replicas disagree"
	kindResurrected  = "acknowledged completion undone"
	kindCancelUndone = "acknowledged cancel undone"
)

// convergenceSlackMs is the fixed part of the convergence goal: two
// anti-entropy rounds plus this (TESTING.md section 6.5).
const convergenceSlackMs = 5000

// aaeRoundsGoal is how many anti-entropy intervals the goal allows: a
// difference found in one round is repaired by the next.
const aaeRoundsGoal = 2

func checkConvergence(h *history) *Check {
	c := newCheck("convergence",
		"after heal the harness saw every replica's digests agree within 2 x aae interval + 5 s; every replica holding a task shows the same task; no replica shows an acknowledged completion or cancel undone",
		kindNotConverged, kindSlow, kindDiverged, kindResurrected, kindCancelUndone)
	h.convergenceTime(c)
	var compared int64
	for _, id := range h.ids {
		t := h.tasks[id]
		views := t.found()
		if len(views) > 1 {
			compared++
			diverged(c, t, views)
		}
		h.undone(c, t, t.completes, finalCompleted, kindResurrected)
		h.undone(c, t, t.cancels, finalCancelled, kindCancelUndone)
	}
	c.count("tasks held by several replicas", compared)
	return c
}

// undone flags the replicas whose view of t is not in state although one
// of ops (its completes, or its cancels) came back ok: a terminal state
// acknowledged is never undone.
func (h *history) undone(c *Check, t *taskHist, ops []*op, state, kind string) {
	var done *op
	for _, o := range ops {
		if o.ok() && (done == nil || o.tc < done.tc) {
			done = o
		}
	}
	if done == nil {
		return
	}
	var flags taskFlags
	for _, r := range t.found() {
		if r.view.State != state {
			flags.add(kind, h.beyond(t.id, done.tc, h.tEnd), done.tc, Example{Task: t.id, Claims: claimsOf(done),
				TNs: []int64{done.tc, r.read.TNs}, Events: done.events(), Detail: done.f + " acknowledged, final state " + r.view.State}, r.read.Node)
		}
	}
	flags.flush(c)
}

// claimsOf is the claim an op names, if any, for an example.
func claimsOf(o *op) []uint32 {
	if !o.hasClaim {
		return nil
	}
	return []uint32{o.claim}
}

// convergenceTime judges the time from the heal phase to the harness's
// converged phase.
func (h *history) convergenceTime(c *Check) {
	goalMs := aaeRoundsGoal*h.in.Run.AAEIntervalMs + convergenceSlackMs
	c.count("goal (ms)", goalMs)
	var heal, end *Event
	for _, p := range h.phases {
		switch {
		case p.F == phaseHeal && heal == nil:
			heal = p
		case heal != nil && end == nil && (p.F == phaseConverged || p.F == phaseNotConverged):
			end = p
		}
	}
	switch {
	case heal == nil:
		c.Notes = append(c.Notes, "no heal phase recorded: convergence time not judged")
		return
	case end == nil:
		c.Notes = append(c.Notes, "no converged or not-converged phase after heal: convergence time unknown")
		return
	}
	ex := Example{TNs: []int64{heal.TNs, end.TNs}, Events: []int64{heal.Index, end.Index}, Detail: string(end.Detail)}
	if end.F == phaseNotConverged {
		c.flag(kindNotConverged, h.beyond("", 0, end.TNs), end.TNs, ex)
		return
	}
	tookMs := (end.TNs - heal.TNs) / nsPerMs
	c.count("heal to converged (ms)", tookMs)
	if tookMs > goalMs {
		ex.Detail = fmt.Sprintf("%d ms, goal %d ms", tookMs, goalMs)
		c.flag(kindSlow, "", end.TNs, ex)
	}
}

// diverged compares the views of the replicas that hold a task.
func diverged(c *Check, t *taskHist, views []taskRead) {
	first := views[0]
	for _, r := range views[1:] {
		if fields := viewDiff(first.view, r.view); len(fields) > 0 {
			c.flag(kindDiverged, "", r.read.TNs, Example{Task: t.id, Nodes: []int{first.read.Node, r.read.Node},
				TNs: []int64{first.read.TNs, r.read.TNs}, Detail: "differ in " + strings.Join(fields, ", ")})
			return
		}
	}
}

// viewDiff names the fields in which two replicas' views of a task differ.
// attempts and claim are left out: the first depends on whether the
// reading node's clock still sees the latest claim live, the second is
// only in claim answers. state is compared up to what the reading node's
// clock decides (timeCompatible).
// written returns the failures a fail or snooze wrote: without those
// derived from a claim's time limit, which show only once the claim is
// over, so replicas read a moment apart may differ in them (the claims
// they derive from are compared).
func written(fs []wire.FailureView) []wire.FailureView {
	return slices.DeleteFunc(slices.Clone(fs), func(f wire.FailureView) bool { return f.TimeLimit })
}

func viewDiff(a, b *wire.TaskView) []string {
	var out []string
	if !timeCompatible(a.State, b.State) {
		out = append(out, fmt.Sprintf("state (%s, %s)", a.State, b.State))
	}
	fields := []struct {
		name string
		a, b any
	}{
		{"queue", a.Queue, b.Queue}, {"priority", a.Priority, b.Priority}, {"data", a.Data, b.Data},
		{"deps", a.Deps, b.Deps}, {"claims", a.Claims, b.Claims}, {"updates", a.Updates, b.Updates},
		{"failures", written(a.Failures), written(b.Failures)}, {"max_attempts", a.MaxAttempts, b.MaxAttempts},
		{"not_before", a.NotBefore, b.NotBefore}, {"enqueued_at", a.EnqueuedAt, b.EnqueuedAt},
		{"group", a.Group, b.Group}, {"kind", a.Kind, b.Kind}, {"subtopic", a.Subtopic, b.Subtopic}, {"description", a.Description, b.Description}, {"cancelled", a.Cancelled, b.Cancelled},
		{"time_limit_ms", a.TimeLimitMs, b.TimeLimitMs}, {"key", a.Key, b.Key}, {"unique_for_ms", a.UniqueForMs, b.UniqueForMs},
	}
	for _, f := range fields {
		if !sameJSON(f.a, f.b) {
			out = append(out, f.name)
		}
	}
	return out
}

// timeCompatible reports whether two replicas' states of one task can
// differ only by their clocks and reading instants: ready, claimed and
// delayed (snoozed, retrying) turn into each other as time passes, and a
// claim live on one clock may have expired into dead on another.
func timeCompatible(a, b string) bool {
	if a == b {
		return true
	}
	live := []string{stateReady, stateClaimed, stateDelayed, stateSnoozed, stateRetrying}
	if slices.Contains(live, a) && slices.Contains(live, b) {
		return true
	}
	pair := []string{a, b}
	return slices.Contains(pair, stateClaimed) && slices.Contains(pair, finalDead)
}

// sameJSON compares two values by their JSON, with null and empty lists
// equal (a replica may leave an empty list out).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return false
	}
	norm := func(j []byte) []byte {
		if bytes.Equal(j, []byte("null")) {
			return []byte("[]")
		}
		return j
	}
	return bytes.Equal(norm(ja), norm(jb))
}

// Anomaly kinds of the idempotent-enqueue check.
const (
	kindIDDisagree   = "replicas disagree on payload, queue or deps"
	kindIDForeign    = "payload, queue or deps of no enqueue of the id"
	kindPayloadTwice = "one payload under several ids"
)

func checkIdempotentEnqueue(h *history) *Check {
	c := newCheck("idempotent enqueue",
		"one task per client-chosen id: its replicas agree on payload, queue and deps, which are those of an enqueue of the id; no payload is stored under two ids",
		kindIDDisagree, kindIDForeign, kindPayloadTwice)
	owner := map[string]string{} // payload -> first id holding it
	var retried, inconsistent int64
	for _, id := range h.ids {
		t := h.tasks[id]
		if len(t.enqueues) > 1 {
			retried++
		}
		if !sameEnqueues(t.enqueues) {
			inconsistent++
		}
		views := t.found()
		var flags taskFlags
		for i, r := range views {
			v := r.view
			ex := Example{Task: id, TNs: []int64{r.read.TNs}}
			if i > 0 && (v.Queue != views[0].view.Queue || !bytes.Equal(v.Data, views[0].view.Data) || !sameDeps(viewDeps(v), viewDeps(views[0].view))) {
				ex.Detail = fmt.Sprintf("replicas hold other tasks under this id than node %d", views[0].read.Node)
				flags.add(kindIDDisagree, "", r.read.TNs, ex, r.read.Node)
			}
			if len(t.enqueues) > 0 && !slices.ContainsFunc(t.enqueues, func(o *op) bool {
				return o.inv.Value == string(v.Data) && (o.inv.Queue == "" || o.inv.Queue == v.Queue) && sameDeps(o.inv.Deps, viewDeps(v))
			}) {
				ex.Events = t.enqueues[0].events()
				ex.Detail = fmt.Sprintf("holds %q in %q with deps %v", truncate(string(v.Data)), v.Queue, viewDeps(v))
				flags.add(kindIDForeign, "", r.read.TNs, ex, r.read.Node)
			}
		}
		flags.flush(c)
		if len(views) > 0 && len(views[0].view.Data) > 0 {
			p := string(views[0].view.Data)
			if other, ok := owner[p]; ok {
				c.flag(kindPayloadTwice, "", views[0].read.TNs, Example{Task: id, TNs: []int64{views[0].read.TNs},
					Detail: fmt.Sprintf("payload %q also under %s", truncate(p), other)})
			} else {
				owner[p] = id
			}
		}
	}
	c.count("ids enqueued more than once (retries)", retried)
	c.count("ids whose enqueues differ in payload, queue or deps (harness)", inconsistent)
	return c
}

// sameEnqueues reports whether every enqueue of an id sent the same task.
func sameEnqueues(ops []*op) bool {
	for _, o := range ops[min(1, len(ops)):] {
		if o.inv.Value != ops[0].inv.Value || o.inv.Queue != ops[0].inv.Queue || !sameDeps(o.inv.Deps, ops[0].inv.Deps) {
			return false
		}
	}
	return true
}

// sameDeps reports whether two lists name the same dependencies, in any
// order (a task stores its deps sorted).
func sameDeps(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// truncLen bounds the payloads quoted in examples.
const truncLen = 40

func truncate(s string) string {
	if len(s) <= truncLen {
		return s
	}
	return s[:truncLen] + "…"
}
