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
