package coord

import "github.com/skuldd/skuldd/task"

// EnqueueTask is what SplitEnqueue needs of one task of an enqueue: its
// id, its deps and the route to its partition's leader ("" for this
// node).
type EnqueueTask struct {
	ID    task.ID
	Deps  []task.ID
	Route string
}

// EnqueueSplit is how one enqueue's tasks go to their partitions'
// leaders.
type EnqueueSplit struct {
	// Order lists the routes in the order of their first task.
	Order []string
	// Tasks lists each route's tasks by their index in the request, in
	// request order.
	Tasks map[string][]int
	// Sequential: a task depends on an earlier task of the request that
	// goes to another route. A dep must be written before its dependent
	// (a later task does not exist yet, so no cycle can form), which
	// parallel sub-requests cannot promise: the tasks then go one at a
	// time, in request order.
	Sequential bool
}

// Remote reports whether any task goes to another node.
func (s EnqueueSplit) Remote() bool {
	for _, r := range s.Order {
		if r != "" {
			return true
		}
	}
	return false
}

// SplitEnqueue splits an enqueue's tasks by route.
func SplitEnqueue(tasks []EnqueueTask) EnqueueSplit {
	s := EnqueueSplit{Tasks: map[string][]int{}}
	routeOf := make(map[task.ID]string, len(tasks))
	for i, t := range tasks {
		for _, d := range t.Deps {
			if r, ok := routeOf[d]; ok && r != t.Route {
				s.Sequential = true
			}
		}
		routeOf[t.ID] = t.Route
		if _, ok := s.Tasks[t.Route]; !ok {
			s.Order = append(s.Order, t.Route)
		}
		s.Tasks[t.Route] = append(s.Tasks[t.Route], i)
	}
	return s
}

// DirectWrite reports whether a task with this key and these deps, whose
// id the coordinator drew (fresh) or a client chose, is written to its
// cohort by the enqueue's coordinator rather than by its partition's
// leader, which leaderOutOfReach says the coordinator cannot count on
// now (or, for a request that reached it, that this node does not
// lead).
//
// A task with a key or deps always goes through its leader: the key is
// checked, and a dependent's first state recorded, under the lock that
// orders the partition's writes. A fresh id never needs the leader: no
// task can hold it. A client's id may be held already with another spec
// (a client reusing ids): a replica lacking that task would take the new
// spec while the others refuse it, and a read could then show it in
// place of the acknowledged one. The leader holds every acknowledged
// task of its partition and checks the id first, so a client's id goes
// through it while it can be reached, and is written directly only when
// it cannot (a failover, a cut), where the residue of a reused id is
// left to anti-entropy.
func DirectWrite(key string, deps []task.ID, fresh, leaderOutOfReach bool) bool {
	return key == "" && len(deps) == 0 && (fresh || leaderOutOfReach)
}
