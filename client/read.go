package client

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// GetOptions shape a read of one task.
type GetOptions struct {
	// MinSeq is how many history entries (progress updates, over all
	// claims) the caller has seen: a replica that shows fewer is stale,
	// and the read fails with ErrStale rather than go back in time. 0:
	// any.
	MinSeq uint64
	// R is how many replicas are read and merged (0: a majority of the
	// partition's cohort; stale ones among them are repaired). R=1 reads
	// whatever one replica holds.
	R int
}

// GetWith reads task id as opts say.
func (c *Client) GetWith(ctx context.Context, id ID, opts GetOptions) (*Info, error) {
	req := &wire.GetRequest{ID: id, R: opts.R}
	if opts.MinSeq > 0 {
		req.MinSeq = &opts.MinSeq
	}
	var resp *wire.TaskView
	err := c.do(ctx, "get", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Get(ctx, req)
		return err
	})
	return resp, err
}

// ListOptions filter a listing; empty fields match every task.
type ListOptions struct {
	Queue string
	// State is a state's name: "ready", "claimed", "delayed", "snoozed",
	// "retrying", "blocked", "completed", "dead" or "cancelled".
	State string
	Group string
	// Kind and Subtopic match those labels.
	Kind, Subtopic string
	// Limit is the most tasks listed; 0: all.
	Limit int
	// After is the cursor: only the tasks after it in the listing's
	// order are listed (the zero ID: from the first). Tasks come in id
	// order, which is enqueue order, so the last ID of one page is the
	// next page's After.
	After ID
	// Desc lists the newest first (descending id order).
	Desc bool
}

// errListStopped ends a listing whose caller stopped ranging over it.
var errListStopped = errors.New("client: list stopped by the caller")

// List ranges over the tasks matching opts in id order (enqueue order)
// across the cluster, as the node streams them: nothing is held beyond
// one page. Ranging ends at
// the first error, yielded with a nil Info. A listing is retried on
// another node only until its first task was yielded; after that an
// error ends it (a retry would yield those tasks again).
//
//	for info, err := range c.List(ctx, client.ListOptions{Queue: "mail", State: "dead"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(info.ID)
//	}
func (c *Client) List(ctx context.Context, opts ListOptions) iter.Seq2[*Info, error] {
	return func(yield func(*Info, error) bool) {
		req := &wire.ListRequest{Queue: opts.Queue, State: opts.State, Group: opts.Group, Kind: opts.Kind, Subtopic: opts.Subtopic,
			Limit: opts.Limit, Desc: opts.Desc}
		if !opts.After.IsZero() {
			after := opts.After
			req.After = &after
		}
		yielded, stopped := false, false
		err := c.do(ctx, "list", func(ctx context.Context, cl *wire.Client) error {
			err := cl.List(ctx, req, func(p *wire.ListPage) error {
				for i := range p.Tasks {
					yielded = true
					if !yield(&p.Tasks[i], nil) {
						stopped = true
						return errListStopped
					}
				}
				return nil
			})
			if err != nil && yielded {
				return notRetried{err}
			}
			return err
		})
		if err != nil && !stopped {
			yield(nil, err)
		}
	}
}

// QueueStats counts one queue's tasks by state (delayed counts delayed,
// snoozed and retrying tasks alike).
type QueueStats = wire.QueueStats

// Queues counts every queue's tasks by state, over the whole cluster.
func (c *Client) Queues(ctx context.Context) ([]QueueStats, error) {
	resp, err := c.queues(ctx, &wire.QueuesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Queues, nil
}

// Subtopics returns the counts by state of every subtopic of every queue,
// cluster-wide, sorted by queue and subtopic (QueueStats.Subtopic set).
func (c *Client) Subtopics(ctx context.Context) ([]QueueStats, error) {
	resp, err := c.queues(ctx, &wire.QueuesRequest{Subtopics: true})
	if err != nil {
		return nil, err
	}
	return resp.Subtopics, nil
}

func (c *Client) queues(ctx context.Context, req *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	var resp *wire.QueuesResponse
	err := c.do(ctx, "queues", func(ctx context.Context, cl *wire.Client) (err error) {
		resp, err = cl.Queues(ctx, req)
		return err
	})
	return resp, err
}

// Attempt is one earlier claim of a task: when it ran, the progress it
// logged, and how it ended.
type Attempt struct {
	Claim      uint32
	Start, End time.Time
	// Updates are the progress entries the claim logged, in order.
	Updates [][]byte
	// Failure is how the claim ended when a fail, a snooze or its time
	// limit ended it; nil when its lease ran out (or a drain of a worker
	// that could not write handed it back unrecorded).
	Failure *wire.FailureView
}

// History reads the task's claims before this Job's, oldest first, each
// with the progress it logged: a retried handler resumes from its last
// checkpoint (the last update of the latest attempt that logged any).
func (j *Job) History(ctx context.Context) ([]Attempt, error) {
	info, err := j.w.c.Get(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	return historyOf(info, j.Claim), nil
}

// historyOf returns the claims of info before claim before, with their
// updates and failures.
func historyOf(info *Info, before uint32) []Attempt {
	var out []Attempt
	at := map[uint32]int{}
	for _, c := range info.Claims {
		if c.Claim >= before {
			continue
		}
		at[c.Claim] = len(out)
		out = append(out, Attempt{Claim: c.Claim, Start: time.UnixMilli(c.Start), End: time.UnixMilli(c.End)})
	}
	for _, u := range info.Updates {
		if i, ok := at[u.Claim]; ok {
			out[i].Updates = append(out[i].Updates, u.Data)
		}
	}
	for k := range info.Failures {
		if i, ok := at[info.Failures[k].Claim]; ok {
			out[i].Failure = &info.Failures[k]
		}
	}
	return out
}
