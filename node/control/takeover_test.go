package control

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/member"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// tickHost is a fakeHost with a registry and a gossip view, for driving
// failover ticks; it records the promises asked of its replicas.
type tickHost struct {
	*fakeHost
	meta  raftgroup.Meta
	peers []member.Peer
	mu    sync.Mutex
	asked []promiseCall // guarded by mu
}

type promiseCall struct{ ep, candidate uint64 }

func (h *tickHost) Group() Group   { return tickGroup{h} }
func (h *tickHost) Gossip() Gossip { return tickGossip{h} }
func (h *tickHost) Replica(part int) Replica {
	return recordingReplica{h.fakeHost.parts[part], h}
}

func (h *tickHost) promises() []promiseCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]promiseCall(nil), h.asked...)
}

// recordingReplica records every promise asked of it, then answers as
// its fakeReplica.
type recordingReplica struct {
	*fakeReplica
	h *tickHost
}

func (r recordingReplica) Promise(ep, candidate uint64) error {
	r.h.mu.Lock()
	r.h.asked = append(r.h.asked, promiseCall{ep, candidate})
	r.h.mu.Unlock()
	return r.fakeReplica.Promise(ep, candidate)
}

type tickGroup struct{ h *tickHost }

func (g tickGroup) Meta() raftgroup.Meta { return g.h.meta.Clone() }
func (g tickGroup) Leader() uint64       { return 0 }
func (g tickGroup) CAS(context.Context, raftgroup.CAS) error {
	return errors.New("no CAS here")
}
func (g tickGroup) Config() (voters, learners []uint64) { return nil, nil }
func (g tickGroup) ApplyConfStep(context.Context, raftgroup.ConfStep) error {
	return errors.New("no conf step here")
}

type tickGossip struct{ h *tickHost }

func (g tickGossip) Members() []member.Peer { return g.h.peers }
func (g tickGossip) Lookup(id uint64) (string, member.State, bool) {
	for _, p := range g.h.peers {
		if p.ID == id {
			return p.Addr, p.State, true
		}
	}
	return "", 0, false
}

// promisedAwayHost is a node the registry names leader of partition 0
// (cohort testSelf, 2 and 3, epoch 4, every member alive), whose
// replica does not lead: it promised epoch 5 to node 2.
func promisedAwayHost() *tickHost {
	const a, b = 2, 3
	cohort := []uint64{testSelf, a, b}
	return &tickHost{
		fakeHost: &fakeHost{
			parts:     []*fakeReplica{{promised: 5, promisedTo: a}},
			placement: Placement{Cohorts: [][]uint64{cohort}, Leaders: []uint64{testSelf}, Epochs: []uint64{4}},
		},
		meta: raftgroup.Meta{
			Members:    map[uint64]raftgroup.Member{testSelf: {ID: testSelf}, a: {ID: a}, b: {ID: b}},
			Partitions: []raftgroup.PartitionInfo{{Epoch: 4, Cohort: cohort, Leader: testSelf, Sealed: cohort}},
		},
		peers: []member.Peer{{ID: testSelf, State: member.Alive}, {ID: a, State: member.Alive}, {ID: b, State: member.Alive}},
	}
}

// The failover loop of a node the registry names leader, whose replica
// promised a newer epoch to a candidate that never finished (seeds 194
// and 754 of the simulation, under load: the partition stayed without a
// leader, every node alive, until the drain gave up): it waits
// PromiseGrace across ticks, then runs a handoff of its own, which asks
// above the registry's epoch. No handoff here can win (the peers are out
// of reach); the promise asked of this node's replica shows it started.
func TestFailoverTickTakesBackAnAbandonedPromise(t *testing.T) {
	h := promisedAwayHost()
	c := newTestControl(t, h)
	c.clock.checked = true // a judged clock: failover acts
	st := newFailoverState()
	t0 := time.Unix(1000, 0)
	grace := c.cfg.PromiseGrace

	c.failoverTick(context.Background(), st, t0)
	c.failoverTick(context.Background(), st, t0.Add(grace-time.Nanosecond))
	c.Wait()
	if got := h.promises(); len(got) != 0 {
		t.Fatalf("within the promise grace: promises asked %v; want none (the candidate may still win)", got)
	}
	if !st.promisedSince[0].Equal(t0) {
		t.Fatalf("promised away since %v; want t0 %v", st.promisedSince[0], t0)
	}

	c.failoverTick(context.Background(), st, t0.Add(grace))
	c.Wait()
	got := h.promises()
	if len(got) == 0 || got[0] != (promiseCall{5, testSelf}) {
		t.Fatalf("past the promise grace: promises asked %v; want a handoff of this node's own, first at epoch 5", got)
	}
	for _, p := range got[1:] {
		// Refused at 5 (promised to a), every retry asks above it.
		if p.candidate != testSelf || p.ep <= 5 {
			t.Fatalf("promises asked %v; want this node's, above the refused epoch 5 after the first", got)
		}
	}
}

// The failover loop takes back at once a partition whose candidate said
// it gave up (ServeAbandoned), and only when that candidate is the one
// this node's replica promised to; the mark goes once the registry names
// another node.
func TestFailoverTickTakesBackWhenTold(t *testing.T) {
	const a, b = 2, 3
	newHost := promisedAwayHost
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		from uint64
		take bool
	}{
		{"told by the candidate promised to", a, true},
		{"told by another node", b, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost()
			c := newTestControl(t, h)
			c.clock.checked = true
			st := newFailoverState()
			if err := c.ServeAbandoned(tc.from, &wire.AbandonedRequest{Part: 0, Epoch: 5}); err != nil {
				t.Fatal(err)
			}
			c.failoverTick(context.Background(), st, t0)
			c.Wait()
			if took := len(h.promises()) > 0; took != tc.take {
				t.Fatalf("promises asked %v within the grace; want a handoff of this node's: %v", h.promises(), tc.take)
			}
		})
	}
	// Named another: the mark is dropped.
	h := newHost()
	c := newTestControl(t, h)
	c.clock.checked = true
	if err := c.ServeAbandoned(a, &wire.AbandonedRequest{Part: 0, Epoch: 5}); err != nil {
		t.Fatal(err)
	}
	h.meta.Partitions[0].Leader, h.meta.Partitions[0].Epoch = b, 5
	c.failoverTick(context.Background(), newFailoverState(), t0)
	c.Wait()
	if got := c.abandonedBy(0, a); got != 0 {
		t.Fatalf("mark %d kept once the registry names another leader; want it dropped", got)
	}
	if err := c.ServeAbandoned(a, &wire.AbandonedRequest{Part: 1, Epoch: 5}); err == nil {
		t.Fatal("a mark of a partition out of range: accepted")
	}
}
