package wire

import (
	"context"
	"errors"
)

// The API of a cluster's life: upgrades (the cluster version) and
// retiring nodes. A node's client API serves it besides Service; admin
// only.

// UpgradeRequest asks for the upgrade status; with Finalize the node also
// raises the cluster version to the highest every member's build
// supports (ctl upgrade finalize).
type UpgradeRequest struct {
	Finalize bool `cbor:"1,keyasint,omitempty" json:"finalize,omitempty"`
}

// MemberBuild is what one member said of its build (OpBuildInfo).
type MemberBuild struct {
	Node uint64 `cbor:"1,keyasint" json:"node,string"`
	Addr string `cbor:"2,keyasint" json:"addr"`
	// Supports is the highest cluster version the member's build
	// supports: 1 for a build before versions (it does not know the
	// question), 0 when the member did not answer.
	Supports uint32 `cbor:"3,keyasint,omitempty" json:"supports"`
	// Hold: the member was started with --upgrade-hold.
	Hold bool `cbor:"4,keyasint,omitempty" json:"hold,omitempty"`
	// Build is the member's build (its --version line).
	Build string `cbor:"5,keyasint,omitempty" json:"build,omitempty"`
	// Err says why the member did not answer.
	Err string `cbor:"6,keyasint,omitempty" json:"error,omitempty"`
}

// UpgradeStatus is where a cluster stands in an upgrade.
type UpgradeStatus struct {
	// ClusterVersion is the version the cluster runs.
	ClusterVersion uint32 `cbor:"1,keyasint" json:"cluster_version"`
	// Supported is the highest version every member's build supports
	// (0 while a member does not answer): what a finalize raises to.
	Supported uint32 `cbor:"2,keyasint,omitempty" json:"supported"`
	// Members is each member's answer, by id.
	Members []MemberBuild `cbor:"3,keyasint" json:"members"`
	// Held: a member holds the automatic raise back (--upgrade-hold).
	Held bool `cbor:"4,keyasint,omitempty" json:"held,omitempty"`
	// Raised: this request raised the version (from RaisedFrom).
	Raised     bool   `cbor:"5,keyasint,omitempty" json:"raised,omitempty"`
	RaisedFrom uint32 `cbor:"6,keyasint,omitempty" json:"raised_from,omitempty"`
}

// BuildInfoRequest asks a peer about its build (OpBuildInfo).
type BuildInfoRequest struct{}

// BuildInfo is a node's answer to OpBuildInfo.
type BuildInfo struct {
	Node     uint64 `cbor:"1,keyasint"`
	Supports uint32 `cbor:"2,keyasint"`
	Hold     bool   `cbor:"3,keyasint,omitempty"`
	Build    string `cbor:"4,keyasint,omitempty"`
}

// RemoveNodeRequest forgets a node that is gone for good (ctl remove).
type RemoveNodeRequest struct {
	Node uint64 `cbor:"1,keyasint" json:"node,string"`
}

// RemoveNodeResponse says what the removal did.
type RemoveNodeResponse struct {
	Node uint64 `cbor:"1,keyasint" json:"node,string"`
	// Refilled counts the partitions whose cohorts named the node when
	// the removal began, all refilled without it since.
	Refilled int `cbor:"2,keyasint" json:"refilled"`
	// Removed: this request removed it; false: it was removed before.
	Removed bool `cbor:"3,keyasint" json:"removed"`
}

// DecommissionRequest starts (or, with Cancel, stops) moving a live
// node's partitions to the others (ctl decommission); each request says
// how far it got. With Leave, once the node holds nothing the cluster
// needs (DecommissionStatus.Done), the node asked tells it to leave (the
// node's process then exits), through the peer protocol: the client
// need not reach it.
type DecommissionRequest struct {
	Node   uint64 `cbor:"1,keyasint" json:"node,string"`
	Cancel bool   `cbor:"2,keyasint,omitempty" json:"cancel,omitempty"`
	Leave  bool   `cbor:"3,keyasint,omitempty" json:"leave,omitempty"`
}

// DecommissionStatus is how far a decommission got.
type DecommissionStatus struct {
	Node uint64 `cbor:"1,keyasint" json:"node,string"`
	Addr string `cbor:"2,keyasint" json:"addr"`
	// Retiring: placement moves the node's partitions away.
	Retiring bool `cbor:"3,keyasint,omitempty" json:"retiring,omitempty"`
	// Remaining are the partitions whose cohort still names the node.
	Remaining []int `cbor:"4,keyasint" json:"remaining"`
	// Voter: the node still votes in the metadata group (the group
	// replaces it first, so that its leaving costs no quorum).
	Voter bool `cbor:"5,keyasint,omitempty" json:"voter,omitempty"`
	// Left: the node was told to leave (DecommissionRequest.Leave) and
	// said it leaves.
	Left bool `cbor:"6,keyasint,omitempty" json:"left,omitempty"`
}

// Done reports whether the node holds nothing the cluster needs: it may
// leave.
func (s *DecommissionStatus) Done() bool { return len(s.Remaining) == 0 && !s.Voter }

// AdminService is the API of a cluster's life. A node's client API
// implements it besides Service (ServiceHandler and package httpapi serve
// it when the Service they are given does).
type AdminService interface {
	Upgrade(ctx context.Context, req *UpgradeRequest) (*UpgradeStatus, error)
	RemoveNode(ctx context.Context, req *RemoveNodeRequest) (*RemoveNodeResponse, error)
	Decommission(ctx context.Context, req *DecommissionRequest) (*DecommissionStatus, error)
}

// Decommission starts or stops moving a node's partitions away, and says
// how far it got.
func (cl *Client) Decommission(ctx context.Context, req *DecommissionRequest) (*DecommissionStatus, error) {
	return invoke[DecommissionStatus](ctx, cl, OpDecommission, req)
}

// Upgrade reads the upgrade status, and with req.Finalize raises the
// cluster version.
func (cl *Client) Upgrade(ctx context.Context, req *UpgradeRequest) (*UpgradeStatus, error) {
	return invoke[UpgradeStatus](ctx, cl, OpUpgrade, req)
}

// RemoveNode forgets a node that is gone for good.
func (cl *Client) RemoveNode(ctx context.Context, req *RemoveNodeRequest) (*RemoveNodeResponse, error) {
	return invoke[RemoveNodeResponse](ctx, cl, OpRemoveNode, req)
}

// ErrClusterVersion: the cluster's version does not have the operation
// yet (version.NotYetError on the node's side).
var ErrClusterVersion = errors.New("cluster version")

// adminDispatch serves an AdminService op; handled is false for other
// ops.
func adminDispatch(ctx context.Context, svc Service, req *Request) (resp any, handled bool, err error) {
	var fn func() (any, error)
	as, ok := svc.(AdminService)
	switch req.Op {
	case OpUpgrade:
		fn = func() (any, error) { return call(ctx, req, as.Upgrade) }
	case OpRemoveNode:
		fn = func() (any, error) { return call(ctx, req, as.RemoveNode) }
	case OpDecommission:
		fn = func() (any, error) { return call(ctx, req, as.Decommission) }
	default:
		return nil, false, nil
	}
	if !ok {
		return nil, true, Errorf(CodeUnknownOp, "op %s: this node does not serve it", req.Op)
	}
	resp, err = fn()
	return resp, true, err
}
