package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/skuldd/skuldd/internal/buildinfo"
	"github.com/skuldd/skuldd/internal/version"
	"github.com/skuldd/skuldd/wire"
)

// Upgrades (docs/design.md, Versions): the cluster runs at one cluster
// version, kept in the metadata group; each node's build supports the
// versions up to its own. The metadata leader asks every member's build
// (OpBuildInfo) each UpgradeCheck and raises the version to the highest
// all of them support, unless a member holds it back (--upgrade-hold);
// `ctl upgrade finalize` raises it then. Peers refuse a node whose build
// is older than the version (checkPeerVersion), so nothing a version adds
// reaches a build that cannot read it.

// buildAskTimeout bounds one member's answer to OpBuildInfo: a member
// that does not answer within it counts as not supporting anything new.
const buildAskTimeout = 2 * time.Second

// supports is the highest cluster version this node supports.
func (n *Node) supports() version.V {
	if v := n.cfg.MaxVersion; v != 0 {
		return v
	}
	return version.Max
}

// buildInfo is this node's answer to OpBuildInfo.
func (n *Node) buildInfo() *wire.BuildInfo {
	return &wire.BuildInfo{Node: n.id, Supports: uint32(n.supports()), Hold: n.cfg.UpgradeHold, Build: buildinfo.Read().String()}
}

// admitPeer refuses a peer removed from the cluster, or whose build
// supports less than the cluster's version (wire.ServerConfig.AdmitPeer).
func (n *Node) admitPeer(id uint64, v version.V) error {
	g := n.raftGroup()
	if g == nil {
		return nil // nothing known yet: the peer's own checks hold
	}
	meta := g.Meta()
	if meta.Removed[id] {
		return fmt.Errorf("%w: node %d was removed from the cluster for good: wipe its data dir to join again as a new node", wire.ErrPeerRefused, id)
	}
	if cur := meta.Version(); v < cur {
		return &wire.TooOldError{Peer: v, Cluster: cur}
	}
	return nil
}

// checkOwnVersion refuses to start a node whose build is older than the
// cluster it belongs to (its peers refuse it too, but this says why at
// once).
func (n *Node) checkOwnVersion() error {
	if cur := n.raft.Meta().Version(); cur > n.supports() {
		return fmt.Errorf("node: the cluster runs cluster version %d; this build supports at most %d: run a newer build", cur, n.supports())
	}
	return nil
}

// upgradeStatus asks every member about its build.
func (n *Node) upgradeStatus(ctx context.Context) (*wire.UpgradeStatus, error) {
	g := n.raftGroup()
	if g == nil {
		return nil, errStarting
	}
	meta := g.Meta()
	ids := slices.Sorted(maps.Keys(meta.Members))
	out := &wire.UpgradeStatus{ClusterVersion: uint32(meta.Version()), Members: make([]wire.MemberBuild, len(ids))}
	var wg sync.WaitGroup
	for i, id := range ids {
		mb := &out.Members[i]
		mb.Node, mb.Addr = id, meta.Members[id].Addr
		if id == n.id {
			bi := n.buildInfo()
			mb.Supports, mb.Hold, mb.Build = bi.Supports, bi.Hold, bi.Build
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, buildAskTimeout)
			defer cancel()
			var bi wire.BuildInfo
			err := n.peers.Call(cctx, n.peerAddr(id, mb.Addr), wire.OpBuildInfo, &wire.BuildInfoRequest{}, &bi)
			var we *wire.Error
			switch {
			case errors.As(err, &we) && we.Code == wire.CodeUnknownOp:
				// A build from before versions does not know the question.
				mb.Supports, mb.Build = uint32(version.Base), "a build before cluster versions"
			case err != nil:
				mb.Err = err.Error()
			case bi.Node != id:
				mb.Err = fmt.Sprintf("node %d answered at its address", bi.Node)
			default:
				mb.Supports, mb.Hold, mb.Build = bi.Supports, bi.Hold, bi.Build
			}
		})
	}
	wg.Wait()
	out.Supported = uint32(version.Max) + 1
	for _, mb := range out.Members {
		out.Supported = min(out.Supported, mb.Supports) // 0 for a member that did not answer
		out.Held = out.Held || mb.Hold
	}
	if len(out.Members) == 0 {
		out.Supported = 0
	}
	return out, nil
}

// raise raises the cluster version to what st says every member supports,
// if that is higher; st says what it did.
func (n *Node) raise(ctx context.Context, st *wire.UpgradeStatus) error {
	if st.Supported <= st.ClusterVersion {
		return nil
	}
	if err := n.raft.Raise(ctx, version.V(st.Supported)); err != nil {
		return fmt.Errorf("raise the cluster version to %d: %w", st.Supported, err)
	}
	st.Raised, st.RaisedFrom, st.ClusterVersion = true, st.ClusterVersion, st.Supported
	n.log.Info("cluster version raised", "from", st.RaisedFrom, "to", st.Supported)
	return nil
}

// upgradeLoop raises the cluster version on the metadata leader once
// every member supports a higher one and none holds it back.
func (n *Node) upgradeLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.UpgradeCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.raft.Leader() != n.id || n.raft.Meta().Version() >= n.supports() {
			continue
		}
		st, err := n.upgradeStatus(ctx)
		if err != nil || st.Held {
			continue
		}
		if err := n.raise(ctx, st); err != nil {
			n.log.Warn("cluster version not raised", "err", err)
		}
	}
}

// adminAPI is the node's wire.AdminService (node/access guards it).
type adminAPI struct{ n *Node }

// Upgrade implements wire.AdminService.
func (a adminAPI) Upgrade(ctx context.Context, req *wire.UpgradeRequest) (*wire.UpgradeStatus, error) {
	n := a.n
	if err := n.serving(); err != nil {
		return nil, err
	}
	st, err := n.upgradeStatus(ctx)
	if err != nil || !req.Finalize {
		return st, err
	}
	for _, mb := range st.Members {
		if mb.Err != "" {
			return nil, fmt.Errorf("%w: finalize: node %d (%s) did not say what its build supports: %s (a node gone for good must be removed first: ctl remove)",
				wire.ErrUnavailable, mb.Node, mb.Addr, mb.Err)
		}
	}
	if st.Supported <= st.ClusterVersion {
		lowest := slices.MinFunc(st.Members, func(a, b wire.MemberBuild) int { return cmp.Compare(a.Supports, b.Supports) })
		return st, wire.Errorf(wire.CodeConflict, "finalize: nothing to raise: the cluster runs cluster version %d and node %d (%s) supports at most %d",
			st.ClusterVersion, lowest.Node, lowest.Addr, lowest.Supports)
	}
	return st, n.raise(ctx, st)
}
