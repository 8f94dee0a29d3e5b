package faults

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The bookkeeping: a fault is partial when it holds on some nodes and
// missed others; nodes the schedule accounts for make it neither partial
// nor skipped; a fault that holds on none says why for every node.
func TestApplication(t *testing.T) {
	type step struct {
		node int
		how  string // hit, miss or leave
	}
	cases := []struct {
		name           string
		intended       []int
		steps          []step
		partial, none  bool
		targets, notAp []int
		errHas         string
	}{
		{"all hit", []int{3, 1}, []step{{3, "hit"}, {1, "hit"}}, false, false, []int{1, 3}, []int{}, ""},
		{"one missed", []int{1, 2, 3}, []step{{1, "hit"}, {2, "miss"}, {3, "hit"}}, true, false, []int{1, 3}, []int{2}, ""},
		{"left out by the step", []int{1, 2}, []step{{1, "hit"}, {2, "leave"}}, false, false, []int{1}, []int{}, ""},
		{"none", []int{4, 5}, []step{{5, "miss"}, {4, "miss"}}, false, true, []int{}, []int{4, 5}, "node 4: why 4"},
		{"all left out", []int{2}, []step{{2, "leave"}}, false, true, []int{}, []int{}, "node 2 left out"},
	}
	for _, c := range cases {
		ap := newApplication(c.intended)
		for _, s := range c.steps {
			switch s.how {
			case "hit":
				ap.hit(s.node)
			case "miss":
				ap.miss(s.node, "why "+string(rune('0'+s.node)))
			case "leave":
				ap.leave(s.node, "down by kill-minority of this step")
			}
		}
		if ap.partial() != c.partial || ap.none() != c.none {
			t.Errorf("%s: partial %v none %v; want %v %v", c.name, ap.partial(), ap.none(), c.partial, c.none)
		}
		if got := ap.targets(); !slices.Equal(got, c.targets) {
			t.Errorf("%s: targets %v; want %v", c.name, got, c.targets)
		}
		if got := ap.notApplied(); !slices.Equal(got, c.notAp) {
			t.Errorf("%s: not applied %v; want %v", c.name, got, c.notAp)
		}
		if c.none && !strings.Contains(ap.err().Error(), c.errHas) {
			t.Errorf("%s: error %q lacks %q", c.name, ap.err(), c.errHas)
		}
		d := ap.detail(NemKillMinority, healedWithFault)
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Nemesis    string         `json:"nemesis"`
			Intended   []int          `json:"intended"`
			Applied    []int          `json:"applied"`
			NotApplied []int          `json:"not_applied"`
			Why        map[int]string `json:"why"`
			Healed     string         `json:"healed"`
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Nemesis != NemKillMinority || !slices.Equal(back.Intended, sorted(c.intended)) ||
			!slices.Equal(back.Applied, c.targets) || !slices.Equal(back.NotApplied, c.notAp) ||
			len(back.Why) != len(c.notAp) || back.Healed == "" {
			t.Errorf("%s: detail %s", c.name, b)
		}
	}
}

// A kill of two nodes, one of them down already: the fault holds on the
// other, its start and stop events name only that one, a NotePartial
// follows the start and says what was not killed and why, and the heal
// restarts both.
func TestApplyKillPartial(t *testing.T) {
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Out, cfg.Topology.Nodes = out, 3
	r := &Run{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), tl: NewTimeline(), held: map[int]string{}}
	var err error
	if r.rec, err = CreateRecorder(filepath.Join(out, HistoryFile)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		n := &NodeProc{Index: i, Argv: []string{"sleep", "60"}, LogPath: filepath.Join(out, "n.log"),
			PidPath: filepath.Join(out, "n.pid"), log: r.log, tl: r.tl}
		if i != 2 { // node 2 is down: it never started
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
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
	ctx := context.Background()
	a, err := r.apply(ctx, Fault{Kind: NemKillMinority, Targets: []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if r.held[1] != NemKillMinority || r.held[2] != "" {
		t.Errorf("held %v; want node 1 by the kill", r.held)
	}
	if err := r.healActive(ctx, a); err != nil {
		t.Fatal(err)
	}
	if len(r.held) != 0 {
		t.Errorf("held %v after the heal", r.held)
	}
	for i, want := range []string{StateRunning, StateRunning, StateRunning} {
		if got := r.nodes[i].State(); got != want {
			t.Errorf("node %d %s after the heal; want %s", i+1, got, want)
		}
	}
	if err := r.rec.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := ReadHistory(filepath.Join(out, HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.F+":"+e.Nemesis)
	}
	if want := []string{"start:" + NemKillMinority, "note:" + NotePartial, "stop:" + NemKillMinority}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v; want %v", kinds, want)
	}
	start, note, stop := events[0], events[1], events[2]
	if !slices.Equal(start.Targets, []int{1}) || !slices.Equal(stop.Targets, start.Targets) {
		t.Errorf("start targets %v, stop targets %v; want [1] both", start.Targets, stop.Targets)
	}
	var d struct {
		Applied    []int          `json:"applied"`
		NotApplied []int          `json:"not_applied"`
		Why        map[int]string `json:"why"`
	}
	if err := json.Unmarshal(note.Detail, &d); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Applied, []int{1}) || !reflect.DeepEqual(d.NotApplied, []int{2}) || d.Why[2] != "down already" {
		t.Errorf("partial detail %s", note.Detail)
	}
	if !IsHarnessFault(note.Nemesis) {
		t.Errorf("%s is not a harness fault", note.Nemesis)
	}
}

// A kill whose every node is down is skipped: an error, no events.
func TestApplyKillNone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Topology.Nodes = 3
	r := &Run{cfg: cfg, log: slog.New(slog.DiscardHandler), tl: NewTimeline(), held: map[int]string{}}
	for i := 1; i <= 3; i++ {
		r.nodes = append(r.nodes, &NodeProc{Index: i, log: r.log, tl: r.tl})
	}
	a := &active{f: Fault{Kind: NemKillMinority}, detail: map[string]any{}}
	err := r.applyKill(a, []int{1, 3})
	if err == nil || !strings.Contains(err.Error(), "node 1: down already") {
		t.Errorf("error %v", err)
	}
	if len(a.notes) != 0 || a.heal != nil {
		t.Errorf("a skipped kill left notes %v or a heal", a.notes)
	}
}
