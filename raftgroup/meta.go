package raftgroup

import (
	"fmt"
	"maps"
	"slices"
)

// Limits on the replicated state. Every command is checked against them
// before it is proposed and again when it is applied, so a log entry from a
// buggy or newer proposer can never grow the state without bound.
const (
	// MaxPartitions is the most partitions a cluster can have: store keys
	// carry the partition as a uint16.
	MaxPartitions = 1 << 16
	// MaxReplicas caps the replication factor. More copies than this buy
	// nothing for a task queue and cost a quorum write each.
	MaxReplicas = 16
	// MaxCohort caps a partition's cohort. A cohort may briefly exceed the
	// replication factor during a two-phase cohort change (the new node is
	// added before the old one is dropped), so the cap is looser.
	MaxCohort = 2 * MaxReplicas
	// MaxMembers caps the node registry.
	MaxMembers = 4096
	// maxClusterIDBytes and maxAddrBytes bound the strings in the state.
	maxClusterIDBytes = 128
	maxAddrBytes      = 256
)

// ClusterConfig is the cluster's creation-time configuration. It is set
// once, by the first Init, and never changes.
type ClusterConfig struct {
	// ClusterID names the cluster; nodes refuse peers from another one.
	ClusterID string
	// Partitions is the number of partitions P, in [1, MaxPartitions].
	Partitions int
	// Replicas is the replication factor N, in [1, MaxReplicas].
	Replicas int
	// CreatedAt is the creation time in Unix milliseconds, taken by the
	// proposer: apply never reads a clock.
	CreatedAt int64
}

// Member is one node in the registry.
type Member struct {
	// ID is the node's raft id: non-zero and never reused.
	ID uint64
	// Addr is the node's host:port.
	Addr string
	// Since is when the node joined, Unix milliseconds (set by the
	// proposer).
	Since int64
}

// PartitionInfo is one partition's leadership record: the compare-and-set
// register the seed kept in ZooKeeper.
type PartitionInfo struct {
	// Epoch is the leadership generation; 0 means the partition was never
	// led. It only grows.
	Epoch uint64
	// Cohort lists the node ids that hold the partition in this epoch.
	Cohort []uint64
	// Leader is the cohort member that grants claims in this epoch; 0 only
	// while Epoch is 0.
	Leader uint64
	// Sealed are the cohort members the handoff to this epoch left
	// holding exactly what it carried of the epochs before (package
	// epoch, step 6): the next handoff takes older writes from them
	// only. Empty for an epoch won before sealed sets were kept.
	// INVARIANT: a subset of Cohort.
	Sealed []uint64
}

// Meta is the replicated state of the metadata group.
//
// Invariants (checked by check): Config is nil exactly when Partitions is
// empty, and otherwise len(Partitions) == Config.Partitions; Members is
// keyed by Member.ID; a partition with Epoch 0 has no cohort and no
// leader; a partition with Epoch > 0 has a leader that is in its cohort;
// Queues holds at most MaxQueueSettings queues, none with zero settings;
// Schedules holds at most MaxSchedules valid schedules, keyed by name;
// Shards holds at most MaxShardSets sets, each as ShardSet.check says;
// Credentials holds at most MaxCredentials valid credentials, each under
// its own id, their names unique.
type Meta struct {
	// Config is nil until Init.
	Config *ClusterConfig
	// Members is the node registry, keyed by Member.ID.
	Members map[uint64]Member
	// Partitions has Config.Partitions entries once initialised.
	Partitions []PartitionInfo
	// Queues holds the settings of the queues that have some, by name.
	Queues map[string]QueueSettings
	// Schedules holds the periodic tasks, by name. Their Data is never
	// mutated in place (a set replaces the record), so clones share it.
	Schedules map[string]Schedule
	// Shards holds the worker shard sets, by name.
	Shards map[string]ShardSet
	// Credentials holds the client credentials, by id. Values hold no
	// reference: a copy is a deep copy.
	Credentials map[uint64]Credential
	// Removed are the ids of the members removed for good (versions.go):
	// none registers again. INVARIANT: none is in Members.
	Removed map[uint64]bool
	// Retiring are the members being decommissioned: placement moves
	// their partitions to the others. INVARIANT: each is in Members.
	Retiring map[uint64]bool
	// ClusterVersion is the cluster version (versions.go); 0 stands for
	// version.Base. It only grows.
	ClusterVersion uint32
	// Applied is the raft index of the last applied entry.
	Applied uint64
}

// Clone returns a deep copy of m: nothing in the copy aliases m.
func (m Meta) Clone() Meta {
	out := Meta{Applied: m.Applied, ClusterVersion: m.ClusterVersion}
	if m.Config != nil {
		c := *m.Config
		out.Config = &c
	}
	if m.Members != nil {
		out.Members = make(map[uint64]Member, len(m.Members))
		for id, mem := range m.Members {
			out.Members[id] = mem
		}
	}
	if m.Partitions != nil {
		out.Partitions = make([]PartitionInfo, len(m.Partitions))
		for i, p := range m.Partitions {
			out.Partitions[i] = p.clone()
		}
	}
	out.Queues = maps.Clone(m.Queues)
	out.Schedules = maps.Clone(m.Schedules)
	out.Credentials = maps.Clone(m.Credentials)
	out.Removed = maps.Clone(m.Removed)
	out.Retiring = maps.Clone(m.Retiring)
	if m.Shards != nil {
		out.Shards = make(map[string]ShardSet, len(m.Shards))
		for name, s := range m.Shards {
			out.Shards[name] = s.clone()
		}
	}
	return out
}

func (p PartitionInfo) clone() PartitionInfo {
	p.Cohort = slices.Clone(p.Cohort)
	p.Sealed = slices.Clone(p.Sealed)
	return p
}

// check verifies the invariants in Meta's doc. It runs before a snapshot
// is written and after one is read (pair assertions).
func (m *Meta) check() error {
	if m.Config == nil {
		if len(m.Partitions) != 0 {
			return fmt.Errorf("%d partitions without a cluster config", len(m.Partitions))
		}
	} else {
		if err := m.Config.validate(); err != nil {
			return err
		}
		if len(m.Partitions) != m.Config.Partitions {
			return fmt.Errorf("%d partitions, config says %d", len(m.Partitions), m.Config.Partitions)
		}
	}
	if len(m.Members) > MaxMembers {
		return fmt.Errorf("%d members, limit %d", len(m.Members), MaxMembers)
	}
	for id, mem := range m.Members {
		if id != mem.ID {
			return fmt.Errorf("member %d stored under id %d", mem.ID, id)
		}
		if err := mem.validate(); err != nil {
			return err
		}
	}
	if len(m.Removed) > MaxMembers {
		return fmt.Errorf("%d removed members, limit %d", len(m.Removed), MaxMembers)
	}
	for id := range m.Removed {
		if _, ok := m.Members[id]; ok {
			return fmt.Errorf("member %d is registered and removed", id)
		}
	}
	for id := range m.Retiring {
		if _, ok := m.Members[id]; !ok {
			return fmt.Errorf("retiring member %d is not registered", id)
		}
	}
	for i, p := range m.Partitions {
		if err := p.check(); err != nil {
			return fmt.Errorf("partition %d: %w", i, err)
		}
	}
	if err := checkQueues(m.Queues); err != nil {
		return err
	}
	if err := checkSchedules(m.Schedules); err != nil {
		return err
	}
	if err := checkShards(m.Shards); err != nil {
		return err
	}
	return checkCredentials(m.Credentials)
}

func (p PartitionInfo) check() error {
	if p.Epoch == 0 {
		if len(p.Cohort) != 0 || p.Leader != 0 {
			return fmt.Errorf("epoch 0 with cohort %v and leader %d", p.Cohort, p.Leader)
		}
		return nil
	}
	if err := checkCohort(p.Cohort, p.Leader); err != nil {
		return err
	}
	return checkSealed(p.Sealed, p.Cohort)
}

// validate checks a config's fields on their own (ErrInvalid otherwise).
func (c *ClusterConfig) validate() error {
	switch {
	case c.ClusterID == "":
		return fmt.Errorf("%w: empty cluster id", ErrInvalid)
	case len(c.ClusterID) > maxClusterIDBytes:
		return fmt.Errorf("%w: cluster id of %d bytes, limit %d", ErrInvalid, len(c.ClusterID), maxClusterIDBytes)
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d not in [1, %d]", ErrInvalid, c.Partitions, MaxPartitions)
	case c.Replicas < 1 || c.Replicas > MaxReplicas:
		return fmt.Errorf("%w: replicas %d not in [1, %d]", ErrInvalid, c.Replicas, MaxReplicas)
	}
	return nil
}

func (m Member) validate() error {
	switch {
	case m.ID == 0:
		return fmt.Errorf("%w: member id 0", ErrInvalid)
	case m.Addr == "":
		return fmt.Errorf("%w: member %d has no address", ErrInvalid, m.ID)
	case len(m.Addr) > maxAddrBytes:
		return fmt.Errorf("%w: member %d address of %d bytes, limit %d", ErrInvalid, m.ID, len(m.Addr), maxAddrBytes)
	}
	return nil
}

// CAS is a compare-and-set of one partition's leadership record: it
// succeeds iff the partition's current epoch is PrevEpoch, and then sets
// Epoch, Cohort and Leader.
type CAS struct {
	// Partition is the partition index, in [0, Config.Partitions).
	Partition int
	// PrevEpoch is the epoch the caller read; 0 for a never-led partition.
	PrevEpoch uint64
	// Epoch is the new epoch; it must be greater than PrevEpoch.
	Epoch uint64
	// Cohort is the new cohort: 1 to MaxCohort distinct non-zero ids.
	Cohort []uint64
	// Leader is the new leader; it must be in Cohort.
	Leader uint64
	// Sealed is the new epoch's sealed set (PartitionInfo.Sealed); it
	// must be a subset of Cohort.
	Sealed []uint64
}

// validate checks what can be checked without the state (ErrInvalid).
func (c *CAS) validate() error {
	if c.Partition < 0 || c.Partition >= MaxPartitions {
		return fmt.Errorf("%w: partition %d", ErrBadPartition, c.Partition)
	}
	if c.Epoch <= c.PrevEpoch {
		return fmt.Errorf("%w: new epoch %d not above previous %d", ErrInvalid, c.Epoch, c.PrevEpoch)
	}
	if err := checkCohort(c.Cohort, c.Leader); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := checkSealed(c.Sealed, c.Cohort); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkSealed: distinct members of cohort.
func checkSealed(sealed, cohort []uint64) error {
	for i, id := range sealed {
		if !slices.Contains(cohort, id) || slices.Contains(sealed[:i], id) {
			return fmt.Errorf("sealed set %v is not a set of members of cohort %v", sealed, cohort)
		}
	}
	return nil
}

// checkCohort: 1..MaxCohort distinct non-zero ids, leader among them.
func checkCohort(cohort []uint64, leader uint64) error {
	if len(cohort) == 0 || len(cohort) > MaxCohort {
		return fmt.Errorf("cohort of %d nodes, want 1 to %d", len(cohort), MaxCohort)
	}
	leaderIn := false
	for i, id := range cohort {
		if id == 0 {
			return fmt.Errorf("cohort %v has node id 0", cohort)
		}
		if slices.Contains(cohort[:i], id) {
			return fmt.Errorf("cohort %v lists node %d twice", cohort, id)
		}
		leaderIn = leaderIn || id == leader
	}
	if !leaderIn {
		return fmt.Errorf("leader %d not in cohort %v", leader, cohort)
	}
	return nil
}
