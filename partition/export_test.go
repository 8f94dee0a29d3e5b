package partition

import (
	"fmt"
	"maps"
	"slices"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// CheckCounts recounts every count the replica keeps (per queue, group and
// subtopic, and each group's open tasks) from the tasks the store holds,
// each at the status the indexes give it, and reports the first
// difference: the bookkeeping of countLocked and the label indexes must
// match a recount after any sequence of writes, merges and collects.
func (r *Replica) CheckCounts() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	type key struct{ queue, sub string }
	queues := map[string][task.NumStatus]int64{}
	subs := map[key][task.NumStatus]int64{}
	groups := map[string][task.NumStatus]int64{}
	open := map[string]map[task.ID]struct{}{}
	labelled := 0
	keys := map[string][]task.ID{}
	err := r.cfg.Store.ExportPartition(r.cfg.Part, task.ID{}, func(t store.TaskExport) (bool, error) {
		sp, id := t.Spec, t.Spec.ID
		var status task.Status
		switch e := r.tasks[id]; {
		case e != nil:
			status = e.status
		case t.State.Completion != nil:
			status = t.State.Completion.Status()
		default:
			q := r.queues[sp.Queue]
			if q == nil || !q.ready.Has(Head{sp.Priority, id}) {
				return false, fmt.Errorf("task %s is in no index", id)
			}
			status = task.Ready
		}
		add := func(c [task.NumStatus]int64) [task.NumStatus]int64 { c[status]++; return c }
		queues[sp.Queue] = add(queues[sp.Queue])
		if sp.Subtopic != "" {
			subs[key{sp.Queue, sp.Subtopic}] = add(subs[key{sp.Queue, sp.Subtopic}])
		}
		if sp.Group != "" {
			groups[sp.Group] = add(groups[sp.Group])
			if open[sp.Group] == nil {
				open[sp.Group] = map[task.ID]struct{}{}
			}
			if !status.Ended() {
				open[sp.Group][id] = struct{}{}
			}
		}
		if sp.Key != "" {
			keys[keyOf(sp)] = append(keys[keyOf(sp)], id) // the export is in id order
		}
		if sp.Group != "" || sp.Subtopic != "" {
			labelled++
			l, ok := r.labelled[id]
			if !ok || (l.group == nil) != (sp.Group == "") || (l.sub == nil) != (sp.Subtopic == "") ||
				(l.group != nil && l.group.name != sp.Group) || (l.sub != nil && l.sub.name != sp.Subtopic) {
				return false, fmt.Errorf("task %s (group %q, subtopic %q): labels %+v", id, sp.Group, sp.Subtopic, l)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if !maps.EqualFunc(r.keys, keys, slices.Equal) {
		return fmt.Errorf("key index %v; the store holds %v", r.keys, keys)
	}
	if len(r.labelled) != labelled {
		return fmt.Errorf("%d tasks labelled; the store holds %d with labels", len(r.labelled), labelled)
	}
	for name, q := range r.queues {
		if q.counts != queues[name] {
			return fmt.Errorf("queue %s counts %v; recount %v", name, q.counts, queues[name])
		}
		for sub, l := range q.subs {
			if l.counts != subs[key{name, sub}] {
				return fmt.Errorf("queue %s subtopic %s counts %v; recount %v", name, sub, l.counts, subs[key{name, sub}])
			}
			delete(subs, key{name, sub})
		}
		delete(queues, name)
	}
	for name, c := range queues {
		return fmt.Errorf("queue %s is not indexed; recount %v", name, c)
	}
	for k, c := range subs {
		return fmt.Errorf("queue %s subtopic %s is not indexed; recount %v", k.queue, k.sub, c)
	}
	if len(r.groups) != len(groups) {
		return fmt.Errorf("%d groups indexed; the store holds %d", len(r.groups), len(groups))
	}
	for name, c := range groups {
		l := r.groups[name]
		if l == nil {
			return fmt.Errorf("group %s is not indexed; recount %v", name, c)
		}
		if l.counts != c {
			return fmt.Errorf("group %s counts %v; recount %v", name, l.counts, c)
		}
		if !maps.Equal(l.open, open[name]) {
			return fmt.Errorf("group %s: %d open tasks indexed; the store holds %d", name, len(l.open), len(open[name]))
		}
	}
	return nil
}
