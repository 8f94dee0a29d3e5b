package faults

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skuldd/skuldd/wire"
)

// A refused operation changes nothing, anywhere, ever (the project's
// second rule). This check holds every final view to it for the writes a
// view shows under a claim or of the task as a whole: a completion, a
// fail or snooze release, a lease longer than its grant, a cancel. Each
// must come from an operation that took effect or may have (ok or info);
// one that only refused operations could have written is an anomaly, and
// so is one that no operation of the history can have written at all.
// The enqueue's and the update's refusals are judged where their writes
// are read: total-queue's failed-but-delivered and the update check's
// failed update visible.
//
// No fault excuses these: losing data, or a clock far off, can make a
// write disappear or come early, never make a refused one appear.

// Anomaly kinds of the refused-ops check.
const (
	kindRefusedComplete       = "refused complete visible"
	kindCompletionUnexplained = "completion no complete explains"
	kindCompletionNoClaim     = "completion with no completing claim"
	kindRefusedFail           = "refused fail visible"
	kindRefusedSnooze         = "refused snooze visible"
	kindReleaseUnexplained    = "release no fail or snooze explains"
	kindRefusedRenew          = "refused renew visible"
	kindLeaseUnexplained      = "lease longer than its grant and renews"
	kindRefusedCancel         = "refused cancel visible"
	kindCancelUnexplained     = "cancel no cancel explains"
)

func checkRefused(h *history) *Check {
	c := newCheck("refused ops change nothing",
		"every completion, release, lease end and cancel a final view shows was written by a complete, fail, snooze, claim or renew, or cancel that came back ok or info: none only by refused ones, none by no op at all; a completed view marks the claim that completed it",
		kindRefusedComplete, kindCompletionUnexplained, kindCompletionNoClaim, kindRefusedFail, kindRefusedSnooze, kindReleaseUnexplained,
		kindRefusedRenew, kindLeaseUnexplained, kindRefusedCancel, kindCancelUnexplained)
	var judged int64
	for _, id := range h.ids {
		t := h.tasks[id]
		var flags taskFlags
		for _, r := range t.found() {
			judged++
			refusedCompletion(&flags, t, r)
			refusedReleases(&flags, t, r)
			refusedLeases(&flags, t, r)
			h.refusedCancel(&flags, t, r)
		}
		flags.flush(c)
	}
	c.count("final views judged", judged)
	return c
}

// writers classifies the ops that could have written what a view shows:
// explained if one took effect or may have; else refused if there were
// some (every one came back fail), else unexplained.
type writers int

const (
	explained writers = iota
	refused
	unexplained
)

func judgeWriters(ops []*op) (writers, []int64) {
	if len(ops) == 0 {
		return unexplained, nil
	}
	var evs []int64
	for _, o := range ops {
		if o.mayHaveApplied() {
			return explained, nil
		}
		evs = append(evs, o.events()...)
	}
	return refused, evs
}

// underClaim returns the ops of ops under claim k.
func underClaim(ops []*op, k uint32) []*op {
	var out []*op
	for _, o := range ops {
		if o.claim == k {
			out = append(out, o)
		}
	}
	return out
}

// viewExample starts an example of what replica r's view shows.
func viewExample(t *taskHist, r taskRead, claims ...uint32) Example {
	return Example{Task: t.id, Claims: claims, Nodes: []int{r.read.Node}, TNs: []int64{r.read.TNs}}
}

// refusedCompletion judges the claim a view shows completing the task. A
// complete acts under a claim, and a task's claims are never dropped, so
// a view completed with no claim marked as the completing one shows a
// completion no complete invocation can explain, whatever the history
// sent (a cancel marks none, but its view's state is cancelled).
func refusedCompletion(flags *taskFlags, t *taskHist, r taskRead) {
	if r.view.State == finalCompleted && !slices.ContainsFunc(r.view.Claims, func(cl wire.ClaimView) bool { return cl.Completed != nil }) {
		ex := viewExample(t, r)
		for _, o := range t.completes {
			ex.Events = append(ex.Events, o.events()...)
		}
		ex.Detail = fmt.Sprintf("state completed, yet none of its %d claim(s) is marked as the completing one (%d complete(s) sent)",
			len(r.view.Claims), len(t.completes))
		flags.add(kindCompletionNoClaim, "", r.read.TNs, ex, r.read.Node)
	}
	for _, cl := range r.view.Claims {
		if cl.Completed == nil {
			continue
		}
		ex := viewExample(t, r, cl.Claim)
		switch w, evs := judgeWriters(underClaim(t.completes, cl.Claim)); w {
		case refused:
			ex.Events, ex.Detail = evs, fmt.Sprintf("completed by claim %d, whose every complete came back fail", cl.Claim)
			flags.add(kindRefusedComplete, "", r.read.TNs, ex, r.read.Node)
		case unexplained:
			ex.Detail = fmt.Sprintf("completed by claim %d, under which no complete was sent", cl.Claim)
			flags.add(kindCompletionUnexplained, "", r.read.TNs, ex, r.read.Node)
		}
	}
}

// refusedReleases judges each fail or snooze release a view shows. A
// snooze with no snooze op is the node's own release of a claim it
// granted and never answered (node/coord/claim.go, releaseUnanswered), so it
// is explained when the history never saw that claim's grant ok; a
// claim whose grant came back ok is its client's to release.
func refusedReleases(flags *taskFlags, t *taskHist, r taskRead) {
	for _, f := range r.view.Failures {
		if f.TimeLimit {
			continue // derived from the claim's lease (the claim ids check judges it)
		}
		ops, kind, what := underClaim(t.fails, f.Claim), kindRefusedFail, "fail"
		// A fail's no_retry is part of what it wrote: only a fail that
		// said no_retry explains a no_retry release, and only one that did
		// not explains a plain one.
		ops = slices.DeleteFunc(ops, func(o *op) bool { return o.inv.NoRetry != f.NoRetry })
		if f.NoRetry {
			what = "fail with no_retry"
		}
		if f.Snooze {
			ops, kind, what = underClaim(t.snoozes, f.Claim), kindRefusedSnooze, "snooze"
		}
		w, evs := judgeWriters(ops)
		if w == unexplained && f.Snooze && !slices.ContainsFunc(t.grants, func(g *op) bool { return g.claim == f.Claim }) {
			w = explained // released unanswered
		}
		ex := viewExample(t, r, f.Claim)
		switch w {
		case refused:
			ex.Events, ex.Detail = evs, fmt.Sprintf("claim %d released as a %s; every %s of it came back fail", f.Claim, what, what)
			flags.add(kind, "", r.read.TNs, ex, r.read.Node)
		case unexplained:
			ex.Detail = fmt.Sprintf("claim %d released as a %s; no %s of it was sent", f.Claim, what, what)
			flags.add(kindReleaseUnexplained, "", r.read.TNs, ex, r.read.Node)
		}
	}
}

// refusedLeases judges each claim's lease end in a view: only a grant
// and a renew set it (a renew grows it to at least the leader's now plus
// the TTL; the merge takes the largest), so with the grant's and every
// renew's answer known (the grant ok, no renew in doubt), the end is at
// most the largest end they reported. A view shows a claim's end cut at
// its release or completion, never beyond.
func refusedLeases(flags *taskFlags, t *taskHist, r taskRead) {
	for _, cl := range r.view.Claims {
		i := slices.IndexFunc(t.grants, func(g *op) bool { return g.claim == cl.Claim })
		if i < 0 || t.grants[i].out.End == 0 {
			continue // granted in doubt, or its end not recorded
		}
		allowed := t.grants[i].out.End
		renews := underClaim(t.renews, cl.Claim)
		known := true
		var refusedEvs []int64
		for _, o := range renews {
			switch {
			case o.ok() && o.out.End > 0:
				allowed = max(allowed, o.out.End)
			case o.typ == Fail:
				refusedEvs = append(refusedEvs, o.events()...)
			default:
				known = false // in doubt, or its end not recorded
			}
		}
		if !known || cl.End <= allowed {
			continue
		}
		ex := viewExample(t, r, cl.Claim)
		ex.Events = append(t.grants[i].events(), refusedEvs...)
		ex.Detail = fmt.Sprintf("claim %d ends at %d, %d ms past the latest end its grant and renews reported", cl.Claim, cl.End, cl.End-allowed)
		kind := kindLeaseUnexplained
		if len(refusedEvs) > 0 {
			kind = kindRefusedRenew
		}
		flags.add(kind, "", r.read.TNs, ex, r.read.Node)
	}
}

// refusedCancel judges a view's cancel by its reason, which names the
// cancel op that sent it (the workload gives each a reason of its own).
func (h *history) refusedCancel(flags *taskFlags, t *taskHist, r taskRead) {
	cv := r.view.Cancelled
	if cv == nil {
		return
	}
	if keeper, ok := strings.CutPrefix(cv.Reason, wire.RetiredKeyReason); ok && sameKey(t, h.tasks[keeper]) {
		return // retired by its leader: another task holds its key
	}
	var ops []*op
	for _, o := range t.cancels {
		if o.inv.Value == cv.Reason {
			ops = append(ops, o)
		}
	}
	ex := viewExample(t, r)
	switch w, evs := judgeWriters(ops); w {
	case refused:
		ex.Events, ex.Detail = evs, fmt.Sprintf("cancelled with reason %q, whose cancel came back fail", truncate(cv.Reason))
		flags.add(kindRefusedCancel, "", r.read.TNs, ex, r.read.Node)
	case unexplained:
		ex.Detail = fmt.Sprintf("cancelled with reason %q, which no cancel sent", truncate(cv.Reason))
		flags.add(kindCancelUnexplained, "", r.read.TNs, ex, r.read.Node)
	}
}

// sameKey reports whether tasks a and b, two tasks, were enqueued with one
// unique key of one queue.
func sameKey(a, b *taskHist) bool {
	if a == nil || b == nil || a == b {
		return false
	}
	for _, x := range a.enqueues {
		for _, y := range b.enqueues {
			if x.inv.Key != "" && x.inv.Key == y.inv.Key && x.inv.Queue == y.inv.Queue {
				return true
			}
		}
	}
	return false
}
