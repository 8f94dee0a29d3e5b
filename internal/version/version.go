// Package version names the cluster versions: what each one adds to what
// nodes write and say to each other, and the highest this build supports.
//
// A cluster runs at one version, kept in the metadata group. Every node
// reports the highest its build supports; the version is raised only once
// every member reports at least the new one, so nothing a version adds
// (a record kind, an op, a metadata command) is written while a member
// that cannot read it remains. Until then an older build can replace a
// newer one (a rollback); after, a node whose build is older than the
// cluster's version is refused by its peers (wire's peer protocol names
// the version in its ALPN). docs/design.md, Versions, has the rules.
//
// It is a leaf: wire, raftgroup and node read it.
package version

import "fmt"

// V is a cluster version.
type V uint32

const (
	// Base is what every build before cluster versions speaks: such a
	// build reports no version, and a cluster whose version was never
	// raised (the metadata group holds 0) runs Base.
	Base V = 1
	// Removal adds forgetting a member for good: the metadata command
	// that removes a node from the registry (ctl remove, and the last
	// step of ctl decommission). A Base build cannot apply it, so its
	// registry would keep the node the others forgot.
	Removal V = 2
	// Max is the highest cluster version this build supports.
	Max = Removal
)

// Of is the version a recorded value stands for: 0 (none recorded) is
// Base.
func Of(recorded uint32) V {
	if recorded == 0 {
		return Base
	}
	return V(recorded)
}

// Feature is something a cluster version adds.
type Feature struct {
	// Name says what it is, for errors.
	Name string
	// Since is the version that adds it.
	Since V
}

// MemberRemoval is Removal's feature.
var MemberRemoval = Feature{Name: "removing a node (ctl remove, ctl decommission)", Since: Removal}

// Check reports whether a cluster running cur has f: nil, or a
// *NotYetError.
func (f Feature) Check(cur V) error {
	if cur >= f.Since {
		return nil
	}
	return &NotYetError{Feature: f, Cluster: cur}
}

// NotYetError refuses a feature the cluster's version does not have yet.
type NotYetError struct {
	Feature Feature
	Cluster V
}

func (e *NotYetError) Error() string {
	return fmt.Sprintf("the cluster runs cluster version %d, which does not have %s (cluster version %d adds it): "+
		"every node must run a build that supports it and the version be raised (skuldd ctl upgrade status)",
		e.Cluster, e.Feature.Name, e.Feature.Since)
}
