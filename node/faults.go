package node

import "github.com/skuldd/skuldd/node/peer"

// Faults injects network faults into a node's peer traffic, for tests
// (Config.Faults): see peer.Faults. The node wraps its transport and its
// peer handlers with it, and holds its client requests at Gate.
type Faults = peer.Faults

// TransferFault is what a partition transfer did under
// Faults.CutTransfers.
type TransferFault = peer.TransferFault

// NewFaults returns a Faults that injects nothing yet.
func NewFaults() *Faults { return peer.NewFaults() }
