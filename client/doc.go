// Package client is skuldd's Go client: enqueue tasks, claim them, renew,
// report progress, complete, fail or snooze them, and read them back,
// against a cluster of skuldd nodes over QUIC.
//
// A Client talks to one node at a time, chosen from Config.Nodes, and
// moves to the next when that node cannot be reached, is shutting down or
// answers that the cluster is unavailable for now; it keeps trying for
// Config.RetryFor or until the call's context ends. Every operation is
// safe to send again in this way:
//
//   - Enqueue always names its tasks: the client picks an id for each
//     task that has none (NewID), so an enqueue retried after a timeout
//     never creates a duplicate, and a retry that finds the task already
//     there is a success;
//   - renew, update (by sequence number), complete, fail and snooze are
//     idempotent at the node: the same write again changes nothing;
//   - a claim retried after its answer was lost may leave a lease nobody
//     holds: the task is claimable again once that lease ends.
//
// Errors are the node's, classified for errors.Is: ErrNotFound,
// ErrInvalid, ErrConflict, ErrUnavailable, ErrClaimSuperseded,
// ErrCompleted, ErrCancelled and the umbrella ErrClaimLost (the claim was
// superseded, expired or ended, or the task completed or cancelled: a
// worker holding it must stop). Cancel, Delete, RequeueDead, PurgeDead
// and CancelGroup are the operator's task control; Group reads a task
// group's counts, CountSubtopic and Subtopics a subtopic's. The claim id
// a claim
// returns (Claimed.Claim) is a fencing token: every write under an older
// claim is refused, so a worker that lost its lease cannot complete the
// task behind its successor's back.
//
// The package imports skuldd's wire protocol and task ids, and nothing of
// the node.
package client
