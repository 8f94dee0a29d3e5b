package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// stepWorld is a cluster of sleep processes behind fake node APIs: every
// partition's cohort and leader, and the metadata leader, are the nodes
// it is told (hit), so a fault resolved when applied (kill-cohort,
// pause-leader, pause-raft-leader) takes exactly those; /debug/clock
// records the offsets set, and whether the node ran when its offset was.
type stepWorld struct {
	r    *Run
	topo Topology
	mu   sync.Mutex
	hit  []int
	// offsets: node -> offset set last; setDown: nodes set while not
	// running.
	offsets map[int]int64
	setDown []int
}

func stepWorldID(i int) uint64 { return uint64(0x10 + i) }

func (w *stepWorld) handler(i int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster", func(rw http.ResponseWriter, _ *http.Request) {
		w.mu.Lock()
		hit := slices.Clone(w.hit)
		w.mu.Unlock()
		var cohort []uint64
		for _, n := range hit {
			cohort = append(cohort, stepWorldID(n))
		}
		cr := wire.ClusterResponse{Self: stepWorldID(i), Raft: wire.RaftView{Leader: cohort[0]}}
		for j := 1; j <= w.topo.Nodes; j++ {
			cr.Members = append(cr.Members, wire.MemberView{ID: stepWorldID(j), Addr: w.topo.RelayAddr(j).String(), State: "alive"})
		}
		for p := range w.r.cfg.Partitions {
			cr.Partitions = append(cr.Partitions, wire.PartitionView{Partition: p, Cohort: cohort, Leader: cohort[0]})
		}
		_ = json.NewEncoder(rw).Encode(cr)
	})
	mux.HandleFunc("POST /debug/clock", func(rw http.ResponseWriter, req *http.Request) {
		var cb clockBody
		if err := json.NewDecoder(req.Body).Decode(&cb); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.offsets[i] = cb.OffsetMs
		if cb.OffsetMs != 0 && w.r.nodes[i-1].State() != StateRunning {
			w.setDown = append(w.setDown, i)
		}
		w.mu.Unlock()
		_, _ = rw.Write([]byte("{}"))
	})
	return mux
}

func newStepWorld(t *testing.T) *stepWorld {
	t.Helper()
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Out = out
	cfg.StopGrace = 5 * time.Second
	r := &Run{cfg: cfg, log: slog.New(slog.DiscardHandler), tl: NewTimeline(), held: map[int]string{}, hooks: true}
	w := &stepWorld{r: r, topo: cfg.Topology, offsets: map[int]int64{}}
	var err error
	if r.rec, err = CreateRecorder(filepath.Join(out, HistoryFile)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.rec.Close() })
	var addrs []string
	for i := 1; i <= cfg.Topology.Nodes; i++ {
		srv := httptest.NewServer(w.handler(i))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
		n := &NodeProc{Index: i, Argv: []string{"sleep", "600"}, LogPath: filepath.Join(out, fmt.Sprintf("n%d.log", i)),
			PidPath: filepath.Join(out, fmt.Sprintf("n%d.pid", i)), log: r.log, tl: r.tl}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		r.nodes = append(r.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range r.nodes {
			if n.State() != StateDown {
				_ = n.Kill()
			}
		}
	})
	r.api = NewAPI(addrs, "", nil, netip.Addr{})
	t.Cleanup(r.api.Close)
	return w
}

// stepApplicable reports whether a step's faults are all ones stepWorld
// can apply (no iptables, relay or workers), some holding nodes and some
// needing them live.
func stepApplicable(st Step) bool {
	var holds, needs bool
	for _, f := range st.Faults {
		switch f.Kind {
		case NemKillMinority, NemKillCohort, NemTermRestart, NemPauseLeader, NemPauseRaftLeader:
			holds = true
		case NemClockWithin, NemClockBeyond:
			needs = true
		default:
			return false
		}
	}
	return holds && needs
}

// A step that combines a fault holding nodes down or paused with a clock
// fault must set the clock of live nodes only, and whole: seed 3131's
// 30-minute run drew kill-cohort of partition 8 with clock-beyond on node
// 5, a member of that cohort; the clock fault found node 5 down, was
// skipped, and the run failed on the skip. Here the steps of that
// schedule (and a few seeds') that combine such faults are applied in
// their order, as Run.step applies them, to a cluster whose cohorts and
// leaders are the clock fault's own targets: every fault applies (no
// skip, no partial application), a clock-beyond sets as many nodes as it
// names, and every node whose offset was set is up once all the step's
// faults are applied.
func TestStepFaultsPickLiveNodes(t *testing.T) {
	type drawn struct {
		seed int64
		k    int
		st   Step
	}
	var steps []drawn
	var cohortAndBeyond bool
	for _, seed := range []int64{3131, 1, 2, 3, 4, 5, 6, 7, 8} {
		c := DefaultConfig()
		c.Seed = seed
		for k, st := range c.Schedule().Steps {
			if !stepApplicable(st) {
				continue
			}
			steps = append(steps, drawn{seed, k + 1, st})
			kinds := []string{st.Faults[0].Kind, st.Faults[1].Kind}
			cohortAndBeyond = cohortAndBeyond || slices.Contains(kinds, NemKillCohort) && slices.Contains(kinds, NemClockBeyond)
		}
	}
	if !cohortAndBeyond {
		t.Fatalf("no drawn step combines kill-cohort and clock-beyond")
	}
	t.Logf("%d steps", len(steps))
	w := newStepWorld(t)
	r := w.r
	ctx := context.Background()
	for _, d := range steps {
		name := fmt.Sprintf("seed %d step %d (%s)", d.seed, d.k, d.st.Faults[0].Kind+" + "+d.st.Faults[1].Kind)
		// The nodes the holding fault takes: the clock fault's targets
		// first (what a kill-minority drew it takes anyway).
		var clock Fault
		for _, f := range d.st.Faults {
			if nemesisClass(f.Kind) == "clock" {
				clock = f
			}
		}
		hit := slices.Clone(clock.Targets[:min(len(clock.Targets), r.cfg.Replicas)])
		for i := 1; len(hit) < r.cfg.Replicas; i++ {
			if !slices.Contains(hit, i) {
				hit = append(hit, i)
			}
		}
		w.mu.Lock()
		w.hit, w.setDown = hit, nil
		clear(w.offsets)
		w.mu.Unlock()

		var acts []*active
		for _, f := range d.st.Faults {
			a, err := r.apply(ctx, f)
			if err != nil {
				t.Errorf("%s: %s skipped: %v", name, f.Kind, err)
				continue
			}
			if len(a.notes) > 0 {
				t.Errorf("%s: %s applied with notes %v", name, f.Kind, a.notes)
			}
			acts = append(acts, a)
		}
		for _, a := range acts {
			if nemesisClass(a.f.Kind) != "clock" {
				continue
			}
			if a.f.Kind == NemClockBeyond && len(a.targets) != len(a.f.Targets) {
				t.Errorf("%s: clock-beyond drawn on %v set %v", name, a.f.Targets, a.targets)
			}
			for _, i := range a.targets {
				if st := r.nodes[i-1].State(); st != StateRunning || r.held[i] != "" {
					t.Errorf("%s: %s targets node %d, %s (held by %q) once the step is applied", name, a.f.Kind, i, st, r.held[i])
				}
			}
		}
		w.mu.Lock()
		for i, off := range w.offsets {
			if st := r.nodes[i-1].State(); off != 0 && st != StateRunning {
				t.Errorf("%s: node %d's clock set to %d ms, and the node is %s once the step is applied", name, i, off, st)
			}
		}
		if len(w.setDown) > 0 {
			t.Errorf("%s: clocks set on nodes not running: %v", name, w.setDown)
		}
		w.mu.Unlock()
		for _, a := range acts {
			if err := r.healActive(ctx, a); err != nil {
				t.Fatalf("%s: heal %s: %v", name, a.f.Kind, err)
			}
		}
		for i, n := range r.nodes {
			if n.State() != StateRunning || len(r.held) > 0 {
				t.Fatalf("%s: node %d %s, held %v after the heal", name, i+1, n.State(), r.held)
			}
		}
	}
}

// The picks of a fault that needs live nodes: a target that is up keeps
// its place and offset; one that is not gives both to the first spare
// that is up and not picked; a target no spare can replace is stranded.
// The same input picks the same nodes.
func TestLivePicks(t *testing.T) {
	upOf := func(down ...int) func(int) bool { return func(i int) bool { return !slices.Contains(down, i) } }
	cases := []struct {
		name     string
		targets  []int
		spares   []int
		down     []int
		want     []livePick
		stranded []int
	}{
		{"all up", []int{2, 4}, []int{5, 1, 3}, nil, []livePick{{2, 2, 0}, {4, 4, 1}}, nil},
		{"seed 3131: node 5 in the killed cohort", []int{5}, []int{4, 1, 2, 3}, []int{1, 3, 5}, []livePick{{4, 5, 0}}, nil},
		{"first spare down too", []int{1, 3}, []int{2, 4, 5}, []int{1, 2}, []livePick{{3, 3, 1}, {4, 1, 0}}, nil},
		{"both down, two spares up", []int{1, 2}, []int{5, 3, 4}, []int{1, 2, 3}, []livePick{{4, 2, 1}, {5, 1, 0}}, nil},
		{"no spare left", []int{1, 2}, []int{3}, []int{1, 2}, []livePick{{3, 1, 0}}, []int{2}},
		{"clock-within: every node, no spares", []int{1, 2, 3, 4, 5}, nil, []int{3}, []livePick{{1, 1, 0}, {2, 2, 1}, {4, 4, 3}, {5, 5, 4}}, []int{3}},
	}
	for _, c := range cases {
		for range 2 {
			picks, stranded := livePicks(c.targets, c.spares, upOf(c.down...))
			if !slices.Equal(picks, c.want) || !slices.Equal(stranded, c.stranded) {
				t.Errorf("%s: picks %v stranded %v; want %v %v", c.name, picks, stranded, c.want, c.stranded)
			}
			for _, p := range picks {
				if slices.Contains(c.down, p.node) {
					t.Errorf("%s: picked node %d, which is down", c.name, p.node)
				}
			}
		}
	}
}

// A one-way cut of a partition's leader acts on the drawn partition's
// leader if it is up, else on the next partition's (in a cycle) whose
// leader is known and up.
func TestPickPartition(t *testing.T) {
	leaders := map[int]int{0: 1, 1: 0, 2: 3, 3: 5}
	leaderOf := func(p int) int { return leaders[p] }
	up := func(down ...int) func(int) bool { return func(i int) bool { return !slices.Contains(down, i) } }
	cases := []struct {
		name          string
		drawn         int
		down          []int
		wantP, wantLd int
	}{
		{"leader up", 2, nil, 2, 3},
		{"no leader known", 1, nil, 2, 3},
		{"leader down by the step", 0, []int{1}, 2, 3},
		{"wraps around", 3, []int{5}, 0, 1},
		{"none up", 0, []int{1, 3, 5}, 0, 0},
	}
	for _, c := range cases {
		p, l := pickPartition(c.drawn, len(leaders), leaderOf, up(c.down...))
		if p != c.wantP || l != c.wantLd {
			t.Errorf("%s: partition %d leader %d; want %d %d", c.name, p, l, c.wantP, c.wantLd)
		}
	}
}

// A combined step applies the faults that hold nodes first, so that the
// other, applied after, picks around them; a fault that needs a live node
// is never combined with one that may hold every node.
func TestLongScheduleStepOrder(t *testing.T) {
	sc := testScheduleConfig()
	whole := sc
	whole.Replicas = whole.Nodes // a kill-cohort takes every node
	for _, c := range []ScheduleConfig{sc, whole} {
		for _, seed := range append([]int64{3131}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10) {
			for k, st := range LongSchedule(seed, 30*time.Minute, c).Steps {
				for j := 1; j < len(st.Faults); j++ {
					a, b := st.Faults[j-1], st.Faults[j]
					if !holdsNodes(a.Kind) && holdsNodes(b.Kind) {
						t.Errorf("seed %d step %d: %s applied before %s, which holds nodes", seed, k+1, a.Kind, b.Kind)
					}
					if !combinable(a.Kind, b.Kind, c) {
						t.Errorf("seed %d step %d (replicas %d): %s combined with %s", seed, k+1, c.Replicas, a.Kind, b.Kind)
					}
				}
			}
		}
	}
	if combinable(NemKillCohort, NemClockBeyond, whole) || !combinable(NemKillCohort, NemClockBeyond, sc) {
		t.Errorf("kill-cohort with clock-beyond: combinable %v with a cohort of every node, %v of 3 of 5",
			combinable(NemKillCohort, NemClockBeyond, whole), combinable(NemKillCohort, NemClockBeyond, sc))
	}
}
