package raftgroup

import (
	"fmt"
	"slices"
)

// result is the outcome of applying one command, handed to its proposer.
type result struct {
	// config is the cluster config after an init (the existing one when
	// the cluster was initialised before).
	config ClusterConfig
	// queue is a queue's settings after a change.
	queue QueueSettings
	// schedule is a schedule after a set.
	schedule Schedule
	// found: a delete found what it deleted.
	found bool
	// shards is a shard set after a change.
	shards ShardSet
	// err is nil or the deterministic apply error (ErrCASConflict...).
	err error
}

// applyCommand applies c to m and reports whether m's content changed.
//
// It is the state machine: pure and deterministic. It reads no clock, does
// no I/O and depends on nothing but m and c, so every replica that applies
// the same log reaches the same state. It validates c again although the
// proposer did: the log is the only input every replica shares, and an
// entry from another version or a buggy proposer must be refused the same
// way everywhere. A refused command changes nothing. It does not touch
// m.Applied; the driver sets that for every entry.
func applyCommand(m *Meta, c *command) (result, bool) {
	switch c.Op {
	case opInit:
		if c.Config == nil {
			return result{err: fmt.Errorf("%w: init without a config", ErrInvalid)}, false
		}
		return applyInit(m, ClusterConfig(*c.Config), c.ClusterVersion)
	case opPutMember:
		if c.Member == nil {
			return result{err: fmt.Errorf("%w: put-member without a member", ErrInvalid)}, false
		}
		return applyPutMember(m, Member(*c.Member))
	case opCAS:
		if c.CAS == nil {
			return result{err: fmt.Errorf("%w: cas without arguments", ErrInvalid)}, false
		}
		return applyCAS(m, c.CAS.toCAS())
	case opQueue:
		if c.Queue == nil {
			return result{err: fmt.Errorf("%w: queue change without a queue", ErrInvalid)}, false
		}
		return applyQueue(m, QueueChange(*c.Queue))
	case opScheduleSet:
		if c.ScheduleSet == nil {
			return result{err: fmt.Errorf("%w: schedule set without a schedule", ErrInvalid)}, false
		}
		return applyScheduleSet(m, c.ScheduleSet.spec(), c.ScheduleSet.AtMs)
	case opScheduleDelete:
		return applyScheduleDelete(m, c.ScheduleDelete)
	case opScheduleAdvance:
		if c.ScheduleAdvance == nil {
			return result{err: fmt.Errorf("%w: schedule advance without arguments", ErrInvalid)}, false
		}
		return applyScheduleAdvance(m, ScheduleAdvance(*c.ScheduleAdvance))
	case opShards:
		if c.Shards == nil {
			return result{err: fmt.Errorf("%w: shards change without arguments", ErrInvalid)}, false
		}
		return applyShards(m, c.Shards.op())
	case opCredentialPut:
		if c.CredentialPut == nil {
			return result{err: fmt.Errorf("%w: credential put without a credential", ErrInvalid)}, false
		}
		return applyCredentialPut(m, Credential(*c.CredentialPut))
	case opCredentialRevoke:
		return applyCredentialRevoke(m, c.CredentialRevoke)
	case opRaise:
		return applyRaise(m, c.ClusterVersion)
	case opRemoveMember:
		return applyRemoveMember(m, c.Remove)
	case opRetire:
		if c.Retire == nil {
			return result{err: fmt.Errorf("%w: retire without a member", ErrInvalid)}, false
		}
		return applyRetire(m, c.Retire)
	}
	return result{err: fmt.Errorf("%w: unknown op %v", ErrInvalid, c.Op)}, false
}

func applyInit(m *Meta, c ClusterConfig, founding uint32) (result, bool) {
	if err := c.validate(); err != nil {
		return result{err: fmt.Errorf("init: %w", err)}, false
	}
	if m.Config != nil {
		cur := *m.Config
		if cur.Partitions != c.Partitions || cur.Replicas != c.Replicas {
			return result{config: cur, err: fmt.Errorf("init: %w: cluster %s has partitions=%d replicas=%d; asked for partitions=%d replicas=%d",
				ErrConfigMismatch, cur.ClusterID, cur.Partitions, cur.Replicas, c.Partitions, c.Replicas)}, false
		}
		return result{config: cur}, false
	}
	m.Config = &c
	m.Partitions = make([]PartitionInfo, c.Partitions)
	m.ClusterVersion = founding
	return result{config: c}, true
}

func applyPutMember(m *Meta, mem Member) (result, bool) {
	if err := mem.validate(); err != nil {
		return result{err: fmt.Errorf("put member: %w", err)}, false
	}
	if m.Removed[mem.ID] {
		return result{err: fmt.Errorf("put member %d: %w", mem.ID, ErrMemberRemoved)}, false
	}
	old, exists := m.Members[mem.ID]
	if exists && old == mem {
		return result{}, false
	}
	if !exists && len(m.Members) >= MaxMembers {
		return result{err: fmt.Errorf("put member %d: %w: registry is full (%d members)", mem.ID, ErrInvalid, MaxMembers)}, false
	}
	if m.Members == nil {
		m.Members = make(map[uint64]Member)
	}
	m.Members[mem.ID] = mem
	return result{}, true
}

func applyCAS(m *Meta, c CAS) (result, bool) {
	if err := c.validate(); err != nil {
		return result{err: fmt.Errorf("cas partition %d: %w", c.Partition, err)}, false
	}
	if m.Config == nil {
		return result{err: fmt.Errorf("cas partition %d: %w", c.Partition, ErrNotInitialized)}, false
	}
	if c.Partition >= len(m.Partitions) {
		return result{err: fmt.Errorf("cas partition %d: %w: the cluster has %d",
			c.Partition, ErrBadPartition, len(m.Partitions))}, false
	}
	cur := &m.Partitions[c.Partition]
	if cur.Epoch != c.PrevEpoch {
		return result{err: &ConflictError{Partition: c.Partition, PrevEpoch: c.PrevEpoch, Current: cur.clone()}}, false
	}
	*cur = PartitionInfo{Epoch: c.Epoch, Cohort: slices.Clone(c.Cohort), Leader: c.Leader, Sealed: slices.Clone(c.Sealed)}
	return result{}, true
}
