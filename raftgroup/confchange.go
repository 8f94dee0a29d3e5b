package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Errors of membership changes. Test with errors.Is.
var (
	// ErrNotMember is returned by Promote and Demote for a node that is
	// neither a voter nor a learner.
	ErrNotMember = errors.New("not a member of the raft group")
	// ErrRemoved is returned by every proposal (Init, PutMember, CAS and
	// the membership changes) once this node applied its own removal:
	// raft drops a removed node's proposals for good.
	ErrRemoved = errors.New("this node was removed from the raft group")
)

// errConfStale is the apply result of a conf change whose precondition
// failed: the target's role changed between the proposer's read and the
// apply. The proposer reads the configuration again and decides anew.
var errConfStale = errors.New("configuration changed before the change applied")

// AddLearner adds node id to the group as a learner: it receives the log
// but does not vote. It is a no-op if id is already a learner or a voter.
// The new node catches up from the log or from a snapshot (one is taken
// at once if the latest does not name it; raftgroup/DESIGN.md). Call it on a member
// of the group, not on the joining node: a node that is not yet a member
// knows no leader to forward the change to.
func (g *Group) AddLearner(ctx context.Context, id uint64) error {
	return g.changeConf(ctx, ConfAddLearner, id)
}

// Promote makes learner id a voter. It is a no-op if id is a voter, and
// fails with ErrNotMember if id is not in the group. Promote a learner
// only once it has caught up: until then it counts toward the quorum
// without acknowledging entries.
func (g *Group) Promote(ctx context.Context, id uint64) error {
	return g.changeConf(ctx, ConfPromote, id)
}

// Demote makes voter id a learner. It is a no-op if id is a learner, and
// fails with ErrNotMember if id is not in the group and with ErrInvalid
// if id is the last voter. A demoted leader steps down, and the others
// elect a new leader after an election timeout.
func (g *Group) Demote(ctx context.Context, id uint64) error {
	return g.changeConf(ctx, ConfDemote, id)
}

// Remove takes voter or learner id out of the group. It is a no-op if id
// is not in the group, and fails with ErrInvalid if id is the last voter.
// A removed id must never join again (raft doc.go: "An ID represents a
// unique node in a cluster for all time").
//
// A node may remove itself. Remove returns once this node applied its
// removal; from then on its Group no longer campaigns (raft does not
// consider a removed node for leadership), a removed leader steps down,
// every proposal fails with ErrRemoved, and Meta stops advancing, since
// the leader no longer sends it the log. The Group still answers Step and
// Meta; Close it and retire its store. If the message that would tell
// this node its removal committed is lost, Remove waits until ctx ends:
// the leader stops talking to a node once it applied its removal. Check
// Config on another member in that case.
func (g *Group) Remove(ctx context.Context, id uint64) error {
	return g.changeConf(ctx, ConfRemove, id)
}

// ApplyConfStep applies one step of a PlanVoters plan.
func (g *Group) ApplyConfStep(ctx context.Context, s ConfStep) error {
	switch s.Kind {
	case ConfAddLearner, ConfPromote, ConfDemote, ConfRemove:
		return g.changeConf(ctx, s.Kind, s.ID)
	}
	return fmt.Errorf("raftgroup: %v: %w: unknown conf kind", s, ErrInvalid)
}

// Config returns the group's configuration as applied on this node: the
// voters and the learners, each sorted. In a joint configuration (which
// this package never proposes) voters lists both halves, and learners
// includes voters of the outgoing half staged to become learners;
// otherwise the two lists never share an id.
func (g *Group) Config() (voters, learners []uint64) {
	g.mu.Lock()
	cs := g.mu.conf // published copies are never mutated
	g.mu.Unlock()
	return confVoters(cs), confLearners(cs)
}

// changeConf moves node id toward what kind asks, one raft conf change
// at a time, and returns once this node applied the change that reached
// it (or found it reached already). Each change is conditional: it
// carries the role id had when it was chosen, and every replica refuses
// it at apply if id's role changed since (another proposer got there
// first, or a re-proposed copy of this change applied twice). Then the
// loop reads the configuration again and decides anew; each round trip
// needs another conf change to have applied in between, so the loop
// ends unless others keep changing the same node, and ctx bounds it.
func (g *Group) changeConf(ctx context.Context, kind ConfKind, id uint64) error {
	if id == 0 {
		return fmt.Errorf("raftgroup: %v node 0: %w: node ids are non-zero", kind, ErrInvalid)
	}
	if kind == ConfAddLearner && g.cfg.Transport == nil {
		return fmt.Errorf("raftgroup: %v node %d: %w: no transport to reach it", kind, id, ErrInvalid)
	}
	for {
		g.mu.Lock()
		cs := g.mu.conf
		g.mu.Unlock()
		change, expect, done, err := nextConfChange(cs, kind, id)
		if err != nil {
			return fmt.Errorf("raftgroup: %v node %d: %w", kind, id, err)
		}
		if done {
			return nil
		}
		err = g.proposeConf(ctx, change, expect)
		if errors.Is(err, errConfStale) {
			g.log.Debug("conf change overtaken; deciding again", "op", kind, "node", id)
			continue
		}
		if err != nil {
			return fmt.Errorf("raftgroup: %v node %d: %w", kind, id, err)
		}
	}
}

// nextConfChange is the one raft change that moves id toward kind's goal
// in configuration cs, with the role id must still have when it applies;
// done when the goal holds already. It refuses what raft would refuse at
// apply (leaving no voter).
func nextConfChange(cs *pb.ConfState, kind ConfKind, id uint64) (change *pb.ConfChangeSingle, expect confRole, done bool, err error) {
	role := confRoleOf(cs, id)
	single := func(t pb.ConfChangeType) *pb.ConfChangeSingle {
		return &pb.ConfChangeSingle{Type: t.Enum(), NodeId: new(id)}
	}
	lastVoter := role == roleVoter && len(confVoters(cs)) == 1
	switch kind {
	case ConfAddLearner:
		if role != roleAbsent {
			return nil, 0, true, nil
		}
		return single(pb.ConfChangeAddLearnerNode), role, false, nil
	case ConfPromote:
		switch role {
		case roleAbsent:
			return nil, 0, false, ErrNotMember
		case roleVoter:
			return nil, 0, true, nil
		}
		return single(pb.ConfChangeAddNode), role, false, nil
	case ConfDemote:
		switch {
		case role == roleAbsent:
			return nil, 0, false, ErrNotMember
		case role == roleLearner:
			return nil, 0, true, nil
		case lastVoter:
			return nil, 0, false, fmt.Errorf("%w: node %d is the last voter", ErrInvalid, id)
		}
		return single(pb.ConfChangeAddLearnerNode), role, false, nil
	case ConfRemove:
		switch {
		case role == roleAbsent:
			return nil, 0, true, nil
		case lastVoter:
			return nil, 0, false, fmt.Errorf("%w: node %d is the last voter", ErrInvalid, id)
		}
		return single(pb.ConfChangeRemoveNode), role, false, nil
	}
	return nil, 0, false, fmt.Errorf("%w: unknown conf kind %v", ErrInvalid, kind)
}

// proposeConf proposes one conditional conf change and waits until this
// node applied it, returning its apply error (errConfStale, or ErrInvalid
// for a change raft could not apply).
//
// raft drops conf changes more often than commands: besides the reasons
// propose lists, a leader turns a conf change into an empty entry while
// another one is not yet applied (one at a time), and a new leader does
// so until it applied its whole log. Nothing reports the drop, so besides
// re-proposing on a leader change it re-proposes every election timeout.
// The copies are harmless: the first one applied answers, and the
// precondition refuses the rest.
func (g *Group) proposeConf(ctx context.Context, change *pb.ConfChangeSingle, expect confRole) error {
	p, err := g.register()
	if err != nil {
		return err
	}
	defer g.dropWaiter(p.seq)
	cctx, err := encodeConfContext(&confContext{Proposer: g.cfg.NodeID, Boot: g.boot, Seq: p.seq, Expect: expect})
	if err != nil {
		return err
	}
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{change}, Context: cctx}
	retry := time.NewTicker(g.proposalRetry())
	defer retry.Stop()
	for {
		if err := p.node.ProposeConfChange(ctx, cc); err != nil {
			if errors.Is(err, raft.ErrStopped) {
				err = ErrClosed
			}
			return fmt.Errorf("propose: %w", err)
		}
		r, again, err := g.awaitApply(ctx, p.ch, &p.leaderCh, retry.C)
		if !again {
			if err != nil {
				return err
			}
			return r.err
		}
		g.log.Debug("conf change not applied yet; proposing again", "change", describeConfChange(cc), "seq", p.seq)
	}
}

// confRole is a node's place in a configuration. The values are
// persisted in confContext: never reuse one.
type confRole uint8

const (
	roleAbsent  confRole = 1
	roleLearner confRole = 2
	roleVoter   confRole = 3
)

func (r confRole) String() string {
	switch r {
	case roleAbsent:
		return "absent"
	case roleLearner:
		return "learner"
	case roleVoter:
		return "voter"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// confContextVersion versions the context record of conf changes.
const confContextVersion byte = 1

// confContext rides in ConfChangeV2.Context of every conf change this
// package proposes: the request id (as in command) and the precondition.
// Conf changes without a context (raft's bootstrap entries) apply
// unconditionally.
type confContext struct {
	Proposer uint64 `cbor:"1,keyasint"`
	Boot     uint64 `cbor:"2,keyasint"`
	Seq      uint64 `cbor:"3,keyasint"`
	// Expect is the role the change's target must have when it applies.
	Expect confRole `cbor:"4,keyasint"`
}

func encodeConfContext(c *confContext) ([]byte, error) {
	b, err := marshalVersioned(confContextVersion, c)
	if err != nil {
		return nil, fmt.Errorf("encode conf change context: %w", err)
	}
	return b, nil
}

func decodeConfContext(b []byte) (confContext, error) {
	var c confContext
	if err := unmarshalVersioned(confContextVersion, b, &c); err != nil {
		return confContext{}, fmt.Errorf("decode conf change context: %w", err)
	}
	switch c.Expect {
	case roleAbsent, roleLearner, roleVoter:
	default:
		return confContext{}, fmt.Errorf("decode conf change context: unknown role %d", c.Expect)
	}
	return c, nil
}

// confDecision is what applying one conf-change entry does: hand cc to
// raft, or refuse the entry with err. req is the entry's context, nil if
// it has none.
type confDecision struct {
	cc  *pb.ConfChangeV2
	req *confContext
	err error
}

// decideConfChange decides, from the configuration cs the entry applies
// to and the entry alone, whether it applies. Like applyCommand it is
// deterministic, so every replica decides the same, and it never panics:
// the entry may come from any proposer, and raft's ApplyConfChange
// panics on a change its confchange package refuses, which would crash
// every replica on every restart.
func decideConfChange(cs *pb.ConfState, e *pb.Entry) confDecision {
	cci, err := decodeConfChange(e)
	if err != nil {
		return confDecision{err: fmt.Errorf("%w: undecodable conf change: %v", ErrInvalid, err)}
	}
	cc := cci.AsV2()
	var req *confContext
	if len(cc.GetContext()) > 0 {
		c, err := decodeConfContext(cc.GetContext())
		if err != nil {
			return confDecision{err: fmt.Errorf("%w: %v", ErrInvalid, err)}
		}
		req = &c
		// Ours are single simple changes; anything else with our context
		// is malformed.
		if len(cc.GetChanges()) != 1 || cc.GetTransition() != pb.ConfChangeTransitionAuto {
			return confDecision{req: req, err: fmt.Errorf("%w: conditional conf change %s is not a single change",
				ErrInvalid, describeConfChange(cc))}
		}
		id := cc.GetChanges()[0].GetNodeId()
		if got := confRoleOf(cs, id); got != c.Expect {
			return confDecision{req: req, err: fmt.Errorf("%w: node %d is %v, the change %s expected %v",
				errConfStale, id, got, describeConfChange(cc), c.Expect)}
		}
	}
	if err := checkConfChange(cs, cc); err != nil {
		return confDecision{req: req, err: fmt.Errorf("%w: raft cannot apply conf change %s: %v",
			ErrInvalid, describeConfChange(cc), err)}
	}
	return confDecision{cc: cc, req: req}
}

// checkConfChange runs cc through raft's own confchange logic on a
// scratch tracker holding cs, exactly as raft's applyConfChange will, and
// returns the error raft would panic with.
func checkConfChange(cs *pb.ConfState, cc *pb.ConfChangeV2) error {
	if cs == nil {
		cs = &pb.ConfState{}
	}
	switch cc.GetTransition() {
	case pb.ConfChangeTransitionAuto, pb.ConfChangeTransitionJointImplicit, pb.ConfChangeTransitionJointExplicit:
	default: // raft's EnterJoint panics on it
		return fmt.Errorf("unknown transition %v", cc.GetTransition())
	}
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0)}
	cfg, trk, err := confchange.Restore(chg, cs)
	if err != nil {
		return fmt.Errorf("restore %v: %w", cs, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	if cc.LeaveJoint() {
		_, _, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		_, _, err = chg.EnterJoint(autoLeave, cc.GetChanges()...)
	} else {
		_, _, err = chg.Simple(cc.GetChanges()...)
	}
	return err
}

// describeConfChange names the changes of cc for logs and errors; unlike
// raft.DescribeConfChange it leaves out the context bytes.
func describeConfChange(cc *pb.ConfChangeV2) string {
	if cc.LeaveJoint() {
		return "leave-joint"
	}
	parts := make([]string, 0, len(cc.GetChanges()))
	for _, c := range cc.GetChanges() {
		parts = append(parts, fmt.Sprintf("%v %d", c.GetType(), c.GetNodeId()))
	}
	return fmt.Sprintf("%v [%s]", cc.GetTransition(), strings.Join(parts, ", "))
}

// confRoleOf is id's role in cs (nil: the empty configuration).
func confRoleOf(cs *pb.ConfState, id uint64) confRole {
	switch {
	case slices.Contains(cs.GetVoters(), id), slices.Contains(cs.GetVotersOutgoing(), id):
		return roleVoter
	case slices.Contains(cs.GetLearners(), id), slices.Contains(cs.GetLearnersNext(), id):
		return roleLearner
	}
	return roleAbsent
}

// confVoters is the sorted voters of cs, both halves if joint.
func confVoters(cs *pb.ConfState) []uint64 {
	return sortedIDs(append(slices.Clone(cs.GetVoters()), cs.GetVotersOutgoing()...))
}

// confLearners is the sorted learners of cs, staged ones included.
func confLearners(cs *pb.ConfState) []uint64 {
	return sortedIDs(append(slices.Clone(cs.GetLearners()), cs.GetLearnersNext()...))
}

// confCovers says whether every member of cur is a member in snap.
func confCovers(snap, cur *pb.ConfState) bool {
	for _, id := range append(confVoters(cur), confLearners(cur)...) {
		if confRoleOf(snap, id) == roleAbsent {
			return false
		}
	}
	return true
}

func cloneConfState(cs *pb.ConfState) *pb.ConfState {
	if cs == nil {
		return nil
	}
	return proto.Clone(cs).(*pb.ConfState)
}
