package raftgroup

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/skuldd/skuldd/internal/cbormode"
	"github.com/skuldd/skuldd/internal/version"
)

// The raft log entries and snapshots of this group are CBOR with integer
// keys, behind a format-version byte. The records below are the persisted
// format; they are separate from the API types so that the API can grow
// without changing what is on disk by accident. Key numbers are never
// reused.
const (
	commandVersion  byte = 1
	snapshotVersion byte = 1
)

// op names a command.
type op uint8

const (
	opInit      op = 1
	opPutMember op = 2
	opCAS       op = 3
	opQueue     op = 4
	// Schedules (schedules.go).
	opScheduleSet     op = 5
	opScheduleDelete  op = 6
	opScheduleAdvance op = 7
	// Worker shards (shards.go).
	opShards op = 8
	// Client credentials (credentials.go).
	opCredentialPut    op = 9
	opCredentialRevoke op = 10
	// Cluster versions (versions.go). A Base build refuses these
	// commands (and their fields) as unknown: they are proposed only
	// once no member runs one (opInit's version field: only by a build
	// that founds a cluster).
	opRaise        op = 11
	opRemoveMember op = 12
	opRetire       op = 13
)

func (o op) String() string {
	switch o {
	case opInit:
		return "init"
	case opPutMember:
		return "put-member"
	case opCAS:
		return "cas"
	case opQueue:
		return "queue"
	case opScheduleSet:
		return "schedule-set"
	case opScheduleDelete:
		return "schedule-delete"
	case opScheduleAdvance:
		return "schedule-advance"
	case opShards:
		return "shards"
	case opCredentialPut:
		return "credential-put"
	case opCredentialRevoke:
		return "credential-revoke"
	case opRaise:
		return "raise-version"
	case opRemoveMember:
		return "remove-member"
	case opRetire:
		return "retire"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// command is one proposal. Proposer, Boot and Seq form the request id:
// Boot is random per Group instance, so entries proposed before a restart
// (and replayed after it) never match a waiter of the new instance,
// whose Seq starts again from 1.
type command struct {
	Proposer uint64             `cbor:"1,keyasint"`
	Boot     uint64             `cbor:"2,keyasint"`
	Seq      uint64             `cbor:"3,keyasint"`
	Op       op                 `cbor:"4,keyasint"`
	Config   *configRecord      `cbor:"5,keyasint,omitempty"`
	Member   *memberRecord      `cbor:"6,keyasint,omitempty"`
	CAS      *casRecord         `cbor:"7,keyasint,omitempty"`
	Queue    *queueChangeRecord `cbor:"8,keyasint,omitempty"`

	ScheduleSet     *scheduleSetRecord     `cbor:"9,keyasint,omitempty"`
	ScheduleDelete  string                 `cbor:"10,keyasint,omitempty"`
	ScheduleAdvance *scheduleAdvanceRecord `cbor:"11,keyasint,omitempty"`
	Shards          *shardOpRecordT        `cbor:"12,keyasint,omitempty"`

	CredentialPut    *credentialRecord `cbor:"13,keyasint,omitempty"`
	CredentialRevoke uint64            `cbor:"14,keyasint,omitempty"`

	// ClusterVersion is opRaise's new version, and opInit's founding one
	// (0 from a build before versions: Base).
	ClusterVersion uint32        `cbor:"15,keyasint,omitempty"`
	Remove         uint64        `cbor:"16,keyasint,omitempty"`
	Retire         *retireRecord `cbor:"17,keyasint,omitempty"`
}

type retireRecord struct {
	ID uint64 `cbor:"1,keyasint"`
	On bool   `cbor:"2,keyasint,omitempty"`
}

type configRecord struct {
	ClusterID  string `cbor:"1,keyasint"`
	Partitions int    `cbor:"2,keyasint"`
	Replicas   int    `cbor:"3,keyasint"`
	CreatedAt  int64  `cbor:"4,keyasint"`
}

type memberRecord struct {
	ID    uint64 `cbor:"1,keyasint"`
	Addr  string `cbor:"2,keyasint"`
	Since int64  `cbor:"3,keyasint"`
}

type partitionRecord struct {
	Epoch  uint64   `cbor:"1,keyasint"`
	Cohort []uint64 `cbor:"2,keyasint,omitempty"`
	Leader uint64   `cbor:"3,keyasint"`
	Sealed []uint64 `cbor:"4,keyasint,omitempty"`
}

type casRecord struct {
	Partition int      `cbor:"1,keyasint"`
	PrevEpoch uint64   `cbor:"2,keyasint"`
	Epoch     uint64   `cbor:"3,keyasint"`
	Cohort    []uint64 `cbor:"4,keyasint"`
	Leader    uint64   `cbor:"5,keyasint"`
	Sealed    []uint64 `cbor:"6,keyasint,omitempty"`
}

// snapshotRecord is Meta as stored in a raft snapshot. Members are a
// slice sorted by id, so equal states encode to equal bytes.
type snapshotRecord struct {
	Applied    uint64            `cbor:"1,keyasint"`
	Config     *configRecord     `cbor:"2,keyasint,omitempty"`
	Members    []memberRecord    `cbor:"3,keyasint,omitempty"`
	Partitions []partitionRecord `cbor:"4,keyasint,omitempty"`
	Queues     []queueRecord     `cbor:"5,keyasint,omitempty"`
	Schedules  []scheduleRecord  `cbor:"6,keyasint,omitempty"`
	Shards     []shardSetRecord  `cbor:"7,keyasint,omitempty"`
	// Credentials are sorted by id.
	Credentials []credentialRecord `cbor:"8,keyasint,omitempty"`
	// ClusterVersion is 0 (omitted) at version.Base, so that a snapshot
	// of a cluster a Base build may still be in is one it can read (its
	// decoder refuses unknown fields).
	ClusterVersion uint32 `cbor:"9,keyasint,omitempty"`
	// Removed is sorted; empty below version.MemberRemoval.
	Removed []uint64 `cbor:"10,keyasint,omitempty"`
	// Retiring is sorted; empty below version.MemberRemoval.
	Retiring []uint64 `cbor:"11,keyasint,omitempty"`
}

// Decoding limits. A snapshot of the largest state has MaxPartitions
// partition records; nothing nests deeper than a snapshot's cohort lists.
const (
	maxNestedLevels  = 8
	maxArrayElements = MaxPartitions
	maxMapPairs      = 64
)

var (
	encMode = cbormode.Enc
	// Entries come from peers through the log; bound what decoding may
	// allocate, and refuse fields this version does not know rather than
	// apply half a command.
	decMode = cbormode.MustDec(cbormode.Limits{Nested: maxNestedLevels, Array: maxArrayElements, MapPairs: maxMapPairs, StrictFields: true})
)

func marshalVersioned(version byte, v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{version}, b...), nil
}

func unmarshalVersioned(version byte, b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("empty record")
	}
	if b[0] != version {
		return fmt.Errorf("format version %d, want %d", b[0], version)
	}
	return decMode.Unmarshal(b[1:], v)
}

func encodeCommand(c *command) ([]byte, error) {
	b, err := marshalVersioned(commandVersion, c)
	if err != nil {
		return nil, fmt.Errorf("encode %v command: %w", c.Op, err)
	}
	return b, nil
}

func decodeCommand(b []byte) (command, error) {
	var c command
	if err := unmarshalVersioned(commandVersion, b, &c); err != nil {
		return command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
}

// encodeSnapshot checks m's invariants before it is written.
func encodeSnapshot(m *Meta) ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("encode snapshot: state at %d: %w", m.Applied, err)
	}
	rec := snapshotRecord{Applied: m.Applied, Config: toConfigRecord(m.Config)}
	if m.Version() > version.Base {
		rec.ClusterVersion = m.ClusterVersion
	}
	rec.Removed = slices.Sorted(maps.Keys(m.Removed))
	rec.Retiring = slices.Sorted(maps.Keys(m.Retiring))
	for _, mem := range m.Members {
		rec.Members = append(rec.Members, memberRecord(mem))
	}
	slices.SortFunc(rec.Members, func(a, b memberRecord) int { return cmp.Compare(a.ID, b.ID) })
	for _, p := range m.Partitions {
		rec.Partitions = append(rec.Partitions, partitionRecord{Epoch: p.Epoch, Cohort: p.Cohort, Leader: p.Leader, Sealed: p.Sealed})
	}
	rec.Queues = queueRecords(m.Queues)
	rec.Schedules = scheduleRecords(m.Schedules)
	rec.Shards = shardSetRecords(m.Shards)
	rec.Credentials = credentialRecords(m.Credentials)
	b, err := marshalVersioned(snapshotVersion, &rec)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	return b, nil
}

// decodeSnapshot checks the decoded state's invariants after reading.
func decodeSnapshot(b []byte) (Meta, error) {
	var rec snapshotRecord
	if err := unmarshalVersioned(snapshotVersion, b, &rec); err != nil {
		return Meta{}, fmt.Errorf("decode snapshot: %w", err)
	}
	m := Meta{Applied: rec.Applied, Members: make(map[uint64]Member, len(rec.Members)), ClusterVersion: rec.ClusterVersion}
	if rec.Config != nil {
		c := ClusterConfig(*rec.Config)
		m.Config = &c
		m.Partitions = make([]PartitionInfo, 0, len(rec.Partitions))
	}
	for _, mr := range rec.Members {
		if _, dup := m.Members[mr.ID]; dup {
			return Meta{}, fmt.Errorf("decode snapshot: member %d twice", mr.ID)
		}
		m.Members[mr.ID] = Member(mr)
	}
	for _, pr := range rec.Partitions {
		m.Partitions = append(m.Partitions, PartitionInfo{Epoch: pr.Epoch, Cohort: pr.Cohort, Leader: pr.Leader, Sealed: pr.Sealed})
	}
	for _, qr := range rec.Queues {
		if m.Queues == nil {
			m.Queues = make(map[string]QueueSettings, len(rec.Queues))
		}
		if _, dup := m.Queues[qr.Queue]; dup {
			return Meta{}, fmt.Errorf("decode snapshot: queue %s twice", qr.Queue)
		}
		m.Queues[qr.Queue] = qr.settings()
	}
	for _, sr := range rec.Schedules {
		if m.Schedules == nil {
			m.Schedules = make(map[string]Schedule, len(rec.Schedules))
		}
		if _, dup := m.Schedules[sr.Set.Name]; dup {
			return Meta{}, fmt.Errorf("decode snapshot: schedule %s twice", sr.Set.Name)
		}
		m.Schedules[sr.Set.Name] = sr.schedule()
	}
	for _, sr := range rec.Shards {
		if m.Shards == nil {
			m.Shards = make(map[string]ShardSet, len(rec.Shards))
		}
		if _, dup := m.Shards[sr.Name]; dup {
			return Meta{}, fmt.Errorf("decode snapshot: shard set %s twice", sr.Name)
		}
		m.Shards[sr.Name] = sr.set()
	}
	for _, id := range rec.Removed {
		if m.Removed == nil {
			m.Removed = make(map[uint64]bool, len(rec.Removed))
		}
		if m.Removed[id] {
			return Meta{}, fmt.Errorf("decode snapshot: removed member %d twice", id)
		}
		m.Removed[id] = true
	}
	for _, id := range rec.Retiring {
		if m.Retiring == nil {
			m.Retiring = make(map[uint64]bool, len(rec.Retiring))
		}
		if m.Retiring[id] {
			return Meta{}, fmt.Errorf("decode snapshot: retiring member %d twice", id)
		}
		m.Retiring[id] = true
	}
	for _, cr := range rec.Credentials {
		if m.Credentials == nil {
			m.Credentials = make(map[uint64]Credential, len(rec.Credentials))
		}
		if _, dup := m.Credentials[cr.ID]; dup {
			return Meta{}, fmt.Errorf("decode snapshot: credential %016x twice", cr.ID)
		}
		m.Credentials[cr.ID] = Credential(cr)
	}
	if err := m.check(); err != nil {
		return Meta{}, fmt.Errorf("decode snapshot: state at %d: %w", m.Applied, err)
	}
	return m, nil
}

func toConfigRecord(c *ClusterConfig) *configRecord {
	if c == nil {
		return nil
	}
	r := configRecord(*c)
	return &r
}

func toCASRecord(c CAS) *casRecord {
	return &casRecord{Partition: c.Partition, PrevEpoch: c.PrevEpoch, Epoch: c.Epoch, Cohort: c.Cohort, Leader: c.Leader, Sealed: c.Sealed}
}

func (r *casRecord) toCAS() CAS {
	return CAS{Partition: r.Partition, PrevEpoch: r.PrevEpoch, Epoch: r.Epoch, Cohort: r.Cohort, Leader: r.Leader, Sealed: r.Sealed}
}
