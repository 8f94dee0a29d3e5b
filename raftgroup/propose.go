package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/skuldd/skuldd/internal/version"
)

// Init sets the cluster config if it is unset, creating c.Partitions
// never-led partitions. If the cluster was initialised before, Init returns
// the existing config when its Partitions and Replicas equal c's (the
// ClusterID and CreatedAt of the first Init win), and otherwise fails
// with ErrConfigMismatch, naming both, and returns the existing config
// along with the error.
func (g *Group) Init(ctx context.Context, c ClusterConfig) (ClusterConfig, error) {
	if err := c.validate(); err != nil {
		return ClusterConfig{}, fmt.Errorf("raftgroup: init: %w", err)
	}
	cmd := command{Op: opInit, Config: toConfigRecord(&c)}
	if v := g.cfg.FoundingVersion; v > version.Base {
		// At Base the field stays out: the command is then one a build
		// before versions reads (and writes).
		cmd.ClusterVersion = uint32(v)
	}
	r, err := g.propose(ctx, cmd)
	if err != nil {
		return ClusterConfig{}, err
	}
	if r.err != nil {
		return r.config, fmt.Errorf("raftgroup: %w", r.err)
	}
	return r.config, nil
}

// PutMember adds m to the registry or replaces the member with its id.
// It does not need Init: the registry is independent of the partition
// layout.
func (g *Group) PutMember(ctx context.Context, m Member) error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("raftgroup: put member: %w", err)
	}
	r, err := g.propose(ctx, command{Op: opPutMember, Member: (*memberRecord)(&m)})
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("raftgroup: %w", r.err)
	}
	return nil
}

// CAS sets a partition's epoch, cohort and leader iff its epoch is still
// c.PrevEpoch (docs/design.md, Partition leaders, step 8). A lost race fails
// with a *ConflictError (errors.Is ErrCASConflict) carrying the current
// record. Arguments are checked first: Epoch must exceed PrevEpoch and
// Leader must be in a cohort of distinct non-zero ids (ErrInvalid); the
// partition must exist (ErrBadPartition) once the cluster is initialised
// (ErrNotInitialized).
func (g *Group) CAS(ctx context.Context, c CAS) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("raftgroup: cas partition %d: %w", c.Partition, err)
	}
	r, err := g.propose(ctx, command{Op: opCAS, CAS: toCASRecord(c)})
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("raftgroup: %w", r.err)
	}
	return nil
}

// propose replicates cmd and waits until this node applied it, returning
// the apply result.
//
// raft may drop a proposal without telling anyone (doc.go: "it is user's
// job to ensure proposal retries"): a follower forwards it to a leader
// that dies, a deposed leader's uncommitted tail is overwritten, or the
// forwarded message is lost on the way while the leader stays (a link
// cut one way for a moment). So whenever this node learns of a new
// leader while waiting, and every election timeout it waits without the
// command applied, it proposes the same command again. If both copies commit, the first one applied
// answers the call; the second changes nothing for Init and CAS (an
// equal config; a CAS from an epoch that is gone) and rewrites the same
// member for PutMember.
//
// An error other than ErrInvalid means the command's fate is unknown:
// after ctx ends or Close, it may still be applied.
func (g *Group) propose(ctx context.Context, cmd command) (result, error) {
	p, err := g.register()
	if err != nil {
		return result{}, fmt.Errorf("raftgroup: %v: %w", cmd.Op, err)
	}
	defer g.dropWaiter(p.seq)

	cmd.Proposer, cmd.Boot, cmd.Seq = g.cfg.NodeID, g.boot, p.seq
	data, err := encodeCommand(&cmd)
	if err != nil {
		return result{}, fmt.Errorf("raftgroup: %v: %w", cmd.Op, err)
	}
	if len(data) > maxCommandBytes {
		return result{}, fmt.Errorf("raftgroup: %v: %w: command of %d bytes, limit %d",
			cmd.Op, ErrInvalid, len(data), maxCommandBytes)
	}
	retry := time.NewTicker(g.proposalRetry())
	defer retry.Stop()
	for {
		if err := p.node.Propose(ctx, data); err != nil {
			if errors.Is(err, raft.ErrStopped) {
				err = ErrClosed
			}
			return result{}, fmt.Errorf("raftgroup: %v: propose: %w", cmd.Op, err)
		}
		r, again, err := g.awaitApply(ctx, p.ch, &p.leaderCh, retry.C)
		if !again {
			if err != nil {
				return result{}, fmt.Errorf("raftgroup: %v: %w", cmd.Op, err)
			}
			return r, nil
		}
		g.log.Debug("not applied yet; proposing again", "op", cmd.Op, "seq", p.seq, "leader", g.Leader())
	}
}

// proposalRetry is how long a proposal (or a conf change) waits to be
// applied before it is proposed again: an election timeout, by which a
// live leader has committed what reached it, and a dead one is replaced.
func (g *Group) proposalRetry() time.Duration {
	return time.Duration(g.cfg.ElectionTicks) * g.cfg.TickInterval
}

// pending is a registered proposal: its request sequence number, the
// channel its result arrives on, and what proposing needs.
type pending struct {
	seq      uint64
	ch       chan result // capacity 1
	node     raft.Node
	leaderCh chan struct{} // closed when the leader changes
}

// register allocates a request sequence number and its waiter. The caller
// must dropWaiter(seq) when done. A node removed from the group cannot
// propose (raft drops its proposals for good), so it fails fast with
// ErrRemoved instead of blocking until ctx ends.
func (g *Group) register() (pending, error) {
	ch := make(chan result, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.lifecycle != stateRunning {
		return pending{}, ErrClosed
	}
	if g.removed.Load() {
		return pending{}, ErrRemoved
	}
	g.mu.seq++
	g.mu.waiters[g.mu.seq] = ch
	return pending{seq: g.mu.seq, ch: ch, node: g.node, leaderCh: g.mu.leaderCh}, nil
}

// awaitApply waits for the result on ch. It returns again when a new
// leader became known (updating *leaderCh) or retry fired, so the caller
// proposes again. retry may be nil.
func (g *Group) awaitApply(ctx context.Context, ch chan result, leaderCh *chan struct{}, retry <-chan time.Time) (r result, again bool, err error) {
	for {
		select {
		case r := <-ch:
			return r, false, nil
		case <-*leaderCh:
			g.mu.Lock()
			*leaderCh = g.mu.leaderCh
			g.mu.Unlock()
			if g.Leader() != 0 {
				return result{}, true, nil
			}
		case <-retry:
			return result{}, true, nil
		case <-g.removedc:
			select {
			case r := <-ch: // applied with, or before, the removal
				return r, false, nil
			default:
				return result{}, false, ErrRemoved
			}
		case <-ctx.Done():
			return result{}, false, fmt.Errorf("waiting for apply: %w", ctx.Err())
		case <-g.stopc:
			select {
			case r := <-ch: // applied just before Close
				return r, false, nil
			default:
				return result{}, false, ErrClosed
			}
		}
	}
}

func (g *Group) dropWaiter(seq uint64) {
	g.mu.Lock()
	delete(g.mu.waiters, seq)
	g.mu.Unlock()
}
