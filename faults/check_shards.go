package faults

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Worker shards (shards.go): the run's members of one shard set, their
// every request, and the stretches each worked on an index (holds), on
// the run's timeline.
//
// The set's promise: no index is ever worked on by two members at once,
// in one generation or across generations; and once the changes stop and
// the members renew, every index of the active generation is worked on.
// By the protocol, a generation takes effect only after every member of
// the one before that is still a member said it stopped (a hold ends
// before the renewal that says so is sent, which is before it commits,
// which is before any answer gives the index to another), and the
// metadata leader expires a member only TTL + margin after its last
// renewal on the leader's clock, while the member stopped at the end of
// its lease on its own clock, a TTL after it sent that renewal. So any
// two holds of one index by two members that overlap in time are an
// anomaly, however short the overlap; only a clock moved beyond the skew
// bound (which may move the leader's count) or a fault that loses the
// metadata group's state can explain one. A harness stall cannot: the
// members' lease ends are computed from send times, not observed.
//
// The answers are checked against the rules that make it so (each is
// the committed state right after the member's own request): an answer
// that moves a member to another generation, or another index, while it
// works on one it never said it stopped; one that tells it to work on a
// generation it said it stopped; one that still waits for it though this
// very request said it stopped; one with nothing pending that does not
// let it work on its index. A member the cluster says it expired
// (not_found) while its lease still held by its own clock was expired
// too early, whether or not another took its index yet.
//
// At the end, after the heal and a settling time, the harness reads the
// set until a read shows no pending generation, lets the members renew a
// little longer, and stops them. The final view (a node's copy, not
// necessarily the latest) is judged against the members' own answers,
// which are committed: each index of its generation must be held, when
// the members were stopped, by the member it names, unless that member's
// answers after the read show the set changed; a member the harness
// never ran, or an index with no member or two, is certainly wrong. A
// read that still shows a pending generation long after the last change
// (twice the lease and margin, and 2 s) is judged only through the
// members it waits for that certainly should not be waited for: one the
// harness never ran, one silent far longer than its lease and margin (the
// leader should have expired it), one whose committed renewal said it
// stopped; or when it waits for no one.

// Kinds of worker-shard anomalies.
const (
	kindShardOverlap    = "index held by two members at once"
	kindShardTwice      = "two members on one index in one generation"
	kindShardIdle       = "index not worked after the changes stopped"
	kindShardEarly      = "member expired within its lease"
	kindShardBadAnswer  = "work answer breaking the protocol"
	kindShardIncomplete = "shard record incomplete"
)

// Figures of the shard check, in the report's order.
const (
	countShardMembers    = "members (ids)"
	countShardJoins      = "joins"
	countShardLeaves     = "leaves"
	countShardExpiries   = "expiries (not_found answers)"
	countShardErrors     = "failed requests"
	countShardGens       = "generations seen"
	countShardHolds      = "holds"
	countShardLeaseEnds  = "holds ended by the lease"
	countShardLongWaitMs = "longest wait from a pending generation to its first hold (ms)"
	countShardHandovers  = "handovers (an index's next hold by another member)"
	countShardMinGapMs   = "shortest handover (ms from one member's hold end to the next's start)"
	countShardWorked     = "indexes of the final generation worked at the stop"
)

var shardCounts = []string{countShardMembers, countShardJoins, countShardLeaves, countShardExpiries, countShardErrors,
	countShardGens, countShardHolds, countShardLeaseEnds, countShardLongWaitMs, countShardHandovers, countShardMinGapMs, countShardWorked}

// shardSlack is added to the settling time after which a pending
// generation is judged.
const shardSlackNs = 2 * nsPerS

type shardCheck struct {
	h   *history
	c   *Check
	rec *ShardRecord
	// ours are the ids the harness ran; ops each id's requests in the
	// order they were sent.
	ours map[string]bool
	ops  map[string][]*ShardOp
	// end is the record's last time: a hold that never ended counts as
	// held until then.
	end int64
}

func checkShards(h *history) *Check {
	c := newCheck("worker shards",
		"no index of the set is held by two members at once, in one generation or across generations, nor by two members in one generation; answers keep the protocol (no member moved on without its stop, none expired within its lease); once the changes stopped, every index of the final generation is held by its member; the record is whole",
		kindShardOverlap, kindShardTwice, kindShardIdle, kindShardEarly, kindShardBadAnswer, kindShardIncomplete)
	rec := h.in.Shards
	if rec == nil {
		if h.in.Run.Shards != "" {
			c.flag(kindShardIncomplete, "", h.tEnd, Example{Detail: fmt.Sprintf("run.json says members of shard set %s ran, but there is no %s", h.in.Run.Shards, ShardsFile)})
		} else {
			c.Notes = append(c.Notes, "no "+ShardsFile+": the run ran no shard members (a run from before them, or the simulation); nothing checked")
		}
		return c
	}
	for _, name := range shardCounts {
		c.count(name, 0)
	}
	sc := &shardCheck{h: h, c: c, rec: rec, ours: map[string]bool{}, ops: map[string][]*ShardOp{}}
	sc.index()
	sc.incomplete()
	sc.overlaps()
	sc.sameGeneration()
	sc.expiries()
	sc.answers()
	sc.final()
	sc.figures()
	return c
}

// index gathers the ids and each id's requests, and the record's end.
func (sc *shardCheck) index() {
	r := sc.rec
	sc.end = max(sc.h.tEnd, r.StopNs, r.DoneNs)
	for _, sl := range r.Members {
		for _, id := range sl.IDs {
			sc.ours[id] = true
		}
	}
	for i := range r.Ops {
		o := &r.Ops[i]
		sc.ours[o.Member] = true
		sc.ops[o.Member] = append(sc.ops[o.Member], o)
		sc.end = max(sc.end, o.AtNs)
	}
	for _, ops := range sc.ops {
		slices.SortStableFunc(ops, func(a, b *ShardOp) int { return cmp.Compare(a.SentNs, b.SentNs) })
	}
	for _, hd := range r.Holds {
		sc.end = max(sc.end, hd.StartNs, hd.EndNs)
	}
	for _, rd := range r.Final {
		sc.end = max(sc.end, rd.AtNs)
	}
}

// holdEnd is when a hold ended, or the record's end if it never did.
func (sc *shardCheck) holdEnd(hd *ShardHold) int64 {
	if hd.EndNs == 0 {
		return sc.end
	}
	return hd.EndNs
}

// incomplete flags what the record lacks: without it the checks below see
// less than the run did, or nothing, and a blind check must not pass.
func (sc *shardCheck) incomplete() {
	c, r := sc.c, sc.rec
	flag := func(at int64, detail string) {
		c.flag(kindShardIncomplete, "", at, Example{TNs: []int64{at}, Detail: detail})
	}
	joined := slices.ContainsFunc(r.Ops, func(o ShardOp) bool { return o.Op == "join" && o.Result == OK })
	if !joined {
		flag(r.StartNs, "no member's join was ever answered")
	} else if len(r.Holds) == 0 {
		flag(r.StartNs, "no member ever worked on an index")
	}
	if r.StopNs == 0 {
		flag(sc.end, "the members were never stopped (the run ended first)")
	}
	for i := range r.Holds {
		hd := &r.Holds[i]
		if hd.EndNs == 0 {
			flag(hd.StartNs, fmt.Sprintf("member %s's hold of index %d of generation %d from %s never ended", hd.Member, hd.Index, hd.Generation, fmtSec(hd.StartNs)))
		}
	}
	switch {
	case len(r.Final) == 0:
		flag(sc.end, "the final read was never sent")
	case !slices.ContainsFunc(r.Final, func(rd ShardRead) bool { return rd.OK && rd.View != nil }):
		last := r.Final[len(r.Final)-1]
		flag(last.AtNs, fmt.Sprintf("the final read never answered (%d attempts, the last: node %d: %s)", len(r.Final), last.Node, truncate(last.Error)))
	}
	for _, n := range r.Notes {
		flag(sc.end, "harness: "+n)
	}
}

// shardClockExcuse names a clock fault beyond the bounds that may have
// moved the metadata leader's count of a lease that ended in [from, to]:
// one in effect from a lease and margin before from on.
func (sc *shardCheck) clockExcuse(from, to int64) excuse {
	h := sc.h
	reach := (sc.rec.TTLMs + sc.rec.ExpiryMarginMs + h.in.Run.SkewBoundMs) * nsPerMs
	for i := range h.windows {
		w := &h.windows[i]
		if w.beyond && w.clock && w.start <= to && w.stop >= from-reach {
			return excuse(fmt.Sprintf("%s: a clock beyond the bound may move the metadata leader's count of leases", w.describe()))
		}
	}
	return h.beyond("", from, to)
}

// overlaps flags every two holds of one index by two members that
// overlap in time.
func (sc *shardCheck) overlaps() {
	byIndex := map[int32][]*ShardHold{}
	for i := range sc.rec.Holds {
		hd := &sc.rec.Holds[i]
		byIndex[hd.Index] = append(byIndex[hd.Index], hd)
	}
	for _, idx := range slices.Sorted(maps.Keys(byIndex)) {
		hs := byIndex[idx]
		slices.SortStableFunc(hs, func(a, b *ShardHold) int { return cmp.Compare(a.StartNs, b.StartNs) })
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				from, to := b.StartNs, min(sc.holdEnd(a), sc.holdEnd(b))
				if a.Member == b.Member || to <= from {
					continue
				}
				sc.c.flag(kindShardOverlap, sc.clockExcuse(from, to), from, Example{TNs: []int64{a.StartNs, b.StartNs, to},
					Detail: fmt.Sprintf("index %d: member %s held it in generation %d from %s to %s, member %s in generation %d from %s to %s: %.1f ms at once",
						idx, a.Member, a.Generation, fmtSec(a.StartNs), sc.endText(a), b.Member, b.Generation, fmtSec(b.StartNs), sc.endText(b),
						float64(to-from)/float64(nsPerMs))})
			}
		}
	}
}

func (sc *shardCheck) endText(hd *ShardHold) string {
	if hd.EndNs == 0 {
		return "the end (never ended)"
	}
	return fmt.Sprintf("%s (%s)", fmtSec(hd.EndNs), hd.End)
}

// sameGeneration flags each index of a generation held by two members,
// whenever.
func (sc *shardCheck) sameGeneration() {
	type genIndex struct {
		gen   uint64
		index int32
	}
	by := map[genIndex][]*ShardHold{}
	for i := range sc.rec.Holds {
		hd := &sc.rec.Holds[i]
		k := genIndex{hd.Generation, hd.Index}
		if !slices.ContainsFunc(by[k], func(o *ShardHold) bool { return o.Member == hd.Member }) {
			by[k] = append(by[k], hd)
		}
	}
	keys := slices.SortedFunc(maps.Keys(by), func(a, b genIndex) int { return cmp.Or(cmp.Compare(a.gen, b.gen), cmp.Compare(a.index, b.index)) })
	for _, k := range keys {
		hs := by[k]
		if len(hs) < 2 {
			continue
		}
		var names []string
		from, to := hs[0].StartNs, int64(0)
		for _, hd := range hs {
			names = append(names, fmt.Sprintf("%s from %s", hd.Member, fmtSec(hd.StartNs)))
			from, to = min(from, hd.StartNs), max(to, sc.holdEnd(hd))
		}
		sc.c.flag(kindShardTwice, sc.h.beyond("", from, to), hs[1].StartNs, Example{TNs: []int64{hs[0].StartNs, hs[1].StartNs},
			Detail: fmt.Sprintf("index %d of generation %d held by %d members: %s", k.index, k.gen, len(hs), strings.Join(names, ", "))})
	}
}

// leaseEnds returns, for each op of member id, the member's lease end
// when it was sent: the send of its last ok join or renewal before, plus
// the TTL (0: none yet).
func (sc *shardCheck) leaseEnds(ops []*ShardOp) []int64 {
	out := make([]int64, len(ops))
	var lease int64
	for i, o := range ops {
		out[i] = lease
		if o.Result == OK && (o.Op == "join" || o.Op == "renew") {
			lease = max(lease, o.SentNs+sc.rec.TTLMs*nsPerMs)
		}
	}
	return out
}

// expiries flags a not_found answer that arrived while the member's lease
// still held by its own clock: the cluster expired it within its lease.
func (sc *shardCheck) expiries() {
	for _, id := range slices.Sorted(maps.Keys(sc.ops)) {
		ops := sc.ops[id]
		leases := sc.leaseEnds(ops)
		for i, o := range ops {
			if o.Result != shardNotFound || leases[i] == 0 || o.AtNs >= leases[i] {
				continue
			}
			last := leases[i] - sc.rec.TTLMs*nsPerMs
			sc.c.flag(kindShardEarly, sc.clockExcuse(last, o.AtNs), o.AtNs, Example{TNs: []int64{last, o.AtNs}, Nodes: []int{o.Node},
				Detail: fmt.Sprintf("member %s's %s sent at %s answered not_found at %s, %.1f ms before its lease ended (its last renewal that succeeded sent at %s, TTL %d ms)",
					id, o.Op, fmtSec(o.SentNs), fmtSec(o.AtNs), float64(leases[i]-o.AtNs)/float64(nsPerMs), fmtSec(last), sc.rec.TTLMs)})
		}
	}
}

// answers flags the answers that break the protocol's rules.
func (sc *shardCheck) answers() {
	holds := map[string][]*ShardHold{}
	for i := range sc.rec.Holds {
		hd := &sc.rec.Holds[i]
		holds[hd.Member] = append(holds[hd.Member], hd)
	}
	for _, id := range slices.Sorted(maps.Keys(sc.ops)) {
		var stopped uint64 // the most the member said it stopped, up to and with each request
		for _, o := range sc.ops[id] {
			if o.Op == "renew" {
				stopped = max(stopped, o.Stopped)
			}
			a := o.Answer
			if o.Result != OK || a == nil {
				continue
			}
			var bad []string
			for _, hd := range holds[id] {
				// A hold the member worked on before this answer and
				// never said it stopped: the set may not move on.
				if hd.StartNs < o.AtNs && stopped < hd.Generation {
					switch {
					case a.Generation > hd.Generation:
						bad = append(bad, fmt.Sprintf("it shows generation %d active while the member worked on index %d of generation %d from %s and never said it stopped it",
							a.Generation, hd.Index, hd.Generation, fmtSec(hd.StartNs)))
					case a.Generation == hd.Generation && a.Work && a.Index != hd.Index:
						bad = append(bad, fmt.Sprintf("it gives index %d of generation %d to a member working on its index %d since %s",
							a.Index, a.Generation, hd.Index, fmtSec(hd.StartNs)))
					}
				}
			}
			switch {
			case a.Work && a.Generation <= stopped:
				bad = append(bad, fmt.Sprintf("it says work on generation %d, which the member said it stopped (%d)", a.Generation, stopped))
			case a.Pending != nil && stopped >= a.Generation && slices.Contains(a.Pending.Waiting, id):
				bad = append(bad, fmt.Sprintf("it lists the member as waited for in generation %d, though it said it stopped %d", a.Generation, stopped))
			case a.Pending == nil && (a.Index < 0 || !a.Work) && stopped < a.Generation:
				bad = append(bad, fmt.Sprintf("nothing is pending, yet it gives index %d, work %v, in generation %d to a member that did not stop it", a.Index, a.Work, a.Generation))
			}
			for _, b := range bad {
				sc.c.flag(kindShardBadAnswer, sc.h.beyond("", o.SentNs, o.AtNs), o.AtNs, Example{TNs: []int64{o.SentNs, o.AtNs}, Nodes: []int{o.Node},
					Detail: fmt.Sprintf("member %s's %s sent at %s (stopped %d), answered at %s: %s", id, o.Op, fmtSec(o.SentNs), o.Stopped, fmtSec(o.AtNs), b)})
			}
		}
	}
}

// lastRead returns the last final read that answered, or nil.
func (sc *shardCheck) lastRead() *ShardRead {
	for i := len(sc.rec.Final) - 1; i >= 0; i-- {
		if rd := &sc.rec.Final[i]; rd.OK && rd.View != nil {
			return rd
		}
	}
	return nil
}

// final judges the final view: with nothing pending, every index of its
// generation held at the stop by the member it names; with a generation
// still pending long after the last change, waiting only for members it
// may wait for.
func (sc *shardCheck) final() {
	rd := sc.lastRead()
	if rd == nil || sc.rec.StopNs == 0 {
		return // flagged as incomplete
	}
	v := rd.View
	if v.Pending != nil {
		sc.unsettled(rd)
		return
	}
	byIndex := map[int32][]string{}
	for _, m := range v.Members {
		byIndex[m.Index] = append(byIndex[m.Index], m.ID)
	}
	idle := func(detail string) {
		sc.c.flag(kindShardIdle, "", rd.AtNs, Example{TNs: []int64{rd.SentNs, sc.rec.StopNs}, Nodes: []int{rd.Node}, Detail: detail})
	}
	var worked int64
	for _, i := range slices.Sorted(maps.Keys(byIndex)) {
		if i < 0 || i >= int32(v.Count) {
			idle(fmt.Sprintf("the final view (generation %d of %d indexes, nothing pending) gives index %d to %v", v.Generation, v.Count, i, byIndex[i]))
		}
	}
	for i := range int32(v.Count) {
		ms := byIndex[i]
		if len(ms) != 1 {
			idle(fmt.Sprintf("the final view (generation %d, nothing pending) gives index %d to %d members %v", v.Generation, i, len(ms), ms))
			continue
		}
		m := ms[0]
		if !sc.ours[m] {
			idle(fmt.Sprintf("the final view gives index %d of generation %d to member %s, which the harness never ran", i, v.Generation, m))
			continue
		}
		if slices.ContainsFunc(sc.rec.Holds, func(hd ShardHold) bool {
			return hd.Member == m && hd.Generation == v.Generation && hd.Index == i && hd.StartNs <= sc.rec.StopNs && sc.holdEnd(&hd) >= sc.rec.StopNs
		}) {
			worked++
			continue
		}
		// Not held at the stop: wrong if the member's own answers after
		// the read still show the view's generation with nothing
		// pending; not judged if they show the set changed; unknown if
		// it had none.
		var after []*ShardOp
		for _, o := range sc.ops[m] {
			if o.Result == OK && o.Answer != nil && o.SentNs >= rd.AtNs && o.AtNs <= sc.rec.StopNs {
				after = append(after, o)
			}
		}
		same := slices.IndexFunc(after, func(o *ShardOp) bool { return o.Answer.Generation == v.Generation && o.Answer.Pending == nil })
		switch {
		case same >= 0:
			o := after[same]
			idle(fmt.Sprintf("index %d of generation %d: its member %s was answered at %s (work %v, nothing pending), after the final read, yet did not hold it when the members were stopped at %s",
				i, v.Generation, m, fmtSec(o.AtNs), o.Answer.Work, fmtSec(sc.rec.StopNs)))
		case len(after) > 0:
			a := after[len(after)-1].Answer
			sc.c.Notes = append(sc.c.Notes, fmt.Sprintf("index %d of generation %d not judged: member %s's answers after the final read show generation %d (pending %v): the set changed after it",
				i, v.Generation, m, a.Generation, a.Pending != nil))
		default:
			sc.c.flag(kindShardIncomplete, "", rd.AtNs, Example{TNs: []int64{rd.AtNs, sc.rec.StopNs}, Nodes: []int{rd.Node},
				Detail: fmt.Sprintf("member %s, which the final view gives index %d of generation %d, got no answer between the read (%s) and the stop (%s): the index is not judged",
					m, i, v.Generation, fmtSec(rd.AtNs), fmtSec(sc.rec.StopNs))})
		}
	}
	sc.c.count(countShardWorked, worked)
}

// unsettled judges a final view still showing a pending generation.
func (sc *shardCheck) unsettled(rd *ShardRead) {
	v, r := rd.View, sc.rec
	p := v.Pending
	ttl := r.TTLMs * nsPerMs
	need := 2*(ttl+r.ExpiryMarginMs*nsPerMs) + shardSlackNs
	last := sc.lastChange(rd.SentNs, p.Generation)
	ex := Example{TNs: []int64{last, rd.SentNs}, Nodes: []int{rd.Node}}
	if len(p.Waiting) == 0 {
		ex.Detail = fmt.Sprintf("the final view has generation %d pending after %d, waiting for no one: it should have taken effect", p.Generation, v.Generation)
		sc.c.flag(kindShardIdle, "", rd.SentNs, ex)
		return
	}
	if r.QuietNs == 0 || rd.SentNs-last < need {
		sc.c.Notes = append(sc.c.Notes, fmt.Sprintf("the final view (sent %s) has generation %d pending, waiting for %v, %.1f s after the last change (%s): too soon to judge (%.1f s)",
			fmtSec(rd.SentNs), p.Generation, p.Waiting, float64(rd.SentNs-last)/float64(nsPerS), fmtSec(last), float64(need)/float64(nsPerS)))
		return
	}
	// A member that said it stopped, in a renewal answered a lease and
	// margin before the read (no node's copy lags that long after the
	// settling), is not waited for; nor one whose last request that may
	// have reached the cluster ended the settling time before the read
	// (the leader expires it a lease and margin after, or twice that if
	// the leader changed meanwhile).
	var why []string
	for _, w := range p.Waiting {
		if !sc.ours[w] {
			why = append(why, fmt.Sprintf("%s, which the harness never ran", w))
			continue
		}
		lastBeat := int64(-1)
		var said *ShardOp
		for _, o := range sc.ops[w] {
			if o.Result == OK || o.Result == Info {
				lastBeat = max(lastBeat, o.AtNs)
			}
			if o.Result == OK && o.Op == "renew" && o.Stopped >= v.Generation && o.AtNs <= rd.SentNs-(ttl+r.ExpiryMarginMs*nsPerMs) && said == nil {
				said = o
			}
		}
		switch {
		case said != nil:
			why = append(why, fmt.Sprintf("%s, whose renewal sent at %s said it stopped %d and was answered at %s", w, fmtSec(said.SentNs), said.Stopped, fmtSec(said.AtNs)))
		case lastBeat >= 0 && rd.SentNs-lastBeat >= need:
			why = append(why, fmt.Sprintf("%s, silent since %s, past its lease and the expiry margin twice", w, fmtSec(lastBeat)))
		}
	}
	if len(why) == 0 {
		sc.c.Notes = append(sc.c.Notes, fmt.Sprintf("the final view has generation %d pending, waiting for %v, which may still be stopping: not judged", p.Generation, p.Waiting))
		return
	}
	ex.Detail = fmt.Sprintf("the final view (sent %s, %.1f s after the last change at %s) has generation %d pending after %d, waiting for %s",
		fmtSec(rd.SentNs), float64(rd.SentNs-last)/float64(nsPerS), fmtSec(last), p.Generation, v.Generation, strings.Join(why, "; "))
	sc.c.flag(kindShardIdle, "", rd.SentNs, ex)
}

// lastChange is the last change of the set the record shows before t:
// the heal, an acknowledged join or leave, an expiry, the first answer
// that showed generation gen pending.
func (sc *shardCheck) lastChange(t int64, gen uint64) int64 {
	last := sc.rec.QuietNs
	for i := range sc.rec.Ops {
		o := &sc.rec.Ops[i]
		if o.AtNs > t {
			continue
		}
		if o.Result == shardNotFound || o.Result == OK && (o.Op == "join" || o.Op == "leave") {
			last = max(last, o.AtNs)
		}
	}
	if first := sc.firstPending(gen); first > 0 && first <= t {
		last = max(last, first)
	}
	return last
}

// firstPending is when an answer first showed generation gen pending
// (0: never).
func (sc *shardCheck) firstPending(gen uint64) int64 {
	var first int64
	for i := range sc.rec.Ops {
		o := &sc.rec.Ops[i]
		if a := o.Answer; a != nil && a.Pending != nil && a.Pending.Generation == gen && (first == 0 || o.AtNs < first) {
			first = o.AtNs
		}
	}
	return first
}

// figures counts the record.
func (sc *shardCheck) figures() {
	c, r := sc.c, sc.rec
	var joins, leaves, expiries, errs, leaseEnds int64
	gens := map[uint64]bool{}
	for _, o := range r.Ops {
		switch {
		case o.Result == OK && o.Op == "join":
			joins++
		case o.Result == OK && o.Op == "leave":
			leaves++
		case o.Result == shardNotFound:
			expiries++
		case o.Result != OK:
			errs++
		}
		if o.Answer != nil {
			gens[o.Answer.Generation] = true
		}
	}
	firstHold := map[uint64]int64{}
	for _, hd := range r.Holds {
		if hd.End == holdLease {
			leaseEnds++
		}
		if t, ok := firstHold[hd.Generation]; !ok || hd.StartNs < t {
			firstHold[hd.Generation] = hd.StartNs
		}
	}
	var wait int64
	for g, t := range firstHold {
		if p := sc.firstPending(g); p > 0 && t > p {
			wait = max(wait, t-p)
		}
	}
	// Handovers: each index's holds in the order they started, the next
	// by another member after one ended (overlaps are flagged above).
	byIndex := map[int32][]*ShardHold{}
	for i := range r.Holds {
		byIndex[r.Holds[i].Index] = append(byIndex[r.Holds[i].Index], &r.Holds[i])
	}
	var handovers, minGap int64
	for _, hs := range byIndex {
		slices.SortStableFunc(hs, func(a, b *ShardHold) int { return cmp.Compare(a.StartNs, b.StartNs) })
		for k := 1; k < len(hs); k++ {
			a, b := hs[k-1], hs[k]
			if a.Member == b.Member || b.StartNs < sc.holdEnd(a) {
				continue
			}
			gap := b.StartNs - sc.holdEnd(a)
			if handovers == 0 || gap < minGap {
				minGap = gap
			}
			handovers++
		}
	}
	c.count(countShardMembers, int64(len(sc.ours)))
	c.count(countShardJoins, joins)
	c.count(countShardLeaves, leaves)
	c.count(countShardExpiries, expiries)
	c.count(countShardErrors, errs)
	c.count(countShardGens, int64(len(gens)))
	c.count(countShardHolds, int64(len(r.Holds)))
	c.count(countShardLeaseEnds, leaseEnds)
	c.count(countShardLongWaitMs, wait/nsPerMs)
	c.count(countShardHandovers, handovers)
	c.count(countShardMinGapMs, minGap/nsPerMs)
}
