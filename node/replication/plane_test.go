package replication

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/antientropy"
	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// cohortHost is a Host that knows cohorts only.
type cohortHost struct {
	Host
	cohorts map[int][]uint64
}

func (h cohortHost) Cohort(part int) []uint64 { return h.cohorts[part] }

func validConfig(t *testing.T) Config {
	return Config{
		Self: 1, Partitions: 4, AAE: antientropy.DefaultConfig(), AAEInterval: time.Second,
		GCInterval: time.Second, GCComponentMax: 10, TombstoneHorizon: time.Hour,
		Clock: clock.Real{}, Log: testkit.Logger(t),
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig(t).Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no id", func(c *Config) { c.Self = 0 }, "no node id"},
		{"no partitions", func(c *Config) { c.Partitions = 0 }, "partitions 0"},
		{"no aae interval", func(c *Config) { c.AAEInterval = 0 }, "anti-entropy interval"},
		{"no gc interval", func(c *Config) { c.GCInterval = 0 }, "gc interval"},
		{"negative retention", func(c *Config) { c.Retention = -time.Second }, "retention"},
		{"no component bound", func(c *Config) { c.GCComponentMax = 0 }, "gc component max"},
		{"no horizon", func(c *Config) { c.TombstoneHorizon = 0 }, "tombstone horizon"},
		{"no clock", func(c *Config) { c.Clock = nil }, "no clock"},
		{"bad limits", func(c *Config) { c.AAE.Limits.IDsPerRound = 0 }, "ids per round"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestNeedAcks(t *testing.T) {
	p, err := New(t.Context(), validConfig(t), cohortHost{cohorts: map[int][]uint64{
		1: {1}, 2: {1, 2, 3}, 3: {1, 2, 3, 4, 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		part    uint16
		w, want int
	}{
		{0, 0, 1}, // no cohort known yet: this replica alone
		{1, 0, 1},
		{2, 0, 2}, // a majority of 3
		{3, 0, 3}, // a majority of 5 (a cohort in a move counts as it is)
		{2, 1, 1},
		{2, 3, 3},
		{2, 5, 3}, // never more than the cohort
	} {
		if got := p.NeedAcks(tc.part, tc.w); got != tc.want {
			t.Errorf("NeedAcks(partition %d, w=%d) = %d; want %d", tc.part, tc.w, got, tc.want)
		}
	}
}

func TestNextID(t *testing.T) {
	for _, tc := range []struct{ in, want task.ID }{
		{task.ID{}, task.ID{task.IDLen - 1: 1}},
		{task.ID{task.IDLen - 1: 0xff}, task.ID{task.IDLen - 2: 1}},
		{task.ID{0: 1, task.IDLen - 2: 0xff, task.IDLen - 1: 0xff}, task.ID{0: 1, task.IDLen - 3: 1}},
	} {
		if got := nextID(tc.in); got != tc.want {
			t.Errorf("nextID(%x) = %x; want %x", tc.in, got, tc.want)
		}
	}
}

func TestSameRecordAndTombOf(t *testing.T) {
	leader := &task.Record{State: &task.State{Stamp: 2}, Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("a")}}}
	for _, tc := range []struct {
		name string
		rec  *task.Record
		want bool
	}{
		{"missing", nil, false},
		{"equal", &task.Record{State: &task.State{Stamp: 2}, Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("a")}}}, true},
		{"other state", &task.Record{State: &task.State{Stamp: 1}, Updates: leader.Updates}, false},
		{"fewer updates", &task.Record{State: &task.State{Stamp: 2}}, false},
		{"other data", &task.Record{State: &task.State{Stamp: 2}, Updates: []task.Update{{Claim: 0, Seq: 0, Data: []byte("b")}}}, false},
	} {
		if got := sameRecord(tc.rec, leader); got != tc.want {
			t.Errorf("%s: sameRecord = %v; want %v", tc.name, got, tc.want)
		}
	}
	recs := map[uint64]*task.Record{1: nil, 2: {Tomb: 50}, 3: {Tomb: 40}, 4: {State: &task.State{}}}
	if got := tombOf(recs); got != 40 {
		t.Errorf("tombOf = %d; want the earliest, 40", got)
	}
	if got := tombOf(map[uint64]*task.Record{1: nil}); got != 0 {
		t.Errorf("tombOf without tombstones = %d; want 0", got)
	}
}

func TestAddGC(t *testing.T) {
	into := &wire.GCResponse{Partitions: 1, Candidates: 2, Collected: 1, Queues: []wire.GCQueue{{Queue: "b", Tasks: 1}}}
	AddGC(into, &wire.GCResponse{
		Partitions: 2, Candidates: 3, Collectable: 4, Collected: 2, Held: 1, Unreached: 1,
		Queues: []wire.GCQueue{{Queue: "b", Tasks: 2}, {Queue: "a", Tasks: 5}},
	})
	want := &wire.GCResponse{
		Partitions: 3, Candidates: 5, Collectable: 4, Collected: 3, Held: 1, Unreached: 1,
		Queues: []wire.GCQueue{{Queue: "a", Tasks: 5}, {Queue: "b", Tasks: 3}},
	}
	if !reflect.DeepEqual(into, want) {
		t.Fatalf("AddGC = %+v; want %+v", into, want)
	}
}
