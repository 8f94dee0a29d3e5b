package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Worker shards split work among the members of a named set: each member
// gets an index in 0..Count-1, and works on what hashes to it (say,
// id % Count == Index). The cluster's metadata group assigns the
// indexes; a member joins, renews its lease, and leaves. When the
// members change, the set moves to a new generation, and a member's
// index there takes effect only once every member stopped the work of
// the generation before: no two members ever work on one index at once,
// and once all stopped, every index of the new generation has its
// member.

// Shard is a member's assignment: Index of Count, in Generation.
type Shard struct {
	Set        string
	Index      int
	Count      int
	Generation uint64
}

// ShardView is a shard set as the cluster holds it (ShardMembers).
type ShardView = wire.ShardView

// ShardConfig configures a member. Zero fields take the defaults.
type ShardConfig struct {
	// TTL is the member's lease (default DefaultShardTTL): a member that
	// cannot renew it for this long stops its work, and the cluster
	// gives its index to others ExpiryMargin (5 s) later.
	TTL time.Duration
	// StopTimeout is how long Run waits for the work function to return
	// once its context ended (default DefaultShardStopTimeout): longer,
	// and Run stops renewing, so that the set moves on without the
	// member after its lease, and returns an error. The work function
	// must return promptly when its context ends: another member may
	// start on its index as soon as it does, or 5 s after the lease.
	StopTimeout time.Duration
	// Info describes the member in ShardMembers (default host and pid).
	Info string
}

// Defaults of ShardConfig.
const (
	DefaultShardTTL         = 10 * time.Second
	DefaultShardStopTimeout = 4 * time.Second
	// shardWaitRenew is how often a member that waits (for its first
	// index, or for a new generation) asks again.
	shardWaitRenew = 300 * time.Millisecond
)

// ShardMember is one member of a shard set.
type ShardMember struct {
	c   *Client
	set string
	id  string
	cfg ShardConfig
	// leaseEnd: the lease runs out then, by this process's clock, counted
	// from the send of the join or renewal that last succeeded.
	leaseEnd time.Time
	view     *wire.ShardView
	// stopped: this member holds no work of a generation at or below it.
	stopped uint64
}

// JoinShards joins the shard set name as a new member (its id random).
// Run it, then Leave.
func (c *Client) JoinShards(ctx context.Context, name string, cfg ShardConfig) (*ShardMember, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultShardTTL
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultShardStopTimeout
	}
	if cfg.Info == "" {
		host, _ := os.Hostname()
		cfg.Info = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	if cfg.TTL < time.Second || cfg.StopTimeout <= 0 {
		return nil, fmt.Errorf("%w: shard TTL %v (1s or more) and stop timeout %v", task.ErrInvalid, cfg.TTL, cfg.StopTimeout)
	}
	m := &ShardMember{c: c, set: name, cfg: cfg}
	if err := m.join(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *ShardMember) join(ctx context.Context) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	m.id, m.stopped = hex.EncodeToString(b[:]), 0
	sent := time.Now()
	var v *wire.ShardView
	err := m.c.do(ctx, "shard-join", func(ctx context.Context, cl *wire.Client) (err error) {
		v, err = cl.ShardJoin(ctx, &wire.ShardJoinRequest{Set: m.set, Member: m.id, TTLMs: m.cfg.TTL.Milliseconds(), Info: m.cfg.Info})
		return err
	})
	if err != nil {
		return err
	}
	m.view, m.leaseEnd = v, sent.Add(m.cfg.TTL)
	return nil
}

// ID returns the member's id.
func (m *ShardMember) ID() string { return m.id }

// renew renews the lease, saying what the member stopped.
//
// A member at work must not wait on a renewal past its lease (it must
// stop then), so its renewal ends with the lease; an idle member's ends
// a TTL from now.
func (m *ShardMember) renew(ctx context.Context, working bool) error {
	deadline := time.Now().Add(m.cfg.TTL)
	if working {
		deadline = m.leaseEnd
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	var v *wire.ShardView
	err := m.c.do(ctx, "shard-renew", func(ctx context.Context, cl *wire.Client) (err error) {
		v, err = cl.ShardRenew(ctx, &wire.ShardRenewRequest{Set: m.set, Member: m.id, Stopped: m.stopped})
		return err
	})
	if err != nil {
		return err
	}
	m.view, m.leaseEnd = v, sent.Add(m.cfg.TTL)
	return nil
}

// running is the work function's current run.
type running struct {
	shard  Shard
	cancel context.CancelFunc
	done   chan error
}

// errWorkStuck: the work function did not return within StopTimeout.
var errWorkStuck = errors.New("shards: the work function did not return after its context ended")

// Run calls work with the member's shard whenever it gets one, cancels
// work's context when the shard ends (a new generation, or a lease that
// ran out), waits for work to return, tells the cluster, and goes on
// with the next shard, until ctx ends; then it leaves the set. A work
// function that returns nil while its shard holds is called again at the
// next one; one that returns an error ends Run (the member leaves) with
// that error. If the cluster expired the member (its lease ran out), Run
// joins again as a new member.
func (m *ShardMember) Run(ctx context.Context, work func(ctx context.Context, s Shard) error) error {
	var cur *running
	var idle *Shard // the shard whose work returned nil: not called again
	// A member that is idle holds no work: stop() and a change report it.
	stop := func() error {
		if cur == nil {
			return nil
		}
		cur.cancel()
		t := time.NewTimer(m.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-cur.done:
		case <-t.C:
			return fmt.Errorf("%w (set %s, index %d, generation %d)", errWorkStuck, m.set, cur.shard.Index, cur.shard.Generation)
		}
		m.stopped = max(m.stopped, cur.shard.Generation)
		cur = nil
		return nil
	}
	defer func() {
		if cur != nil {
			cur.cancel()
		}
	}()
	for {
		if over, _ := m.leaseDeadline(); over {
			// Its lease ran out: whatever its last view said, the member
			// may not work until a renewal says so again.
			if err := stop(); err != nil {
				return err
			}
			if m.view.Work {
				v := *m.view
				v.Work = false
				m.view = &v
			}
		}
		v := m.view
		switch {
		case v.Work && (cur == nil || cur.shard.Generation != v.Generation) && (idle == nil || idle.Generation != v.Generation):
			if err := stop(); err != nil {
				return err
			}
			s := Shard{Set: m.set, Index: int(v.Index), Count: int(v.Count), Generation: v.Generation}
			wctx, cancel := context.WithCancel(ctx)
			r := &running{shard: s, cancel: cancel, done: make(chan error, 1)}
			go func() { r.done <- work(wctx, s) }()
			cur, idle = r, nil
		case !v.Work:
			if err := stop(); err != nil {
				return err
			}
			m.stopped = max(m.stopped, v.Generation)
			idle = nil
		}
		_, left := m.leaseDeadline()
		wait := renewWait(cur != nil, m.cfg.TTL, left)
		var done <-chan error
		if cur != nil {
			done = cur.done
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if err := stop(); err != nil {
				return err
			}
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.TTL)
			defer cancel()
			return m.Leave(lctx)
		case err := <-done:
			// The work returned while its shard holds: the member keeps
			// the index, idle (saying it stopped would move the whole set
			// to a new generation), and says so at the next change.
			t.Stop()
			s := cur.shard
			cur = nil
			if err != nil && ctx.Err() == nil && time.Now().Before(m.leaseEnd) {
				lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.TTL)
				defer cancel()
				_ = m.Leave(lctx)
				return fmt.Errorf("shards %s: index %d of generation %d: %w", m.set, s.Index, s.Generation, err)
			}
			idle = &s
			continue
		case <-t.C:
		}
		err := m.renew(ctx, cur != nil)
		switch {
		case err == nil:
		case errors.Is(err, task.ErrNotFound) && ctx.Err() == nil:
			// Expired: the cluster gave the index away. Stop, join anew.
			if err := stop(); err != nil {
				return err
			}
			if err := m.join(ctx); err != nil && ctx.Err() == nil {
				return err
			}
		case ctx.Err() != nil:
		default:
			// Unreachable for now: keep working until the lease ends.
		}
	}
}

// renewWait is how long a member waits before its next renewal: a
// quarter of its lease while it works, shardWaitRenew while it waits for
// a shard, and never past the end of its lease (left) while it works,
// when it must stop (a lease that already ended: at once).
func renewWait(working bool, ttl, left time.Duration) time.Duration {
	if !working {
		return min(ttl/4, shardWaitRenew)
	}
	return min(ttl/4, max(left, 0))
}

// leaseDeadline reports whether the lease ran out, or how long is left.
func (m *ShardMember) leaseDeadline() (over bool, left time.Duration) {
	left = time.Until(m.leaseEnd)
	return left <= 0, left
}

// Leave leaves the set. The member's work must have stopped (Run leaves
// by itself when its context ends).
func (m *ShardMember) Leave(ctx context.Context) error {
	err := m.c.do(ctx, "shard-leave", func(ctx context.Context, cl *wire.Client) error {
		_, err := cl.ShardLeave(ctx, &wire.ShardLeaveRequest{Set: m.set, Member: m.id})
		return err
	})
	if errors.Is(err, task.ErrNotFound) {
		return nil // expired already
	}
	return err
}

// ShardMembers reads the shard set name.
func (c *Client) ShardMembers(ctx context.Context, name string) (*ShardView, error) {
	var v *wire.ShardView
	err := c.do(ctx, "shard-members", func(ctx context.Context, cl *wire.Client) (err error) {
		v, err = cl.ShardMembers(ctx, &wire.ShardMembersRequest{Set: name})
		return err
	})
	return v, err
}
