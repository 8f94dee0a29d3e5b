package raftgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// initialised returns a Meta after Init with p partitions.
func initialised(p int) Meta {
	return Meta{
		Config:     &ClusterConfig{ClusterID: "c1", Partitions: p, Replicas: 3, CreatedAt: 1000},
		Members:    map[uint64]Member{},
		Partitions: make([]PartitionInfo, p),
	}
}

func with(m Meta, f func(*Meta)) Meta {
	m = m.Clone()
	f(&m)
	return m
}

func cfgCmd(id string, p, n int) *command {
	return &command{Op: opInit, Config: &configRecord{ClusterID: id, Partitions: p, Replicas: n, CreatedAt: 2000}}
}

func casCmd(part int, prev, epoch uint64, cohort []uint64, leader uint64) *command {
	return &command{Op: opCAS, CAS: toCASRecord(CAS{Partition: part, PrevEpoch: prev, Epoch: epoch, Cohort: cohort, Leader: leader})}
}

func memberCmd(id uint64, addr string) *command {
	return &command{Op: opPutMember, Member: &memberRecord{ID: id, Addr: addr, Since: 5}}
}

// TestApply is the table of the pure state machine (docs/design.md, Partition
// leaders, step 8: CAS (epoch', cohort', leader) into raftgroup).
func TestApply(t *testing.T) {
	empty := Meta{Members: map[uint64]Member{}}
	led := with(initialised(4), func(m *Meta) {
		m.Partitions[2] = PartitionInfo{Epoch: 3, Cohort: []uint64{1, 2, 3}, Leader: 2}
	})
	tests := []struct {
		name        string
		start       Meta
		cmd         *command
		want        Meta // the state after; equal to start when refused
		wantErr     error
		wantChanged bool
		wantConfig  *ClusterConfig
	}{
		{
			name: "init sets config and partitions", start: empty, cmd: cfgCmd("c1", 4, 3),
			want: with(empty, func(m *Meta) {
				m.Config = &ClusterConfig{ClusterID: "c1", Partitions: 4, Replicas: 3, CreatedAt: 2000}
				m.Partitions = make([]PartitionInfo, 4)
			}),
			wantChanged: true, wantConfig: &ClusterConfig{ClusterID: "c1", Partitions: 4, Replicas: 3, CreatedAt: 2000},
		},
		{
			name: "init again with equal P and N returns the existing config", start: initialised(4),
			cmd: cfgCmd("other", 4, 3), want: initialised(4), wantConfig: initialised(4).Config,
		},
		{
			name: "init with other partitions", start: initialised(4), cmd: cfgCmd("c1", 8, 3),
			want: initialised(4), wantErr: ErrConfigMismatch,
		},
		{
			name: "init with other replicas", start: initialised(4), cmd: cfgCmd("c1", 4, 5),
			want: initialised(4), wantErr: ErrConfigMismatch,
		},
		{name: "init with no partitions", start: empty, cmd: cfgCmd("c1", 0, 3), want: empty, wantErr: ErrInvalid},
		{name: "init with too many partitions", start: empty, cmd: cfgCmd("c1", MaxPartitions+1, 3), want: empty, wantErr: ErrInvalid},
		{name: "init with no cluster id", start: empty, cmd: cfgCmd("", 4, 3), want: empty, wantErr: ErrInvalid},
		{name: "init with no config", start: empty, cmd: &command{Op: opInit}, want: empty, wantErr: ErrInvalid},
		{
			name: "put member before init", start: empty, cmd: memberCmd(7, "10.0.0.7:13000"),
			want:        with(empty, func(m *Meta) { m.Members[7] = Member{ID: 7, Addr: "10.0.0.7:13000", Since: 5} }),
			wantChanged: true,
		},
		{
			name:  "put member replaces",
			start: with(empty, func(m *Meta) { m.Members[7] = Member{ID: 7, Addr: "old:1", Since: 1} }),
			cmd:   memberCmd(7, "new:1"),
			want:  with(empty, func(m *Meta) { m.Members[7] = Member{ID: 7, Addr: "new:1", Since: 5} }), wantChanged: true,
		},
		{
			name:  "put member unchanged",
			start: with(empty, func(m *Meta) { m.Members[7] = Member{ID: 7, Addr: "a:1", Since: 5} }),
			cmd:   memberCmd(7, "a:1"),
			want:  with(empty, func(m *Meta) { m.Members[7] = Member{ID: 7, Addr: "a:1", Since: 5} }),
		},
		{name: "put member id 0", start: empty, cmd: memberCmd(0, "a:1"), want: empty, wantErr: ErrInvalid},
		{name: "put member without address", start: empty, cmd: memberCmd(3, ""), want: empty, wantErr: ErrInvalid},
		{
			name: "cas first epoch", start: initialised(4), cmd: casCmd(1, 0, 1, []uint64{1, 2, 3}, 1),
			want: with(initialised(4), func(m *Meta) {
				m.Partitions[1] = PartitionInfo{Epoch: 1, Cohort: []uint64{1, 2, 3}, Leader: 1}
			}),
			wantChanged: true,
		},
		{
			name: "cas from the current epoch, new cohort", start: led, cmd: casCmd(2, 3, 7, []uint64{2, 4}, 4),
			want: with(led, func(m *Meta) {
				m.Partitions[2] = PartitionInfo{Epoch: 7, Cohort: []uint64{2, 4}, Leader: 4}
			}),
			wantChanged: true,
		},
		{name: "cas stale prev epoch", start: led, cmd: casCmd(2, 2, 4, []uint64{1}, 1), want: led, wantErr: ErrCASConflict},
		{name: "cas prev epoch ahead", start: led, cmd: casCmd(2, 4, 5, []uint64{1}, 1), want: led, wantErr: ErrCASConflict},
		{name: "cas epoch equal to prev", start: led, cmd: casCmd(2, 3, 3, []uint64{1}, 1), want: led, wantErr: ErrInvalid},
		{name: "cas epoch below prev", start: led, cmd: casCmd(2, 3, 2, []uint64{1}, 1), want: led, wantErr: ErrInvalid},
		{name: "cas partition past the end", start: led, cmd: casCmd(4, 0, 1, []uint64{1}, 1), want: led, wantErr: ErrBadPartition},
		{name: "cas negative partition", start: led, cmd: casCmd(-1, 0, 1, []uint64{1}, 1), want: led, wantErr: ErrBadPartition},
		{name: "cas before init", start: empty, cmd: casCmd(0, 0, 1, []uint64{1}, 1), want: empty, wantErr: ErrNotInitialized},
		{name: "cas leader outside cohort", start: led, cmd: casCmd(0, 0, 1, []uint64{1, 2}, 3), want: led, wantErr: ErrInvalid},
		{name: "cas empty cohort", start: led, cmd: casCmd(0, 0, 1, nil, 0), want: led, wantErr: ErrInvalid},
		{name: "cas duplicate in cohort", start: led, cmd: casCmd(0, 0, 1, []uint64{1, 1}, 1), want: led, wantErr: ErrInvalid},
		{name: "cas node 0 in cohort", start: led, cmd: casCmd(0, 0, 1, []uint64{0, 1}, 1), want: led, wantErr: ErrInvalid},
		{name: "cas without arguments", start: led, cmd: &command{Op: opCAS}, want: led, wantErr: ErrInvalid},
		{
			name: "cas records the sealed set", start: led,
			cmd: &command{Op: opCAS, CAS: toCASRecord(CAS{Partition: 2, PrevEpoch: 3, Epoch: 9, Cohort: []uint64{1, 2, 3}, Leader: 1, Sealed: []uint64{1, 3}})},
			want: with(led, func(m *Meta) {
				m.Partitions[2] = PartitionInfo{Epoch: 9, Cohort: []uint64{1, 2, 3}, Leader: 1, Sealed: []uint64{1, 3}}
			}),
			wantChanged: true,
		},
		{
			name: "cas sealed outside the cohort", start: led,
			cmd:  &command{Op: opCAS, CAS: toCASRecord(CAS{Partition: 2, PrevEpoch: 3, Epoch: 9, Cohort: []uint64{1, 2}, Leader: 1, Sealed: []uint64{1, 4}})},
			want: led, wantErr: ErrInvalid,
		},
		{name: "unknown op", start: led, cmd: &command{Op: 99}, want: led, wantErr: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.start.Clone()
			res, changed := applyCommand(&m, tc.cmd)
			if !errors.Is(res.err, tc.wantErr) || (tc.wantErr == nil) != (res.err == nil) {
				t.Fatalf("err: got %v; want %v", res.err, tc.wantErr)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed: got %v; want %v", changed, tc.wantChanged)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Errorf("state:\ngot  %+v\nwant %+v", m, tc.want)
			}
			if tc.wantConfig != nil && res.config != *tc.wantConfig {
				t.Errorf("config: got %+v; want %+v", res.config, *tc.wantConfig)
			}
			if err := m.check(); err != nil {
				t.Errorf("invariants broken after apply: %v", err)
			}
		})
	}
}

// A lost CAS says what the partition holds now, so the loser can retry
// from it (docs/design.md, Partition leaders, step 8: "on conflict, back off").
func TestApplyConflictCarriesCurrent(t *testing.T) {
	m := with(initialised(4), func(m *Meta) {
		m.Partitions[2] = PartitionInfo{Epoch: 3, Cohort: []uint64{1, 2, 3}, Leader: 2}
	})
	res, _ := applyCommand(&m, casCmd(2, 1, 4, []uint64{1}, 1))
	var ce *ConflictError
	if !errors.As(res.err, &ce) {
		t.Fatalf("got %v; want a *ConflictError", res.err)
	}
	if ce.Current.Epoch != 3 || ce.Current.Leader != 2 || ce.PrevEpoch != 1 {
		t.Errorf("conflict: got %+v; want current epoch 3 leader 2, prev 1", ce)
	}
	for _, want := range []string{"epoch 3", "leader 2", "not 1"} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("message %q does not say %q", res.err, want)
		}
	}
	// The error's record is a copy: changing the state later must not
	// change it.
	m.Partitions[2].Cohort[0] = 99
	if ce.Current.Cohort[0] != 1 {
		t.Errorf("conflict error aliases the state")
	}
}

func TestApplyMismatchNamesBoth(t *testing.T) {
	m := initialised(4)
	res, _ := applyCommand(&m, cfgCmd("c2", 8, 5))
	for _, want := range []string{"partitions=4", "replicas=3", "partitions=8", "replicas=5"} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("message %q does not say %q", res.err, want)
		}
	}
	if res.config != *m.Config {
		t.Errorf("config: got %+v; want the existing %+v", res.config, *m.Config)
	}
}

func TestMetaClone(t *testing.T) {
	m := with(initialised(2), func(m *Meta) {
		m.Partitions[0] = PartitionInfo{Epoch: 1, Cohort: []uint64{1, 2}, Leader: 1}
		m.Members[1] = Member{ID: 1, Addr: "a:1"}
		m.Applied = 9
	})
	c := m.Clone()
	if !reflect.DeepEqual(c, m) {
		t.Fatalf("clone differs:\ngot  %+v\nwant %+v", c, m)
	}
	c.Config.Partitions = 7
	c.Partitions[0].Cohort[0] = 42
	c.Members[2] = Member{ID: 2, Addr: "b:1"}
	if m.Config.Partitions != 2 || m.Partitions[0].Cohort[0] != 1 || len(m.Members) != 1 {
		t.Errorf("clone aliases the original: %+v", m)
	}
	if z := (Meta{}).Clone(); !reflect.DeepEqual(z, Meta{}) {
		t.Errorf("zero clone: got %+v", z)
	}
}

func TestCommandCodec(t *testing.T) {
	cmd := casCmd(3, 1, 2, []uint64{4, 5}, 5)
	cmd.Proposer, cmd.Boot, cmd.Seq = 9, 1234, 77
	b, err := encodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, cmd) {
		t.Errorf("round trip: got %+v; want %+v", got, cmd)
	}
	again, _ := encodeCommand(&got)
	if string(again) != string(b) {
		t.Errorf("encoding is not deterministic")
	}

	bad := map[string][]byte{
		"empty":         nil,
		"wrong version": append([]byte{commandVersion + 1}, b[1:]...),
		"truncated":     b[:len(b)-2],
		"garbage":       {commandVersion, 0xff, 0x00},
		"huge array":    {commandVersion, 0xa1, 0x07, 0xa1, 0x04, 0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		// {99: 1}: a field this version does not know.
		"unknown field": {commandVersion, 0xa1, 0x18, 0x63, 0x01},
	}
	for name, data := range bad {
		if _, err := decodeCommand(data); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func TestSnapshotCodec(t *testing.T) {
	m := with(initialised(3), func(m *Meta) {
		m.Partitions[1] = PartitionInfo{Epoch: 4, Cohort: []uint64{3, 1}, Leader: 3, Sealed: []uint64{1}}
		m.Members[3] = Member{ID: 3, Addr: "c:1", Since: 30}
		m.Members[1] = Member{ID: 1, Addr: "a:1", Since: 10}
		m.Queues = map[string]QueueSettings{"b": {Paused: true}, "a": {MaxAttempts: 3, DefaultTTLMs: 5000, BackoffBaseMs: 10, BackoffMaxMs: 20, RetentionMs: 7}}
		m.Schedules = map[string]Schedule{
			"nightly": {ScheduleSpec: ScheduleSpec{Name: "nightly", Queue: "q", Cron: "0 3 * * *", Data: []byte("x"), Priority: -2, CatchUp: CatchUpAll},
				Version: 17, StartMs: 1000, DoneMs: 5000, Enqueued: 3, Skipped: 1},
			"tick": {ScheduleSpec: ScheduleSpec{Name: "tick", Queue: "q", EveryMs: 1000}, Version: 20, StartMs: 2000, DoneMs: 2000},
		}
		m.Shards = map[string]ShardSet{"w": {Name: "w", JoinSeq: 3,
			Members: map[string]ShardMember{
				"a": {ID: "a", Seq: 1, TTLMs: 5000, Beat: 9, Stopped: 2, Info: "host-1 pid 7"},
				"c": {ID: "c", Seq: 3, TTLMs: 5000},
			},
			Active:  ShardGen{Gen: 2, Count: 2, Assign: map[string]uint32{"a": 1, "b": 0}},
			Pending: &ShardGen{Gen: 3, Count: 2, Assign: map[string]uint32{"a": 1, "c": 0}},
		}}
		m.Applied = 42
	})
	b, err := encodeSnapshot(&m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\ngot  %+v\nwant %+v", got, m)
	}
	empty := Meta{Members: map[uint64]Member{}}
	b, _ = encodeSnapshot(&empty)
	if got, err := decodeSnapshot(b); err != nil || !reflect.DeepEqual(got, empty) {
		t.Errorf("empty round trip: got %+v, %v", got, err)
	}

	// Pair assertion: a state that breaks an invariant is neither written
	// nor read.
	broken := with(initialised(3), func(m *Meta) { m.Partitions = m.Partitions[:2] })
	if _, err := encodeSnapshot(&broken); err == nil {
		t.Errorf("encoded a state with a missing partition")
	}
	rec := snapshotRecord{Partitions: []partitionRecord{{Epoch: 1, Cohort: []uint64{1}, Leader: 1}}}
	raw, _ := marshalVersioned(snapshotVersion, &rec)
	if _, err := decodeSnapshot(raw); err == nil {
		t.Errorf("decoded partitions without a config")
	}
	rec = snapshotRecord{Members: []memberRecord{{ID: 1, Addr: "a:1"}, {ID: 1, Addr: "b:1"}}}
	raw, _ = marshalVersioned(snapshotVersion, &rec)
	if _, err := decodeSnapshot(raw); err == nil {
		t.Errorf("decoded a member twice")
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		c := DefaultLocalConfig()
		c.NodeID = 1
		c.Peers = []uint64{1, 2, 3}
		c.Store = testStore(t)
		c.Transport = nopTransport{}
		return c
	}
	tests := []struct {
		name  string
		tweak func(*Config)
		ok    bool
	}{
		{"valid", func(*Config) {}, true},
		{"lone voter without transport", func(c *Config) { c.Peers, c.Transport = []uint64{1}, nil }, true},
		{"join without peers", func(c *Config) { c.Peers = nil }, true},
		{"node id 0", func(c *Config) { c.NodeID = 0 }, false},
		{"election not above heartbeat", func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 2, 2 }, false},
		{"negative tick", func(c *Config) { c.TickInterval = -time.Millisecond }, false},
		{"no store", func(c *Config) { c.Store = nil }, false},
		{"peers without self", func(c *Config) { c.Peers = []uint64{2, 3} }, false},
		{"duplicate peer", func(c *Config) { c.Peers = []uint64{1, 2, 2} }, false},
		{"peer 0", func(c *Config) { c.Peers = []uint64{1, 0} }, false},
		{"no transport with peers", func(c *Config) { c.Transport = nil }, false},
		{"no transport when joining", func(c *Config) { c.Peers, c.Transport = nil, nil }, false},
		{"no snapshot entries", func(c *Config) { c.SnapshotEntries = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.tweak(&c)
			err := c.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate: got %v; want ok=%v", err, tc.ok)
			}
		})
	}
	// New fills zero fields with the defaults before validating.
	c := base()
	c.TickInterval, c.ElectionTicks, c.HeartbeatTicks, c.SnapshotEntries, c.Logger = 0, 0, 0, 0, nil
	g, err := New(c)
	if err != nil {
		t.Fatalf("New with zero fields: %v", err)
	}
	if g.cfg.TickInterval != DefaultTickInterval || g.cfg.ElectionTicks != DefaultElectionTicks ||
		g.cfg.HeartbeatTicks != DefaultHeartbeatTicks || g.cfg.SnapshotEntries != DefaultSnapshotEntries {
		t.Errorf("defaults not filled: %+v", g.cfg)
	}
}
