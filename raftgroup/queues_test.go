package raftgroup

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestApplyQueue: a change sets only its fields, on the settings current
// when it applies; settings back at the defaults leave the registry; a
// bad change or one past the cap changes nothing.
func TestApplyQueue(t *testing.T) {
	m := initialised(1)
	steps := []struct {
		name    string
		change  QueueChange
		want    QueueSettings
		changed bool
		err     error
	}{
		{"max attempts", QueueChange{Queue: "q", MaxAttempts: ptr(uint32(3))}, QueueSettings{MaxAttempts: 3}, true, nil},
		{"pause keeps the rest", QueueChange{Queue: "q", Paused: ptr(true)}, QueueSettings{MaxAttempts: 3, Paused: true}, true, nil},
		{"same again", QueueChange{Queue: "q", Paused: ptr(true)}, QueueSettings{MaxAttempts: 3, Paused: true}, false, nil},
		{"backoff", QueueChange{Queue: "q", BackoffBaseMs: ptr(int64(100)), BackoffMaxMs: ptr(int64(1000))},
			QueueSettings{MaxAttempts: 3, Paused: true, BackoffBaseMs: 100, BackoffMaxMs: 1000}, true, nil},
		{"max below base", QueueChange{Queue: "q", BackoffMaxMs: ptr(int64(10))},
			QueueSettings{MaxAttempts: 3, Paused: true, BackoffBaseMs: 100, BackoffMaxMs: 1000}, false, ErrInvalid},
		{"negative ttl", QueueChange{Queue: "q", DefaultTTLMs: ptr(int64(-1))},
			QueueSettings{MaxAttempts: 3, Paused: true, BackoffBaseMs: 100, BackoffMaxMs: 1000}, false, ErrInvalid},
		{"no name", QueueChange{Paused: ptr(true)}, QueueSettings{}, false, ErrInvalid},
		{"back to defaults", QueueChange{Queue: "q", MaxAttempts: ptr(uint32(0)), Paused: ptr(false), BackoffBaseMs: ptr(int64(0)), BackoffMaxMs: ptr(int64(0))},
			QueueSettings{}, true, nil},
	}
	for _, s := range steps {
		r, changed := applyQueue(&m, s.change)
		if !errors.Is(r.err, s.err) || (s.err == nil && r.err != nil) || changed != s.changed {
			t.Fatalf("%s: err %v, changed %v; want %v, %v", s.name, r.err, changed, s.err, s.changed)
		}
		if s.change.Queue != "" && m.Queues["q"] != s.want {
			t.Fatalf("%s: settings %+v; want %+v", s.name, m.Queues["q"], s.want)
		}
		if err := m.check(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if _, ok := m.Queues["q"]; ok {
		t.Fatal("a queue back at the defaults is still in the registry")
	}
	m.Queues = map[string]QueueSettings{}
	for i := range MaxQueueSettings {
		m.Queues[fmt.Sprintf("q%d", i)] = QueueSettings{Paused: true}
	}
	before := m.Clone()
	if r, changed := applyQueue(&m, QueueChange{Queue: "one-more", Paused: ptr(true)}); !errors.Is(r.err, ErrInvalid) || changed {
		t.Fatalf("past the cap: %v, changed %v; want ErrInvalid", r.err, changed)
	}
	if !reflect.DeepEqual(m, before) {
		t.Fatal("a refused change changed the registry")
	}
}

// TestChangeQueueSurvivesRestart: settings changed through the group are
// on every member and after a restart.
func TestChangeQueueSurvivesRestart(t *testing.T) {
	c := newCluster(t, []uint64{1, 2, 3}, nil)
	lead := c.leader()
	g := c.groups[c.follower(lead)]
	got, err := g.ChangeQueue(testCtx(t), QueueChange{Queue: "mail", MaxAttempts: ptr(uint32(5)), Paused: ptr(true)})
	if err != nil || got != (QueueSettings{MaxAttempts: 5, Paused: true}) {
		t.Fatalf("ChangeQueue = %+v, %v", got, err)
	}
	want := g.Meta()
	c.converged(want)
	c.restart(lead)
	c.leader()
	c.converged(want)
	if s := c.groups[lead].Meta().Queues["mail"]; !s.Paused || s.MaxAttempts != 5 {
		t.Fatalf("after a restart: %+v", s)
	}
}
