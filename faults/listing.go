package faults

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"
)

// The final listing of the workload's queue: after the final reads, the
// harness pages through GET /v1/tasks?queue=... as a client pages a long
// listing (the last id of a page is the next one's cursor). A listing by
// queue reads the nodes' queue index, not every task; the check holds it
// to what the final reads found: every task of the queue that a replica
// holds is listed, once, in id order.

// ListingFile is the run's final listing (QueueListing); optional for
// the checkers: a run from before it has none.
const ListingFile = "listing.json"

// Bounds of the final listing: a page asks for listingPage tasks; the
// whole listing (every page, through one node) is bounded by
// listingTimeout per attempt, the attempts by periodicReadBound.
const (
	listingPage    = 1000
	listingTimeout = 60 * time.Second
)

// QueueListing is listing.json: the workload queue's final listing.
type QueueListing struct {
	Queue string `json:"queue"`
	PeriodicTasks
}

// queueListing lists the workload's queue, through the nodes in turn
// until one answers whole, and writes listing.json.
func (r *Run) queueListing(ctx context.Context) error {
	l := &QueueListing{Queue: r.cfg.Queue}
	var tasks []PeriodicTask
	l.PeriodicRead = r.periodicRead(ctx, listingTimeout, periodicReadBound, func(ctx context.Context, node int) (err error) {
		tasks, err = r.listQueue(ctx, node, l.Queue, listingPage)
		return err
	})
	l.Tasks = tasks
	r.log.Info("final listing", "queue", l.Queue, "tasks", len(tasks), "read", l.OK, "failed attempts", len(l.Errors))
	if err := WriteJSONFile(filepath.Join(r.cfg.Out, ListingFile), l); err != nil {
		return err
	}
	return ctx.Err()
}

// listQueue lists queue through node, a page of page tasks at a time, as
// a client pages a long listing: the last id of a page is the next one's
// cursor (the listing is in id order across the cluster, which the
// checks hold it to).
func (r *Run) listQueue(ctx context.Context, node int, queue string, page int) ([]PeriodicTask, error) {
	var tasks []PeriodicTask
	after := ""
	for {
		path := fmt.Sprintf("/v1/tasks?queue=%s&limit=%d", url.QueryEscape(queue), page)
		if after != "" {
			path += "&after=" + after
		}
		res := r.api.Do(ctx, node, http.MethodGet, path, nil, nil)
		if res.Type != OK {
			return nil, fmt.Errorf("%s %s", res.Code, res.Err)
		}
		got, err := parseTaskList(res.Body)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, got...)
		if len(got) < page {
			return tasks, nil
		}
		after = got[len(got)-1].ID
	}
}

// Anomaly kinds of the listing check.
const (
	kindListingMissing = "queue listing misses a task a replica holds"
	kindListingOrder   = "queue listing out of id order or repeating a task"
	kindListingUnread  = "queue listing not read"
)

func checkListing(h *history) *Check {
	c := newCheck("queue listing",
		"the final listing of the workload's queue (paged with its cursor, read from the nodes' queue index) is in id order with no task twice, and lists every task of the queue that the final reads found on a replica",
		kindListingMissing, kindListingOrder, kindListingUnread)
	l := h.in.Listing
	if l == nil {
		c.Notes = append(c.Notes, "no "+ListingFile+": a run from before the final listing; nothing checked")
		return c
	}
	if !l.OK {
		c.flag(kindListingUnread, "", l.TNs, Example{Detail: fmt.Sprintf("%d attempts failed: %v", len(l.Errors), l.Errors)})
		return c
	}
	listed := make(map[string]bool, len(l.Tasks))
	for i, t := range l.Tasks {
		if listed[t.ID] || i > 0 && t.ID <= l.Tasks[i-1].ID { // 40 lowercase hex characters: the strings sort as the ids
			c.flag(kindListingOrder, "", l.TNs, Example{Task: t.ID, TNs: []int64{l.TNs}, Nodes: []int{l.Node},
				Detail: fmt.Sprintf("listed at %d", i)})
		}
		listed[t.ID] = true
	}
	var held int64
	for _, id := range h.ids {
		for _, r := range h.tasks[id].found() {
			if r.view.Queue != l.Queue {
				continue
			}
			held++
			if !listed[id] {
				c.flag(kindListingMissing, "", l.TNs, Example{Task: id, TNs: []int64{l.TNs}, Nodes: []int{l.Node},
					Detail: fmt.Sprintf("found on node %d by the final reads, not in the listing of %d tasks", r.read.Node, len(l.Tasks))})
			}
			break
		}
	}
	c.count("tasks listed", int64(len(l.Tasks)))
	c.count("tasks the final reads found", held)
	return c
}
