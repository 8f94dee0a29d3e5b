// Package retrying is the client API as clients see it (QUIC and HTTP):
// a node's operations (wire.Service), retried while the cluster moves
// under them. A partition between leaders (a failover, a cohort move)
// answers "unavailable" or "stale epoch" for a moment; the coordinating
// node retries the operations that are safe to repeat, so clients see the
// move as a slower request rather than an error.
//
// Safe to repeat: reads, claims (a claim that was not acknowledged only
// expires), enqueues (every task gets its id before the first attempt,
// and a repeated id is idempotent), renew, update (keyed by claim and
// seq), complete (a repeated completion by the same claim succeeds),
// cancel and delete (a repeat of either is acknowledged), and the bulk
// requeue and purge of dead tasks (what one did is no longer dead, so a
// repeat only counts less). Fail, snooze and requeue are not retried: a
// repeat could report an error for a write that took effect.
//
// Requests peers forward are served by the node itself, never retried
// there: the forwarding node retries.
//
// retrying imports wire only; it must not reach into the node: what it
// needs of it is its Host.
package retrying
