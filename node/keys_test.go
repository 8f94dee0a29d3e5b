package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// TestClusterDuplicateKeyRetired: two leaders each take one key. Node F
// leads the key's partition; frozen and cut off, a w=1 enqueue of the key
// queues for it; another node takes the partition over and creates a task
// for the key. F thaws, still cut off, and acknowledges the queued
// enqueue alone: a second task of the key. After the heal the new leader
// gathers F's copy, holds both, and retires one: cancelled, naming the
// other, which is then the key's only claimable task.
func TestClusterDuplicateKeyRetired(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	f := c.ALeader(t, all)
	ctx, cancel := context.WithTimeout(context.Background(), 4*clusterWait)
	defer cancel()
	fLeads := c.LeadersSettled(t, 0)[all[f]]
	var key string
	var part uint16
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("order-%d", i)
		if p := ring.KeyPartition("k", k, nodetest.DefaultPartitions); slices.Contains(fLeads, int(p)) {
			key, part = k, p
		}
	}
	v, err := c.View((f + 1) % 3)
	if err != nil {
		t.Fatal(err)
	}
	oldEpoch := v.Partitions[part].Epoch

	c.Faults(f).Freeze()
	c.Isolate(f)
	type answer struct {
		status int
		body   string
		err    error
	}
	held := make(chan answer, 1)
	go func() {
		st, b, err := postHTTP(c, f, "/v1/enqueue", map[string]any{"tasks": []map[string]any{{"queue": "k", "key": key}}, "w": 1})
		held <- answer{st, b, err}
	}()
	nodetest.WaitFor(t, clusterWait, func() error {
		if h := c.Faults(f).Held(); h < 1 {
			return fmt.Errorf("%d requests held", h)
		}
		return nil
	})
	newLeader := c.AwaitTakeover(t, all, f, part, oldEpoch)
	var b task.ID
	nodetest.WaitFor(t, clusterWait, func() error {
		r, err := c.Client(newLeader).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "k", Key: key}}})
		if err != nil {
			return err
		}
		if r.Results[0].Duplicate {
			return fmt.Errorf("the new leader answered duplicate of %s", r.Results[0].ID)
		}
		b = r.Results[0].ID
		return nil
	})
	c.Faults(f).Thaw()
	ans := <-held
	if ans.err != nil || ans.status != 200 {
		t.Fatalf("F's enqueue: %d %s %v", ans.status, ans.body, ans.err)
	}
	var resp wire.EnqueueResponse
	if err := json.Unmarshal([]byte(ans.body), &resp); err != nil || len(resp.Results) != 1 || resp.Results[0].Duplicate {
		t.Fatalf("F's enqueue answered %s (%v); want a new task", ans.body, err)
	}
	a := resp.Results[0].ID
	if a == b {
		t.Fatalf("both leaders created %s", a)
	}
	c.Heal()

	// One of the two is retired, naming the other.
	var kept task.ID
	nodetest.WaitFor(t, 2*clusterWait, func() error {
		views := map[task.ID]*wire.TaskView{}
		for _, id := range []task.ID{a, b} {
			v, err := c.Client(newLeader).Get(ctx, &wire.GetRequest{ID: id})
			if err != nil {
				return err
			}
			views[id] = v
		}
		for _, pair := range [][2]task.ID{{a, b}, {b, a}} {
			gone, other := views[pair[0]], views[pair[1]]
			if gone.Cancelled != nil && other.Cancelled == nil {
				if want := wire.RetiredKeyReason + pair[1].String(); gone.Cancelled.Reason != want {
					return fmt.Errorf("%s cancelled with %q; want %q", pair[0], gone.Cancelled.Reason, want)
				}
				kept = pair[1]
				return nil
			}
		}
		return fmt.Errorf("states %s and %s; want one retired", views[a].State, views[b].State)
	})
	if lower := a; b.Compare(a) < 0 && kept != b || b.Compare(a) > 0 && kept != lower {
		t.Errorf("kept %s of %s and %s; want the lower id (neither was claimed)", kept, a, b)
	}
	// The partition may move back to F (placement returns it to its
	// first member) meanwhile: an empty answer is asked again.
	nodetest.WaitFor(t, clusterWait, func() error {
		r, err := c.Client(newLeader).Claim(ctx, &wire.ClaimRequest{Queue: "k", TTLMs: 60_000, Count: 2})
		switch {
		case err != nil:
			return err
		case len(r.Tasks) == 0:
			return fmt.Errorf("no task claimed yet")
		case len(r.Tasks) != 1 || r.Tasks[0].ID != kept:
			t.Fatalf("claim of the key's queue: %+v; want the kept task %s only", r, kept)
		}
		return nil
	})
	// An attempt that meets the partition moving back is in doubt (its
	// first try may have written the task at a leader on its way out:
	// retrying.TestDuplicateAfterDoubt); asked again once it settled,
	// the key yields the kept task.
	nodetest.WaitFor(t, clusterWait, func() error {
		d, err := c.Client((newLeader+1)%3).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "k", Key: key}}})
		switch {
		case errors.Is(err, wire.ErrUnavailable):
			return err
		case err != nil || !d.Results[0].Duplicate || d.Results[0].ID != kept:
			t.Fatalf("the key enqueued again: %+v, %v; want a duplicate of %s", d, err, kept)
		}
		return nil
	})
}
