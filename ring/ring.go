// Package ring owns placement: which partition an id belongs to, and which
// nodes (the cohort) hold a partition, by rendezvous hashing.
//
// Both functions are pure and deterministic: every node computes the same
// answer from the same inputs, and the hash functions are part of the
// on-disk format (a partition's keys are where PartitionOf put them), so
// they must never change.
//
// ring imports nothing internal.
package ring

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// MaxPartitions bounds P: partitions are numbered by a uint16 in keys, and
// per-partition overhead (an index, a leader election) makes more than a
// few thousand pointless.
const MaxPartitions = 4096

// PartitionOf maps an id (any bytes, normally a 20-byte task id) to one of p
// partitions by FNV-1a 64. It panics if p is not in [1, MaxPartitions]: the
// partition count is validated once at cluster creation.
func PartitionOf(id []byte, p int) uint16 {
	if p < 1 || p > MaxPartitions {
		panic("ring: partition count out of range")
	}
	h := fnv.New64a()
	_, _ = h.Write(id)
	return uint16(h.Sum64() % uint64(p))
}

// KeyPartition returns the partition of the tasks of queue with unique
// key key (task.Spec.Key): every task of one key lives in one partition,
// whose leader keeps the key unique.
func KeyPartition(queue, key string, p int) uint16 {
	return PartitionOf([]byte("key\x00"+queue+"\x00"+key), p)
}

// score is the rendezvous weight of node for partition part.
func score(node uint64, part int) uint64 {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], node)
	binary.BigEndian.PutUint64(b[8:16], uint64(part))
	h := fnv.New64a()
	_, _ = h.Write(b[:])
	// FNV's low bits mix poorly for short inputs; finish with a
	// splitmix64 step so scores spread evenly.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Cohort returns the n nodes (fewer if there are fewer members) with the
// highest rendezvous score for part, best first: the first is the
// partition's preferred leader. A change of members moves only the
// partitions whose top n changed, about 1/len(members) of them per node.
func Cohort(part int, members []uint64, n int) []uint64 {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	slices.SortFunc(ms, func(a, b uint64) int {
		sa, sb := score(a, part), score(b, part)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	if n < len(ms) {
		ms = ms[:n]
	}
	return ms
}

// Majority returns the smallest count that is more than half of n.
func Majority(n int) int { return n/2 + 1 }
