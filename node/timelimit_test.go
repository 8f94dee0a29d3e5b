package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// TestTimeLimitEndsTheClaim: a task enqueued with a 2 s time limit whose
// worker keeps renewing is ended by the leader at 2 s: no lease runs
// past the claim's start + 2 s, a renewal then is refused (time_limit),
// and the claim counts as a failed attempt whose reason is the time
// limit; the task is ready again after the lease plus the skew bound, on
// 1 and 3 nodes. A claim asking for a lease longer than the limit gets
// the limit.
func TestTimeLimitEndsTheClaim(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			c := nodetest.NewCluster(t, size)
			if size > 1 {
				c.Placed(t, 0, c.IDs(0, 1, 2), 3)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
			defer cancel()
			const limit = 2000
			enq, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{
				{Queue: "tl", MaxAttempts: 3, TimeLimitMs: limit}}})
			if err != nil {
				t.Fatal(err)
			}
			id := enq.Results[0].ID
			cr, err := c.Client(0).Claim(ctx, &wire.ClaimRequest{Queue: "tl", TTLMs: 60_000})
			if err != nil || len(cr.Tasks) != 1 {
				t.Fatalf("claim: %+v, %v", cr, err)
			}
			got := cr.Tasks[0]
			cl := got.Claims[len(got.Claims)-1]
			if got.TimeLimitMs != limit || cl.End != cl.Start+limit {
				t.Fatalf("claim asking a 60 s lease: time limit %d, lease %d..%d; want the lease capped at the 2 s limit",
					got.TimeLimitMs, cl.Start, cl.End)
			}
			// The worker renews every 200 ms, each asking for 60 s more,
			// until refused; through each node in turn.
			var refusal error
			for i := 0; refusal == nil; i++ {
				time.Sleep(200 * time.Millisecond)
				r, err := c.Client(i%size).Renew(ctx, &wire.RenewRequest{ID: id, Claim: *got.Claim, TTLMs: 60_000})
				switch {
				case err != nil:
					refusal = err
				case r.End > cl.Start+limit:
					t.Fatalf("renewal %d: lease to %d, past the limit at %d", i, r.End, cl.Start+limit)
				}
			}
			if !errors.Is(refusal, task.ErrTimeLimit) {
				t.Fatalf("renewal at the limit: %v; want %v", refusal, task.ErrTimeLimit)
			}
			// Ended by the leader: a failed attempt, "time limit", and the
			// task claimable again once the lease and the skew bound passed.
			nodetest.WaitFor(t, clusterWait, func() error {
				v, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: id})
				if err != nil {
					return err
				}
				if v.State != "ready" {
					return fmt.Errorf("state %s", v.State)
				}
				if v.Attempts != 1 || len(v.Failures) != 1 || v.Failures[0].Reason != wire.TimeLimitReason || v.Failures[0].At != cl.Start+limit {
					return fmt.Errorf("attempts %d, failures %+v; want 1 failure, %q at %d", v.Attempts, v.Failures, wire.TimeLimitReason, cl.Start+limit)
				}
				return nil
			})
			next, err := c.Client(0).Claim(ctx, &wire.ClaimRequest{Queue: "tl", TTLMs: 1000})
			if err != nil || len(next.Tasks) != 1 || *next.Tasks[0].Claim != 1 {
				t.Fatalf("claim after the limit: %+v, %v; want claim 1", next, err)
			}
			// The new claim completes within its limit; the first claim's
			// time limit stays a failure in the view.
			if _, err := c.Client(0).Complete(ctx, &wire.CompleteRequest{ID: id, Claim: 1}); err != nil {
				t.Fatal(err)
			}
			v, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if v.State != "completed" || len(v.Failures) != 1 || v.Failures[0].Claim != 0 {
				t.Fatalf("completed: state %s failures %+v; want the first claim's time limit only", v.State, v.Failures)
			}
		})
	}
}

// TestTimeLimitQueueDefault: a queue's time limit applies to its tasks
// enqueued without one; a task's own wins; a negative or oversized one
// is refused.
func TestTimeLimitQueueDefault(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	ctx := context.Background()
	ms := int64(90_000)
	if _, err := c.Client(0).QueueSet(ctx, &wire.QueueSetRequest{Queue: "q", TimeLimitMs: &ms}); err != nil {
		t.Fatal(err)
	}
	enq, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{
		{Queue: "q"}, {Queue: "q", TimeLimitMs: 5000}, {Queue: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{90_000, 5000, 0} {
		v, err := c.Client(0).Get(ctx, &wire.GetRequest{ID: enq.Results[i].ID})
		if err != nil {
			t.Fatal(err)
		}
		if v.TimeLimitMs != want {
			t.Errorf("task %d: time limit %d; want %d", i, v.TimeLimitMs, want)
		}
	}
	for _, bad := range []int64{-1, (400 * 24 * time.Hour).Milliseconds()} {
		if _, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q", TimeLimitMs: bad}}}); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("time limit %d ms: %v; want %v", bad, err, task.ErrInvalid)
		}
	}
}
