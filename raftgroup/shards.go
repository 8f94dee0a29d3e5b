package raftgroup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Worker shards: named sets of members that split work by index
// (`id % count == index`), kept in the metadata group.
//
// A set has an active generation: an assignment of the indexes 0..Count-1
// to its members, one each. A change of the members (a join, a leave, an
// expiry) makes a pending generation with the assignment the new members
// should have, which keeps each member's index where it can. The pending
// generation becomes active only once every member of the active one
// that is still a member has reported that it stopped the active
// generation's work (ShardMember.Stopped), so no index is ever worked on
// by two members at once, and every index of the active generation has a
// member once its members started. A member that stops renewing is
// expired by the group's leader on the leader's own clock (node/shards),
// which frees it from the wait: the member itself stops its work when its
// lease runs out on its clock, earlier.

const (
	// MaxShardSets caps the shard sets of a cluster.
	MaxShardSets = 256
	// MaxShardMembers caps the members of one set.
	MaxShardMembers = 256
	// MaxShardIDBytes bounds a member id and a set's name;
	// maxShardInfoBytes a member's description.
	MaxShardIDBytes   = 64
	maxShardInfoBytes = 256
	// MinShardTTLMs and MaxShardTTLMs bound a member's lease.
	MinShardTTLMs = 1000
	MaxShardTTLMs = 10 * 60 * 1000
)

// ErrShardMember is returned by a renew, leave or expire of a member the
// set does not hold (expired, left, or never joined): nothing changed.
var ErrShardMember = errors.New("not a member of the shard set")

// ShardMember is one member of a set.
type ShardMember struct {
	// ID is the member's id, chosen by the member (random).
	ID string
	// Seq orders the members by join: the set's JoinSeq at its join.
	Seq uint64
	// TTLMs is the member's lease: the group's leader expires it when it
	// saw no renewal for this long (plus a margin) on its own clock.
	TTLMs int64
	// Beat counts the member's renewals; an expiry names the beat it saw
	// last, so a renewal that commits first wins.
	Beat uint64
	// Stopped: the member holds no work of a generation at or below it.
	Stopped uint64
	// Info describes the member (host, pid) for people.
	Info string
}

// ShardGen is one generation's assignment: member id to index, the
// indexes exactly 0..Count-1.
type ShardGen struct {
	Gen    uint64
	Count  uint32
	Assign map[string]uint32
}

// ShardSet is a set as the group holds it.
type ShardSet struct {
	Name    string
	Members map[string]ShardMember
	// Active is the generation in effect; Pending the next one, waiting
	// for the active one's members to stop (nil: none).
	Active  ShardGen
	Pending *ShardGen
	// JoinSeq is the last join's sequence number.
	JoinSeq uint64
}

func (g ShardGen) clone() ShardGen {
	g.Assign = maps.Clone(g.Assign)
	return g
}

func (s ShardSet) clone() ShardSet {
	s.Members = maps.Clone(s.Members)
	s.Active = s.Active.clone()
	if s.Pending != nil {
		p := s.Pending.clone()
		s.Pending = &p
	}
	return s
}

// Index returns member's index in g (ok false if it has none).
func (g ShardGen) Index(member string) (uint32, bool) {
	i, ok := g.Assign[member]
	return i, ok
}

// ShardOp is one change of a set.
type ShardOp struct {
	Kind   ShardOpKind
	Set    string
	Member string
	// TTLMs and Info, for a join.
	TTLMs int64
	Info  string
	// Stopped, for a renew.
	Stopped uint64
	// Beat, for an expiry: the beat the expirer saw last.
	Beat uint64
}

// ShardOpKind names a ShardOp.
type ShardOpKind uint8

const (
	ShardJoin   ShardOpKind = 1
	ShardRenew  ShardOpKind = 2
	ShardLeave  ShardOpKind = 3
	ShardExpire ShardOpKind = 4
)

func (k ShardOpKind) String() string {
	switch k {
	case ShardJoin:
		return "join"
	case ShardRenew:
		return "renew"
	case ShardLeave:
		return "leave"
	case ShardExpire:
		return "expire"
	}
	return fmt.Sprintf("shard-op(%d)", uint8(k))
}

// ValidateShardID checks a set name or member id: 1 to MaxShardIDBytes
// of [A-Za-z0-9._-].
func ValidateShardID(what, id string) error {
	if id == "" || len(id) > MaxShardIDBytes {
		return fmt.Errorf("%w: %s of %d bytes: want 1..%d", ErrInvalid, what, len(id), MaxShardIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %s %q: byte %d is not one of [A-Za-z0-9._-]", ErrInvalid, what, id, i)
		}
	}
	return nil
}

func (o ShardOp) validate() error {
	if err := ValidateShardID("shard set name", o.Set); err != nil {
		return err
	}
	if err := ValidateShardID("shard member id", o.Member); err != nil {
		return err
	}
	switch o.Kind {
	case ShardJoin:
		if o.TTLMs < MinShardTTLMs || o.TTLMs > MaxShardTTLMs {
			return fmt.Errorf("%w: shard lease %d ms: want %d to %d", ErrInvalid, o.TTLMs, MinShardTTLMs, MaxShardTTLMs)
		}
		if len(o.Info) > maxShardInfoBytes {
			return fmt.Errorf("%w: shard member info of %d bytes, limit %d", ErrInvalid, len(o.Info), maxShardInfoBytes)
		}
	case ShardRenew, ShardLeave, ShardExpire:
	default:
		return fmt.Errorf("%w: %v", ErrInvalid, o.Kind)
	}
	return nil
}

// ChangeShards applies op and returns the set as it left it (a leave
// or an expiry that emptied the set returns it empty).
func (g *Group) ChangeShards(ctx context.Context, op ShardOp) (ShardSet, error) {
	if err := op.validate(); err != nil {
		return ShardSet{}, fmt.Errorf("raftgroup: shards: %w", err)
	}
	rec := shardOpRecord(op)
	r, err := g.propose(ctx, command{Op: opShards, Shards: &rec})
	if err != nil {
		return ShardSet{}, err
	}
	if r.err != nil {
		return ShardSet{}, fmt.Errorf("raftgroup: %w", r.err)
	}
	return r.shards, nil
}

// applyShards applies op. It reports a change only when the assignment
// or what a member stopped changed: a renewal's beat alone does not wake
// the group's watchers (every renewal would).
func applyShards(m *Meta, op ShardOp) (result, bool) {
	if err := op.validate(); err != nil {
		return result{err: fmt.Errorf("shards: %w", err)}, false
	}
	cur, exists := m.Shards[op.Set]
	if !exists && op.Kind != ShardJoin {
		return result{err: fmt.Errorf("shards %s: %w %s", op.Set, ErrShardMember, op.Member)}, false
	}
	if !exists && len(m.Shards) >= MaxShardSets {
		return result{err: fmt.Errorf("shards %s: %w: %d shard sets exist already", op.Set, ErrInvalid, MaxShardSets)}, false
	}
	s := cur.clone()
	if !exists {
		s = ShardSet{Name: op.Set, Members: map[string]ShardMember{}, Active: ShardGen{Assign: map[string]uint32{}}}
	}
	mem, isMember := s.Members[op.Member]
	changed := false
	switch op.Kind {
	case ShardJoin:
		if isMember {
			return result{shards: cur}, false // a repeat of the join
		}
		if len(s.Members) >= MaxShardMembers {
			return result{err: fmt.Errorf("shards %s: %w: %d members already", op.Set, ErrInvalid, MaxShardMembers)}, false
		}
		s.JoinSeq++
		s.Members[op.Member] = ShardMember{ID: op.Member, Seq: s.JoinSeq, TTLMs: op.TTLMs, Info: op.Info}
		changed = true
	case ShardRenew:
		if !isMember {
			return result{err: fmt.Errorf("shards %s: %w %s", op.Set, ErrShardMember, op.Member)}, false
		}
		mem.Beat++
		if op.Stopped > mem.Stopped {
			mem.Stopped = op.Stopped
			changed = true
		}
		s.Members[op.Member] = mem
	case ShardLeave, ShardExpire:
		if !isMember || op.Kind == ShardExpire && mem.Beat != op.Beat {
			return result{err: fmt.Errorf("shards %s: %w %s (beat %d)", op.Set, ErrShardMember, op.Member, op.Beat)}, false
		}
		delete(s.Members, op.Member)
		changed = true
	}
	if changed {
		s.plan()
		s.activate()
	}
	if len(s.Members) == 0 && len(s.Active.Assign) == 0 && s.Pending == nil {
		delete(m.Shards, op.Set)
		return result{shards: s}, true
	}
	if m.Shards == nil {
		m.Shards = make(map[string]ShardSet)
	}
	m.Shards[op.Set] = s
	return result{shards: s}, changed
}

// plan sets Pending to the assignment the members should have, or nil
// if the active one is it and its members still work on it. Members keep their active index while it is
// below the new count; the others take the free indexes in join order.
func (s *ShardSet) plan() {
	ids := slices.SortedFunc(maps.Keys(s.Members), func(a, b string) int {
		return cmp.Compare(s.Members[a].Seq, s.Members[b].Seq)
	})
	count := uint32(len(ids))
	assign := make(map[string]uint32, len(ids))
	taken := make([]bool, count)
	for _, id := range ids {
		if i, ok := s.Active.Assign[id]; ok && i < count && !taken[i] {
			assign[id], taken[i] = i, true
		}
	}
	free := 0
	for _, id := range ids {
		if _, ok := assign[id]; ok {
			continue
		}
		for taken[free] {
			free++
		}
		assign[id], taken[free] = uint32(free), true
	}
	// A member that stopped the active generation never works on it
	// again: if a change was withdrawn (a member joined and left before
	// it took effect) after some stopped, the same assignment still
	// needs a generation of its own.
	stopped := false
	for id := range s.Active.Assign {
		if mem, ok := s.Members[id]; ok && mem.Stopped >= s.Active.Gen {
			stopped = true
		}
	}
	switch {
	case count == s.Active.Count && maps.Equal(assign, s.Active.Assign) && !stopped:
		s.Pending = nil
	case s.Pending != nil && s.Pending.Count == count && maps.Equal(assign, s.Pending.Assign):
	default:
		next := s.Active.Gen + 1
		if s.Pending != nil {
			next = s.Pending.Gen + 1
		}
		s.Pending = &ShardGen{Gen: next, Count: count, Assign: assign}
	}
}

// activate makes Pending active once every member of the active
// generation that is still a member stopped its work.
func (s *ShardSet) activate() {
	if s.Pending == nil {
		return
	}
	for id := range s.Active.Assign {
		if mem, ok := s.Members[id]; ok && mem.Stopped < s.Active.Gen {
			return
		}
	}
	s.Active, s.Pending = *s.Pending, nil
}

// check verifies a set's invariants: each generation's indexes are
// exactly 0..Count-1, assigned to members (the active one may still name
// members that left: they are waited for no more); the pending
// generation is newer than the active one.
func (s ShardSet) check() error {
	if err := ValidateShardID("shard set name", s.Name); err != nil {
		return err
	}
	if len(s.Members) > MaxShardMembers {
		return fmt.Errorf("shards %s: %d members", s.Name, len(s.Members))
	}
	for id, mem := range s.Members {
		if id != mem.ID || mem.Seq == 0 || mem.Seq > s.JoinSeq {
			return fmt.Errorf("shards %s: member %s stored as %+v (join seq %d)", s.Name, id, mem, s.JoinSeq)
		}
	}
	gens := []ShardGen{s.Active}
	if s.Pending != nil {
		if s.Pending.Gen <= s.Active.Gen {
			return fmt.Errorf("shards %s: pending generation %d not after active %d", s.Name, s.Pending.Gen, s.Active.Gen)
		}
		for id := range s.Pending.Assign {
			if _, ok := s.Members[id]; !ok {
				return fmt.Errorf("shards %s: pending generation %d assigns %s, not a member", s.Name, s.Pending.Gen, id)
			}
		}
		gens = append(gens, *s.Pending)
	}
	for _, g := range gens {
		if len(g.Assign) != int(g.Count) {
			return fmt.Errorf("shards %s: generation %d assigns %d members for %d indexes", s.Name, g.Gen, len(g.Assign), g.Count)
		}
		seen := make([]bool, g.Count)
		for id, i := range g.Assign {
			if i >= g.Count || seen[i] {
				return fmt.Errorf("shards %s: generation %d gives %s index %d twice or out of %d", s.Name, g.Gen, id, i, g.Count)
			}
			seen[i] = true
		}
	}
	return nil
}

func checkShards(ss map[string]ShardSet) error {
	if len(ss) > MaxShardSets {
		return fmt.Errorf("%d shard sets, limit %d", len(ss), MaxShardSets)
	}
	for name, s := range ss {
		if name != s.Name {
			return fmt.Errorf("shard set %s stored under %s", s.Name, name)
		}
		if err := s.check(); err != nil {
			return err
		}
	}
	return nil
}

// shardOpRecordT is a ShardOp in the log.
type shardOpRecordT struct {
	Kind    uint8  `cbor:"1,keyasint"`
	Set     string `cbor:"2,keyasint"`
	Member  string `cbor:"3,keyasint"`
	TTLMs   int64  `cbor:"4,keyasint,omitempty"`
	Info    string `cbor:"5,keyasint,omitempty"`
	Stopped uint64 `cbor:"6,keyasint,omitempty"`
	Beat    uint64 `cbor:"7,keyasint,omitempty"`
}

func shardOpRecord(o ShardOp) shardOpRecordT {
	return shardOpRecordT{Kind: uint8(o.Kind), Set: o.Set, Member: o.Member, TTLMs: o.TTLMs, Info: o.Info, Stopped: o.Stopped, Beat: o.Beat}
}

func (r *shardOpRecordT) op() ShardOp {
	return ShardOp{Kind: ShardOpKind(r.Kind), Set: r.Set, Member: r.Member, TTLMs: r.TTLMs, Info: r.Info, Stopped: r.Stopped, Beat: r.Beat}
}

// shardSetRecord is a set in a snapshot: members and assignments sorted,
// so equal states encode to equal bytes.
type shardSetRecord struct {
	Name    string              `cbor:"1,keyasint"`
	Members []shardMemberRecord `cbor:"2,keyasint,omitempty"`
	Active  shardGenRecord      `cbor:"3,keyasint"`
	Pending *shardGenRecord     `cbor:"4,keyasint,omitempty"`
	JoinSeq uint64              `cbor:"5,keyasint"`
}

type shardMemberRecord struct {
	ID      string `cbor:"1,keyasint"`
	Seq     uint64 `cbor:"2,keyasint"`
	TTLMs   int64  `cbor:"3,keyasint"`
	Beat    uint64 `cbor:"4,keyasint,omitempty"`
	Stopped uint64 `cbor:"5,keyasint,omitempty"`
	Info    string `cbor:"6,keyasint,omitempty"`
}

type shardGenRecord struct {
	Gen     uint64   `cbor:"1,keyasint"`
	Count   uint32   `cbor:"2,keyasint"`
	Members []string `cbor:"3,keyasint,omitempty"` // Members[i] holds index i
}

func toShardGenRecord(g ShardGen) shardGenRecord {
	r := shardGenRecord{Gen: g.Gen, Count: g.Count, Members: make([]string, g.Count)}
	for id, i := range g.Assign {
		if i < g.Count {
			r.Members[i] = id
		}
	}
	return r
}

func (r shardGenRecord) gen() ShardGen {
	g := ShardGen{Gen: r.Gen, Count: r.Count, Assign: make(map[string]uint32, len(r.Members))}
	for i, id := range r.Members {
		g.Assign[id] = uint32(i)
	}
	return g
}

func shardSetRecords(ss map[string]ShardSet) []shardSetRecord {
	var out []shardSetRecord
	for _, name := range slices.Sorted(maps.Keys(ss)) {
		s := ss[name]
		rec := shardSetRecord{Name: name, Active: toShardGenRecord(s.Active), JoinSeq: s.JoinSeq}
		for _, id := range slices.Sorted(maps.Keys(s.Members)) {
			m := s.Members[id]
			rec.Members = append(rec.Members, shardMemberRecord{ID: id, Seq: m.Seq, TTLMs: m.TTLMs, Beat: m.Beat, Stopped: m.Stopped, Info: m.Info})
		}
		if s.Pending != nil {
			p := toShardGenRecord(*s.Pending)
			rec.Pending = &p
		}
		out = append(out, rec)
	}
	return out
}

func (r *shardSetRecord) set() ShardSet {
	s := ShardSet{Name: r.Name, Members: make(map[string]ShardMember, len(r.Members)), Active: r.Active.gen(), JoinSeq: r.JoinSeq}
	for _, m := range r.Members {
		s.Members[m.ID] = ShardMember{ID: m.ID, Seq: m.Seq, TTLMs: m.TTLMs, Beat: m.Beat, Stopped: m.Stopped, Info: m.Info}
	}
	if r.Pending != nil {
		p := r.Pending.gen()
		s.Pending = &p
	}
	return s
}
