package raftgroup

import (
	"errors"
	"fmt"
)

// Sentinel errors. Methods wrap them with context; test with errors.Is.
var (
	// ErrConfigMismatch is returned by Init when the cluster was already
	// initialised with another partition count or replication factor. The
	// message names both.
	ErrConfigMismatch = errors.New("cluster config mismatch")
	// ErrCASConflict is returned by CAS when the partition's epoch is not
	// the caller's PrevEpoch: another leader won the race. The error is a
	// *ConflictError that carries the current record; back off and retry
	// from it.
	ErrCASConflict = errors.New("cas conflict")
	// ErrNotInitialized is returned by CAS before Init set the cluster
	// config (there are no partitions yet).
	ErrNotInitialized = errors.New("cluster not initialized")
	// ErrBadPartition is returned by CAS for a partition index outside
	// [0, Partitions).
	ErrBadPartition = errors.New("no such partition")
	// ErrInvalid is returned for a malformed argument: an empty cluster id,
	// a CAS whose new epoch is not above the previous one, a leader outside
	// its cohort, a member without an address.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed is returned by every method once Close was called (and by
	// proposals and Step before Start). A proposal pending at Close fails
	// with it; it may or may not have been applied.
	ErrClosed = errors.New("raft group closed")
	// ErrMemberRemoved refuses registering a node removed from the
	// cluster for good: its data dir must be wiped, and it joins as a new
	// node.
	ErrMemberRemoved = errors.New("node removed from the cluster for good (wipe its data dir to join again as a new node)")
	// ErrBadMessage is returned by Step for bytes that are not a raft
	// message meant for this node.
	ErrBadMessage = errors.New("bad raft message")
)

// ConflictError is the error of a CAS that lost: it says what the
// partition holds now. It matches ErrCASConflict under errors.Is.
type ConflictError struct {
	// Partition is the partition of the failed CAS.
	Partition int
	// PrevEpoch is the epoch the caller expected.
	PrevEpoch uint64
	// Current is the partition's record when the CAS was applied.
	Current PartitionInfo
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: partition %d is at epoch %d (leader %d, cohort %v), not %d",
		ErrCASConflict, e.Partition, e.Current.Epoch, e.Current.Leader, e.Current.Cohort, e.PrevEpoch)
}

// Unwrap makes errors.Is(err, ErrCASConflict) hold.
func (e *ConflictError) Unwrap() error { return ErrCASConflict }
