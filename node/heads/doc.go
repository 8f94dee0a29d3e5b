// Package heads is where a claim looks for work: the best ready task of
// each queue in every partition this node leads (Index, fed by the
// partitions' OnHead callbacks, with the fence that keeps a cut-off
// leader's partitions out), and the same per node from the summaries the
// other nodes send (Summaries), with the rule that decides whether a
// claim stays here or goes to the node with the better head (ClaimHere).
//
// It holds views, not tasks: it never reads a replica or the store, and
// sends nothing (node's summary loop and claim routing do).
package heads
