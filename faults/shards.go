package faults

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Worker shards in a run (check_shards.go judges them). Once the cluster
// is up, before the faults, the harness runs a few members of one shard
// set (ShardSetName), each in its own goroutine and each talking to one
// node only, so that a fault of that node (a kill, a pause, a partition)
// cuts it off and its lease runs out. A member behaves as the Go client's
// (client/shards.go: ShardMember.Run) with a work function that works
// until told to stop: it joins, renews every TTL/4 while it works and
// every shardWaitRenew while it waits, starts working on its index when an
// answer says work, stops when one says not to (or when its lease runs
// out by its own clock) and says so in its next renewal, and joins again
// under a new id when the cluster says it expired it. One member (churn)
// leaves and joins again every so often; one (silent) now and then stops
// sending anything for longer than its lease and the cluster's expiry
// margin, so the cluster expires it.
//
// Every request is recorded (ShardOp), and every stretch a member worked
// on an index (ShardHold) on the run's timeline: from the moment the
// answer saying work arrived to the moment right before the renewal or
// leave that says it stopped was sent, or the moment its lease ended by
// its own clock (the send time of its last successful join or renewal
// plus the TTL, on the same monotonic clock), whichever comes first. A
// harness stall cannot stretch a hold: lease ends are computed, not
// observed.
//
// At the heal, the churn and the silences stop (QuietNs): the members
// only renew from then on. Once every expiry the faults caused is
// certainly over (Settle after the heal), the harness reads the set
// (GET /v1/shards/{set}) through the nodes in turn until a read shows no
// pending generation or ReadBound after the heal passes, lets the members
// renew AfterRead longer, and then stops them: each stops its work and
// leaves. All of it goes to shards.json.

// ShardsFile is the run's shard record (ShardRecord); optional for the
// checkers: a run from before worker shards has none.
const ShardsFile = "shards.json"

// ShardSetName is the set the run's members join.
const ShardSetName = "fault-shards"

// The members' roles.
const (
	shardSteady = "steady"
	shardChurn  = "churn"
	shardSilent = "silent"
)

// Hold end reasons (ShardHold.End).
const (
	holdStopped    = "stopped"    // right before the renewal that says so
	holdLease      = "lease"      // the lease ran out by the member's clock
	holdLeave      = "leave"      // right before the leave
	holdNotFound   = "not_found"  // the cluster answered that it expired the member
	holdSuperseded = "superseded" // an answer moved the member on without its stop
	holdAbort      = "abort"      // the run ended without a leave
)

// Outcomes of a shard request (ShardOp.Result): OK, Fail and Info as the
// history's; shardNotFound is the fail that says the member is not (or no
// longer) in the set.
const shardNotFound = "not_found"

// ShardRecord is shards.json.
type ShardRecord struct {
	Set string `json:"set"`
	// TTLMs is every member's lease; ExpiryMarginMs how long after a
	// lease the cluster's metadata leader waits, on its clock, before it
	// expires a member that did not renew (node/shards.ExpiryMargin).
	TTLMs          int64 `json:"ttl_ms"`
	ExpiryMarginMs int64 `json:"expiry_margin_ms"`
	// Members are the member slots: role, node, and the ids each used.
	Members []ShardSlot `json:"members"`
	// StartNs: the members started. QuietNs: the churn and silences
	// stopped (the heal); 0: never. StopNs: the members were told to
	// stop and leave; DoneNs: all had. 0: never.
	StartNs int64 `json:"start_ns"`
	QuietNs int64 `json:"quiet_ns,omitempty"`
	StopNs  int64 `json:"stop_ns,omitempty"`
	DoneNs  int64 `json:"done_ns,omitempty"`
	// Ops are every request of the members, in the order they were
	// answered (or failed).
	Ops []ShardOp `json:"ops"`
	// Holds are the stretches members worked on an index, in the order
	// they started.
	Holds []ShardHold `json:"holds"`
	// Final are the attempts of the final read, in order.
	Final []ShardRead `json:"final"`
	// Notes are what the harness did not do as planned (a member that
	// did not stop in time): the checker fails the run on them.
	Notes []string `json:"notes,omitempty"`
}

// ShardSlot is one member slot: a goroutine that talks to Node and joins
// under a new id (IDs, in order) each time it joins anew.
type ShardSlot struct {
	Slot int      `json:"slot"`
	Role string   `json:"role"`
	Node int      `json:"node"`
	IDs  []string `json:"ids"`
	// Silences are a silent member's stretches without requests.
	Silences []ShardSpan `json:"silences,omitempty"`
}

// ShardSpan is a stretch of the run's timeline.
type ShardSpan struct {
	FromNs int64 `json:"from_ns"`
	ToNs   int64 `json:"to_ns"`
}

// ShardOp is one request of a member: join, renew or leave, sent to Node
// at SentNs, answered (or failed) at AtNs.
type ShardOp struct {
	Member string `json:"member"`
	Slot   int    `json:"slot"`
	Node   int    `json:"node"`
	Op     string `json:"op"`
	SentNs int64  `json:"sent_ns"`
	AtNs   int64  `json:"at_ns"`
	// Result is ok, not_found, fail or info (Code and Error say what).
	Result string `json:"result"`
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
	// Stopped is what a renewal said the member stopped.
	Stopped uint64 `json:"stopped,omitempty"`
	// Answer is an ok join's or renewal's view, reduced.
	Answer *ShardAnswer `json:"answer,omitempty"`
}

// ShardAnswer is what a join or renewal answered: the active generation,
// the member's index in it and whether to work now, and the pending
// generation.
type ShardAnswer struct {
	Generation uint64                 `json:"generation"`
	Count      uint32                 `json:"count"`
	Index      int32                  `json:"index"`
	Work       bool                   `json:"work"`
	Pending    *wire.ShardPendingView `json:"pending,omitempty"`
}

// ShardHold is a stretch a member worked on Index of Count in Generation:
// from StartNs (its answer arrived) to EndNs (End says why); EndNs 0:
// the record ended first.
type ShardHold struct {
	Member     string `json:"member"`
	Slot       int    `json:"slot"`
	Generation uint64 `json:"generation"`
	Index      int32  `json:"index"`
	Count      uint32 `json:"count"`
	StartNs    int64  `json:"start_ns"`
	EndNs      int64  `json:"end_ns,omitempty"`
	End        string `json:"end,omitempty"`
}

// ShardRead is an attempt of the final read: the view when OK.
type ShardRead struct {
	Node   int             `json:"node"`
	SentNs int64           `json:"sent_ns"`
	AtNs   int64           `json:"at_ns"`
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	View   *wire.ShardView `json:"view,omitempty"`
}

// shardPlan is what the members do and when.
type shardPlan struct {
	Set string
	// TTL is each member's lease; Margin the cluster's expiry margin past
	// it (node/shards.ExpiryMargin: faults may not import node).
	TTL, Margin time.Duration
	// WaitRenew is how often a waiting member renews (the client's
	// shardWaitRenew).
	WaitRenew time.Duration
	// Roles are the member slots' roles; slot k talks to node
	// (k-1) mod nodes + 1.
	Roles []string
	// The churn member leaves after working ChurnHold (drawn between the
	// two) and joins again ChurnAway later.
	ChurnHold, ChurnAway [2]time.Duration
	// The silent member goes silent SilentFirst after it starts, then
	// SilentEvery after each silence ends, for TTL + Margin +
	// SilentExtra.
	SilentFirst, SilentEvery, SilentExtra [2]time.Duration
	// ReqTimeout bounds a join, a leave and a final read's attempt.
	ReqTimeout time.Duration
	// Settle after the heal the final read starts; it is retried until
	// ReadBound after the heal; the members stop AfterRead after it;
	// LeaveBound bounds the attempts of each leave.
	Settle, ReadBound, AfterRead, LeaveBound time.Duration
}

// Defaults of the plan: a lease of 3 s (renewals every 750 ms) and the
// cluster's margin of 5 s; three steady members, one that churns, one
// that goes silent. Every expiry the faults cause is over by TTL + margin
// after the heal (the members' renewals reach their nodes again then), and
// the leader's expiry pass runs every 500 ms: the final read starts 4 s
// after that, and is retried up to twice that span (a leader change
// restarts every count).
const (
	shardTTL          = 3 * time.Second
	shardExpiryMargin = 5 * time.Second
	shardWaitRenew    = 300 * time.Millisecond
)

func defaultShardPlan(reqTimeout time.Duration) shardPlan {
	span := shardTTL + shardExpiryMargin
	return shardPlan{
		Set: ShardSetName, TTL: shardTTL, Margin: shardExpiryMargin, WaitRenew: shardWaitRenew,
		Roles:     []string{shardSteady, shardSteady, shardSteady, shardChurn, shardSilent},
		ChurnHold: [2]time.Duration{10 * time.Second, 15 * time.Second}, ChurnAway: [2]time.Duration{time.Second, 2 * time.Second},
		SilentFirst: [2]time.Duration{15 * time.Second, 30 * time.Second}, SilentEvery: [2]time.Duration{30 * time.Second, 45 * time.Second},
		SilentExtra: [2]time.Duration{2 * time.Second, 4 * time.Second},
		ReqTimeout:  reqTimeout,
		Settle:      span + 4*time.Second, ReadBound: 2*span + 10*time.Second, AfterRead: 2 * time.Second, LeaveBound: span,
	}
}

// shardHarness runs the members. Safe for concurrent use.
type shardHarness struct {
	api  *API
	tl   Timeline
	log  *slog.Logger
	plan shardPlan
	// quiet is closed at the heal: no churn, no silence from then on.
	quiet     chan struct{}
	quietOnce sync.Once
	// root is the harness's context: abort ends it, and with it the
	// members and the final read. cancel stops the members; done is
	// closed when all returned; finalDone when the final read's
	// goroutine did (nil until it starts).
	root      context.Context
	abort     context.CancelFunc
	cancel    context.CancelFunc
	done      chan struct{}
	finalDone chan struct{}
	// stopOnce guards the stop; leave says whether the members leave.
	stopOnce sync.Once
	leave    bool

	mu  sync.Mutex
	rec ShardRecord
}

// startShardMembers starts the plan's members against the nodes of api.
func startShardMembers(ctx context.Context, api *API, tl Timeline, log *slog.Logger, seed int64, plan shardPlan) *shardHarness {
	h := &shardHarness{api: api, tl: tl, log: log, plan: plan, quiet: make(chan struct{}), done: make(chan struct{})}
	h.rec = ShardRecord{Set: plan.Set, TTLMs: plan.TTL.Milliseconds(), ExpiryMarginMs: plan.Margin.Milliseconds(),
		StartNs: tl.Now(), Ops: []ShardOp{}, Holds: []ShardHold{}, Final: []ShardRead{}}
	h.root, h.abort = context.WithCancel(ctx)
	mctx, cancel := context.WithCancel(h.root)
	h.cancel = cancel
	var ms []*shardMember
	for k, role := range plan.Roles {
		slot := k + 1
		m := &shardMember{h: h, slot: slot, role: role, node: (slot-1)%api.Nodes() + 1,
			rng: mrand.New(mrand.NewPCG(uint64(seed), shardStream+uint64(slot)))}
		h.rec.Members = append(h.rec.Members, ShardSlot{Slot: slot, Role: role, Node: m.node, IDs: []string{}})
		ms = append(ms, m)
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.run(mctx) })
	}
	go func() {
		wg.Wait()
		close(h.done)
	}()
	return h
}

// shardStream seeds the members' draws apart from the run's others.
const shardStream = 0x5348

// quieted reports whether the heal came: no churn or silence any more.
func (h *shardHarness) quieted() bool {
	select {
	case <-h.quiet:
		return true
	default:
		return false
	}
}

// quietDown stops the churn and the silences (at the heal).
func (h *shardHarness) quietDown() {
	h.quietOnce.Do(func() {
		h.mu.Lock()
		h.rec.QuietNs = h.tl.Now()
		h.mu.Unlock()
		close(h.quiet)
	})
}

// stop tells the members to stop (and to leave, if leave), and waits up
// to bound for them; a member still running then is noted.
func (h *shardHarness) stop(leave bool, bound time.Duration) {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		h.leave = leave
		h.rec.StopNs = h.tl.Now()
		h.mu.Unlock()
		h.quietDown()
		h.cancel()
	})
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-h.done:
		h.mu.Lock()
		if h.rec.DoneNs == 0 {
			h.rec.DoneNs = h.tl.Now()
		}
		h.mu.Unlock()
	case <-t.C:
		h.note(fmt.Sprintf("members still running %v after they were told to stop", bound))
	}
}

func (h *shardHarness) leaving() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leave
}

func (h *shardHarness) note(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.Notes = append(h.rec.Notes, s)
}

// startFinal starts the final read (finalRead) and returns where its
// outcome will be sent.
func (h *shardHarness) startFinal(heal int64) <-chan error {
	out := make(chan error, 1)
	h.finalDone = make(chan struct{})
	go func() {
		defer close(h.finalDone)
		out <- h.finalRead(h.root, heal)
	}()
	return out
}

// waitFinal waits up to bound for the final read's goroutine, if it
// started.
func (h *shardHarness) waitFinal(bound time.Duration) {
	if h.finalDone == nil {
		return
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-h.finalDone:
	case <-t.C:
	}
}

// finalRead reads the set through the nodes in turn, from Settle after
// heal, until a read shows no pending generation or ReadBound after heal
// passes; then lets the members renew AfterRead longer, and stops them.
func (h *shardHarness) finalRead(ctx context.Context, heal int64) error {
	p := &h.plan
	if err := sleepCtx(ctx, time.Duration(heal+p.Settle.Nanoseconds()-h.tl.Now())); err != nil {
		return err
	}
	for node := 1; ; node = node%h.api.Nodes() + 1 {
		rd := ShardRead{Node: node, SentNs: h.tl.Now()}
		var v wire.ShardView
		actx, cancel := context.WithTimeout(ctx, p.ReqTimeout)
		res := h.api.Do(actx, node, http.MethodGet, "/v1/shards/"+url.PathEscape(p.Set), nil, &v)
		cancel()
		rd.AtNs = h.tl.Now()
		if res.Read() {
			rd.OK, rd.View = true, &v
		} else {
			rd.Error = fmt.Sprintf("%s %s", res.Code, truncate(res.Err))
		}
		h.mu.Lock()
		h.rec.Final = append(h.rec.Final, rd)
		h.mu.Unlock()
		if rd.OK && v.Pending == nil || h.tl.Now() >= heal+p.ReadBound.Nanoseconds() {
			break
		}
		if err := sleepCtx(ctx, p.WaitRenew); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, p.AfterRead); err != nil {
		return err
	}
	h.stop(true, p.LeaveBound+p.ReqTimeout+time.Second)
	return ctx.Err()
}

// write writes shards.json as it stands.
func (h *shardHarness) write(dir string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return WriteJSONFile(filepath.Join(dir, ShardsFile), &h.rec)
}

// ShardsSummary is the shard part of summary.json.
type ShardsSummary struct {
	Members  int `json:"members"`
	Joins    int `json:"joins"`
	Leaves   int `json:"leaves"`
	Expiries int `json:"expiries"`
	Holds    int `json:"holds"`
	Errors   int `json:"errors"`
	// Final is the final read's outcome, for people.
	Final string `json:"final"`
}

// summary counts the record.
func (h *shardHarness) summary() ShardsSummary {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := ShardsSummary{Holds: len(h.rec.Holds), Final: "not read"}
	for _, sl := range h.rec.Members {
		s.Members += len(sl.IDs)
	}
	for _, o := range h.rec.Ops {
		switch {
		case o.Result == OK && o.Op == "join":
			s.Joins++
		case o.Result == OK && o.Op == "leave":
			s.Leaves++
		case o.Result == shardNotFound:
			s.Expiries++
		case o.Result != OK:
			s.Errors++
		}
	}
	for i := len(h.rec.Final) - 1; i >= 0; i-- {
		if v := h.rec.Final[i].View; v != nil {
			s.Final = fmt.Sprintf("generation %d of %d indexes, %d members, pending %v", v.Generation, v.Count, len(v.Members), v.Pending != nil)
			break
		}
	}
	return s
}

// shardMember is one member slot's goroutine state.
type shardMember struct {
	h    *shardHarness
	slot int
	role string
	node int
	rng  *mrand.Rand
	inc  int
	id   string
	// view is the last answer; fresh while it has not been acted on,
	// answerAt when it arrived.
	view     *wire.ShardView
	fresh    bool
	answerAt int64
	// leaseEnd is when the lease ends on the timeline: the send of the
	// last join or renewal that succeeded, plus the TTL.
	leaseEnd int64
	// stopped: the member holds no work of a generation at or below it.
	stopped uint64
	cur     *heldIndex
}

// heldIndex is the hold a member works on: rec.Holds[i].
type heldIndex struct {
	i     int
	gen   uint64
	index int32
	// stopping: an answer said stop; the hold ends before the next
	// renewal, which says so.
	stopping bool
}

// loopEnd says why a member's loop returned.
type loopEnd int

const (
	loopStopped loopEnd = iota // told to stop: it left
	loopExpired                // the cluster expired it: join anew now
	loopChurned                // it left to join again later
)

func (m *shardMember) run(ctx context.Context) {
	p := &m.h.plan
	var nextSilence int64
	if m.role == shardSilent {
		nextSilence = m.h.tl.Now() + m.draw(p.SilentFirst)
	}
	for m.join(ctx) {
		switch m.loop(ctx, &nextSilence) {
		case loopStopped:
			return
		case loopChurned:
			if sleepCtx(ctx, time.Duration(m.draw(p.ChurnAway))) != nil {
				return
			}
		}
	}
	if m.cur != nil {
		m.endHold(min(m.h.tl.Now(), m.leaseEnd), holdAbort)
	}
}

// draw returns a duration between the two, in ns.
func (m *shardMember) draw(r [2]time.Duration) int64 {
	lo, hi := r[0].Nanoseconds(), r[1].Nanoseconds()
	if hi <= lo {
		return lo
	}
	return lo + m.rng.Int64N(hi-lo)
}

// loop runs the member from a join until it stops, leaves, or is
// expired: Run's loop in client/shards.go.
func (m *shardMember) loop(ctx context.Context, nextSilence *int64) loopEnd {
	h, p := m.h, &m.h.plan
	var churnAt int64
	if m.role == shardChurn {
		churnAt = h.tl.Now() + m.draw(p.ChurnHold)
	}
	for {
		m.apply()
		now := h.tl.Now()
		wait := p.TTL.Nanoseconds() / 4
		if m.cur == nil || m.cur.stopping {
			wait = min(wait, p.WaitRenew.Nanoseconds())
		}
		if m.cur != nil {
			// Wake at the lease's end, to stop then.
			wait = min(wait, m.leaseEnd-now)
		}
		if !h.quieted() {
			if churnAt > 0 {
				wait = min(wait, churnAt-now)
			}
			if *nextSilence > 0 {
				wait = min(wait, *nextSilence-now)
			}
		}
		if sleepCtx(ctx, time.Duration(max(wait, 0))) != nil {
			m.stopAndLeave(ctx)
			return loopStopped
		}
		if *nextSilence > 0 && h.tl.Now() >= *nextSilence && !h.quieted() {
			m.silence(ctx)
			*nextSilence = h.tl.Now() + m.draw(p.SilentEvery)
			if ctx.Err() != nil {
				m.stopAndLeave(ctx)
				return loopStopped
			}
		}
		if churnAt > 0 && h.tl.Now() >= churnAt && !h.quieted() {
			m.stopAndLeave(ctx)
			return loopChurned
		}
		m.checkLease()
		if m.renew(ctx) {
			return loopExpired
		}
	}
}

// silence sends nothing for TTL + Margin + SilentExtra, or until the heal
// or the stop.
func (m *shardMember) silence(ctx context.Context) {
	h, p := m.h, &m.h.plan
	from := h.tl.Now()
	d := p.TTL + p.Margin + time.Duration(m.draw(p.SilentExtra))
	h.log.Info("shard member goes silent", "member", m.id, "for", d)
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-h.quiet:
	case <-ctx.Done():
	}
	t.Stop()
	h.mu.Lock()
	sl := &h.rec.Members[m.slot-1]
	sl.Silences = append(sl.Silences, ShardSpan{FromNs: from, ToNs: h.tl.Now()})
	h.mu.Unlock()
}

// checkLease stops the work when the lease ran out: whatever the last
// view said, the member may not work until an answer says so again.
func (m *shardMember) checkLease() {
	if m.cur == nil || m.h.tl.Now() < m.leaseEnd {
		return
	}
	m.endHold(m.leaseEnd, holdLease)
	if m.view.Work {
		v := *m.view
		v.Work = false
		m.view = &v
	}
}

// apply acts on a fresh answer: starts working on the index it gives,
// or stops. A member never works on a generation it stopped.
func (m *shardMember) apply() {
	if !m.fresh {
		return
	}
	m.fresh = false
	v := m.view
	if m.cur != nil && (v.Generation != m.cur.gen || v.Work && v.Index != m.cur.index) {
		// The set moved on though the member never said it stopped:
		// the checker flags the answer; the member stops.
		m.endHold(m.answerAt, holdSuperseded)
	}
	switch {
	case v.Work && m.cur == nil && v.Generation > m.stopped && v.Index >= 0:
		m.startHold(v, m.answerAt)
	case !v.Work:
		if m.cur != nil {
			m.cur.stopping = true
			m.stopped = max(m.stopped, m.cur.gen)
		}
		m.stopped = max(m.stopped, v.Generation)
	}
}

func (m *shardMember) startHold(v *wire.ShardView, at int64) {
	h := m.h
	h.mu.Lock()
	h.rec.Holds = append(h.rec.Holds, ShardHold{Member: m.id, Slot: m.slot, Generation: v.Generation, Index: v.Index, Count: v.Count, StartNs: at})
	m.cur = &heldIndex{i: len(h.rec.Holds) - 1, gen: v.Generation, index: v.Index}
	h.mu.Unlock()
}

// endHold ends the current hold at at, for why; the member holds no work
// of its generation from then on.
func (m *shardMember) endHold(at int64, why string) {
	h := m.h
	h.mu.Lock()
	h.rec.Holds[m.cur.i].EndNs, h.rec.Holds[m.cur.i].End = at, why
	h.mu.Unlock()
	m.stopped = max(m.stopped, m.cur.gen)
	m.cur = nil
}

// do sends one request, records it, and returns its result and answer.
func (m *shardMember) do(ctx context.Context, op string, body any, stopped uint64, sent int64) (Result, *wire.ShardView) {
	h := m.h
	var v wire.ShardView
	var out any = &v
	if op == "leave" {
		out = nil
	}
	res := h.api.Do(ctx, m.node, http.MethodPost, "/v1/shards/"+op, body, out)
	rec := ShardOp{Member: m.id, Slot: m.slot, Node: m.node, Op: op, SentNs: sent, AtNs: h.tl.Now(), Result: res.Type, Stopped: stopped}
	switch {
	case res.Type == Fail && res.Code == shardNotFound:
		rec.Result = shardNotFound
	case res.Type != OK || res.Code == CodeBadResponse:
		rec.Code, rec.Error = res.Code, truncate(res.Err)
	}
	if res.Read() && out != nil {
		rec.Answer = &ShardAnswer{Generation: v.Generation, Count: v.Count, Index: v.Index, Work: v.Work, Pending: v.Pending}
	}
	h.mu.Lock()
	h.rec.Ops = append(h.rec.Ops, rec)
	h.mu.Unlock()
	if !res.Read() || out == nil {
		return res, nil
	}
	return res, &v
}

// join joins under a new id, retrying the same id (a repeat of a join
// changes nothing) until it is answered or ctx ends.
func (m *shardMember) join(ctx context.Context) bool {
	h, p := m.h, &m.h.plan
	m.inc++
	m.id, m.stopped, m.cur, m.view = fmt.Sprintf("m%d-%d", m.slot, m.inc), 0, nil, nil
	h.mu.Lock()
	sl := &h.rec.Members[m.slot-1]
	sl.IDs = append(sl.IDs, m.id)
	h.mu.Unlock()
	req := wire.ShardJoinRequest{Set: p.Set, Member: m.id, TTLMs: p.TTL.Milliseconds(), Info: fmt.Sprintf("faults slot %d (%s) via node %d", m.slot, m.role, m.node)}
	for ctx.Err() == nil {
		sent := h.tl.Now()
		rctx, cancel := context.WithTimeout(ctx, p.TTL)
		_, v := m.do(rctx, "join", &req, 0, sent)
		cancel()
		if v != nil {
			m.took(v, sent)
			return true
		}
		if sleepCtx(ctx, p.WaitRenew) != nil {
			break
		}
	}
	return false
}

// took records an answer of a join or renewal sent at sent.
func (m *shardMember) took(v *wire.ShardView, sent int64) {
	m.view, m.fresh, m.answerAt = v, true, m.h.tl.Now()
	m.leaseEnd = sent + m.h.plan.TTL.Nanoseconds()
}

// renew renews the lease, saying what the member stopped, ending its
// hold first if it is stopping. A working member's renewal ends with its
// lease: it must not wait on it past then. It reports whether the
// cluster expired the member.
func (m *shardMember) renew(ctx context.Context) (expired bool) {
	h, p := m.h, &m.h.plan
	if m.cur != nil && m.cur.stopping {
		m.endHold(min(h.tl.Now(), m.leaseEnd), holdStopped)
	}
	deadline := h.tl.Now() + p.TTL.Nanoseconds()
	if m.cur != nil {
		deadline = m.leaseEnd
	}
	sent := h.tl.Now()
	rctx, cancel := context.WithTimeout(ctx, time.Duration(deadline-sent))
	defer cancel()
	res, v := m.do(rctx, "renew", &wire.ShardRenewRequest{Set: p.Set, Member: m.id, Stopped: m.stopped}, m.stopped, sent)
	at := h.tl.Now()
	if m.cur != nil && at >= m.leaseEnd {
		// The lease ran out before the answer came: the work stopped
		// then, whatever the answer says.
		m.checkLease()
		if v != nil {
			v.Work = false
		}
	}
	switch {
	case v != nil:
		m.took(v, sent)
	case res.Type == Fail && res.Code == shardNotFound && ctx.Err() == nil:
		// Expired: the cluster gave the index away. Stop; join anew.
		if m.cur != nil {
			m.endHold(min(at, m.leaseEnd), holdNotFound)
		}
		h.log.Info("shard member expired", "member", m.id, "node", m.node)
		return true
	}
	return false
}

// stopAndLeave stops the work, and leaves (retried until answered or
// LeaveBound passes) unless the members were stopped without leaving.
func (m *shardMember) stopAndLeave(ctx context.Context) {
	h, p := m.h, &m.h.plan
	if ctx.Err() != nil && !h.leaving() {
		if m.cur != nil {
			m.endHold(min(h.tl.Now(), m.leaseEnd), holdAbort)
		}
		return
	}
	if m.cur != nil {
		m.endHold(min(h.tl.Now(), m.leaseEnd), holdLeave)
	}
	lctx := context.WithoutCancel(ctx)
	deadline := time.Now().Add(p.LeaveBound)
	for {
		sent := h.tl.Now()
		actx, cancel := context.WithTimeout(lctx, p.ReqTimeout)
		res, _ := m.do(actx, "leave", &wire.ShardLeaveRequest{Set: p.Set, Member: m.id}, 0, sent)
		cancel()
		if res.Type != Info || time.Now().After(deadline) {
			return
		}
		time.Sleep(p.WaitRenew)
	}
}

// Bounds of the run's shard steps outside the plan: the final stop of an
// aborted run, and the wait for the final read's goroutine.
const (
	shardAbortBound = 5 * time.Second
)

// startShards starts the members (after setup) and writes shards.json.
func (r *Run) startShards(ctx context.Context) error {
	plan := defaultShardPlan(r.cfg.ReqTimeout)
	r.shards = startShardMembers(ctx, r.api, r.tl, r.log, r.cfg.Seed, plan)
	r.log.Info("shard members started", "set", plan.Set, "members", len(plan.Roles), "ttl", plan.TTL)
	return r.shards.write(r.cfg.Out)
}

// shardsFinal ends the churn and silences at the heal, and starts the
// final read and the members' stop, which Execute waits for before it
// stops the nodes.
func (r *Run) shardsFinal(heal int64) {
	r.shards.quietDown()
	r.shardsDone = r.shards.startFinal(heal)
}

// closeShards stops the members if they still run (without leaving: the
// run is being torn down), waits for the final read's goroutine, and
// writes shards.json and the summary's part. Called by finish, whatever
// the run's outcome.
func (r *Run) closeShards() error {
	h := r.shards
	if h == nil {
		return nil
	}
	h.stop(false, shardAbortBound)
	h.abort()
	h.waitFinal(shardAbortBound)
	r.sum.Shards = h.summary()
	return h.write(r.cfg.Out)
}
