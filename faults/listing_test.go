package faults

import (
	"slices"
	"strings"
	"testing"
)

const checkListingName = "queue listing"

// withListing gives b a final listing of its queue: every task it has a
// view of, in id order, read whole through node 2.
func (b *builder) withListing() *QueueListing {
	l := &QueueListing{Queue: "q"}
	l.OK, l.Node, l.TNs, l.Attempts = true, 2, 5*nsPerS, 1
	var ids []string
	for id := range b.views {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l.Tasks = append(l.Tasks, PeriodicTask{ID: id, Queue: "q"})
	}
	b.listing = l
	return l
}

// TestListing: the final listing of the workload's queue lists, once and
// in id order, every task of the queue the final reads found.
func TestListing(t *testing.T) {
	const check = checkListingName
	runFlagCases(t, []flagCase{
		{name: "a whole listing", check: check, kind: kindListingMissing, inject: func(b *builder) { b.withListing() }},
		{name: "a listing without a task a replica holds", check: check, kind: kindListingMissing, want: 1, inject: func(b *builder) {
			l := b.withListing()
			l.Tasks = l.Tasks[1:]
		}},
		{name: "a listing out of id order", check: check, kind: kindListingOrder, want: 1, inject: func(b *builder) {
			l := b.withListing()
			l.Tasks[0], l.Tasks[1] = l.Tasks[1], l.Tasks[0]
		}},
		{name: "a task listed twice (a page repeated)", check: check, kind: kindListingOrder, want: 1, inject: func(b *builder) {
			l := b.withListing()
			l.Tasks = append(l.Tasks, l.Tasks[len(l.Tasks)-1])
		}},
		{name: "the listing never answered", check: check, kind: kindListingUnread, want: 1, inject: func(b *builder) {
			l := b.withListing()
			l.OK, l.Tasks, l.Errors = false, nil, []string{"node 1: unavailable"}
		}},
	})
}

// A run without listing.json passes the check with a note saying it
// checked nothing; a listing's figures are counted.
func TestListingFigures(t *testing.T) {
	ch := findCheck(t, Analyze(base().input()), checkListingName)
	if !ch.OK() || len(ch.Notes) != 1 || !strings.Contains(ch.Notes[0], ListingFile) {
		t.Errorf("without a listing: ok %v, notes %q; want a pass with a note", ch.OK(), ch.Notes)
	}
	b := base()
	l := b.withListing()
	ch = findCheck(t, Analyze(b.input()), checkListingName)
	if !ch.OK() || countOf(t, ch, "tasks listed") != int64(len(l.Tasks)) || countOf(t, ch, "tasks the final reads found") != int64(len(b.views)) {
		t.Errorf("ok %v, counts %+v; want a pass, %d listed and found", ch.OK(), ch.Counts, len(l.Tasks))
	}
}
