package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
)

// TestEnqueueWithW: W reaches the node (acks at least W; a negative W is
// refused before anything is sent).
func TestEnqueueWithW(t *testing.T) {
	_, c := oneNode(t)
	out, err := c.EnqueueWith(t.Context(), client.EnqueueOptions{W: 1}, client.Task{Queue: "w"}, client.Task{Queue: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Acks < 1 || out[1].Acks < 1 {
		t.Fatalf("enqueue w=1: %+v; want two tasks acknowledged", out)
	}
	if _, err := c.EnqueueWith(t.Context(), client.EnqueueOptions{W: -1}, client.Task{Queue: "w"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("enqueue w=-1: %v; want ErrInvalid", err)
	}
	if n, err := c.Count(t.Context(), "w"); err != nil || n != 2 {
		t.Fatalf("count: %d, %v; want 2", n, err)
	}
}

// TestListIterates: List ranges over every matching task, across pages
// and partitions, filtered by queue and state; breaking out stops it.
func TestListIterates(t *testing.T) {
	_, c := oneNode(t)
	const n = 1100 // more than one page
	ids := enqueueN(t, c, "many", n, 0)
	enqueueN(t, c, "other", 3, 0)
	got := map[client.ID]bool{}
	for info, err := range c.List(t.Context(), client.ListOptions{Queue: "many", State: "ready"}) {
		if err != nil {
			t.Fatal(err)
		}
		if info.Queue != "many" || got[info.ID] {
			t.Fatalf("listed %s of queue %s (seen before: %v)", info.ID, info.Queue, got[info.ID])
		}
		got[info.ID] = true
	}
	if len(got) != n {
		t.Fatalf("listed %d tasks; want %d", len(got), n)
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("task %s not listed", id)
		}
	}
	seen := 0
	for _, err := range c.List(t.Context(), client.ListOptions{Queue: "many"}) {
		if err != nil {
			t.Fatal(err)
		}
		if seen++; seen == 5 {
			break
		}
	}
	if seen != 5 {
		t.Fatalf("ranged over %d tasks after a break at 5", seen)
	}
	// Kind and subtopic filter too, and the views carry them.
	labelled, err := c.EnqueueBatch(t.Context(), []client.Task{
		{Queue: "labels", Kind: "a", Subtopic: "eu"}, {Queue: "labels", Kind: "a", Subtopic: "us"}, {Queue: "labels", Kind: "b", Subtopic: "eu"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts client.ListOptions
		want []int
	}{
		{client.ListOptions{Kind: "a"}, []int{0, 1}},
		{client.ListOptions{Subtopic: "eu"}, []int{0, 2}},
		{client.ListOptions{Queue: "labels", Kind: "b", Subtopic: "eu"}, []int{2}},
		{client.ListOptions{Kind: "c"}, nil},
	} {
		var listed []client.ID
		for info, err := range c.List(t.Context(), tc.opts) {
			if err != nil {
				t.Fatal(err)
			}
			if tc.opts.Kind != "" && info.Kind != tc.opts.Kind || tc.opts.Subtopic != "" && info.Subtopic != tc.opts.Subtopic {
				t.Fatalf("list %+v: %s has kind %q, subtopic %q", tc.opts, info.ID, info.Kind, info.Subtopic)
			}
			listed = append(listed, info.ID)
		}
		var want []client.ID
		for _, i := range tc.want {
			want = append(want, labelled[i].ID)
		}
		slices.SortFunc(listed, func(a, b client.ID) int { return a.Compare(b) })
		slices.SortFunc(want, func(a, b client.ID) int { return a.Compare(b) })
		if !slices.Equal(listed, want) {
			t.Fatalf("list %+v: %v; want %v", tc.opts, listed, want)
		}
	}
	for _, err := range c.List(t.Context(), client.ListOptions{State: "sleeping"}) {
		if !errors.Is(err, client.ErrInvalid) {
			t.Fatalf("list --state sleeping: %v; want ErrInvalid", err)
		}
	}
}

// TestQueuesAndGetWith: Queues counts by state; GetWith passes R and
// MinSeq (a caller that saw more history than a read shows gets
// ErrStale).
func TestQueuesAndGetWith(t *testing.T) {
	_, c := oneNode(t)
	enqueueN(t, c, "counted", 3, 0)
	claimed, err := c.Claim(t.Context(), "counted", client.ClaimOptions{Count: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	qs, err := c.Queues(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs, func(q client.QueueStats) bool { return q.Queue == "counted" })
	if i < 0 || qs[i].Ready != 2 || qs[i].Claimed != 1 {
		t.Fatalf("queues: %+v; want counted with 2 ready, 1 claimed", qs)
	}
	if err := c.Update(t.Context(), claimed[0].ID, claimed[0].Claim, 0, []byte("step 1")); err != nil {
		t.Fatal(err)
	}
	info, err := c.GetWith(t.Context(), claimed[0].ID, client.GetOptions{MinSeq: 1, R: 1})
	if err != nil || len(info.Updates) != 1 {
		t.Fatalf("get min_seq=1 r=1: %+v, %v; want the update", info, err)
	}
	if _, err := c.GetWith(t.Context(), claimed[0].ID, client.GetOptions{MinSeq: 2}); !errors.Is(err, client.ErrStale) {
		t.Fatalf("get min_seq=2 of a task with one update: %v; want ErrStale", err)
	}
}

// TestJobHistory: a retried handler reads its task's earlier claims with
// the progress each logged, and resumes from the last checkpoint.
func TestJobHistory(t *testing.T) {
	_, c := oneNode(t)
	ids := enqueueN(t, c, "resume", 1, 3)
	resumedFrom := make(chan string, 1)
	startWorker(t, c, client.WorkerConfig{Queues: []client.Queue{{Name: "resume"}}, PollWait: 50 * time.Millisecond},
		func(ctx context.Context, j *client.Job) error {
			hist, err := j.History(ctx)
			if err != nil {
				return err
			}
			if j.Claim == 0 {
				if len(hist) != 0 {
					return fmt.Errorf("first claim: history %+v", hist)
				}
				for _, step := range []string{"page 1", "page 2"} {
					if err := j.Progress(ctx, []byte(step)); err != nil {
						return err
					}
				}
				return client.RetryAfter(time.Millisecond, errors.New("crashed after page 2"))
			}
			if len(hist) != 1 || hist[0].Claim != 0 || hist[0].Failure == nil || len(hist[0].Updates) != 2 {
				resumedFrom <- fmt.Sprintf("history %+v", hist)
				return nil
			}
			resumedFrom <- string(hist[0].Updates[1])
			return nil
		})
	if got := <-resumedFrom; got != "page 2" {
		t.Fatalf("the retry resumed from %q; want page 2", got)
	}
	awaitState(t, c, ids, "completed")
}
