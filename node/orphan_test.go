package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// postHTTP sends body to node i's HTTP API and returns the status and
// answer.
func postHTTP(c *nodetest.Cluster, i int, path string, body any) (int, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.Post(c.HTTP(i)+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), nil
}

// Issue 20, first defect: a paused ex-leader's refused writes survived and
// spread. Reference: docs/design.md, "Partition leaders": no write of a
// superseded epoch that the handoff did not carry may extend, rewrite or
// complete anything in any replica, and anti-entropy must never spread
// it as truth.
//
// Node F leads the partition of task X and grants claim 0. F is frozen
// (its HTTP requests held, as SIGSTOP holds what queues in its sockets)
// and cut off; an update and a completion under claim 0 queue for it.
// Another node takes the partition over, claim 0 expires, claim 1 is
// granted. F is thawed while still cut off: it serves the queued requests
// with its old state, writing them to its own store (they cannot be
// acknowledged). Then claim 1 completes at the new leader, and the
// network heals. The queued writes must never appear anywhere: every
// replica ends with claim 1's completion and update, and none holds
// claim 0's.
func TestClusterFrozenLeaderOrphans(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	f := c.ALeader(t, all)
	ctx, cancel := context.WithTimeout(context.Background(), 3*clusterWait)
	defer cancel()

	// X in a partition F leads (an enqueue through F picks one), once
	// leadership settled: F must still lead it when it freezes.
	fLeads := c.LeadersSettled(t, 0)[all[f]]
	enq, err := c.Client(f).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "orphan", Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	x := enq.Results[0].ID
	if p := partOfForTest(x, nodetest.DefaultPartitions); !slices.Contains(fLeads, int(p)) {
		t.Fatalf("the enqueue through F put X in partition %d; F leads %v", p, fLeads)
	}
	cl, err := c.Client(f).Claim(ctx, &wire.ClaimRequest{Queue: "orphan", TTLMs: 1000})
	if err != nil || len(cl.Tasks) != 1 || cl.Tasks[0].ID != x || *cl.Tasks[0].Claim != 0 {
		t.Fatalf("claim through F: %+v, %v", cl, err)
	}
	if _, err := c.Client(f).Update(ctx, &wire.UpdateRequest{ID: x, Claim: 0, Seq: 0, Data: []byte("acked 0/0")}); err != nil {
		t.Fatal(err)
	}
	part := partOfForTest(x, nodetest.DefaultPartitions)
	v, err := c.View((f + 1) % 3)
	if err != nil {
		t.Fatal(err)
	}
	oldEpoch := v.Partitions[part].Epoch

	// Freeze F and cut it off; the requests queue.
	c.Faults(f).Freeze()
	c.Isolate(f)
	type answer struct {
		what   string
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 2)
	go func() {
		st, b, err := postHTTP(c, f, "/v1/update", map[string]any{"id": x.String(), "claim": 0, "seq": 1, "data": []byte("orphan 0/1")})
		answers <- answer{"update", st, b, err}
	}()
	nodetest.WaitFor(t, clusterWait, func() error {
		if h := c.Faults(f).Held(); h < 1 {
			return fmt.Errorf("%d requests held", h)
		}
		return nil
	})

	// Another node takes X's partition over; claim 0 expires there and
	// claim 1 is granted.
	newLeader := c.AwaitTakeover(t, all, f, part, oldEpoch)
	var claim1 *wire.TaskView
	nodetest.WaitFor(t, clusterWait, func() error {
		r, err := c.Client(newLeader).Claim(ctx, &wire.ClaimRequest{Queue: "orphan", TTLMs: 60_000})
		if err != nil {
			return err
		}
		if len(r.Tasks) == 0 {
			return fmt.Errorf("nothing to claim yet")
		}
		claim1 = &r.Tasks[0]
		return nil
	})
	if claim1.ID != x || *claim1.Claim != 1 {
		t.Fatalf("claim at the new leader: %s claim %d; want %s claim 1", claim1.ID, *claim1.Claim, x)
	}
	if _, err := c.Client(newLeader).Update(ctx, &wire.UpdateRequest{ID: x, Claim: 1, Seq: 0, Data: []byte("acked 1/0")}); err != nil {
		t.Fatal(err)
	}

	// F thaws, still cut off: it serves what queued with its old state,
	// and then a completion, one after the other (their order fixed: the
	// completion is sent once F's own replica holds the update). Each is
	// written to F's store at once but answered only when F's coordinator
	// stops retrying it (up to 10s), so the answers are awaited together,
	// rather than one 10s wait after the other; both before the network
	// heals.
	c.Faults(f).Thaw()
	// orphans: F's own replica holds updates updates, in state state (any
	// if "").
	orphans := func(state string, updates int) func() error {
		return func() error {
			local, err := c.Client(f).Get(ctx, &wire.GetRequest{ID: x, R: 1})
			if err != nil {
				return err
			}
			if (state != "" && local.State != state) || len(local.Updates) != updates {
				return fmt.Errorf("the thawed leader's own replica: state %s updates %+v; want state %q with %d updates", local.State, local.Updates, state, updates)
			}
			return nil
		}
	}
	nodetest.WaitFor(t, clusterWait, orphans("", 2))
	go func() {
		st, b, err := postHTTP(c, f, "/v1/complete", map[string]any{"id": x.String(), "claim": 0, "seq": 2})
		answers <- answer{"complete", st, b, err}
	}()
	nodetest.WaitFor(t, clusterWait, orphans("completed", 2))
	for range 2 {
		a := <-answers
		if a.err == nil && a.status/100 == 2 {
			t.Fatalf("the cut-off leader acknowledged the %s: %d %s", a.what, a.status, a.body)
		}
		t.Logf("%s on the thawed leader: %d %s %v", a.what, a.status, a.body, a.err)
	}
	// It did write them to its own store: the case this test is about.
	local, err := c.Client(f).Get(ctx, &wire.GetRequest{ID: x, R: 1})
	if err != nil {
		t.Fatal(err)
	}
	if local.State != "completed" || len(local.Updates) != 2 {
		t.Fatalf("the thawed leader's own replica: state %s updates %+v; want its orphans (completed, 2 updates)", local.State, local.Updates)
	}
	// Claim 1 completes after the orphan completion: the earlier one
	// would win a plain CRDT merge.
	if _, err := c.Client(newLeader).Complete(ctx, &wire.CompleteRequest{ID: x, Claim: 1}); err != nil {
		t.Fatal(err)
	}

	c.Heal()
	want := func(v *wire.TaskView) error {
		if v.State != "completed" {
			return fmt.Errorf("state %s", v.State)
		}
		var done []uint32
		for _, cv := range v.Claims {
			if cv.Completed != nil {
				done = append(done, cv.Claim)
			}
		}
		if len(done) != 1 || done[0] != 1 {
			return fmt.Errorf("completed by claims %v; want [1]", done)
		}
		if len(v.Updates) != 2 || string(v.Updates[0].Data) != "acked 0/0" || string(v.Updates[1].Data) != "acked 1/0" {
			return fmt.Errorf("updates %+v; want claim 0's seq 0 and claim 1's seq 0", v.Updates)
		}
		return nil
	}
	nodetest.WaitFor(t, clusterWait, func() error {
		for i := range 3 {
			v, err := c.Client(i).Get(ctx, &wire.GetRequest{ID: x, R: 1})
			if err != nil {
				return fmt.Errorf("node %d: %v", i, err)
			}
			if err := want(v); err != nil {
				return fmt.Errorf("node %d's replica: %v", i, err)
			}
		}
		return nil
	})
	// The majority read agrees, and the thawed node leads the partition
	// no more.
	v2, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: x})
	if err != nil {
		t.Fatal(err)
	}
	if err := want(v2); err != nil {
		t.Fatalf("majority read: %v", err)
	}
	reps, err := c.Node(f).Replicas()
	if err != nil {
		t.Fatal(err)
	}
	// Its stale leadership ended; placement may since have moved the
	// partition back to it through a handoff, at a newer epoch.
	if le := reps[part].LeadingEpoch; le != 0 && le <= oldEpoch {
		t.Errorf("the thawed node still leads partition %d at %d, the epoch it was frozen at (%d) or older", part, le, oldEpoch)
	}
}

// Issue 20, third defect: a partition stayed without a leader for good
// after a split healed. A takeover won promises for the next epoch and was
// abandoned (its old leader came back); the old leader then asked that
// same epoch again and again, refused each time by the promises the
// abandoned takeover left. Reference: docs/design.md, Partition leaders: a
// refused promise means "try a higher epoch", and an abandoned takeover
// must not leave a promise that blocks everyone else.
//
// The leader A of some partitions is killed; the survivors' takeovers win
// their promises but cannot carry the data (replication between them is
// dropped), so they only leave promises behind. A restarts, its
// takeovers see it back and are abandoned, and A must lead its
// partitions again, above the abandoned promises.
func TestClusterAbandonedTakeoverDoesNotBlock(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	a, _ := c.BusiestLeader(t, 0, 3)
	b, cc := (a+1)%3, (a+2)%3
	v, err := c.View(b)
	if err != nil {
		t.Fatal(err)
	}
	epochs := map[int]uint64{}
	for _, p := range v.Partitions {
		if p.Leader == all[a] {
			epochs[p.Partition] = p.Epoch
		}
	}
	c.Faults(b).DropReplication(c.Addr(cc))
	c.Faults(cc).DropReplication(c.Addr(b))
	c.Kill(a)
	// Every partition A led has a promise above its epoch on B and C: a
	// takeover got that far, and no further.
	nodetest.WaitFor(t, clusterWait, func() error {
		for _, i := range []int{b, cc} {
			reps, err := c.Node(i).Replicas()
			if err != nil {
				return err
			}
			for p, ep := range epochs {
				if reps[p].Promised <= ep {
					return fmt.Errorf("node %d promised epoch %d for partition %d (led at %d)", i, reps[p].Promised, p, ep)
				}
			}
		}
		return nil
	})
	v, err = c.View(b)
	if err != nil {
		t.Fatal(err)
	}
	for p, ep := range epochs {
		if got := v.Partitions[p].Epoch; got != ep {
			t.Fatalf("partition %d went to epoch %d; the test needs its takeover stuck at the carry", p, got)
		}
	}
	// A comes back (its start leads what the registry names it for).
	c.Restart(a)
	c.Heal()
	nodetest.WaitFor(t, clusterWait, func() error {
		v, err := c.View(b)
		if err != nil {
			return err
		}
		for p, ep := range epochs {
			pi := v.Partitions[p]
			if pi.Epoch <= ep+1 {
				return fmt.Errorf("partition %d at epoch %d (leader %d); want above %d, the abandoned promise", p, pi.Epoch, pi.Leader, ep+1)
			}
			lead := slices.Index(all, pi.Leader)
			if lead < 0 {
				return fmt.Errorf("partition %d led by unknown node %d", p, pi.Leader)
			}
			reps, err := c.Node(lead).Replicas()
			if err != nil {
				return err
			}
			if reps[p].LeadingEpoch != pi.Epoch {
				return fmt.Errorf("partition %d: registry leader %d leads at %d, registry says %d", p, pi.Leader, reps[p].LeadingEpoch, pi.Epoch)
			}
		}
		return nil
	})
}

// Found by the fault suite: an update forwarded to its leader was applied
// there, but its answer was lost (the coordinating node was cut one way);
// the coordinator retried, and by then the task was completed, so the
// retry was refused as completed, and the client took the refusal as
// "never happened" for an update that is in the task's history. A
// refusal after an attempt that ended in doubt must itself be in doubt.
func TestClusterRefusalAfterDoubtIsInDoubt(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	leader := c.ALeader(t, all)
	coord := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	enq, err := c.Client(leader).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "doubt"}}})
	if err != nil {
		t.Fatal(err)
	}
	x := enq.Results[0].ID
	v, err := c.View(0)
	if err != nil {
		t.Fatal(err)
	}
	if l := v.Partitions[partOfForTest(x, nodetest.DefaultPartitions)].Leader; l != all[leader] {
		t.Fatalf("task led by %d, not node %d", l, all[leader])
	}
	if cl, err := c.Client(leader).Claim(ctx, &wire.ClaimRequest{Queue: "doubt", TTLMs: 60_000}); err != nil || len(cl.Tasks) != 1 {
		t.Fatalf("claim: %+v %v", cl, err)
	}

	c.Faults(coord).LoseReplies(c.Addr(leader))
	type result struct {
		ack *wire.Ack
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := c.Client(coord).Update(ctx, &wire.UpdateRequest{ID: x, Claim: 0, Seq: 0, Data: []byte("applied")})
		done <- result{a, err}
	}()
	// The update is applied at the leader while its answers are lost.
	nodetest.WaitFor(t, clusterWait, func() error {
		g, err := c.Client(leader).Get(ctx, &wire.GetRequest{ID: x, R: 1})
		if err != nil {
			return err
		}
		if len(g.Updates) != 1 {
			return fmt.Errorf("%d updates at the leader", len(g.Updates))
		}
		return nil
	})
	if _, err := c.Client(leader).Complete(ctx, &wire.CompleteRequest{ID: x, Claim: 0}); err != nil {
		t.Fatal(err)
	}
	c.Heal()
	r := <-done
	if r.err == nil {
		t.Fatalf("the update's retry succeeded on a completed task: %+v", r.ack)
	}
	if code := wire.CodeOf(r.err); code != wire.CodeUnavailable {
		t.Fatalf("the update, applied by its first attempt, answered %v (%v); want unavailable (in doubt)", code, r.err)
	}
	g, err := c.Client(leader).Get(ctx, &wire.GetRequest{ID: x})
	if err != nil || g.State != "completed" || len(g.Updates) != 1 {
		t.Fatalf("task: %+v, %v; want completed with the update", g, err)
	}
}

// Found by the simulation: a leader cut off while another took over
// still believes it leads, and refused an update of the new leader's
// claim from its own stale replica ("no such claim", or "superseded" by
// a claim of its own that no majority took): a definite answer that
// tells a worker holding a live claim to give it up. A refusal from the
// replica's state now needs a majority to confirm the epoch; without
// one it is unavailable (in doubt).
func TestClusterStaleLeaderRefusesInDoubt(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	f := c.ALeader(t, all)
	fLeads := c.LeadersSettled(t, 0)[all[f]]
	ctx, cancel := context.WithTimeout(context.Background(), 3*clusterWait)
	defer cancel()
	enq, err := c.Client(f).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "stale", Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	x := enq.Results[0].ID
	part := partOfForTest(x, nodetest.DefaultPartitions)
	if !slices.Contains(fLeads, int(part)) {
		t.Fatalf("the enqueue through F put X in partition %d; F leads %v", part, fLeads)
	}
	if cl, err := c.Client(f).Claim(ctx, &wire.ClaimRequest{Queue: "stale", TTLMs: 500}); err != nil || len(cl.Tasks) != 1 || cl.Tasks[0].ID != x {
		t.Fatalf("claim 0 through F: %+v, %v", cl, err)
	}
	v, err := c.View((f + 1) % 3)
	if err != nil {
		t.Fatal(err)
	}
	oldEpoch := v.Partitions[part].Epoch

	// F is cut off from its peers (its clients still reach it); another
	// node takes the partition over and grants claim 1.
	c.Isolate(f)
	newLeader := c.AwaitTakeover(t, all, f, part, oldEpoch)
	nodetest.WaitFor(t, clusterWait, func() error {
		r, err := c.Client(newLeader).Claim(ctx, &wire.ClaimRequest{Queue: "stale", TTLMs: 60_000})
		if err != nil {
			return err
		}
		if len(r.Tasks) == 0 || r.Tasks[0].ID != x || *r.Tasks[0].Claim != 1 {
			return fmt.Errorf("claim at the new leader: %+v", r.Tasks)
		}
		return nil
	})
	reps, err := c.Node(f).Replicas()
	if err != nil || reps[part].LeadingEpoch != oldEpoch {
		t.Fatalf("F leads partition %d at epoch %d (%v); the test needs it to believe it still leads at %d", part, reps[part].LeadingEpoch, err, oldEpoch)
	}
	// F must not answer for claim 1 from its stale replica.
	_, err = c.Client(f).Update(ctx, &wire.UpdateRequest{ID: x, Claim: 1, Seq: 0, Data: []byte("live claim")})
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("update of the new leader's claim through the cut-off leader: %v; want unavailable (in doubt), not a definite refusal", err)
	}
	// Through the new leader, claim 1 is live.
	if _, err := c.Client(newLeader).Update(ctx, &wire.UpdateRequest{ID: x, Claim: 1, Seq: 0, Data: []byte("live claim")}); err != nil {
		t.Fatalf("update through the new leader: %v", err)
	}
}
