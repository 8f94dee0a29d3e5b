package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Routing: every node coordinates every request (docs/design.md, Operations).
// An operation on one task runs at the leader of the task's partition: a
// node that does not lead it forwards the request over a peer connection.
// Queue-wide operations (claim, count, queues, list) run on every node
// that leads partitions and are merged here.
//
// A forwarded request (fwd: it reached this node through Plane.Forwarded,
// from a peer's coordinator) is served strictly locally: the receiving
// node never forwards it again, so a stale view of the placement costs an
// error the client can retry, never a loop.

// routeTo returns "" when this node serves part itself, else the address
// of part's leader.
func (p *Plane) routeTo(ctx context.Context, fwd bool, part uint16) (string, error) {
	if p.leads(part) {
		return "", nil
	}
	if fwd {
		return "", fmt.Errorf("%w: node %d does not lead partition %d (any more); retry", wire.ErrUnavailable, p.cfg.Self, part)
	}
	var leader uint64
	if ls := p.h.Leaders(); int(part) < len(ls) {
		leader = ls[part]
	}
	if leader == p.cfg.Self {
		// Won the handoff, the local replica is about to lead.
		if p.waitLead(ctx, part) {
			return "", nil
		}
	}
	if leader == 0 || leader == p.cfg.Self {
		return "", fmt.Errorf("%w: partition %d has no leader right now; retry", wire.ErrUnavailable, part)
	}
	addr := p.h.AddrOf(leader)
	if addr == "" {
		return "", fmt.Errorf("%w: the address of node %d, leader of partition %d, is unknown", wire.ErrUnavailable, leader, part)
	}
	return addr, nil
}

// leadWait bounds waitLead: the gap between a handoff's CAS and the
// replica starting to lead is a local step.
const leadWait = time.Second

// waitLead waits until this node's replica of part leads, up to leadWait.
func (p *Plane) waitLead(ctx context.Context, part uint16) bool {
	deadline := time.Now().Add(leadWait)
	for !p.leads(part) {
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
func (p *Plane) forwardCall(ctx context.Context, addr string, op wire.Op, req, resp any) error {
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	c, err := p.peers.Get(dctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: forward %s to %s: %v", wire.ErrUnavailable, op, addr, err)
	}
	return forwardErr(op, addr, c.Call(ctx, op, req, resp))
}

// forwardErr is what a forward's error means to this node's client. A
// peer that is shutting down is, to this node, a peer out of reach: the
// client retries, or this node writes or hints what it may (hintable),
// as for any leader it cannot reach. Passed on as it came, it would tell
// the client that the node it asked is stopping, which the client's
// retries take as final. Either way the outcome is in doubt, as the
// peer may have applied the op before it stopped.
func forwardErr(op wire.Op, addr string, err error) error {
	if errors.Is(err, wire.ErrShuttingDown) {
		return fmt.Errorf("%w: %s at %s: %v", wire.ErrUnavailable, op, addr, err)
	}
	return err
}

// forward runs op at part's leader when that is another node. handled is
// false when this node serves part itself.
func forward[Req, Resp any](ctx context.Context, p *Plane, fwd bool, part uint16, op wire.Op, req *Req) (resp *Resp, handled bool, err error) {
	addr, err := p.routeTo(ctx, fwd, part)
	if err != nil {
		return nil, true, err
	}
	if addr == "" {
		return nil, false, nil
	}
	resp = new(Resp)
	if err := p.forwardCall(ctx, addr, op, req, resp); err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// fanPlan is a cluster-wide op's plan (PlanFan) with the
// partitions this node serves as a set and the other leaders' addresses.
type fanPlan struct {
	*FanPlan
	mine   map[uint16]bool
	others []fanPeer
}

// fanPeer is another leader, its address and the partitions it must
// serve.
type fanPeer struct {
	addr  string
	parts []uint16
}

// fanPlanFor returns the plan of a cluster-wide op (PlanFan) from
// this node's registry, once this node serves each partition it leads:
// one it leads but does not serve yet (between leaders) makes the op
// unavailable, as does another leader with no known address.
func (p *Plane) fanPlanFor(ctx context.Context, fwd bool, named []uint16) (*fanPlan, error) {
	cp, err := PlanFan(p.h.Leaders(), p.cfg.Self, fwd, named)
	if err != nil {
		return nil, err
	}
	plan := &fanPlan{FanPlan: cp, mine: make(map[uint16]bool, len(cp.Mine))}
	for _, part := range cp.Mine {
		if !p.waitLead(ctx, part) {
			return nil, fmt.Errorf("%w: partition %d is between leaders; retry", wire.ErrUnavailable, part)
		}
		plan.mine[part] = true
	}
	for _, o := range cp.Others {
		addr := p.h.AddrOf(o.ID)
		if addr == "" {
			return nil, fmt.Errorf("%w: partitions %v's leader %x has no known address; retry", wire.ErrUnavailable, o.Parts, o.ID)
		}
		plan.others = append(plan.others, fanPeer{addr: addr, parts: o.Parts})
	}
	return plan, nil
}

// changed reports whether the registry moved on since the plan was made.
func (fp *fanPlan) changed(p *Plane) bool { return fp.Changed(p.h.Leaders()) }

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
func fanOut[Req any, PReq fanned[Req], Resp any](ctx context.Context, p *Plane, plan *fanPlan, op wire.Op, req PReq, merge func(*Resp)) error {
	for _, fp := range plan.others {
		sub := *req
		PReq(&sub).SetParts(fp.parts)
		r := new(Resp)
		if err := p.forwardCall(ctx, fp.addr, op, PReq(&sub), r); err != nil {
			return fmt.Errorf("%s at %s: %w", op, fp.addr, err)
		}
		merge(r)
	}
	return nil
}

// otherLeaders returns the addresses of the other nodes that lead
// partitions, in a stable order.
func (p *Plane) otherLeaders() []string {
	ids := p.otherLeaderIDs()
	addrs := make([]string, 0, len(ids))
	for _, id := range ids {
		if a := p.h.AddrOf(id); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// otherLeaderIDs returns the other nodes that lead partitions, in order.
func (p *Plane) otherLeaderIDs() []uint64 {
	var ids []uint64
	for _, l := range p.h.Leaders() {
		if l != 0 && l != p.cfg.Self && !slices.Contains(ids, l) {
			ids = append(ids, l)
		}
	}
	slices.Sort(ids)
	return ids
}

// fanOutAll calls op on every other leader, which acts on whatever it
// leads, and hands each answer to merge: for an op that reports what it
// could not reach itself (a GC pass).
func fanOutAll[Req, Resp any](ctx context.Context, p *Plane, fwd bool, op wire.Op, req *Req, merge func(*Resp)) error {
	if fwd {
		return nil
	}
	for _, addr := range p.otherLeaders() {
		r := new(Resp)
		if err := p.forwardCall(ctx, addr, op, req, r); err != nil {
			return fmt.Errorf("%s at %s: %w", op, addr, err)
		}
		merge(r)
	}
	return nil
}

// RouteTo is routeTo for node/deps, which asks as a coordinator: ""
// when this node leads part, else the address of its leader.
func (p *Plane) RouteTo(ctx context.Context, part uint16) (string, error) {
	return gated(p, ctx, part, func(ctx context.Context, part uint16) (string, error) {
		return p.routeTo(ctx, false, part)
	})
}

// GetAtLeader reads task id at its partition's leader, for node/deps,
// when that is another node (handled); handled is false when this node
// leads part.
func (p *Plane) GetAtLeader(ctx context.Context, part uint16, id task.ID) (*wire.TaskView, bool, error) {
	ctx, exit, err := p.enter(ctx)
	if err != nil {
		return nil, true, err
	}
	defer exit()
	return forward[wire.GetRequest, wire.TaskView](ctx, p, false, part, wire.OpGet, &wire.GetRequest{ID: id})
}
