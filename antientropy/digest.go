package antientropy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// IDLen is the length of a task id in bytes. It equals task.IDLen (a test
// checks), so that ID and task.ID share their underlying type.
const IDLen = 20

// ID is a task id. It is an alias of the bare array type, so a task.ID
// (whose underlying type is the same array) is assignable to an ID and back
// without a conversion, and this package needs no internal import.
type ID = [IDLen]byte

// DigestLen is the length of a Digest in bytes: SHA-256 truncated to 128
// bits. 128 bits make an unnoticed difference (a digest collision, or
// differences that XOR to zero) a 2^-128 event per comparison for data not
// crafted against the hash, while halving what 256 bits would cost in memory
// and on the wire (an Entry is IDLen+DigestLen = 36 bytes instead of 52).
// docs/design.md, "Digests", has the reasoning and the limits of it.
const DigestLen = 16

// Digest is the 128-bit digest of an item, of a task (the XOR of its items'
// digests) or of a tree node (the XOR of every item below it). The zero
// Digest is the digest of the empty set.
type Digest [DigestLen]byte

// Xor returns d XOR o. XOR is commutative, associative and its own inverse,
// which is what makes a set digest independent of insertion order and lets
// a removal undo an addition.
func (d Digest) Xor(o Digest) Digest {
	d.xorIn(o)
	return d
}

// xorIn sets *d to *d XOR o, as two 64-bit words (the compiler turns each
// word into one load and one store).
func (d *Digest) xorIn(o Digest) {
	const word = DigestLen / 2
	binary.LittleEndian.PutUint64(d[:word], binary.LittleEndian.Uint64(d[:word])^binary.LittleEndian.Uint64(o[:word]))
	binary.LittleEndian.PutUint64(d[word:], binary.LittleEndian.Uint64(d[word:])^binary.LittleEndian.Uint64(o[word:]))
}

// IsZero reports whether d is the zero digest (the empty set's).
func (d Digest) IsZero() bool { return d == Digest{} }

// String returns d as 32 lowercase hex characters.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Fold returns the XOR of ds: the digest of a task from its items'
// digests, or of a bucket from its entries' digests. Fold() is the zero
// digest.
func Fold(ds ...Digest) Digest {
	var sum Digest
	for _, d := range ds {
		sum.xorIn(d)
	}
	return sum
}

// The hashed formats below are frozen: every node, of every version, must
// compute the same bucket and the same digests for the same data, or
// replicas would never agree. A change needs a new domain string and a
// migration (rebuilding every tree and every stored task digest).
const (
	// domainItem prefixes every item hash. The NUL ends the string so no
	// domain is a prefix of another.
	domainItem = "skuldd/antientropy/item/v1\x00"
	// domainBucket prefixes the bucket hash of an id, so that the bucket
	// of an id is unrelated to any item digest.
	domainBucket = "skuldd/antientropy/bucket/v1\x00"
)

// Item kinds, hashed right after domainItem. Each kind fixes the layout of
// the fixed-width fields that follow, and the variable-length data is always
// last, so the hashed string is injective without length prefixes.
const (
	kindSpec   byte = 1 // id, spec bytes
	kindState  byte = 2 // id, state bytes
	kindUpdate byte = 3 // id, claim (u32 BE), seq (u64 BE), data
	kindEdge   byte = 4 // id, dependent id; no data
	kindTomb   byte = 5 // id; no fixed field, no data
)

// Sizes of the fixed fields of an update item.
const (
	claimLen = 4 // uint32, big-endian
	seqLen   = 8 // uint64, big-endian
)

// SpecItem returns the digest of a task's spec. spec must be the canonical
// encoding of the whole spec, payload included: the same bytes on every
// replica (deterministic CBOR). A spec never changes, so a replica adds this
// item once, when it first stores the task.
func SpecItem(id ID, spec []byte) Digest {
	return itemDigest(kindSpec, id, nil, spec)
}

// StateItem returns the digest of a task's merged state. state must be the
// canonical encoding of the state as every replica holding the same merged
// state would encode it, with nothing local to the replica in it (no cache
// fields, no local times). A replica replaces the old state item with the
// new one (Tree.Replace) whenever the state's bytes change.
func StateItem(id ID, state []byte) Digest {
	return itemDigest(kindState, id, nil, state)
}

// UpdateItem returns the digest of one progress update, keyed (claim, seq),
// with its data. Updates form a grow-only set: a replica adds the item of a
// key when it first stores that key, and never again.
func UpdateItem(id ID, claim uint32, seq uint64, data []byte) Digest {
	var fixed [claimLen + seqLen]byte
	binary.BigEndian.PutUint32(fixed[:claimLen], claim)
	binary.BigEndian.PutUint64(fixed[claimLen:], seq)
	return itemDigest(kindUpdate, id, fixed[:], data)
}

// EdgeItem returns the digest of one reverse dependency edge of task id:
// dependent waits on id. Edges form a grow-only set kept in id's
// partition: a replica adds the item of an edge when it first stores it,
// and never again (storing a held edge again adds nothing).
func EdgeItem(id, dependent ID) Digest {
	return itemDigest(kindEdge, id, dependent[:], nil)
}

// TombItem returns the digest of the tombstone of a garbage-collected
// task. A replica holding the tombstone holds no other item of the task,
// so its task digest is this item alone: it differs from the digest of any
// replica still holding the task (anti-entropy finds the two), and is the
// same on every replica holding the tombstone, whatever its deletion time
// (which is not hashed: it only decides when the tombstone expires).
func TombItem(id ID) Digest {
	return itemDigest(kindTomb, id, nil, nil)
}

// maxFixedLen is the longest fixed-field part of any item kind: the
// dependent id of an edge (an update's claim and seq are shorter).
const maxFixedLen = max(claimLen+seqLen, IDLen)

// itemDigest hashes domainItem, kind, id, fixed and data, and truncates the
// SHA-256 to DigestLen bytes.
func itemDigest(kind byte, id ID, fixed, data []byte) Digest {
	var head [len(domainItem) + 1 + IDLen + maxFixedLen]byte
	n := copy(head[:], domainItem)
	head[n] = kind
	n++
	n += copy(head[n:], id[:])
	n += copy(head[n:], fixed)
	h := sha256.New()
	h.Write(head[:n]) // a hash.Hash never returns an error
	h.Write(data)
	var sum [sha256.Size]byte
	var d Digest
	copy(d[:], h.Sum(sum[:0]))
	return d
}

// bucketHash returns the 64-bit hash that places id in the tree: the first
// 8 bytes, big-endian, of SHA-256(domainBucket || id). A bucket is the top
// bits of it, so the buckets of a 2^k tree refine those of a 2^(k-1) one.
// Ids are k-ordered (time first), so their own bytes are far from uniform:
// they must be hashed. The hash is fixed, never seeded: it must be the same
// on every node and across restarts.
func bucketHash(id ID) uint64 {
	var in [len(domainBucket) + IDLen]byte
	n := copy(in[:], domainBucket)
	copy(in[n:], id[:])
	sum := sha256.Sum256(in[:])
	return binary.BigEndian.Uint64(sum[:8])
}
