package shards

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/wire"
)

// ExpiryMargin is how long past a member's lease the group's leader waits
// before it expires the member: the member's own count ends earlier
// (package doc), and this is its time to stop its work (a worker
// process's SIGTERM grace fits in it) and the clocks' rate difference.
const ExpiryMargin = 5 * time.Second

// Config is what the plane needs of the node's configuration.
type Config struct {
	// Interval is how often the group's leader looks for expired
	// members.
	Interval time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("shards: interval %v must be positive", c.Interval)
	case c.Clock == nil || c.Log == nil:
		return errors.New("shards: clock and logger are required")
	}
	return nil
}

// Host is what the plane sees of the node that runs it.
type Host interface {
	// Leads reports whether this node leads the metadata group.
	Leads() bool
	// Sets returns the shard sets as this node's copy of the group holds
	// them.
	Sets() map[string]raftgroup.ShardSet
	// Change applies a shard op through the group.
	Change(ctx context.Context, op raftgroup.ShardOp) (raftgroup.ShardSet, error)
}

// Plane is one node's part in the worker shards.
type Plane struct {
	cfg  Config
	host Host
	// seen: for each member, the beat the leader saw last and when it
	// first saw it (on its clock). Reset whenever this node does not lead:
	// a new leader counts every lease afresh. Only Loop touches it.
	seen map[memberKey]sighting
}

type memberKey struct{ set, member string }

type sighting struct {
	beat uint64
	at   time.Time
}

// New returns the plane.
func New(cfg Config, host Host) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plane{cfg: cfg, host: host, seen: map[memberKey]sighting{}}, nil
}

// Loop expires members every Interval while this node leads the group,
// until ctx ends.
func (p *Plane) Loop(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.Expire(ctx)
	}
}

// Expire looks at every member once: it notes new beats, and expires the
// members whose beat stood still past their lease and ExpiryMargin.
func (p *Plane) Expire(ctx context.Context) {
	if !p.host.Leads() {
		clear(p.seen)
		return
	}
	now := p.cfg.Clock.Now()
	sets := p.host.Sets()
	live := map[memberKey]bool{}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		s := sets[name]
		for _, id := range slices.Sorted(maps.Keys(s.Members)) {
			mem := s.Members[id]
			k := memberKey{name, id}
			live[k] = true
			seen, ok := p.seen[k]
			if !ok || seen.beat != mem.Beat {
				p.seen[k] = sighting{beat: mem.Beat, at: now}
				continue
			}
			if now.Sub(seen.at) <= time.Duration(mem.TTLMs)*time.Millisecond+ExpiryMargin {
				continue
			}
			_, err := p.host.Change(ctx, raftgroup.ShardOp{Kind: raftgroup.ShardExpire, Set: name, Member: id, Beat: mem.Beat})
			switch {
			case err == nil:
				p.cfg.Log.Warn("shard member expired: its lease ran out", "shards", name, "member", id, "info", mem.Info,
					"silent", now.Sub(seen.at).Round(time.Millisecond))
				delete(p.seen, k)
			case errors.Is(err, raftgroup.ErrShardMember):
				delete(p.seen, k) // it renewed, or left, first
			default:
				p.cfg.Log.Info("shard member expiry not committed; retried", "shards", name, "member", id, "err", err)
			}
		}
	}
	for k := range p.seen {
		if !live[k] {
			delete(p.seen, k)
		}
	}
}

// Join adds a member to a set.
func (p *Plane) Join(ctx context.Context, req *wire.ShardJoinRequest) (*wire.ShardView, error) {
	s, err := p.change(ctx, raftgroup.ShardOp{Kind: raftgroup.ShardJoin, Set: req.Set, Member: req.Member, TTLMs: req.TTLMs, Info: req.Info})
	if err != nil {
		return nil, err
	}
	p.cfg.Log.Info("shard member joined", "shards", req.Set, "member", req.Member, "info", req.Info)
	return View(s, req.Member), nil
}

// Renew renews a member's lease.
func (p *Plane) Renew(ctx context.Context, req *wire.ShardRenewRequest) (*wire.ShardView, error) {
	s, err := p.change(ctx, raftgroup.ShardOp{Kind: raftgroup.ShardRenew, Set: req.Set, Member: req.Member, Stopped: req.Stopped})
	if err != nil {
		return nil, err
	}
	return View(s, req.Member), nil
}

// Leave removes a member from a set.
func (p *Plane) Leave(ctx context.Context, req *wire.ShardLeaveRequest) (*wire.ShardView, error) {
	s, err := p.change(ctx, raftgroup.ShardOp{Kind: raftgroup.ShardLeave, Set: req.Set, Member: req.Member})
	if err != nil {
		return nil, err
	}
	p.cfg.Log.Info("shard member left", "shards", req.Set, "member", req.Member)
	return View(s, ""), nil
}

// Members reads a set as this node's copy of the group holds it; a set
// without members reads as empty.
func (p *Plane) Members(_ context.Context, req *wire.ShardMembersRequest) (*wire.ShardView, error) {
	if err := raftgroup.ValidateShardID("shard set name", req.Set); err != nil {
		return nil, wire.Errorf(wire.CodeInvalid, "%v", err)
	}
	s, ok := p.host.Sets()[req.Set]
	if !ok {
		s = raftgroup.ShardSet{Name: req.Set}
	}
	return View(s, ""), nil
}

func (p *Plane) change(ctx context.Context, op raftgroup.ShardOp) (raftgroup.ShardSet, error) {
	s, err := p.host.Change(ctx, op)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, raftgroup.ErrInvalid):
		return raftgroup.ShardSet{}, wire.Errorf(wire.CodeInvalid, "%v", err)
	case errors.Is(err, raftgroup.ErrShardMember):
		// Expired (or left): the member must stop, and join again.
		return raftgroup.ShardSet{}, wire.Errorf(wire.CodeNotFound, "%v", err)
	}
	// It may or may not have committed: a repeat is harmless.
	return raftgroup.ShardSet{}, fmt.Errorf("%w: shards %s: %v", wire.ErrUnavailable, op.Set, err)
}

// View is s as the API shows it, for member (what it may do now; "" for
// anyone). A member works on its index of the active generation only
// while no generation is pending and it has not said it stopped this one
// (it never comes back to a generation it stopped).
func View(s raftgroup.ShardSet, member string) *wire.ShardView {
	v := &wire.ShardView{Set: s.Name, Generation: s.Active.Gen, Count: s.Active.Count, Members: []wire.ShardMemberView{}, Index: -1}
	ids := slices.SortedFunc(maps.Keys(s.Members), func(a, b string) int { return cmp.Compare(s.Members[a].Seq, s.Members[b].Seq) })
	for _, id := range ids {
		mem := s.Members[id]
		idx := int32(-1)
		if i, ok := s.Active.Index(id); ok {
			idx = int32(i)
		}
		v.Members = append(v.Members, wire.ShardMemberView{ID: id, Index: idx, Stopped: mem.Stopped, TTLMs: mem.TTLMs, Info: mem.Info})
	}
	if s.Pending != nil {
		pv := &wire.ShardPendingView{Generation: s.Pending.Gen, Count: s.Pending.Count}
		for _, id := range slices.Sorted(maps.Keys(s.Active.Assign)) {
			if mem, ok := s.Members[id]; ok && mem.Stopped < s.Active.Gen {
				pv.Waiting = append(pv.Waiting, id)
			}
		}
		v.Pending = pv
	}
	if mem, ok := s.Members[member]; ok {
		if i, in := s.Active.Index(member); in {
			v.Index = int32(i)
			v.Work = s.Pending == nil && mem.Stopped < s.Active.Gen
		}
	}
	return v
}
