package faults

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// The wipes: the schedule draws them only when asked, the run lists them
// beyond the bounds, and the harness records what they deleted
// (check_wipe_test.go: which anomalies the checkers excuse for them).

// A run names wipes only through --nemeses: the default schedules never
// draw them, and a run that names them draws only what it names, in the
// same schedule whatever order the names come in.
func TestScheduleNemesesFlag(t *testing.T) {
	for _, quick := range []bool{true, false} {
		c := QuickConfig()
		if !quick {
			c = DefaultConfig()
		}
		for seed := int64(1); seed <= 20; seed++ {
			c.Seed = seed
			for _, k := range c.Schedule().Kinds() {
				if slices.Contains(OnDemandNemeses, k) {
					t.Fatalf("quick %v, seed %d: the default schedule draws %s", quick, seed, k)
				}
			}
		}
	}

	c := DefaultConfig()
	c.Duration = 10 * time.Minute
	c.Nemeses = []string{NemWipe}
	s := c.Schedule()
	if got := s.Kinds(); !reflect.DeepEqual(got, []string{NemWipe}) {
		t.Fatalf("--nemeses wipe drew %v", got)
	}
	if s.Estimate() < c.Duration {
		t.Errorf("--nemeses wipe: schedule of %v for a %v run", s.Estimate(), c.Duration)
	}
	for _, st := range s.Steps {
		f := st.Faults[0]
		if len(st.Faults) != 1 || len(f.Targets) != 1 || f.Targets[0] < 1 || f.Targets[0] > c.Topology.Nodes || f.Hold != c.KillHold {
			t.Fatalf("wipe step %v", st)
		}
	}

	c.Nemeses = []string{NemWipeMajority, NemPartitionOne, NemWipe}
	a := c.Schedule()
	c.Nemeses = []string{NemWipe, NemWipeMajority, NemPartitionOne}
	if b := c.Schedule(); !reflect.DeepEqual(a, b) {
		t.Errorf("the order of --nemeses changed the schedule")
	}
	want := []string{NemPartitionOne, NemWipe, NemWipeMajority}
	if got := a.Kinds(); !reflect.DeepEqual(got, want) {
		t.Errorf("kinds %v; want %v", got, want)
	}
	combos := 0
	for _, st := range a.Steps {
		for _, f := range st.Faults {
			if f.Kind == NemWipeMajority && (f.Partition < 0 || f.Partition >= c.Partitions) {
				t.Errorf("wipe-majority of partition %d", f.Partition)
			}
		}
		if len(st.Faults) > 1 {
			combos++
			if nemesisClass(st.Faults[0].Kind) == nemesisClass(st.Faults[1].Kind) {
				t.Errorf("step combines two %s nemeses: %v", nemesisClass(st.Faults[0].Kind), st)
			}
		}
	}
	if combos == 0 {
		t.Errorf("no wipe combined with the partition in %d steps", len(a.Steps))
	}

	// --exclude applies to the named ones too.
	c.Exclude = []string{NemWipeMajority}
	if got := c.Schedule().Kinds(); !reflect.DeepEqual(got, []string{NemPartitionOne, NemWipe}) {
		t.Errorf("with wipe-majority excluded: %v", got)
	}
}

func TestConfigNemeses(t *testing.T) {
	c := validConfig(t, DefaultConfig())
	c.Nemeses = []string{NemWipe, NemWipeMajority}
	if err := c.Validate(); err != nil {
		t.Errorf("--nemeses wipe,wipe-majority: %v", err)
	}
	c.W = 1
	if err := c.Validate(); err != nil {
		t.Errorf("--nemeses wipe --w 1: %v", err)
	}
	c.Nemeses = []string{NemWipe, "wipe-all"}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `"wipe-all"`) || !strings.Contains(err.Error(), NemWipeMajority) || !strings.Contains(err.Error(), NemKillAll) {
		t.Errorf("unknown nemesis: %v; want an error naming it and listing the known ones", err)
	}
	c.Nemeses, c.Exclude = []string{NemWipe}, []string{NemWipe}
	if err := c.Validate(); err == nil {
		t.Errorf("every named nemesis excluded: validated")
	}
	c.Nemeses, c.Exclude = nil, []string{NemWipe}
	if err := c.Validate(); err != nil {
		t.Errorf("excluding an on-demand nemesis: %v", err)
	}
}

// run.json lists the wipes beyond the bounds when the schedule has them,
// and only then.
func TestWipeBeyondBounds(t *testing.T) {
	for _, k := range KnownNemeses() {
		want := k == NemClockBeyond || k == NemWipe || k == NemWipeMajority
		if BeyondBounds(k) != want {
			t.Errorf("BeyondBounds(%s) = %v; want %v", k, BeyondBounds(k), want)
		}
	}
	cases := []struct {
		nemeses []string
		want    []string
	}{
		{[]string{NemWipe}, []string{NemWipe}},
		{[]string{NemWipeMajority}, []string{NemWipeMajority}},
		{[]string{NemWipe, NemWipeMajority, NemClockBeyond, NemKillMinority}, []string{NemClockBeyond, NemWipe, NemWipeMajority}},
		{[]string{NemKillMinority}, nil},
	}
	for _, tc := range cases {
		c := validConfig(t, DefaultConfig())
		c.Duration, c.Nemeses = 10*time.Minute, tc.nemeses
		r, err := NewRun(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.runInfo().BeyondBounds; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("--nemeses %v: beyond_bounds %v; want %v", tc.nemeses, got, tc.want)
		}
	}
}

// applyWipe, on stand-in processes: it kills the node, deletes its data
// dir and nothing else, gives it a join list of every other node for its
// restart, and records the cohorts it took replicas from in a form the
// checkers read back.
func TestApplyWipe(t *testing.T) {
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Out, cfg.Binary = out, "/bin/skuldd"
	cfg.Topology.Nodes = 3
	r := &Run{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), tl: NewTimeline()}
	for i := 1; i <= 3; i++ {
		if err := os.MkdirAll(r.dataDir(i), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.dataDir(i), "MANIFEST"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		n := &NodeProc{Index: i, Argv: []string{"sleep", "60"}, LogPath: filepath.Join(out, "n.log"),
			PidPath: filepath.Join(out, "n.pid"), log: r.log, tl: r.tl}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		r.nodes = append(r.nodes, n)
	}
	defer func() {
		for _, n := range r.nodes {
			if n.State() != StateDown {
				_ = n.Kill()
			}
		}
	}()
	v := testView(cfg.Topology, []wire.MemberView{
		{ID: 0x11, Addr: cfg.Topology.RelayAddr(1).String(), State: "alive"},
		{ID: 0x22, Addr: cfg.Topology.RelayAddr(2).String(), State: "alive"},
		{ID: 0x33, Addr: cfg.Topology.RelayAddr(3).String(), State: "alive"},
	}, []wire.PartitionView{{Partition: 0, Cohort: []uint64{0x11, 0x22, 0x33}}, {Partition: 1, Cohort: []uint64{0x11, 0x33}}})
	v.Raw.Raft.Voters = []uint64{0x11, 0x22, 0x33}

	a := &active{f: Fault{Kind: NemWipe, Targets: []int{2}}, detail: map[string]any{}}
	if err := r.applyWipe(a, []int{2}, v); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.targets, []int{2}) {
		t.Errorf("targets %v; want [2]", a.targets)
	}
	for i, want := range []string{StateRunning, StateDown, StateRunning} {
		if got := r.nodes[i].State(); got != want {
			t.Errorf("node %d %s; want %s", i+1, got, want)
		}
	}
	for i := 1; i <= 3; i++ {
		_, err := os.Stat(r.dataDir(i))
		if gone := os.IsNotExist(err); gone != (i == 2) {
			t.Errorf("node %d's data dir gone: %v (%v)", i, gone, err)
		}
	}
	argv := strings.Join(r.nodes[1].Argv, " ")
	for j, want := range map[int]bool{1: true, 2: false, 3: true} {
		if got := strings.Contains(argv, "--join "+cfg.Topology.RelayAddr(j).String()); got != want {
			t.Errorf("wiped node 2 joins through node %d: %v; want %v (%s)", j, got, want, argv)
		}
	}
	if argv1 := strings.Join(r.nodes[0].Argv, " "); strings.Contains(argv1, "--join") {
		t.Errorf("node 1's command changed: %s", argv1)
	}
	detail, err := json.Marshal(a.detail)
	if err != nil {
		t.Fatal(err)
	}
	cohorts, voters := wipeDetail(detail)
	if want := (map[int][]int{0: {1, 2, 3}, 1: {1, 3}}); !reflect.DeepEqual(cohorts, want) {
		t.Errorf("cohorts read back %v; want %v (detail %s)", cohorts, want, detail)
	}
	if want := []int{1, 2, 3}; !reflect.DeepEqual(voters, want) {
		t.Errorf("voters read back %v; want %v (detail %s)", voters, want, detail)
	}
	if !strings.Contains(string(detail), `"2":"0000000000000022"`) {
		t.Errorf("detail %s lacks the wiped node's old id", detail)
	}
}
