package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/wire"
)

// TestCancelStopsTheHandler: cancelling a task a Worker holds supersedes
// its claim: the keepalive's renewal is refused, the handler's context
// ends with ErrCancelled, and the task stays cancelled (never completed
// by the late handler, never claimed again). A repeat succeeds; a
// completed task cannot be cancelled.
func TestCancelStopsTheHandler(t *testing.T) {
	_, c := oneNode(t)
	ctx := t.Context()
	ids := enqueueN(t, c, "q", 1, 0)
	started := make(chan struct{})
	cause := make(chan error, 1)
	const ttl = 600 * time.Millisecond // renewed every ttl/3: the cancel is seen soon
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "q"}}, Concurrency: 1, TTL: ttl, PollWait: 100 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil // a late success: refused, the task is cancelled
		})
	<-started
	if err := c.Cancel(ctx, ids[0], "no longer wanted"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, client.ErrCancelled) || !errors.Is(err, client.ErrClaimLost) {
			t.Fatalf("handler's context ended with %v; want ErrCancelled (an ErrClaimLost)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end after its task was cancelled")
	}
	if err := c.Cancel(ctx, ids[0], "again"); err != nil {
		t.Errorf("repeated cancel = %v", err)
	}
	info := awaitState(t, c, ids, "cancelled")[0]
	if info.Cancelled == nil || info.Cancelled.Reason != "no longer wanted" || len(info.Claims) != 1 {
		t.Errorf("cancelled task = %+v (cancel %+v); want the first reason and its one claim", info, info.Cancelled)
	}

	done := enqueueN(t, c, "done", 1, 0)
	got, err := c.Claim(ctx, "done", client.ClaimOptions{})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	if err := c.Complete(ctx, done[0], got[0].Claim); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, done[0], ""); !errors.Is(err, client.ErrCompleted) {
		t.Errorf("cancel of a completed task = %v; want ErrCompleted", err)
	}
}

// TestDeleteAndDeadTasks: on three nodes (partitions led by each), a
// delete makes a task read as not found, also while claimed; a task
// others wait on is not deleted; a bulk requeue reaches every dead task
// of the queue and a bulk purge deletes every one.
func TestDeleteAndDeadTasks(t *testing.T) {
	_, clients := threeNodes(t)
	c := clients[0]
	ctx := t.Context()

	ids := enqueueN(t, c, "q", 2, 0)
	if _, err := c.Claim(ctx, "q", client.ClaimOptions{Count: 1}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := clients[1].Delete(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if err := clients[2].Delete(ctx, id); err != nil {
			t.Errorf("repeated delete of %s = %v", id, err)
		}
		if _, err := c.Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get of deleted %s = %v; want ErrNotFound", id, err)
		}
	}
	// A deleted (or cancelled) task satisfies no dependency: an enqueue
	// naming it is refused rather than run or left blocked for ever.
	if _, err := c.Enqueue(ctx, client.Task{Queue: "deps", Deps: []client.ID{ids[0]}}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("enqueue naming a deleted task = %v; want ErrConflict", err)
	}
	cancelled := enqueueN(t, c, "deps", 1, 0)[0]
	if err := c.Cancel(ctx, cancelled, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, client.Task{Queue: "deps", Deps: []client.ID{cancelled}}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("enqueue naming a cancelled task = %v; want ErrConflict", err)
	}
	dep := enqueueN(t, c, "deps", 1, 0)[0]
	waiter, err := c.Enqueue(ctx, client.Task{Queue: "deps", Deps: []client.ID{dep}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, dep); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete of a task another waits on = %v; want ErrConflict", err)
	}
	if info, err := c.Get(ctx, waiter.ID); err != nil || info.State != "blocked" {
		t.Errorf("waiter = %+v, %v; want blocked", info, err)
	}

	const n = 24 // over 3 nodes' partitions
	dead := enqueueN(t, c, "dead", n, 1)
	failAll(t, c, "dead", n)
	awaitState(t, c, dead, "dead")
	res, err := clients[1].RequeueDead(ctx, "dead")
	if err != nil || res.Done != n || res.Skipped != 0 {
		t.Fatalf("RequeueDead = %+v, %v; want %d done", res, err, n)
	}
	awaitState(t, c, dead, "ready")
	if res, err := c.RequeueDead(ctx, "dead"); err != nil || res.Done != 0 {
		t.Errorf("RequeueDead again = %+v, %v; want nothing done", res, err)
	}
	failAll(t, c, "dead", n)
	awaitState(t, c, dead, "dead")
	if res, err := clients[2].PurgeDead(ctx, "dead"); err != nil || res.Done != n {
		t.Fatalf("PurgeDead = %+v, %v; want %d done", res, err, n)
	}
	for _, id := range dead {
		if _, err := c.Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get of purged %s = %v; want ErrNotFound", id, err)
		}
	}
	if n, err := c.Count(ctx, "dead"); err != nil || n != 0 {
		t.Errorf("count of the purged queue = %d, %v; want 0", n, err)
	}
}

// failAll claims every ready task of queue, n at a time, and fails each
// claim until the queue has none ready.
func failAll(t *testing.T, c *client.Client, queue string, n int) {
	t.Helper()
	for {
		got, err := c.Claim(t.Context(), queue, client.ClaimOptions{Count: n})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return
		}
		for _, g := range got {
			if err := c.Fail(t.Context(), g.ID, g.Claim, "boom", 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestGroups: on three nodes (partitions led by each), a group's counts,
// its dead tasks and its subtopics' counts are summed over every leader;
// a group cancel reaches every open task of the group, leaves its ended
// ones and other groups alone, and a repeat finds nothing to do.
func TestGroups(t *testing.T) {
	_, clients := threeNodes(t)
	c := clients[0]
	ctx := t.Context()

	const n = 30 // over 3 nodes' partitions
	var tasks []client.Task
	for i := range n {
		q, sub := "a", "eu"
		if i%2 == 1 {
			q, sub = "b", "us"
		}
		tasks = append(tasks, client.Task{Queue: q, Group: "batch", Subtopic: sub, MaxAttempts: 1, Data: fmt.Appendf(nil, "%d", i)})
	}
	for range 5 {
		tasks = append(tasks, client.Task{Queue: "a", Group: "other", Subtopic: "eu"})
	}
	res, err := c.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	var otherIDs []client.ID
	for _, r := range res[n:] {
		otherIDs = append(otherIDs, r.ID)
	}
	// Queue b's 15 tasks go dead; 6 of queue a's complete.
	failAll(t, c, "b", n)
	// One claim takes tasks of one leader: claim until 6 are held.
	var done []client.Claimed
	for len(done) < 6 {
		got, err := c.Claim(ctx, "a", client.ClaimOptions{Count: 6 - len(done)})
		if err != nil || len(got) == 0 {
			t.Fatalf("claim = %d tasks, %v", len(got), err)
		}
		done = append(done, got...)
	}
	for _, j := range done {
		if err := c.Complete(ctx, j.ID, j.Claim); err != nil {
			t.Fatal(err)
		}
	}
	var batchDone int // of the 6, those of group batch
	for _, j := range done {
		if j.Group == "batch" {
			batchDone++
		}
	}

	g, err := clients[1].Group(ctx, "batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.Total != n || g.Dead != n/2 || g.Completed != int64(batchDone) || g.Ready != int64(n/2-batchDone) || len(g.Failures) != 10 {
		t.Fatalf("group = %+v; want %d tasks, %d dead, %d completed, 10 failures listed", g, n, n/2, batchDone)
	}
	if !slices.IsSortedFunc(g.Failures, func(a, b wire.GroupFailure) int { return a.ID.Compare(b.ID) }) {
		t.Errorf("failures not in id order: %+v", g.Failures)
	}
	for _, f := range g.Failures {
		if f.Queue != "b" || f.Reason != "boom" || f.Attempts != 1 {
			t.Errorf("failure %+v; want queue b's, reason boom, 1 attempt", f)
		}
	}
	if g3, err := clients[2].Group(ctx, "batch", 3); err != nil || !slices.Equal(g3.Failures, g.Failures[:3]) {
		t.Errorf("group with 3 dead = %+v, %v; want the first 3 of %+v", g3, err, g.Failures)
	}
	if all, err := c.Group(ctx, "batch", 1000); err != nil || len(all.Failures) != n/2 {
		t.Errorf("group with every dead task = %d failures, %v; want %d", len(all.Failures), err, n/2)
	}
	if none, err := c.Group(ctx, "none", 0); err != nil || none.Total != 0 || none.Group != "none" {
		t.Errorf("unknown group = %+v, %v", none, err)
	}
	for _, bad := range []string{"", "a b"} {
		if _, err := c.Group(ctx, bad, 0); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("group %q = %v; want ErrInvalid", bad, err)
		}
	}
	if _, err := c.Group(ctx, "batch", 1001); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("group with 1001 dead = %v; want ErrInvalid", err)
	}

	if cnt, err := c.CountSubtopic(ctx, "", "eu"); err != nil || cnt != n/2+5 {
		t.Errorf("count of subtopic eu = %d, %v; want %d", cnt, err, n/2+5)
	}
	if cnt, err := clients[2].CountSubtopic(ctx, "b", "eu"); err != nil || cnt != 0 {
		t.Errorf("count of subtopic eu in b = %d, %v; want 0", cnt, err)
	}
	subs, err := clients[1].Subtopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].Queue != "a" || subs[0].Subtopic != "eu" || subs[0].Completed != 6 || subs[0].Ready != n/2+5-6 ||
		subs[1].Queue != "b" || subs[1].Subtopic != "us" || subs[1].Dead != n/2 {
		t.Errorf("subtopics = %+v", subs)
	}

	open := n - batchDone
	cres, err := clients[2].CancelGroup(ctx, "batch", "customer left")
	if err != nil || cres.Done != open || cres.Skipped != 0 {
		t.Fatalf("CancelGroup = %+v, %v; want %d done", cres, err, open)
	}
	g, err = c.Group(ctx, "batch", 0)
	if err != nil || g.Cancelled != int64(open) || g.Completed != int64(batchDone) || g.Total != n || len(g.Failures) != 0 {
		t.Errorf("group after the cancel = %+v, %v; want %d cancelled, %d completed", g, err, open, batchDone)
	}
	for _, r := range res[:n] {
		info, err := c.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != "completed" && (info.State != "cancelled" || info.Cancelled == nil || info.Cancelled.Reason != "customer left") {
			t.Errorf("task %s after the group cancel: %s (%+v)", r.ID, info.State, info.Cancelled)
		}
	}
	for _, id := range otherIDs {
		if info, err := c.Get(ctx, id); err != nil || info.State == "cancelled" {
			t.Errorf("task %s of another group = %+v, %v; want it not cancelled", id, info, err)
		}
	}
	if again, err := c.CancelGroup(ctx, "batch", "again"); err != nil || again.Done != 0 {
		t.Errorf("CancelGroup again = %+v, %v; want nothing done", again, err)
	}
	if _, err := c.CancelGroup(ctx, "", ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("CancelGroup of no group = %v; want ErrInvalid", err)
	}
}
