package faults

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

const checkShardsName = "worker shards"

// ans is an answer: generation gen of count indexes, the member's index
// in it, work or not.
func ans(gen uint64, count uint32, index int32, work bool) *ShardAnswer {
	return &ShardAnswer{Generation: gen, Count: count, Index: index, Work: work}
}

// pend adds a pending generation to an answer.
func (a *ShardAnswer) pend(gen uint64, count uint32, waiting ...string) *ShardAnswer {
	c := *a
	c.Pending = &wire.ShardPendingView{Generation: gen, Count: count, Waiting: waiting}
	return &c
}

// op appends a request of member, answered ok with a (leave: nil).
func (r *ShardRecord) op(member, op string, sentMs, atMs int64, stopped uint64, a *ShardAnswer) *ShardOp {
	r.Ops = append(r.Ops, ShardOp{Member: member, Node: 1, Op: op, SentNs: sentMs * nsPerMs, AtNs: atMs * nsPerMs, Result: OK, Stopped: stopped, Answer: a})
	return &r.Ops[len(r.Ops)-1]
}

// hold appends a hold.
func (r *ShardRecord) hold(member string, gen uint64, index int32, count uint32, startMs, endMs int64, why string) {
	r.Holds = append(r.Holds, ShardHold{Member: member, Generation: gen, Index: index, Count: count, StartNs: startMs * nsPerMs, EndNs: endMs * nsPerMs, End: why})
}

// holdOf returns member's hold of generation gen.
func (r *ShardRecord) holdOf(member string, gen uint64) *ShardHold {
	i := slices.IndexFunc(r.Holds, func(h ShardHold) bool { return h.Member == member && h.Generation == gen })
	return &r.Holds[i]
}

// opAt returns member's request sent at sentMs.
func (r *ShardRecord) opAt(member string, sentMs int64) *ShardOp {
	i := slices.IndexFunc(r.Ops, func(o ShardOp) bool { return o.Member == member && o.SentNs == sentMs*nsPerMs })
	return &r.Ops[i]
}

// read sets the final read: one attempt through node 3, sent at sentMs.
func (r *ShardRecord) read(sentMs int64, gen uint64, count uint32, pending *wire.ShardPendingView, members ...wire.ShardMemberView) *wire.ShardView {
	v := &wire.ShardView{Set: ShardSetName, Generation: gen, Count: count, Members: members, Pending: pending, Index: -1}
	r.Final = []ShardRead{{Node: 3, SentNs: sentMs * nsPerMs, AtNs: (sentMs + 10) * nsPerMs, OK: true, View: v}}
	return v
}

func mv(id string, index int32) wire.ShardMemberView {
	return wire.ShardMemberView{ID: id, Index: index, TTLMs: 3000}
}

// withShards gives the run a clean shard record (times in ms):
//
//	m1-1 joins (100) alone: generation 1, index 0 of 1, works;
//	m2-1 joins (500): generation 2 pending, waiting for m1-1, which
//	  stops (renewal at 1000) and gets index 0 of 2; m2-1 gets index 1;
//	m1-1 leaves (2000): generation 3 pending, waiting for m2-1, which
//	  stops (2100) and gets index 0 of 1;
//	m1-2 (m1 again) joins (2500): generation 4 pending, waiting for
//	  m2-1, which stops (2900) and gets index 0 of 2; m1-2 index 1;
//	a renewal of m1-2 fails (3300); the heal at 3200; the final read
//	  (3500) shows generation 4 settled; both renew; both are stopped at
//	  4000 and leave.
func (b *builder) withShards() *ShardRecord {
	b.run.Shards = ShardSetName
	r := &ShardRecord{Set: ShardSetName, TTLMs: 3000, ExpiryMarginMs: 5000, StartNs: 90 * nsPerMs, QuietNs: 3200 * nsPerMs,
		StopNs: 4000 * nsPerMs, DoneNs: 4020 * nsPerMs,
		Members: []ShardSlot{{Slot: 1, Role: shardSteady, Node: 1, IDs: []string{"m1-1", "m1-2"}}, {Slot: 2, Role: shardSteady, Node: 2, IDs: []string{"m2-1"}}}}
	r.op("m1-1", "join", 100, 105, 0, ans(1, 1, 0, true))
	r.op("m2-1", "join", 500, 505, 0, ans(1, 1, -1, false).pend(2, 2, "m1-1"))
	r.op("m1-1", "renew", 800, 805, 0, ans(1, 1, 0, false).pend(2, 2, "m1-1"))
	r.op("m2-1", "renew", 810, 815, 1, ans(1, 1, -1, false).pend(2, 2, "m1-1"))
	r.op("m1-1", "renew", 1000, 1005, 1, ans(2, 2, 0, true))
	r.op("m2-1", "renew", 1100, 1105, 1, ans(2, 2, 1, true))
	r.op("m1-1", "leave", 2000, 2010, 0, nil)
	r.op("m2-1", "renew", 2050, 2055, 1, ans(2, 2, 1, false).pend(3, 1, "m2-1"))
	r.op("m2-1", "renew", 2100, 2105, 2, ans(3, 1, 0, true))
	r.op("m1-2", "join", 2500, 2505, 0, ans(3, 1, -1, false).pend(4, 2, "m2-1"))
	r.op("m2-1", "renew", 2600, 2605, 2, ans(3, 1, 0, false).pend(4, 2, "m2-1"))
	r.op("m1-2", "renew", 2700, 2705, 3, ans(3, 1, -1, false).pend(4, 2, "m2-1"))
	r.op("m2-1", "renew", 2900, 2905, 3, ans(4, 2, 0, true))
	r.op("m1-2", "renew", 3000, 3005, 3, ans(4, 2, 1, true))
	failed := r.op("m1-2", "renew", 3300, 6300, 3, nil)
	failed.Result, failed.Code = Info, "timeout"
	r.op("m2-1", "renew", 3700, 3705, 3, ans(4, 2, 0, true))
	r.op("m1-2", "renew", 3800, 3805, 3, ans(4, 2, 1, true))
	r.op("m2-1", "leave", 4001, 4010, 0, nil)
	r.op("m1-2", "leave", 4002, 4012, 0, nil)
	r.hold("m1-1", 1, 0, 1, 106, 1000, holdStopped)
	r.hold("m1-1", 2, 0, 2, 1006, 2000, holdLeave)
	r.hold("m2-1", 2, 1, 2, 1106, 2100, holdStopped)
	r.hold("m2-1", 3, 0, 1, 2106, 2900, holdStopped)
	r.hold("m2-1", 4, 0, 2, 2906, 4001, holdLeave)
	r.hold("m1-2", 4, 1, 2, 3006, 4002, holdLeave)
	r.read(3500, 4, 2, nil, mv("m2-1", 0), mv("m1-2", 1))
	b.shards = r
	return r
}

func TestShards(t *testing.T) {
	const check = checkShardsName
	// late moves the final read and the stop past the settling time
	// (2·(3 s + 5 s) + 2 s after the last change, m1-2's leave at 4012).
	late := func(r *ShardRecord) {
		r.StopNs, r.DoneNs = 26000*nsPerMs, 26020*nsPerMs
	}
	runFlagCases(t, []flagCase{
		{name: "a clean record", check: check, kind: kindShardOverlap, inject: func(b *builder) { b.withShards() }},
		{name: "no shard record (a run from before shards): a note", check: check, kind: kindShardIncomplete, inject: func(b *builder) {}},

		// Two members at once.
		{name: "an index held across generations by two members at once", check: check, kind: kindShardOverlap, want: 1, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 2).EndNs = 2200 * nsPerMs // m2-1 holds index 0 from 2106
		}},
		{name: "... a clock beyond the bound in effect before", check: check, kind: kindShardOverlap, beyond: 1, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 2).EndNs = 2200 * nsPerMs
			b.beyondClock(1500, 1800, 1, 1500)
		}},
		{name: "... a clock within the bound: not excused", check: check, kind: kindShardOverlap, want: 1, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 2).EndNs = 2200 * nsPerMs
			b.nemesis(NemClockWithin, 1500, 1800, 1)
		}},
		{name: "... the metadata group's majority wiped meanwhile", check: check, kind: kindShardOverlap, beyond: 1, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 2).EndNs = 2200 * nsPerMs
			b.wipe(NemWipeMajority, 2000, 2150, nil, 1, 2)
		}},
		{name: "a hold that never ended overlaps the later holds of its index", check: check, kind: kindShardOverlap, want: 2, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 1).EndNs = 0
		}},
		{name: "one member's holds of one index overlapping: not two members", check: check, kind: kindShardOverlap, inject: func(b *builder) {
			b.withShards().holdOf("m1-1", 1).EndNs = 1010 * nsPerMs
		}},

		// Two members in one generation.
		{name: "two members on one index of one generation, apart in time", check: check, kind: kindShardTwice, want: 1, inject: func(b *builder) {
			b.withShards().hold("m1-1", 2, 1, 2, 1050, 1100, holdStopped)
		}},
		{name: "... the metadata group's majority wiped", check: check, kind: kindShardTwice, beyond: 1, inject: func(b *builder) {
			b.withShards().hold("m1-1", 2, 1, 2, 1050, 1100, holdStopped)
			b.wipe(NemWipeMajority, 1000, 1500, nil, 1, 2)
		}},

		// Expiries.
		{name: "not_found while the member's lease held", check: check, kind: kindShardEarly, want: 1, inject: func(b *builder) {
			o := b.withShards().op("m1-2", "renew", 3300, 3305, 3, nil)
			o.Result = shardNotFound
		}},
		{name: "not_found after the lease: an expiry", check: check, kind: kindShardEarly, inject: func(b *builder) {
			r := b.withShards()
			r.Members = append(r.Members, ShardSlot{Slot: 3, Role: shardSilent, Node: 3, IDs: []string{"m3-1"}})
			r.op("m3-1", "join", 200, 205, 0, ans(1, 1, -1, false).pend(2, 2, "m1-1"))
			r.op("m3-1", "renew", 4500, 4505, 1, nil).Result = shardNotFound
		}},
		{name: "not_found within the lease, a clock beyond the bound in effect", check: check, kind: kindShardEarly, beyond: 1, inject: func(b *builder) {
			b.withShards().op("m1-2", "renew", 3300, 3305, 3, nil).Result = shardNotFound
			b.beyondClock(2000, 2500, 4, -1500)
		}},

		// Answers.
		{name: "an answer moving a working member to a later generation it never stopped", check: check, kind: kindShardBadAnswer, want: 1, inject: func(b *builder) {
			b.withShards().op("m1-1", "renew", 1500, 1505, 1, ans(3, 1, -1, false).pend(4, 2))
		}},
		{name: "an answer giving a working member another index of its generation", check: check, kind: kindShardBadAnswer, want: 1, inject: func(b *builder) {
			b.withShards().op("m2-1", "renew", 1500, 1505, 1, ans(2, 2, 0, true))
		}},
		{name: "an answer saying work on a generation the member stopped", check: check, kind: kindShardBadAnswer, want: 1, inject: func(b *builder) {
			b.withShards().op("m2-1", "renew", 2150, 2155, 2, ans(2, 2, 1, true))
		}},
		{name: "an answer waiting for the member though it said it stopped", check: check, kind: kindShardBadAnswer, want: 1, inject: func(b *builder) {
			b.withShards().op("m2-1", "renew", 2080, 2085, 2, ans(2, 2, 1, false).pend(3, 1, "m2-1"))
		}},
		{name: "an answer with nothing pending not letting the member work", check: check, kind: kindShardBadAnswer, want: 1, inject: func(b *builder) {
			b.withShards().op("m1-2", "renew", 3600, 3605, 3, ans(4, 2, 1, false))
		}},
		{name: "... the metadata group's majority wiped", check: check, kind: kindShardBadAnswer, beyond: 1, inject: func(b *builder) {
			b.withShards().op("m1-2", "renew", 3600, 3605, 3, ans(4, 2, 1, false))
			b.wipe(NemWipeMajority, 3500, 3700, nil, 1, 2)
		}},

		// The final state.
		{name: "the final view gives an index to a member the harness never ran", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			b.withShards().read(3500, 4, 2, nil, mv("m2-1", 0), mv("x-9", 1))
		}},
		{name: "an index of the final view without a member", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			b.withShards().read(3500, 4, 2, nil, mv("m2-1", 0))
		}},
		{name: "a member of the final view at an index beyond its count", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			b.withShards().read(3500, 4, 2, nil, mv("m2-1", 0), mv("m1-2", 1), mv("m1-1", 2))
		}},
		{name: "an index whose member was answered after the read, not held at the stop", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			h := b.withShards().holdOf("m1-2", 4)
			h.EndNs, h.End = 3900*nsPerMs, holdLease
		}},
		{name: "... its answers after the read show a change: not judged", check: check, kind: kindShardIdle, inject: func(b *builder) {
			r := b.withShards()
			h := r.holdOf("m1-2", 4)
			h.EndNs, h.End = 3900*nsPerMs, holdLease
			r.opAt("m1-2", 3800).Answer = ans(4, 2, 1, false).pend(5, 3, "m1-2")
		}},
		{name: "a pending generation waiting for no one", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			b.withShards().read(3500, 4, 2, &wire.ShardPendingView{Generation: 5, Count: 2}, mv("m2-1", 0), mv("m1-2", 1))
		}},
		{name: "a pending generation soon after the last change: not judged", check: check, kind: kindShardIdle, inject: func(b *builder) {
			b.withShards().read(3500, 4, 2, &wire.ShardPendingView{Generation: 5, Count: 2, Waiting: []string{"m2-1"}}, mv("m2-1", 0), mv("m1-2", 1))
		}},
		{name: "a pending generation long after, waiting for a member silent since", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			r := b.withShards()
			r.read(25000, 4, 2, &wire.ShardPendingView{Generation: 5, Count: 2, Waiting: []string{"m2-1"}}, mv("m2-1", 0), mv("m1-2", 1))
			late(r)
		}},
		{name: "... waiting for a member that said it stopped", check: check, kind: kindShardIdle, want: 1, inject: func(b *builder) {
			r := b.withShards()
			r.op("m1-2", "renew", 5000, 5005, 4, ans(4, 2, 1, false).pend(5, 2))
			r.op("m1-2", "renew", 24000, 24005, 4, ans(4, 2, 1, false).pend(5, 2))
			r.read(25000, 4, 2, &wire.ShardPendingView{Generation: 5, Count: 2, Waiting: []string{"m1-2"}}, mv("m2-1", 0), mv("m1-2", 1))
			late(r)
		}},
		{name: "... waiting for a member that renews and has not said it stopped: not judged", check: check, kind: kindShardIdle, inject: func(b *builder) {
			r := b.withShards()
			r.op("m2-1", "renew", 16000, 16005, 3, ans(4, 2, 0, true))
			r.op("m2-1", "renew", 24000, 24005, 3, ans(4, 2, 0, true))
			r.read(25000, 4, 2, &wire.ShardPendingView{Generation: 5, Count: 2, Waiting: []string{"m2-1"}}, mv("m2-1", 0), mv("m1-2", 1))
			late(r)
		}},

		// An incomplete record.
		{name: "no shard record though run.json names the set", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.run.Shards = ShardSetName
		}},
		{name: "a hold that never ended", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			h := b.withShards().holdOf("m1-2", 4)
			h.EndNs, h.End = 0, ""
		}},
		{name: "the members never stopped", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.withShards().StopNs = 0
		}},
		{name: "the final read never answered", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.withShards().Final = []ShardRead{{Node: 3, SentNs: 3500 * nsPerMs, AtNs: 6500 * nsPerMs, Error: "timeout context deadline exceeded"}}
		}},
		{name: "the final read never sent", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.withShards().Final = nil
		}},
		{name: "no join answered", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			r := b.withShards()
			for i := range r.Ops {
				if r.Ops[i].Op == "join" {
					r.Ops[i].Result, r.Ops[i].Answer = Info, nil
				}
			}
		}},
		{name: "no hold at all", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.withShards().Holds = nil
		}},
		{name: "a member of the final view without an answer after the read", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			r := b.withShards()
			h := r.holdOf("m1-2", 4)
			h.EndNs, h.End = 3900*nsPerMs, holdLease
			r.Ops = slices.DeleteFunc(r.Ops, func(o ShardOp) bool { return o.Member == "m1-2" && o.SentNs == 3800*nsPerMs })
		}},
		{name: "a harness note", check: check, kind: kindShardIncomplete, want: 1, inject: func(b *builder) {
			b.withShards().Notes = []string{"members still running 5s after they were told to stop"}
		}},
	})
}

// The figures of the clean record.
func TestShardsFigures(t *testing.T) {
	b := base()
	b.withShards()
	r := Analyze(b.input())
	if !r.OK() {
		t.Fatalf("flagged:\n%s", dump(r))
	}
	c := findCheck(t, r, checkShardsName)
	want := map[string]int64{countShardMembers: 3, countShardJoins: 3, countShardLeaves: 3, countShardExpiries: 0, countShardErrors: 1,
		countShardGens: 4, countShardHolds: 6, countShardLeaseEnds: 0, countShardLongWaitMs: 501, countShardHandovers: 2, countShardMinGapMs: 106, countShardWorked: 2}
	for name, w := range want {
		if got := countOf(t, c, name); got != w {
			t.Errorf("%s = %d; want %d", name, got, w)
		}
	}
	var names []string
	for _, n := range c.Counts {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, shardCounts) {
		t.Errorf("figures %v; want %v", names, shardCounts)
	}
	if len(c.Notes) != 0 {
		t.Errorf("notes %v; want none", c.Notes)
	}
}

// A run without shards.json, from before shards, passes the check with a
// note saying it checked nothing.
func TestShardsMissing(t *testing.T) {
	c := findCheck(t, Analyze(base().input()), checkShardsName)
	if !c.OK() || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], ShardsFile) {
		t.Errorf("ok %v, notes %q; want a pass with a note naming %s", c.OK(), c.Notes, ShardsFile)
	}
}

// ReadRun reads shards.json when there is one, and refuses a broken one.
func TestReadRunShards(t *testing.T) {
	b := base()
	want := b.withShards()
	dir := t.TempDir()
	in := b.input()
	if err := writeRun(dir, in); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRun(dir)
	if err != nil || got.Shards != nil {
		t.Fatalf("without %s: shards %v, err %v; want nil, nil", ShardsFile, got.Shards, err)
	}
	if r := Analyze(got); r.OK() {
		t.Errorf("run.json names the set, no %s: passed", ShardsFile)
	}
	if err := WriteJSONFile(filepath.Join(dir, ShardsFile), want); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadRun(dir); err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(got.Shards)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("read back\n%s\nwant\n%s", gj, wj)
	}
	if r := Analyze(got); !r.OK() {
		t.Errorf("flagged:\n%s", dump(r))
	}
	if err := os.WriteFile(filepath.Join(dir, ShardsFile), []byte(`{"set": "fault-shards", "ops": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRun(dir); err == nil || !strings.Contains(err.Error(), ShardsFile) {
		t.Errorf("ReadRun of a truncated %s = %v; want an error naming it", ShardsFile, err)
	}
}

// fakeShards is a cluster's shard set as the nodes serve it: the rules of
// raftgroup/shards.go (plan, activate) and node/shards (View, expiry on
// the leader's clock a lease and margin after the last renewal), one
// copy shared by every node. A node that is down answers 503.
type fakeShards struct {
	mu      sync.Mutex
	margin  time.Duration
	members map[string]*fakeMember
	joinSeq uint64
	active  fakeGen
	pending *fakeGen
	down    map[int]bool
	// expired counts the members expired; joins the joins.
	expired, joins int
}

type fakeMember struct {
	seq     uint64
	ttl     time.Duration
	stopped uint64
	beat    time.Time
}

type fakeGen struct {
	gen    uint64
	count  uint32
	assign map[string]uint32
}

func newFakeShards(margin time.Duration) *fakeShards {
	return &fakeShards{margin: margin, members: map[string]*fakeMember{}, active: fakeGen{assign: map[string]uint32{}}, down: map[int]bool{}}
}

func (f *fakeShards) setDown(node int, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[node] = down
}

// node returns node i's handler.
func (f *fakeShards) node(i int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fail := func(status int, code string) {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":"%s","code":"%s"}`, code, code)
		}
		if f.down[i] {
			fail(http.StatusServiceUnavailable, "unavailable")
			return
		}
		f.expire()
		var req struct {
			Set     string `json:"set"`
			Member  string `json:"member"`
			TTLMs   int64  `json:"ttl_ms"`
			Stopped uint64 `json:"stopped"`
		}
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Set != ShardSetName || req.Member == "" {
				fail(http.StatusBadRequest, "invalid")
				return
			}
		}
		mem := f.members[req.Member]
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/shards/"+ShardSetName:
			_ = json.NewEncoder(w).Encode(f.view(""))
			return
		case r.URL.Path == "/v1/shards/join":
			if mem == nil {
				f.joinSeq++
				f.joins++
				f.members[req.Member] = &fakeMember{seq: f.joinSeq, ttl: time.Duration(req.TTLMs) * time.Millisecond, beat: time.Now()}
				f.change()
			}
		case mem == nil:
			fail(http.StatusNotFound, "not_found")
			return
		case r.URL.Path == "/v1/shards/renew":
			mem.beat = time.Now()
			if req.Stopped > mem.stopped {
				mem.stopped = req.Stopped
				f.change()
			}
		case r.URL.Path == "/v1/shards/leave":
			delete(f.members, req.Member)
			f.change()
			_ = json.NewEncoder(w).Encode(f.view(""))
			return
		default:
			fail(http.StatusNotFound, "unknown_op")
			return
		}
		_ = json.NewEncoder(w).Encode(f.view(req.Member))
	})
}

// expire removes the members silent for their lease and the margin.
func (f *fakeShards) expire() {
	for id, m := range f.members {
		if time.Since(m.beat) > m.ttl+f.margin {
			delete(f.members, id)
			f.expired++
			f.change()
		}
	}
}

// change is plan, then activate.
func (f *fakeShards) change() {
	ids := slices.SortedFunc(maps.Keys(f.members), func(a, b string) int { return cmp.Compare(f.members[a].seq, f.members[b].seq) })
	count := uint32(len(ids))
	assign := map[string]uint32{}
	taken := make([]bool, count)
	for _, id := range ids {
		if i, ok := f.active.assign[id]; ok && i < count && !taken[i] {
			assign[id], taken[i] = i, true
		}
	}
	free := 0
	for _, id := range ids {
		if _, ok := assign[id]; ok {
			continue
		}
		for taken[free] {
			free++
		}
		assign[id], taken[free] = uint32(free), true
	}
	stopped := false
	for id := range f.active.assign {
		if m, ok := f.members[id]; ok && m.stopped >= f.active.gen {
			stopped = true
		}
	}
	switch {
	case count == f.active.count && maps.Equal(assign, f.active.assign) && !stopped:
		f.pending = nil
	case f.pending != nil && f.pending.count == count && maps.Equal(assign, f.pending.assign):
	default:
		next := f.active.gen + 1
		if f.pending != nil {
			next = f.pending.gen + 1
		}
		f.pending = &fakeGen{gen: next, count: count, assign: assign}
	}
	if f.pending == nil {
		return
	}
	for id := range f.active.assign {
		if m, ok := f.members[id]; ok && m.stopped < f.active.gen {
			return
		}
	}
	f.active, f.pending = *f.pending, nil
}

func (f *fakeShards) view(member string) *wire.ShardView {
	v := &wire.ShardView{Set: ShardSetName, Generation: f.active.gen, Count: f.active.count, Members: []wire.ShardMemberView{}, Index: -1}
	ids := slices.SortedFunc(maps.Keys(f.members), func(a, b string) int { return cmp.Compare(f.members[a].seq, f.members[b].seq) })
	for _, id := range ids {
		idx := int32(-1)
		if i, ok := f.active.assign[id]; ok {
			idx = int32(i)
		}
		v.Members = append(v.Members, wire.ShardMemberView{ID: id, Index: idx, Stopped: f.members[id].stopped, TTLMs: f.members[id].ttl.Milliseconds()})
	}
	if f.pending != nil {
		pv := &wire.ShardPendingView{Generation: f.pending.gen, Count: f.pending.count}
		for _, id := range slices.Sorted(maps.Keys(f.active.assign)) {
			if m, ok := f.members[id]; ok && m.stopped < f.active.gen {
				pv.Waiting = append(pv.Waiting, id)
			}
		}
		v.Pending = pv
	}
	if m, ok := f.members[member]; ok {
		if i, in := f.active.assign[member]; in {
			v.Index = int32(i)
			v.Work = f.pending == nil && m.stopped < f.active.gen
		}
	}
	return v
}

// The harness's members against two fake nodes: node 2 goes down for
// longer than a lease and the margin, so its members' leases run out and
// the cluster expires them; a member churns, one goes silent; after the
// heal, the final read finds the set settled, the members leave, and the
// checker passes the record.
func TestShardsHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs members for about 7 s")
	}
	f := newFakeShards(500 * time.Millisecond)
	s1, s2 := httptest.NewServer(f.node(1)), httptest.NewServer(f.node(2))
	defer s1.Close()
	defer s2.Close()
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	api := NewAPI([]string{addr(s1), addr(s2)}, "", nil, netip.Addr{})
	defer api.Close()
	plan := shardPlan{Set: ShardSetName, TTL: time.Second, Margin: 500 * time.Millisecond, WaitRenew: 50 * time.Millisecond,
		Roles:     []string{shardSteady, shardSteady, shardChurn, shardSilent},
		ChurnHold: [2]time.Duration{time.Second, 1200 * time.Millisecond}, ChurnAway: [2]time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		SilentFirst: [2]time.Duration{800 * time.Millisecond, time.Second}, SilentEvery: [2]time.Duration{10 * time.Second, 11 * time.Second},
		SilentExtra: [2]time.Duration{300 * time.Millisecond, 400 * time.Millisecond},
		ReqTimeout:  500 * time.Millisecond, Settle: 2 * time.Second, ReadBound: 4 * time.Second, AfterRead: 600 * time.Millisecond,
		LeaveBound: time.Second}
	tl := NewTimeline()
	h := startShardMembers(context.Background(), api, tl, slog.New(slog.DiscardHandler), 7, plan)
	time.Sleep(500 * time.Millisecond)
	f.setDown(2, true)
	time.Sleep(2 * time.Second)
	f.setDown(2, false)
	time.Sleep(time.Second)
	heal := tl.Now()
	h.quietDown()
	if err := <-h.startFinal(heal); err != nil {
		t.Fatal(err)
	}
	h.stop(false, time.Second) // a no-op: already stopped
	dir := t.TempDir()
	if d := os.Getenv("SHARDS_HARNESS_OUT"); d != "" {
		dir = d
	}
	if err := h.write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ShardsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec ShardRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	in := base().input()
	in.Run.Shards, in.Shards = ShardSetName, &rec
	r := Analyze(in)
	c := findCheck(t, r, checkShardsName)
	if !c.OK() || len(c.Notes) != 0 {
		t.Errorf("the harness's record flagged, or notes %q:\n%s", c.Notes, dump(r))
	}
	for name, least := range map[string]int64{countShardJoins: 5, countShardLeaves: 5, countShardExpiries: 1, countShardErrors: 1,
		countShardHolds: 6, countShardLeaseEnds: 1, countShardHandovers: 1, countShardWorked: 4} {
		if got := countOf(t, c, name); got < least {
			t.Errorf("%s = %d; want at least %d", name, got, least)
		}
	}
	if rec.QuietNs == 0 || rec.StopNs < rec.QuietNs || rec.DoneNs < rec.StopNs || len(rec.Members[3].Silences) == 0 {
		t.Errorf("quiet %d, stop %d, done %d, silences %v", rec.QuietNs, rec.StopNs, rec.DoneNs, rec.Members[3].Silences)
	}
	if s := h.summary(); s.Joins != int(countOf(t, c, countShardJoins)) || !strings.HasPrefix(s.Final, "generation") {
		t.Errorf("summary %+v", s)
	}
	f.mu.Lock()
	left := len(f.members)
	f.mu.Unlock()
	if left != 0 {
		t.Errorf("%d members still in the set after the stop; want every member gone", left)
	}
}
