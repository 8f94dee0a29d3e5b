package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The workload (TESTING.md section 7, "mix"): each client loop enqueues
// tasks with unique payloads and ids of its own choosing, some depending
// on tasks acknowledged earlier, and claims tasks and works them: posts
// updates, renews the slow ones, and then completes (after offering the
// effect to the fenced sink), fails, snoozes or abandons them. Every
// request goes to a node drawn at random.

// Mix is the workload's choices.
type Mix struct {
	// EnqueuePerSec is one loop's enqueue rate.
	EnqueuePerSec float64 `json:"enqueue_per_sec"`
	// DepProb is the chance an enqueue depends on 1..MaxDeps tasks the
	// loop saw acknowledged.
	DepProb float64 `json:"dep_prob"`
	MaxDeps int     `json:"max_deps"`
	// MaxUpdates: a worked task gets 0..MaxUpdates updates.
	MaxUpdates int `json:"max_updates"`
	// The fate of a claimed task: fail, snooze or abandon it, with these
	// chances; complete it otherwise. Slow is the chance its work
	// outlasts the lease, so the loop renews it.
	Fail    float64 `json:"fail"`
	Snooze  float64 `json:"snooze"`
	Abandon float64 `json:"abandon"`
	Slow    float64 `json:"slow"`
	// Cancel is the chance that an enqueue is followed by the cancel of a
	// task the loop saw acknowledged (claimed by anyone or not: a holder
	// learns it from its next write, refused as cancelled).
	Cancel float64 `json:"cancel"`
	// FailRetry is a fail's retry_after, SnoozeDelay a snooze's delay.
	FailRetry   time.Duration `json:"fail_retry"`
	SnoozeDelay time.Duration `json:"snooze_delay"`
	// FastWork bounds a normal task's work; a slow one works
	// SlowWorkMin..SlowWorkMax, renewing every TTL/RenewsPerTTL.
	FastWork     time.Duration `json:"fast_work"`
	SlowWorkMin  time.Duration `json:"slow_work_min"`
	SlowWorkMax  time.Duration `json:"slow_work_max"`
	RenewsPerTTL int           `json:"renews_per_ttl"`
	// IdlePause is how long a loop that found nothing to claim waits
	// before it looks again (at most; an enqueue due sooner ends it).
	IdlePause time.Duration `json:"idle_pause"`
	// TimeLimited is the chance an enqueue carries TimeLimit: a slow
	// task's work may outlast it, and its renewals are then refused
	// (time_limit) and its claim ends there, a failed attempt.
	TimeLimited float64       `json:"time_limited"`
	TimeLimit   time.Duration `json:"time_limit"`
	// NoRetry is the chance that a fail says no_retry (a handler's
	// SkipRetry): the task is dead at once, whatever its attempts left.
	NoRetry float64 `json:"no_retry"`
	// GroupSize is how many consecutive enqueues of a loop share a group
	// label; GroupCancel the chance that an enqueue is followed by the
	// cancel of the group it went into (whose later enqueues, claims
	// and completions then race the cancel).
	GroupSize   int     `json:"group_size"`
	GroupCancel float64 `json:"group_cancel"`
	// Keyed is the chance an enqueue carries a unique key, drawn from the
	// loop's KeyPool keys, so that keys repeat (and race the cancels
	// that free them); a keyed enqueue names no deps.
	Keyed   float64 `json:"keyed"`
	KeyPool int     `json:"key_pool"`
	// Placed is the chance an enqueue without key or deps sends no id:
	// the node draws it in a partition it can write (placement), and
	// the ok names it. The checkers know such a task by its id from the
	// ok, or, for one in doubt, by its unique payload where a claim or a
	// final read shows it.
	Placed float64 `json:"placed"`
	// Hinted is the chance an enqueue asks for a hint: a task whose
	// cohort the node cannot write is kept there and answered "hinted"
	// (Event.Hinted), and must reach its cohort once the fault heals.
	Hinted float64 `json:"hinted"`
	// Forbidden is the chance an enqueue is sent with the worker's
	// credential (LoopConfig.WorkerToken), whose role may not enqueue:
	// it must be refused (403), and its task never appear anywhere
	// (total-queue's failed-but-delivered). The loop's other requests go
	// with the credential of their role: enqueues the producer's, claims
	// and the writes under them the worker's, the rest (an operator's
	// cancel, a group's) the cluster token.
	Forbidden float64 `json:"forbidden"`
}

// DefaultMix is the mix of TESTING.md section 7, scaled to a shared
// 2-core machine. A loop is sequential, so its time is the budget: at 12
// enqueues a second it also works about 12 tasks a second, and a slow
// task holds it for 1-2.5 s; 1% slow tasks cost it about a fifth of its
// time (at 3% the loops fell behind their enqueue rate).
func DefaultMix() Mix {
	return Mix{
		EnqueuePerSec: 12,
		DepProb:       0.15,
		MaxDeps:       2,
		MaxUpdates:    3,
		Fail:          0.06,
		Snooze:        0.05,
		Abandon:       0.04,
		Slow:          0.01,
		Cancel:        0.02,
		FailRetry:     500 * time.Millisecond,
		SnoozeDelay:   700 * time.Millisecond,
		FastWork:      20 * time.Millisecond,
		SlowWorkMin:   time.Second,
		SlowWorkMax:   2500 * time.Millisecond,
		RenewsPerTTL:  3,
		IdlePause:     150 * time.Millisecond,
		// Within the slow work's 1-2.5 s: about half the slow tasks
		// that carry it run past it.
		TimeLimited: 0.3,
		TimeLimit:   1800 * time.Millisecond,
		// A fifth of the fails: about 1% of the tasks go dead at once.
		NoRetry: 0.2,
		// A group fills in under 2 s; a loop cancels one about every
		// 17 s, most of whose tasks are still open then.
		GroupSize:   20,
		GroupCancel: 0.005,
		// About one enqueue a second per loop, over 40 keys: most keys
		// are enqueued again while their task is kept.
		Keyed:   0.08,
		KeyPool: 40,
		// A third of the enqueues: the Go client always sends an id,
		// ctl and HTTP users mostly do not.
		Placed: 0.3,
		// A fifth: the ones cut off with their node are the test.
		Hinted: 0.2,
		// About one enqueue every 4 s per loop is the worker's, refused.
		Forbidden: 0.02,
	}
}

// Validate checks the mix.
func (m Mix) Validate() error {
	if m.EnqueuePerSec <= 0 {
		return fmt.Errorf("mix: enqueue rate %v must be positive", m.EnqueuePerSec)
	}
	for name, p := range map[string]float64{"dep": m.DepProb, "fail": m.Fail, "snooze": m.Snooze, "abandon": m.Abandon, "slow": m.Slow, "cancel": m.Cancel,
		"time-limited": m.TimeLimited, "no-retry": m.NoRetry, "group-cancel": m.GroupCancel, "keyed": m.Keyed, "placed": m.Placed, "hinted": m.Hinted, "forbidden": m.Forbidden} {
		if p < 0 || p > 1 {
			return fmt.Errorf("mix: %s chance %v: want [0, 1]", name, p)
		}
	}
	if m.Fail+m.Snooze+m.Abandon > 1 {
		return fmt.Errorf("mix: fail %v + snooze %v + abandon %v exceed 1", m.Fail, m.Snooze, m.Abandon)
	}
	if m.MaxDeps < 0 || m.MaxUpdates < 0 || m.RenewsPerTTL < 1 {
		return fmt.Errorf("mix: max deps %d, max updates %d, renews per ttl %d: want >= 0, >= 0, >= 1", m.MaxDeps, m.MaxUpdates, m.RenewsPerTTL)
	}
	if m.GroupSize < 1 || m.KeyPool < 1 {
		return fmt.Errorf("mix: group size %d, key pool %d: want >= 1", m.GroupSize, m.KeyPool)
	}
	if m.TimeLimited > 0 && m.TimeLimit <= 0 {
		return fmt.Errorf("mix: time-limited %v of the tasks, with a time limit of %v", m.TimeLimited, m.TimeLimit)
	}
	if m.SlowWorkMax < m.SlowWorkMin || m.FastWork < 0 || m.IdlePause <= 0 {
		return fmt.Errorf("mix: work times fast %v, slow [%v, %v], idle %v are not ranges", m.FastWork, m.SlowWorkMin, m.SlowWorkMax, m.IdlePause)
	}
	return nil
}

// LoopConfig configures one client loop; a worker process gets it as
// JSON.
type LoopConfig struct {
	// Loop is the loop's number (0-based); its procs are Loop,
	// Loop+ProcStride, Loop+2·ProcStride, ... so loops never share one.
	Loop       int `json:"loop"`
	ProcStride int `json:"proc_stride"`
	// Addrs are the nodes' HTTP addresses (node i at Addrs[i-1]); Local
	// the source address of the loop's connections.
	Addrs []string   `json:"addrs"`
	Local netip.Addr `json:"local"`
	Token string     `json:"token"`
	// ProducerToken and WorkerToken are the credentials of those roles
	// (empty: the cluster token sends everything).
	ProducerToken string `json:"producer_token,omitempty"`
	WorkerToken   string `json:"worker_token,omitempty"`
	// CA is the PEM of the cluster's HTTPS authority (nil: plain HTTP).
	CA []byte `json:"ca,omitempty"`
	// Seed draws the loop's choices; Start is the run's timeline.
	Seed  int64 `json:"seed"`
	Start int64 `json:"start"`
	// RunTag makes payloads unique across runs too.
	RunTag string `json:"run_tag"`
	// Partitions is the cluster's P, for ids of a key's partition.
	Partitions  int           `json:"partitions"`
	Queue       string        `json:"queue"`
	TTL         time.Duration `json:"ttl"`
	MaxAttempts uint32        `json:"max_attempts"`
	// W is the enqueue's ack count (0: a majority).
	W int `json:"w"`
	// ReqTimeout bounds one request (a claim's wait comes on top).
	ReqTimeout time.Duration `json:"req_timeout"`
	Mix        Mix           `json:"mix"`
}

// Emitter receives a loop's events and runs its fenced-sink offers. Its
// methods are called from the loop's goroutine only.
type Emitter interface {
	// Emit records e (the harness gives it its Index).
	Emit(e Event)
	// Offer offers task's effect under claim to the fenced sink and
	// reports whether the sink took it; the harness records the Effect
	// event.
	Offer(proc int, task string, claim uint32) (bool, error)
	// Holding tells the harness whether the loop holds a claim now
	// (the pause-worker nemesis picks a worker that does).
	Holding(bool)
}

// maxRecent bounds the acknowledged ids a loop remembers to depend on.
const maxRecent = 64

// maxEnqueueBacklog is how far behind its enqueue schedule a loop may be
// and still catch up: half a second of enqueues, so the rate holds
// through the loop's own slow tasks, but a stall of seconds does not end
// in a burst.
const maxEnqueueBacklog = 500 * time.Millisecond

// Loop is one client: one operation in flight at a time.
type Loop struct {
	cfg LoopConfig
	api *API
	// as are the APIs of the roles' credentials (Event.As), by role.
	as   map[string]*API
	em   Emitter
	tl   Timeline
	rng  *rand.Rand
	proc int
	// recent are ids this loop saw acknowledged (a ring).
	recent []string
	count  int
	// cancelDue: the last enqueue drew a cancel, sent before the next
	// claim; cancels numbers them, for their unique reasons; lastAcked is
	// the id the loop saw acknowledged last.
	cancelDue bool
	cancels   int
	lastAcked string
	// groupCancelDue: the last enqueue drew the cancel of its group,
	// sent next (as cancelDue).
	groupCancelDue bool
}

// NewLoop returns a loop.
func NewLoop(cfg LoopConfig, em Emitter) *Loop {
	api := NewAPI(cfg.Addrs, cfg.Token, cfg.CA, cfg.Local)
	l := &Loop{
		cfg:  cfg,
		api:  api,
		as:   map[string]*API{"": api, roleProducer: api, roleWorker: api},
		em:   em,
		tl:   Timeline{Start: cfg.Start},
		rng:  rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Loop))),
		proc: cfg.Loop,
	}
	if cfg.ProducerToken != "" {
		l.as[roleProducer] = api.As(cfg.ProducerToken)
	}
	if cfg.WorkerToken != "" {
		l.as[roleWorker] = api.As(cfg.WorkerToken)
	}
	return l
}

// The roles of the workload's credentials (Event.As).
const (
	roleProducer = "producer"
	roleWorker   = "worker"
)

// Close releases the loop's connections.
func (l *Loop) Close() { l.api.Close() }

// Run runs the loop until stop is closed (between operations: an
// operation under way finishes) or ctx ends.
func (l *Loop) Run(ctx context.Context, stop <-chan struct{}) {
	interval := time.Duration(float64(time.Second) / l.cfg.Mix.EnqueuePerSec)
	next := time.Now()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	for !stopped() {
		if now := time.Now(); !now.Before(next) {
			l.enqueue(ctx)
			// Exponential gaps, as arrivals of independent clients.
			// A loop that fell behind (a slow task, a timeout)
			// catches up on at most maxEnqueueBacklog of them.
			next = next.Add(time.Duration(l.rng.ExpFloat64() * float64(interval)))
			if floor := now.Add(-maxEnqueueBacklog); next.Before(floor) {
				next = floor
			}
			continue
		}
		if l.cancelDue {
			l.cancelDue = false
			l.cancel(ctx)
			continue
		}
		if l.groupCancelDue {
			l.groupCancelDue = false
			l.cancelGroup(ctx)
			continue
		}
		if l.claimAndWork(ctx, stop) {
			continue
		}
		wait := min(time.Until(next), l.cfg.Mix.IdlePause)
		select {
		case <-stop:
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// node draws the node of the next request.
func (l *Loop) node() int { return 1 + l.rng.IntN(len(l.cfg.Addrs)) }

// call records inv, runs the request (on inv.Node, or on a node drawn
// at random) and records its outcome (filled by fill on OK); after an
// info the loop takes a new proc.
func (l *Loop) call(ctx context.Context, inv Event, method, path string, body, out any, timeout time.Duration, fill func(*Event)) Event {
	inv.Proc, inv.Type = l.proc, Invoke
	if inv.Node == 0 {
		inv.Node = l.node()
	}
	inv.TNs = l.tl.Now()
	l.em.Emit(inv)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	r := l.as[inv.As].Do(cctx, inv.Node, method, path, body, out)
	cancel()
	res := inv
	res.Type, res.TNs, res.Code, res.Err = r.Type, l.tl.Now(), r.Code, r.Err
	if r.Type == OK && r.Code == "" && fill != nil {
		fill(&res) // not from an answer that did not decode
	}
	l.em.Emit(res)
	if r.Type == Info {
		l.proc += l.cfg.ProcStride
	}
	return res
}

// KeyedTaskID draws ids as NewTaskID does until one is of the partition
// of queue's key (ring.KeyPartition) among partitions: a keyed enqueue's
// own id must be (64·P draws miss with probability e^-64).
func KeyedTaskID(rng *rand.Rand, now time.Time, queue, key string, partitions int) task.ID {
	want := ring.KeyPartition(queue, key, partitions)
	id := NewTaskID(rng, now)
	for range 64 * partitions {
		if ring.PartitionOf(id[:], partitions) == want {
			break
		}
		id = NewTaskID(rng, now)
	}
	return id
}

// NewTaskID draws a client-chosen id: 8 bytes of Unix milliseconds (so
// ids sort by time, as skuldd's own do) and 12 random bytes.
func NewTaskID(rng *rand.Rand, now time.Time) task.ID {
	var id task.ID
	binary.BigEndian.PutUint64(id[0:8], uint64(now.UnixMilli()))
	binary.BigEndian.PutUint64(id[8:16], rng.Uint64())
	binary.BigEndian.PutUint32(id[16:20], rng.Uint32()|1) // never the zero id
	return id
}

func (l *Loop) enqueue(ctx context.Context) {
	id := NewTaskID(l.rng, time.Now())
	l.count++
	payload := fmt.Sprintf("%s-l%d-%d", l.cfg.RunTag, l.cfg.Loop, l.count)
	et := wire.EnqueueTask{ID: &id, Queue: l.cfg.Queue, Data: []byte(payload), MaxAttempts: l.cfg.MaxAttempts, Group: l.group()}
	// Drawn whatever the mix, so the other draws do not depend on it.
	if l.rng.Float64() < l.cfg.Mix.Keyed && l.cfg.Partitions > 0 {
		et.Key = fmt.Sprintf("%s-l%d-k%d", l.cfg.RunTag, l.cfg.Loop, l.rng.IntN(l.cfg.Mix.KeyPool))
		id = KeyedTaskID(l.rng, time.Now(), l.cfg.Queue, et.Key, l.cfg.Partitions)
	}
	var deps []string
	if et.Key == "" && len(l.recent) > 0 && l.rng.Float64() < l.cfg.Mix.DepProb {
		for range 1 + l.rng.IntN(max(l.cfg.Mix.MaxDeps, 1)) {
			d := l.recent[l.rng.IntN(len(l.recent))]
			dep, err := task.ParseID(d)
			if err == nil && !slices.Contains(deps, d) {
				deps = append(deps, d)
				et.Deps = append(et.Deps, dep)
			}
		}
	}
	// Drawn whatever the mix, so the other draws do not depend on it.
	if l.rng.Float64() < l.cfg.Mix.TimeLimited {
		et.TimeLimitMs = l.cfg.Mix.TimeLimit.Milliseconds()
	}
	inv := Event{F: FEnqueue, Task: id.String(), Value: payload, Deps: deps, MaxAttempts: l.cfg.MaxAttempts, Queue: l.cfg.Queue,
		TimeLimitMs: et.TimeLimitMs, Group: et.Group, Key: et.Key}
	// Drawn whatever the mix, so the other draws do not depend on it.
	if l.rng.Float64() < l.cfg.Mix.Placed && et.Key == "" && len(et.Deps) == 0 {
		et.ID, inv.Task, inv.Placed = nil, "", true
	}
	// Drawn whatever the mix, so the other draws do not depend on it.
	hint := l.rng.Float64() < l.cfg.Mix.Hinted
	inv.Hint = hint
	// Drawn whatever the mix, so the other draws do not depend on it.
	inv.As = roleProducer
	if l.rng.Float64() < l.cfg.Mix.Forbidden && l.cfg.WorkerToken != "" {
		inv.As = roleWorker
	}
	var resp wire.EnqueueResponse
	res := l.call(ctx, inv, http.MethodPost, "/v1/enqueue", &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{et}, W: l.cfg.W, Hint: hint}, &resp, l.cfg.ReqTimeout,
		func(e *Event) {
			if len(resp.Results) == 1 {
				e.Acks, e.Hinted = resp.Results[0].Acks, resp.Results[0].Hinted
				if resp.Results[0].Duplicate {
					e.Holder = resp.Results[0].ID.String()
				}
				if inv.Placed {
					e.Task = resp.Results[0].ID.String()
				}
			}
		})
	switch {
	case res.Holder != "":
		id, _ = task.ParseID(res.Holder) // the task the loop may depend on and cancel
	case inv.Placed && res.Type == OK:
		if id, _ = task.ParseID(res.Task); id.IsZero() {
			return // an ok without a task: the checkers flag it
		}
	case inv.Placed:
		return // in doubt or refused, under an id the loop does not know
	}
	// Drawn whatever the outcome, so the draws do not depend on outcomes.
	l.cancelDue = l.rng.Float64() < l.cfg.Mix.Cancel
	l.groupCancelDue = l.rng.Float64() < l.cfg.Mix.GroupCancel
	if res.Type == OK {
		l.lastAcked = id.String()
		if len(l.recent) < maxRecent {
			l.recent = append(l.recent, id.String())
		} else {
			l.recent[l.count%maxRecent] = id.String()
		}
	}
}

// cancel cancels the task the loop saw acknowledged last, with a reason
// no other cancel of the run gives (the checkers tell by it which cancel a
// final view shows). The latest, because most older ones are completed
// already (a cancel of those is refused): the cancel then races the
// task's claim, work and completion.
func (l *Loop) cancel(ctx context.Context) {
	if l.lastAcked == "" {
		return
	}
	id, err := task.ParseID(l.lastAcked)
	if err != nil {
		return
	}
	l.cancels++
	reason := fmt.Sprintf("%s-l%d-x%d", l.cfg.RunTag, l.cfg.Loop, l.cancels)
	inv := Event{F: FCancel, Task: id.String(), Value: reason}
	l.call(ctx, inv, http.MethodPost, "/v1/cancel", &wire.CancelRequest{ID: id, Reason: reason}, nil, l.cfg.ReqTimeout, nil)
}

// group is the group label of the loop's current enqueue: every
// GroupSize consecutive enqueues share one.
func (l *Loop) group() string {
	return fmt.Sprintf("%s-l%d-g%d", l.cfg.RunTag, l.cfg.Loop, (l.count-1)/max(l.cfg.Mix.GroupSize, 1))
}

// cancelGroup cancels the group of the loop's last enqueue, with a reason
// no other cancel of the run gives: the group's later enqueues, and the
// claims and completions of its tasks, race it.
func (l *Loop) cancelGroup(ctx context.Context) {
	if l.count == 0 {
		return
	}
	g := l.group()
	l.cancels++
	reason := fmt.Sprintf("%s-l%d-x%d", l.cfg.RunTag, l.cfg.Loop, l.cancels)
	var resp wire.BulkResponse
	l.call(ctx, Event{F: FGroupCancel, Group: g, Value: reason}, http.MethodPost, "/v1/groups/"+url.PathEscape(g)+"/cancel",
		&wire.GroupCancelRequest{Reason: reason}, &resp, l.cfg.ReqTimeout, func(e *Event) { e.Tasks = resp.Done })
}

// claimed is a task a claim granted.
type claimed struct {
	id    task.ID
	claim uint32
}

// claim asks for one task; ok is false when none was claimed, and res is
// the claim's outcome (OK with no task: none was ready).
func (l *Loop) claim(ctx context.Context, node int, wait time.Duration) (c claimed, ok bool, res Event) {
	const count = 1
	inv := Event{F: FClaim, As: roleWorker, Node: node, Queue: l.cfg.Queue, TTLMs: l.cfg.TTL.Milliseconds(), Tasks: count}
	var resp wire.ClaimResponse
	res = l.call(ctx, inv, http.MethodPost, "/v1/claim",
		&wire.ClaimRequest{Queue: l.cfg.Queue, TTLMs: l.cfg.TTL.Milliseconds(), Count: count, WaitMs: wait.Milliseconds()},
		&resp, l.cfg.ReqTimeout+wait, func(e *Event) {
			// More tasks than asked is an anomaly the checkers flag;
			// the loop works the first.
			e.Tasks = len(resp.Tasks)
			if len(resp.Tasks) == 0 || resp.Tasks[0].Claim == nil {
				return
			}
			tv := &resp.Tasks[0]
			FillClaim(e, tv)
			c, ok = claimed{tv.ID, *tv.Claim}, true
		})
	return c, ok, res
}

// FillClaim copies what a claim's ok reports of the task it granted into
// e: the task, the claim id, its epoch and lease end, the attempts.
func FillClaim(e *Event, tv *wire.TaskView) {
	c := *tv.Claim
	e.Task, e.Claim, e.Attempts = tv.ID.String(), &c, tv.Attempts
	// The payload names the enqueue: a placed one in doubt is known by it.
	e.Value = string(tv.Data)
	for _, cv := range tv.Claims {
		if cv.Claim == c {
			e.Epoch, e.End = cv.Epoch, cv.End
		}
	}
}

// claimAndWork claims a task and works it to its fate; false when
// nothing was claimed.
func (l *Loop) claimAndWork(ctx context.Context, stop <-chan struct{}) bool {
	c, ok, _ := l.claim(ctx, 0, 0)
	if !ok {
		return false
	}
	l.em.Holding(true)
	defer l.em.Holding(false)
	m := l.cfg.Mix
	// Draw the whole plan first, so the draws do not depend on
	// outcomes (the same seed makes the same choices as far as it can).
	updates := l.rng.IntN(m.MaxUpdates + 1)
	work := time.Duration(l.rng.Int64N(int64(m.FastWork) + 1))
	slow := l.rng.Float64() < m.Slow
	if slow {
		work = m.SlowWorkMin + time.Duration(l.rng.Int64N(int64(m.SlowWorkMax-m.SlowWorkMin)+1))
	}
	fate := l.rng.Float64()
	halted := func() bool {
		select {
		case <-stop:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	// ambiguous: an update's outcome is unknown, so the claim's next seq
	// is too; the complete then leaves seq out.
	ambiguous := false
	for s := 0; s < updates && !ambiguous; s++ {
		if halted() {
			return true
		}
		res := l.update(ctx, c, uint64(s))
		if res.Type == Info {
			// Send the same update again once, as a client does after
			// a timeout: if the first landed, the second is a
			// duplicate skuldd must take or refuse as such.
			res = l.update(ctx, c, uint64(s))
		}
		switch res.Type {
		case Fail:
			return true // the claim is gone (superseded, expired): drop the task
		case Info:
			ambiguous = true
		}
	}
	if !l.work(ctx, stop, c, work) {
		return true
	}
	if halted() {
		return true
	}
	switch {
	case fate < m.Fail:
		l.fail(ctx, c)
	case fate < m.Fail+m.Snooze:
		l.snooze(ctx, c)
	case fate < m.Fail+m.Snooze+m.Abandon:
		// Abandon: the claim must expire and the task be claimed again.
	default:
		var seq *uint64
		if !ambiguous {
			n := uint64(updates)
			seq = &n
		}
		l.completeWithEffect(ctx, 0, c, seq)
	}
	return true
}

// work spends d on the task, renewing the claim every TTL/RenewsPerTTL
// while it lasts; false if a renew was refused (the claim is gone).
func (l *Loop) work(ctx context.Context, stop <-chan struct{}, c claimed, d time.Duration) bool {
	every := l.cfg.TTL / time.Duration(l.cfg.Mix.RenewsPerTTL)
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(min(left, every)):
		}
		if left > every && l.renew(ctx, c).Type == Fail {
			return false
		}
	}
}

func uint64Ptr(v uint64) *uint64 { return &v }
func uint32Ptr(v uint32) *uint32 { return &v }

func (l *Loop) update(ctx context.Context, c claimed, seq uint64) Event {
	data := fmt.Sprintf("u-%s-c%d-s%d", c.id.String()[:12], c.claim, seq)
	inv := Event{F: FUpdate, As: roleWorker, Task: c.id.String(), Claim: uint32Ptr(c.claim), Seq: uint64Ptr(seq), Value: data}
	return l.call(ctx, inv, http.MethodPost, "/v1/update",
		&wire.UpdateRequest{ID: c.id, Claim: c.claim, Seq: seq, Data: []byte(data)}, nil, l.cfg.ReqTimeout, nil)
}

func (l *Loop) renew(ctx context.Context, c claimed) Event {
	inv := Event{F: FRenew, As: roleWorker, Task: c.id.String(), Claim: uint32Ptr(c.claim), TTLMs: l.cfg.TTL.Milliseconds()}
	var resp wire.RenewResponse
	return l.call(ctx, inv, http.MethodPost, "/v1/renew",
		&wire.RenewRequest{ID: c.id, Claim: c.claim, TTLMs: l.cfg.TTL.Milliseconds()}, &resp, l.cfg.ReqTimeout,
		func(e *Event) { e.End = resp.End })
}

func (l *Loop) fail(ctx context.Context, c claimed) Event {
	if l.rng.Float64() < l.cfg.Mix.NoRetry {
		inv := Event{F: FFail, As: roleWorker, Task: c.id.String(), Claim: uint32Ptr(c.claim), NoRetry: true}
		return l.call(ctx, inv, http.MethodPost, "/v1/fail",
			&wire.FailRequest{ID: c.id, Claim: c.claim, Reason: "faults harness, no retry", NoRetry: true}, nil, l.cfg.ReqTimeout, nil)
	}
	ms := l.cfg.Mix.FailRetry.Milliseconds()
	inv := Event{F: FFail, As: roleWorker, Task: c.id.String(), Claim: uint32Ptr(c.claim), DelayMs: ms}
	return l.call(ctx, inv, http.MethodPost, "/v1/fail",
		&wire.FailRequest{ID: c.id, Claim: c.claim, Reason: "faults harness", RetryAfterMs: &ms}, nil, l.cfg.ReqTimeout, nil)
}

func (l *Loop) snooze(ctx context.Context, c claimed) Event {
	ms := l.cfg.Mix.SnoozeDelay.Milliseconds()
	inv := Event{F: FSnooze, As: roleWorker, Task: c.id.String(), Claim: uint32Ptr(c.claim), DelayMs: ms}
	return l.call(ctx, inv, http.MethodPost, "/v1/snooze",
		&wire.SnoozeRequest{ID: c.id, Claim: c.claim, DelayMs: ms}, nil, l.cfg.ReqTimeout, nil)
}

// completeWithEffect offers the task's effect to the fenced sink, then
// completes it. The effect comes first, as a worker's side effect does;
// the complete is sent whatever the sink said, so the history shows how
// skuldd answers a stale claim's complete.
func (l *Loop) completeWithEffect(ctx context.Context, node int, c claimed, seq *uint64) Event {
	if _, err := l.em.Offer(l.proc, c.id.String(), c.claim); err != nil {
		// The harness is gone; nothing more can be recorded.
		return Event{}
	}
	inv := Event{F: FComplete, As: roleWorker, Node: node, Task: c.id.String(), Claim: uint32Ptr(c.claim), Seq: seq}
	return l.call(ctx, inv, http.MethodPost, "/v1/complete",
		&wire.CompleteRequest{ID: c.id, Claim: c.claim, Seq: seq}, nil, l.cfg.ReqTimeout, nil)
}

// DrainReport is what a drain did.
type DrainReport struct {
	Claimed   int     `json:"claimed"`
	Completed int     `json:"completed"`
	Requests  int     `json:"requests"`
	Done      bool    `json:"done"`
	Seconds   float64 `json:"seconds"`
}

// drainErrPause is the pause after a drain's claim that failed.
const drainErrPause = 100 * time.Millisecond

// Drain claims and completes through every node in turn until each has
// answered empty `empties` times in a row (each claim long-polling for
// wait), or bound passes. Completions carry seq 0: the drain posts no
// updates.
func (l *Loop) Drain(ctx context.Context, bound, wait time.Duration, empties int) DrainReport {
	start := time.Now()
	nodes := len(l.cfg.Addrs)
	streak := make([]int, nodes+1)
	var rep DrainReport
	done := func() bool {
		for i := 1; i <= nodes; i++ {
			if streak[i] < empties {
				return false
			}
		}
		return true
	}
	// Bounded by time; each round trip takes at least a request.
	for i := 1; !done() && time.Since(start) < bound && ctx.Err() == nil; i = i%nodes + 1 {
		if streak[i] >= empties {
			continue
		}
		rep.Requests++
		c, ok, res := l.claim(ctx, i, wait)
		if !ok {
			if res.Type == OK {
				streak[i]++
			} else {
				// A node that refuses or fails is asked again after
				// the others, not hammered.
				_ = sleepCtx(ctx, drainErrPause)
			}
			continue
		}
		// A task handed out anywhere resets every node's count: what
		// one node found, another may still hold.
		clear(streak)
		rep.Claimed++
		var zero uint64
		if l.completeWithEffect(ctx, i, c, &zero).Type == OK {
			rep.Completed++
		}
	}
	rep.Done, rep.Seconds = done(), time.Since(start).Seconds()
	return rep
}
