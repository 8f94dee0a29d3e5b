package antientropy

import (
	"fmt"
	"math/bits"
)

// Bounds of a Shape. Memory of a tree is about Buckets*DigestLen bytes
// (Tree.Bytes), so BucketsMax keeps one partition's tree within 1 MiB and a
// full level within one response of 1 MiB.
const (
	// FanoutMin is the smallest fan-out: a binary tree.
	FanoutMin = 2
	// FanoutMax bounds the children of a node, hence the digests one
	// differing node costs at the next level of a descent.
	FanoutMax = 256
	// BucketsMin is the smallest tree: one inner node over FanoutMin leaves.
	BucketsMin = FanoutMin
	// BucketsMax is the largest number of leaves (2^16).
	BucketsMax = 1 << 16
	// IDsPerRoundMax bounds Limits.IDsPerRound.
	IDsPerRoundMax = 1 << 20
)

// Default shape and limits (DefaultConfig). With 1024 buckets of fan-out 32
// a tree has three levels (root, 32 nodes, 1024 leaves) and takes about
// 17 KiB; one differing bucket costs 1+32+32 digests to find.
const (
	defaultBuckets         = 1024
	defaultFanout          = 32
	defaultBucketsPerRound = 32
	defaultIDsPerRound     = 4096
)

// Small shape and limits for tests (DefaultLocalConfig): deep enough to
// have inner levels, small enough that limits truncate.
const (
	localBuckets         = 64
	localFanout          = 8
	localBucketsPerRound = 4
	localIDsPerRound     = 64
)

// Config configures anti-entropy of one node: the shape of every partition's
// tree and the limits of one comparison round. Every node of a cluster must
// use the same Shape (a peer refuses a request of another shape with
// ErrShape); Limits may differ per node.
type Config struct {
	// Shape is the tree's shape.
	Shape Shape
	// Limits bound one round of Diff.
	Limits Limits
}

// DefaultConfig returns the production configuration: 1024 buckets, fan-out
// 32, 32 buckets and 4096 ids per round.
func DefaultConfig() Config {
	return Config{
		Shape:  Shape{Buckets: defaultBuckets, Fanout: defaultFanout},
		Limits: Limits{BucketsPerRound: defaultBucketsPerRound, IDsPerRound: defaultIDsPerRound},
	}
}

// DefaultLocalConfig returns a small configuration for tests: 64 buckets,
// fan-out 8, 4 buckets and 64 ids per round.
func DefaultLocalConfig() Config {
	return Config{
		Shape:  Shape{Buckets: localBuckets, Fanout: localFanout},
		Limits: Limits{BucketsPerRound: localBucketsPerRound, IDsPerRound: localIDsPerRound},
	}
}

// Validate checks c; errors wrap ErrConfig.
func (c Config) Validate() error {
	if err := c.Shape.Validate(); err != nil {
		return err
	}
	return c.Limits.Validate()
}

// Shape is the geometry of a tree: Buckets leaves under inner nodes of
// Fanout children. Level 0 is the root; the leaves are level Depth(). A
// level above the leaves has Fanout times fewer nodes than the one below,
// except that the root may have fewer than Fanout children when
// log2(Buckets) is not a multiple of log2(Fanout).
type Shape struct {
	// Buckets is the number of leaves: a power of two in
	// [BucketsMin, BucketsMax]. An id's bucket is BucketOf(id).
	Buckets int
	// Fanout is the number of children of an inner node: a power of two
	// in [FanoutMin, FanoutMax], at most Buckets.
	Fanout int
}

// Validate checks s; errors wrap ErrConfig.
func (s Shape) Validate() error {
	switch {
	case s.Buckets < BucketsMin || s.Buckets > BucketsMax:
		return fmt.Errorf("%w: buckets %d: want [%d, %d]", ErrConfig, s.Buckets, BucketsMin, BucketsMax)
	case !isPowerOfTwo(s.Buckets):
		return fmt.Errorf("%w: buckets %d: want a power of two", ErrConfig, s.Buckets)
	case s.Fanout < FanoutMin || s.Fanout > FanoutMax:
		return fmt.Errorf("%w: fanout %d: want [%d, %d]", ErrConfig, s.Fanout, FanoutMin, FanoutMax)
	case !isPowerOfTwo(s.Fanout):
		return fmt.Errorf("%w: fanout %d: want a power of two", ErrConfig, s.Fanout)
	case s.Fanout > s.Buckets:
		return fmt.Errorf("%w: fanout %d exceeds buckets %d", ErrConfig, s.Fanout, s.Buckets)
	}
	return nil
}

// Depth returns the level of the leaves (the root is level 0): the number
// of inner levels, ceil(log2(Buckets) / log2(Fanout)). s must be valid.
func (s Shape) Depth() int {
	b, f := s.bucketBits(), log2(s.Fanout)
	return (b + f - 1) / f
}

// Width returns the number of nodes at level, in [0, Depth()]. It panics
// outside that range.
func (s Shape) Width(level int) int { return 1 << s.levelBits(level) }

// BucketOf returns the bucket of id, in [0, Buckets): the top log2(Buckets)
// bits of a fixed hash of id (see bucketHash). It is the same on every node
// and across restarts. s must be valid.
func (s Shape) BucketOf(id ID) int {
	return int(bucketHash(id) >> (64 - s.bucketBits()))
}

// bucketBits returns log2(Buckets).
func (s Shape) bucketBits() int { return log2(s.Buckets) }

// levelBits returns log2(Width(level)): a node at level covers the buckets
// whose top levelBits bits are its index.
func (s Shape) levelBits(level int) int {
	depth := s.Depth()
	if level < 0 || level > depth {
		panic(fmt.Sprintf("antientropy: level %d outside [0, %d]", level, depth))
	}
	return max(0, s.bucketBits()-(depth-level)*log2(s.Fanout))
}

// Limits bound one round of Diff, so a round's cost does not depend on how
// far two replicas have drifted apart. A round that hits a limit says so
// (Result.Truncated) and names where the next one starts (Result.Next).
type Limits struct {
	// BucketsPerRound is the most buckets whose entry lists one round
	// exchanges, in [1, BucketsMax]. It also bounds the descent: at most
	// BucketsPerRound+1 differing nodes per level are followed, so a
	// round fetches at most 1 + (BucketsPerRound+1)*Fanout*Depth() node
	// digests.
	BucketsPerRound int
	// IDsPerRound is the most distinct ids one round reports in
	// Pull and Push together, in [1, IDsPerRoundMax].
	IDsPerRound int
}

// Validate checks l; errors wrap ErrConfig.
func (l Limits) Validate() error {
	switch {
	case l.BucketsPerRound < 1 || l.BucketsPerRound > BucketsMax:
		return fmt.Errorf("%w: buckets per round %d: want [1, %d]", ErrConfig, l.BucketsPerRound, BucketsMax)
	case l.IDsPerRound < 1 || l.IDsPerRound > IDsPerRoundMax:
		return fmt.Errorf("%w: ids per round %d: want [1, %d]", ErrConfig, l.IDsPerRound, IDsPerRoundMax)
	}
	return nil
}

func isPowerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// log2 returns log2(n) for a power of two n.
func log2(n int) int { return bits.TrailingZeros(uint(n)) }
