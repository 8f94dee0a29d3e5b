package member

import "errors"

var (
	// ErrShutdown is returned by operations on a Member (or its transport)
	// after Shutdown.
	ErrShutdown = errors.New("member: shut down")

	// ErrLeft is returned by operations that would re-announce this node
	// after Leave: memberlist cannot rejoin a cluster it left, so a node
	// that left must Shutdown and be created again.
	ErrLeft = errors.New("member: left the cluster")
)
