package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/node/coord"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Routing: every node coordinates every request (DESIGN.md, Operations).
// An operation on one task runs at the leader of the task's partition: a
// node that does not lead it forwards the request over a peer connection.
// Queue-wide operations (claim, count, queues, list) run on every node
// that leads partitions and are merged here.
//
// A forwarded request is served strictly locally: the receiving node never
// forwards it again, so a stale view of the placement costs an error the
// client can retry, never a loop.

// claimPollInterval is how often a long-polling claim asks the other
// leaders for work; local work wakes it at once.
const claimPollInterval = 100 * time.Millisecond

type forwardedKey struct{}

// withForwarded marks ctx as serving a request another node forwarded.
func withForwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

func isForwarded(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey{}).(bool)
	return v
}

// freshKey marks a request whose EnqueueTask.FreshID flags this node set
// itself (the coordinator, on a first attempt).
type freshKey struct{}

func withFresh(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshKey{}, true)
}

// trustsFreshIDs reports whether the FreshID flags of the request served
// under ctx come from a node: this one, or a peer that forwarded it.
func trustsFreshIDs(ctx context.Context) bool {
	v, _ := ctx.Value(freshKey{}).(bool)
	return v || isForwarded(ctx)
}

// Placement of id-less tasks (DESIGN.md, Operations: placement and
// hints). Ids carry no meaning beyond order, so skipping some costs
// nothing.
const (
	// localIDTries is how many draws placeID spends looking for a
	// partition this node leads before it takes any placeable one; with
	// this node leading a fraction f of the partitions it misses with
	// probability (1-f)^tries.
	localIDTries = 32
	// placeTries bounds all of placeID's draws: with a fraction g of the
	// partitions placeable it finds none with probability (1-g)^tries.
	placeTries = 256
)

// placeID returns a new task id for a task that has neither id nor key,
// of a partition whose cohort has enough reachable members to take a
// write of w (placeable), and preferably of one this node leads: the
// leader then holds the task at once (claimable without anti-entropy),
// and the tasks of a partition's leader land in it, so clients spread
// over the nodes spread tasks over the partitions. When no partition is
// placeable the id is any: its write then fails in doubt.
func (n *Node) placeID(w int) task.ID {
	var fallback task.ID
	for i := range placeTries {
		id := n.ids.Next()
		part := n.partOf(id)
		if !n.placeable(part, w) {
			continue
		}
		if i >= localIDTries || n.leads(part) {
			return id
		}
		if fallback.IsZero() {
			fallback = id
		}
	}
	if !fallback.IsZero() {
		return fallback
	}
	return n.ids.Next()
}

// placeable reports whether enough members of part's cohort to take a
// write of w are reachable from here: this node, and the others that
// gossip holds alive and whose last replication request, if recent, was
// answered.
func (n *Node) placeable(part uint16, w int) bool {
	need := n.repl.NeedAcks(part, w)
	up := 0
	for _, id := range n.partitionCohort(int(part)) {
		if id == n.id || n.ms.Alive(id) && n.repl.Reachable(id) {
			up++
		}
	}
	return up >= need
}

// leads reports whether this node serves part's requests itself.
func (n *Node) leads(part uint16) bool { return n.parts[part].Epoch() > 0 }

// routeTo returns "" when this node serves part itself, else the address
// of part's leader.
func (n *Node) routeTo(ctx context.Context, part uint16) (string, error) {
	if n.leads(part) {
		return "", nil
	}
	if isForwarded(ctx) {
		return "", fmt.Errorf("%w: node %d does not lead partition %d (any more); retry", wire.ErrUnavailable, n.id, part)
	}
	var leader uint64
	if ls := n.leaders(); int(part) < len(ls) {
		leader = ls[part]
	}
	if leader == n.id {
		// Won the handoff, the local replica is about to lead.
		if n.waitLead(ctx, part) {
			return "", nil
		}
	}
	if leader == 0 || leader == n.id {
		return "", fmt.Errorf("%w: partition %d has no leader right now; retry", wire.ErrUnavailable, part)
	}
	addr := n.ms.AddrOf(leader)
	if addr == "" {
		return "", fmt.Errorf("%w: the address of node %d, leader of partition %d, is unknown", wire.ErrUnavailable, leader, part)
	}
	return addr, nil
}

// leadWait bounds waitLead: the gap between a handoff's CAS and the
// replica starting to lead is a local step.
const leadWait = time.Second

// waitLead waits until this node's replica of part leads, up to leadWait.
func (n *Node) waitLead(ctx context.Context, part uint16) bool {
	deadline := time.Now().Add(leadWait)
	for !n.leads(part) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(leadPoll)
	}
	return true
}

// leadPoll is waitLead's polling pause.
const leadPoll = 2 * time.Millisecond

// forwardCall sends a client op to the node at addr over a peer
// connection, bounded by ctx only (a forwarded claim may long-poll).
func (n *Node) forwardCall(ctx context.Context, addr string, op wire.Op, req, resp any) error {
	dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	c, err := n.peers.Get(dctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: forward %s to %s: %v", wire.ErrUnavailable, op, addr, err)
	}
	return c.Call(ctx, op, req, resp)
}

// forward runs op at part's leader when that is another node. handled is
// false when this node serves part itself.
func forward[Req, Resp any](ctx context.Context, n *Node, part uint16, op wire.Op, req *Req) (resp *Resp, handled bool, err error) {
	addr, err := n.routeTo(ctx, part)
	if err != nil {
		return nil, true, err
	}
	if addr == "" {
		return nil, false, nil
	}
	resp = new(Resp)
	if err := n.forwardCall(ctx, addr, op, req, resp); err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// fanPlan is a cluster-wide op's plan (coord.PlanFan) with the
// partitions this node serves as a set and the other leaders' addresses.
type fanPlan struct {
	*coord.FanPlan
	mine   map[uint16]bool
	others []fanPeer
}

// fanPeer is another leader, its address and the partitions it must
// serve.
type fanPeer struct {
	addr  string
	parts []uint16
}

// fanPlanFor returns the plan of a cluster-wide op (coord.PlanFan) from
// this node's registry, once this node serves each partition it leads:
// one it leads but does not serve yet (between leaders) makes the op
// unavailable, as does another leader with no known address.
func (n *Node) fanPlanFor(ctx context.Context, named []uint16) (*fanPlan, error) {
	cp, err := coord.PlanFan(n.leaders(), n.id, isForwarded(ctx), named)
	if err != nil {
		return nil, err
	}
	plan := &fanPlan{FanPlan: cp, mine: make(map[uint16]bool, len(cp.Mine))}
	for _, p := range cp.Mine {
		if !n.waitLead(ctx, p) {
			return nil, fmt.Errorf("%w: partition %d is between leaders; retry", wire.ErrUnavailable, p)
		}
		plan.mine[p] = true
	}
	for _, o := range cp.Others {
		addr := n.ms.AddrOf(o.ID)
		if addr == "" {
			return nil, fmt.Errorf("%w: partitions %v's leader %x has no known address; retry", wire.ErrUnavailable, o.Parts, o.ID)
		}
		plan.others = append(plan.others, fanPeer{addr: addr, parts: o.Parts})
	}
	return plan, nil
}

// changed reports whether the registry moved on since the plan was made.
func (p *fanPlan) changed(n *Node) bool { return p.Changed(n.leaders()) }

// fanned is a request a coordinator fans out, telling each leader the
// partitions it must serve (wire.Fanned).
type fanned[Req any] interface {
	*Req
	SetParts([]uint16)
}

// fanOut runs op at every other leader of plan, each told its
// partitions, and hands each answer to merge. A leader that cannot be
// reached, or that disagrees about what it leads, fails the whole
// request: a count or an op that silently left out partitions would be
// wrong.
func fanOut[Req any, PReq fanned[Req], Resp any](ctx context.Context, n *Node, plan *fanPlan, op wire.Op, req PReq, merge func(*Resp)) error {
	for _, fp := range plan.others {
		sub := *req
		PReq(&sub).SetParts(fp.parts)
		r := new(Resp)
		if err := n.forwardCall(ctx, fp.addr, op, PReq(&sub), r); err != nil {
			return fmt.Errorf("%s at %s: %w", op, fp.addr, err)
		}
		merge(r)
	}
	return nil
}

// otherLeaders returns the addresses of the other nodes that lead
// partitions, in a stable order.
func (n *Node) otherLeaders() []string {
	ids := n.otherLeaderIDs()
	addrs := make([]string, 0, len(ids))
	for _, id := range ids {
		if a := n.ms.AddrOf(id); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// otherLeaderIDs returns the other nodes that lead partitions, in order.
func (n *Node) otherLeaderIDs() []uint64 {
	var ids []uint64
	for _, l := range n.leaders() {
		if l != 0 && l != n.id && !slices.Contains(ids, l) {
			ids = append(ids, l)
		}
	}
	slices.Sort(ids)
	return ids
}

// routeHint is enqueueRouted's route of tasks whose leader this node
// cannot reach, to be hinted here.
const routeHint = "!hint"

// leaderForwardWait bounds the forward of tasks without key or deps to
// their partition's leader: a leader answers in milliseconds, and past
// this the coordinator writes them to their cohort itself (coord.DirectWrite)
// rather than wait out a leader that died or was cut off before its
// peers noticed.
const leaderForwardWait = 500 * time.Millisecond

// enqueueRouted splits an enqueue by partition leader: the tasks of
// partitions led here, and those written without a leader, are written
// here, the others forwarded, and the results put back in request
// order. Every task gets its id first, so a forwarded part is
// idempotent under the client's retries.

func (n *Node) enqueueRouted(ctx context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, bool, error) {
	if isForwarded(ctx) {
		return nil, false, nil
	}
	plan := make([]coord.EnqueueTask, len(req.Tasks))
	for i := range req.Tasks {
		t := &req.Tasks[i]
		// A task without an id here came past the retrying service
		// (which draws fresh ids for them): its new id is not marked
		// fresh, and the task is written as a client's would be.
		fresh := t.FreshID && trustsFreshIDs(ctx)
		if t.ID == nil {
			id := n.newID(t, req.W)
			t.ID = &id
		}
		// A task without key or deps under a fresh id, or a client's id
		// whose leader is out of reach, is written here, to its cohort
		// (writeTasks, coord.DirectWrite): no leader is looked up.
		addr := ""
		if part := n.partOf(*t.ID); !coord.DirectWrite(t.Key, t.Deps, fresh, n.leaderOutOfReach(part)) {
			var err error
			if addr, err = n.routeTo(ctx, part); err != nil {
				if !req.Hint || len(t.Deps) > 0 || !hintable(err) {
					return nil, true, fmt.Errorf("task %d of %d: %w", i+1, len(req.Tasks), err)
				}
				addr = routeHint
			}
		}
		plan[i] = coord.EnqueueTask{ID: *t.ID, Deps: t.Deps, Route: addr}
	}
	split := coord.SplitEnqueue(plan)
	if !split.Remote() {
		return nil, false, nil
	}
	resp := &wire.EnqueueResponse{Results: make([]wire.EnqueueResult, len(req.Tasks))}
	send := func(addr string, idx []int) error {
		sub := &wire.EnqueueRequest{W: req.W, Tasks: make([]wire.EnqueueTask, len(idx))}
		noDeps, plain := true, true
		for k, i := range idx {
			sub.Tasks[k] = req.Tasks[i]
			noDeps = noDeps && len(req.Tasks[i].Deps) == 0
			plain = plain && len(req.Tasks[i].Deps) == 0 && req.Tasks[i].Key == ""
		}
		var r *wire.EnqueueResponse
		var err error
		switch addr {
		case "", routeHint:
			// Here: the tasks written without a leader, those of
			// partitions this node leads (hinted if asked for), and
			// those whose leader it cannot reach (it does not lead
			// their partition, so its write fails at once and hints
			// them).
			sub.Hint = req.Hint
			r, err = n.enqueueLocal(ctx, sub)
		default:
			// The leader writes; if it cannot be reached in time, this
			// node writes tasks without key or deps to their cohort
			// itself (coord.DirectWrite), and hints what it must (the copy it
			// forwards asks for no hint). A forward that timed out may
			// have been written: the same tasks again are repeats.
			r = new(wire.EnqueueResponse)
			fctx, cancel := ctx, context.CancelFunc(func() {})
			switch {
			case plain:
				fctx, cancel = context.WithTimeout(ctx, leaderForwardWait)
			case req.Hint && noDeps:
				fctx, cancel = n.hintWait(ctx, true)
			}
			err = n.forwardCall(fctx, addr, wire.OpEnqueue, sub, r)
			cancel()
			switch {
			case err == nil || !hintable(err) || ctx.Err() != nil:
			case plain:
				sub.Hint = req.Hint
				r, err = n.enqueueLocal(ctx, sub)
			case req.Hint && noDeps:
				sub.Hint = true
				r, err = n.enqueueLocal(ctx, sub)
			}
		}
		if err != nil {
			return err
		}
		if len(r.Results) != len(idx) {
			return fmt.Errorf("%w: node %s answered %d results for %d tasks", wire.ErrUnavailable, addr, len(r.Results), len(idx))
		}
		for k, i := range idx {
			resp.Results[i] = r.Results[k]
		}
		return nil
	}
	if split.Sequential {
		for i := range req.Tasks {
			if err := send(plan[i].Route, []int{i}); err != nil {
				return nil, true, fmt.Errorf("task %d of %d: %w", i+1, len(req.Tasks), err)
			}
		}
		return resp, true, nil
	}
	errs := make([]error, len(split.Order))
	done := make(chan struct{}, len(split.Order))
	for gi, addr := range split.Order {
		go func() {
			errs[gi] = send(addr, split.Tasks[addr])
			done <- struct{}{}
		}()
	}
	for range split.Order {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// claimElsewhere asks the other leaders, in turn, for up to count tasks of
// the queue; it returns what the first one with work granted. This is the
// bounded fallback of claim routing: one request per other leader at most.
// With trustIdle it skips the leaders whose fresh summary shows no ready
// task in the queue: a long poll asks everyone once, and after that
// relies on the summaries, which bring new work within heads.SummaryInterval,
// instead of asking every leader every claimPollInterval.
func (n *Node) claimElsewhere(ctx context.Context, req *wire.ClaimRequest, count int, trustIdle bool) ([]wire.TaskView, error) {
	if isForwarded(ctx) {
		return nil, nil
	}
	sub := *req
	sub.WaitMs = 0
	sub.Count = count
	var last error
	for _, id := range n.otherLeaderIDs() {
		if trustIdle && n.sums.Idle(id, req.Queue) {
			continue
		}
		addr := n.ms.AddrOf(id)
		if addr == "" {
			continue
		}
		var r wire.ClaimResponse
		if err := n.forwardCall(ctx, addr, wire.OpClaim, &sub, &r); err != nil {
			last = err
			n.log.Debug("claim at another leader failed", "addr", addr, "err", err)
			continue
		}
		if len(r.Tasks) > 0 {
			return r.Tasks, nil
		}
	}
	return nil, last
}

// fanOutAll calls op on every other leader, which acts on whatever it
// leads, and hands each answer to merge: for an op that reports what it
// could not reach itself (a GC pass).
func fanOutAll[Req, Resp any](ctx context.Context, n *Node, op wire.Op, req *Req, merge func(*Resp)) error {
	if isForwarded(ctx) {
		return nil
	}
	for _, addr := range n.otherLeaders() {
		r := new(Resp)
		if err := n.forwardCall(ctx, addr, op, req, r); err != nil {
			return fmt.Errorf("%s at %s: %w", op, addr, err)
		}
		merge(r)
	}
	return nil
}
