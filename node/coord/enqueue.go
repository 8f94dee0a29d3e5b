package coord

import (
	"context"
	"errors"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// EnqueueTask is what the enqueue planners need of one task of an
// enqueue: its id, key and deps, and its route (RouteTask).
type EnqueueTask struct {
	ID    task.ID
	Key   string
	Deps  []task.ID
	Route string
}

// The routes of RouteTask that are not a leader's address.
const (
	// RouteHere: written by this node (it leads the task's partition, or
	// writes the task to its cohort itself: DirectWrite).
	RouteHere = ""
	// RouteHint: the task's leader cannot be found; this node writes it,
	// which fails at once (it does not lead) and hints it.
	RouteHint = "!hint"
)

// RouteTask returns where one task of an enqueue is written: RouteHere
// when DirectWrite says this node writes it to its cohort itself, else
// what lookup finds (the leader's address, or RouteHere when this node
// leads). A task without deps of an enqueue that is hinted (hint) goes
// to RouteHint when its leader is out of reach (a forward to a leader
// this node cannot count on would spend the hint wait on a dead or
// cut-off node), or when lookup fails and the failure leaves it in doubt
// (hintable); otherwise the failure is the task's answer. lookup is
// called only for a task that needs its leader.
func RouteTask(key string, deps []task.ID, fresh, leaderOutOfReach, hint bool, lookup func() (string, error)) (string, error) {
	if DirectWrite(key, deps, fresh, leaderOutOfReach) {
		return RouteHere, nil
	}
	if hint && len(deps) == 0 && leaderOutOfReach {
		return RouteHint, nil
	}
	route, err := lookup()
	switch {
	case err == nil:
		return route, nil
	case hint && len(deps) == 0 && hintable(err):
		return RouteHint, nil
	}
	return "", err
}

// ForwardPlan is how a coordinator forwards one route's tasks of an
// enqueue to their leader (PlanForward).
type ForwardPlan struct {
	// Wait bounds the forward (0: the request's own deadline).
	Wait time.Duration
	// Fallback: when the forward fails in doubt within Wait, the
	// coordinator writes the tasks itself (a direct write, or a hint).
	Fallback bool
	// Hint is the enqueue's hint request (wire.EnqueueRequest.Hint) on
	// whatever this node writes of it.
	Hint bool
}

// PlanForward plans the forward of tasks, one route's tasks of an
// enqueue that asked for a hint (asked) or is hinted by its queues'
// settings too (hint), with hintLeft of its hint wait left (see
// Plane.hintBy). Tasks without key or deps, which the coordinator can
// write to their cohort itself, wait for their leader leaderWait at most
// (and no longer than hintLeft when hinted): a leader answers in
// milliseconds, and a dead or cut-off one is not waited out. Hinted tasks
// without deps wait hintLeft, then are hinted here. The rest wait for
// their leader as long as the request does: their leader alone can write
// them.
func PlanForward(tasks []EnqueueTask, hint, asked bool, leaderWait, hintLeft time.Duration) ForwardPlan {
	plain, noDeps := true, true
	for _, t := range tasks {
		noDeps = noDeps && len(t.Deps) == 0
		plain = plain && len(t.Deps) == 0 && t.Key == ""
	}
	// A wait that is over already still waits a moment (minForwardWait):
	// a zero Wait means no bound at all.
	hintLeft = max(hintLeft, minForwardWait)
	switch {
	case plain && hint:
		return ForwardPlan{Wait: min(leaderWait, hintLeft), Fallback: true, Hint: asked}
	case plain:
		return ForwardPlan{Wait: leaderWait, Fallback: true, Hint: asked}
	case hint && noDeps:
		return ForwardPlan{Wait: hintLeft, Fallback: true, Hint: true}
	}
	return ForwardPlan{Hint: asked}
}

// minForwardWait is the least a bounded forward waits: a hinted enqueue
// whose hint wait ran out before its forward still gives its leader this
// long (a round trip on a LAN, with room).
const minForwardWait = 5 * time.Millisecond

// hintable reports whether a write of a hinted enqueue that failed with
// err is hinted instead: it could not reach W replicas (in doubt), which
// a hint then settles; a refusal stays a refusal.
func hintable(err error) bool {
	return errors.Is(err, wire.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
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
