package queues_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node/queues"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// fakeGroup commits every change it is given.
type fakeGroup struct{ meta raftgroup.Meta }

func (g *fakeGroup) Meta() raftgroup.Meta     { return g.meta }
func (g *fakeGroup) Changed() <-chan struct{} { return make(chan struct{}) }
func (g *fakeGroup) ChangeQueue(_ context.Context, c raftgroup.QueueChange) (raftgroup.QueueSettings, error) {
	s := g.meta.Queues[c.Queue]
	if c.RetentionMs != nil {
		s.RetentionMs = *c.RetentionMs
	}
	if c.DefaultTTLMs != nil {
		s.DefaultTTLMs = *c.DefaultTTLMs
	}
	if g.meta.Queues == nil {
		g.meta.Queues = map[string]raftgroup.QueueSettings{}
	}
	g.meta.Queues[c.Queue] = s
	return s, nil
}

func ptr[T any](v T) *T { return &v }

// TestSetChecksBounds: a change is checked against the node's bounds
// before it reaches the group; what the group commits is what Set
// returns and, once refreshed, what the node applies.
func TestSetChecksBounds(t *testing.T) {
	g := &fakeGroup{}
	s := queues.New(g, queues.Bounds{MaxTTL: time.Minute, MaxDelay: time.Hour, MaxWait: time.Minute, MaxBatch: 100})
	for _, tc := range []struct {
		name string
		req  wire.QueueSetRequest
		ok   bool
	}{
		{"nothing to change", wire.QueueSetRequest{Queue: "q"}, false},
		{"bad queue name", wire.QueueSetRequest{Queue: "q q", DefaultTTLMs: ptr(int64(1))}, false},
		{"lease over the node's limit", wire.QueueSetRequest{Queue: "q", DefaultTTLMs: ptr(int64(61_000))}, false},
		{"negative backoff", wire.QueueSetRequest{Queue: "q", BackoffBaseMs: ptr(int64(-1))}, false},
		{"negative retention", wire.QueueSetRequest{Queue: "q", RetentionMs: ptr(int64(-1))}, false},
		{"lease and retention", wire.QueueSetRequest{Queue: "q", DefaultTTLMs: ptr(int64(30_000)), RetentionMs: ptr(int64(3_600_000))}, true},
	} {
		got, err := s.Set(context.Background(), &tc.req)
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%s: Set = %+v, %v; want ok=%v (else ErrInvalid)", tc.name, got, err, tc.ok)
		}
	}
	s.Refresh(g.meta.Queues)
	if q := s.Of("q"); q.DefaultTTLMs != 30_000 || q.RetentionMs != 3_600_000 {
		t.Errorf("applied settings %+v", q)
	}
	if r := s.Retentions(); len(r) != 1 || r["q"] != time.Hour {
		t.Errorf("Retentions = %v; want q: 1h", r)
	}
}
