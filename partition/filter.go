package partition

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/skuldd/skuldd/task"
)

// idFilter answers "might this partition hold a task with this id?" from
// memory, so that writing a new task (an enqueue, or a follower merging
// one) does not read the store to learn that it is not there: a miss in
// Pebble walks the memtables' skiplists, which under load costs more than
// the rest of the write.
//
// It is a scalable Bloom filter: a chain of filters, each filterGrowth
// times the size of the one before, the newest taking the adds. Invariant: every id whose
// spec is in the store for this partition was added (Load adds what it
// scans, every write of a new spec adds before the write is applied), so
// mayHold == false is exact and only true needs the store. Ids are never
// removed: a deleted task leaves bits that cost a store read at worst.
type idFilter struct {
	seed  maphash.Seed
	parts []bloom
}

// Filter sizing: filterFirst ids in the first filter, filterBitsPerID
// bits and filterHashes probes per id (about 0.3% false positives each;
// a query of a new id probes every filter of the chain, so the chain is
// kept short by growing 4x).
const (
	filterFirst     = 1024
	filterGrowth    = 4
	filterBitsPerID = 12
	filterHashes    = 8
)

type bloom struct {
	bits []uint64
	n    int // ids added
	cap  int // ids it was sized for
}

func newIDFilter() *idFilter { return &idFilter{seed: maphash.MakeSeed()} }

// hash returns two independent-enough 64-bit hashes of id for double
// hashing: probe i is h1 + i*h2.
func (f *idFilter) hash(id *task.ID) (uint64, uint64) {
	h1 := maphash.Bytes(f.seed, id[:])
	// The second hash mixes h1 (splitmix64's finaliser), odd so the
	// probes cover the table.
	h2 := h1 ^ binary.LittleEndian.Uint64(id[12:20])
	h2 ^= h2 >> 30
	h2 *= 0xbf58476d1ce4e5b9
	h2 ^= h2 >> 27
	h2 *= 0x94d049bb133111eb
	h2 ^= h2 >> 31
	return h1, h2 | 1
}

// add records id.
func (f *idFilter) add(id task.ID) {
	if len(f.parts) == 0 || f.parts[len(f.parts)-1].n >= f.parts[len(f.parts)-1].cap {
		c := filterFirst
		if len(f.parts) > 0 {
			c = filterGrowth * f.parts[len(f.parts)-1].cap
		}
		f.parts = append(f.parts, bloom{bits: make([]uint64, (c*filterBitsPerID+63)/64), cap: c})
	}
	b := &f.parts[len(f.parts)-1]
	h1, h2 := f.hash(&id)
	m := uint64(len(b.bits) * 64)
	for i := range uint64(filterHashes) {
		bit := (h1 + i*h2) % m
		b.bits[bit/64] |= 1 << (bit % 64)
	}
	b.n++
}

// mayHold reports whether id may have been added; false is certain.
func (f *idFilter) mayHold(id task.ID) bool {
	h1, h2 := f.hash(&id)
	for p := range f.parts {
		b := &f.parts[p]
		m := uint64(len(b.bits) * 64)
		hit := true
		for i := range uint64(filterHashes) {
			bit := (h1 + i*h2) % m
			if b.bits[bit/64]&(1<<(bit%64)) == 0 {
				hit = false
				break
			}
		}
		if hit {
			return true
		}
	}
	return false
}

// bytes is the filter's memory, for tests.
func (f *idFilter) bytes() int {
	n := 0
	for _, b := range f.parts {
		n += 8 * len(b.bits)
	}
	return n
}
