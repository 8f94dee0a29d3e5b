// Package queues owns a queue's settings as a node applies them: kept in
// the metadata group (raftgroup.ChangeQueue), read from the copy the node
// refreshes after each change of the group, and the client operations
// that read and change them. The node applies them where a request takes
// a default (an enqueue's max attempts, a claim's lease, a fail's
// backoff), at the claims of a paused queue, and in garbage collection (a
// queue's retention).
//
// queues imports raftgroup, task and wire; it must not reach into the
// node.
package queues
