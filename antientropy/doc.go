// Package antientropy owns the reconciliation core of replicas (docs/design.md,
// "Anti-entropy"): the per-partition hash tree, the digests of task
// records, the comparison of two trees (Diff) and the byte formats of that
// exchange. DESIGN.md in this directory says why it is built this way.
//
// It is given ids, digests and canonical bytes, and knows nothing else: not
// Pebble, not QUIC, not the partition, not the task types. It starts no
// goroutine, reads no clock and does no I/O; a driver (the replica and the
// node) stores, sends and schedules. It imports nothing internal: ID is an
// alias of [20]byte, so a task.ID is assignable to it and back.
//
// # Model
//
// A task is a set of items, each with a Digest: its spec (SpecItem), its
// current merged state (StateItem), each of its progress updates
// (UpdateItem) and each of its reverse dependency edges (EdgeItem). A
// task's digest is the XOR of its items' digests (Fold); an Entry lists it
// with its id. The Tree of a partition has Shape.Buckets leaves; a task's
// items go to leaf BucketOf(id); a leaf is the XOR of its tasks' digests,
// and every inner node the XOR of its children.
//
// Invariant: two replicas that hold the same records have equal trees (the
// same digest at every node), whatever the order of their writes, since XOR
// is commutative, associative and its own inverse. This holds only if each
// replica's tree is exactly the XOR of the items it holds: every item added
// once when it appears and removed once when it goes.
//
// # Usage by a partition replica
//
//  1. At open, build the tree: NewTree(cfg.Shape), then Add(id, d) for
//     every stored task, d being its task digest.
//  2. On every write, in the critical section that applies the store batch
//     (so the tree never runs ahead of or behind the store's order):
//     a new task adds its spec item, state item and update items; a state
//     whose canonical bytes changed replaces its old state item with the
//     new (Replace; a state merged without change is a no-op); an update
//     key or an edge seen for the first time adds its item (a repeated
//     merge of a known key or edge adds nothing, or the item would cancel
//     out); a deleted task removes its task digest. Simplest and most
//     robust: store each task's digest next to its header, in the same
//     batch, and call Replace(id, old, new) with the old and new task
//     digests.
//  3. Canonical bytes: the spec and state bytes hashed must be the same on
//     every replica holding the same spec or merged state (deterministic
//     CBOR, no replica-local fields), or replicas never agree.
//  4. To answer a peer: decode its request (DecodeNodesRequest,
//     DecodeBucketsRequest); for nodes, call Tree.Answer under the lock
//     (it copies a few digests); for buckets, check the request's shape
//     against the tree's, list the buckets as ListFunc does and encode each
//     with AppendEntries.
//  5. A round: under the lock take snap := tree.Clone(); release it; call
//     Diff(ctx, snap, remote, list, cfg.Limits, cursor); fetch the records
//     of res.Pull from the peer and merge them, send those of res.Push;
//     keep cursor = res.Next; if res.Truncated, run the next round soon.
//
// Listing a bucket: the replica lists the ids it holds with
// Tree.BucketOf(id) == b and their task digests. Either it scans the
// partition's ids once per round for all requested buckets (Diff asks for
// all of them in one ListFunc call), or it keeps ids grouped by bucket.
//
// # Concurrency
//
// A Tree is not safe for concurrent use: its owner serialises every call
// and hands Diff a Clone. Diff is synchronous and calls the Remote and the
// ListFunc from its caller's goroutine, one call at a time.
//
// # Frozen formats
//
// BucketOf, the item digests and the byte formats (codec.go) must be
// identical on every node and across versions; tests pin them with fixed
// vectors. Changing any of them needs a new domain string or format tag.
package antientropy
