package faults

import (
	"cmp"
	"fmt"
	"slices"
)

// Unique keys: a keyed enqueue (Event.Key) yields a new task unless a
// kept task of the queue holds the key, and then names that task
// (Event.Holder) and creates none (filed as a refused enqueue of its own
// id and as proof that the holder exists: fileDuplicate). A task holds
// its key until it is cancelled (the workload has no unique_for and the
// suite's nodes keep every task).

// Kinds of unique-key anomalies.
const (
	kindKeyTakenTwice  = "key taken twice"
	kindHolderOtherKey = "duplicate names a task of another key"
)

func checkKeys(h *history) *Check {
	c := newCheck("unique keys",
		"a keyed enqueue acknowledged as new was not invoked after another of its key was acknowledged as new by a majority, unless a cancel of that one was sent first (a hinted one: its task was not claimed before such a cancel); an enqueue acknowledged as a duplicate names a task enqueued with its key",
		kindKeyTakenTwice, kindHolderOtherKey)
	type keyOf struct{ queue, key string }
	created := map[keyOf][]*op{} // ok keyed enqueues that created their task
	keyed := 0
	need := majority(max(h.in.Run.Replicas, 1))
	for _, id := range h.ids {
		t := h.tasks[id]
		for _, o := range t.enqueues {
			if o.inv.Key == "" {
				continue
			}
			keyed++
			if o.ok() && o.out.Holder == "" {
				k := keyOf{o.inv.Queue, o.inv.Key}
				created[k] = append(created[k], o)
			}
		}
	}
	keys := slices.SortedFunc(func(yield func(keyOf) bool) {
		for k := range created {
			if !yield(k) {
				return
			}
		}
	}, func(a, b keyOf) int { return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.key, b.key)) })
	var twice int64
	for _, k := range keys {
		ops := created[k]
		slices.SortFunc(ops, func(a, b *op) int { return cmp.Compare(a.out.Index, b.out.Index) })
		for i, b := range ops {
			// A hinted enqueue (b.out.Hinted) could not check the key: its
			// task is handed to the key's leader later, which retires it
			// if the key is held then. It took the key twice only if its
			// task was claimed while the other held the key.
			takenBy := b.out.Index
			if b.out.Hinted {
				g := slices.IndexFunc(h.tasks[b.task].grants, func(g *op) bool { return g.ok() })
				if g < 0 {
					continue
				}
				takenBy = h.tasks[b.task].grants[g].out.Index
			}
			for _, a := range ops[:i] {
				if a.task == b.task || a.out.Acks < need || a.out.Index > b.inv.Index {
					continue // the same task (a retry), one a stale leader held alone, or concurrent
				}
				if freed := slices.ContainsFunc(h.tasks[a.task].cancels, func(x *op) bool {
					return x.mayHaveApplied() && x.inv.Index < takenBy
				}); freed {
					continue
				}
				twice++
				c.flag(kindKeyTakenTwice, h.beyond(b.task, a.tc, b.tc), b.tc, Example{Task: b.task, TNs: []int64{a.tc, b.ti, b.tc},
					Events: append(a.events(), b.events()...),
					Detail: fmt.Sprintf("key %q of queue %s: task %s created after task %s was acknowledged with it, and no cancel of that one sent", k.key, k.queue, b.task, a.task)})
				break
			}
		}
	}
	for _, o := range h.duplicates {
		ht := h.tasks[o.out.Holder]
		if slices.ContainsFunc(ht.enqueues, func(e *op) bool { return e.inv.Key == o.inv.Key && e.inv.Queue == o.inv.Queue }) {
			continue
		}
		c.flag(kindHolderOtherKey, "", o.tc, Example{Task: o.out.Holder, TNs: []int64{o.ti, o.tc}, Events: o.events(),
			Detail: fmt.Sprintf("enqueue of key %q answered duplicate of task %s, which no enqueue with that key named", o.inv.Key, o.out.Holder)})
	}
	c.count("keyed enqueues", int64(keyed))
	c.count("keyed enqueues acknowledged as duplicates", int64(len(h.duplicates)))
	c.count("keys whose task was created more than once while held", twice)
	return c
}
