package faults

import (
	"strings"
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// TestUpgradePlan: every node is upgraded once, in order, within the
// schedule, and the finalize comes after the last upgrade, with a step of
// mixed running between when there is room for it.
func TestUpgradePlan(t *testing.T) {
	for _, tc := range []struct{ steps, nodes int }{{16, 5}, {40, 5}, {10, 5}, {3, 5}, {1, 3}} {
		after, fin := upgradePlan(tc.steps, tc.nodes)
		var order []int
		last := -1
		for k := range tc.steps {
			for _, i := range after[k] {
				order = append(order, i)
				last = k
			}
		}
		if len(order) != tc.nodes {
			t.Fatalf("%+v: upgrades %v", tc, after)
		}
		for i, n := range order {
			if n != i+1 {
				t.Fatalf("%+v: order %v", tc, order)
			}
		}
		if fin < last || fin >= tc.steps || (last+1 < tc.steps && fin != last+1) {
			t.Fatalf("%+v: finalize after step %d, last upgrade after %d", tc, fin, last)
		}
		if tc.steps >= 2*tc.nodes && last > tc.steps/2 {
			t.Fatalf("%+v: the last upgrade after step %d, past the first half", tc, last)
		}
	}
}

// withUpgrade makes b an upgrade run that went as planned: its nodes
// replaced, the finalize done, every member at version 2.
func (b *builder) withUpgrade() *UpgradeRecord {
	b.run.Upgrade = true
	u := &UpgradeRecord{From: "v0 (older)", Finalized: true, Finalize: &wire.UpgradeStatus{ClusterVersion: 2, Raised: true, RaisedFrom: 1}}
	st := &wire.UpgradeStatus{ClusterVersion: 2, Supported: 2}
	for i := 1; i <= b.run.Nodes; i++ {
		u.Upgraded = append(u.Upgraded, NodeUpgrade{Node: i, AfterStep: i, TNs: int64(i) * nsPerS})
		st.Members = append(st.Members, wire.MemberBuild{Node: uint64(i), Supports: 2})
	}
	u.Status = st
	b.upgrade = u
	return u
}

// TestUpgradeCheck: an upgrade run passes only when every node ran this
// build, the finalize succeeded and every member supports the version
// the cluster ends at.
func TestUpgradeCheck(t *testing.T) {
	const check = "upgrade"
	runFlagCases(t, []flagCase{
		{name: "an upgrade as planned", check: check, kind: kindUpgradeIncomplete, inject: func(b *builder) { b.withUpgrade() }},
		{name: "a node never replaced", check: check, kind: kindUpgradeIncomplete, want: 1, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Upgraded = u.Upgraded[1:]
		}},
		{name: "a node whose replacement failed", check: check, kind: kindUpgradeIncomplete, want: 2, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Upgraded[0].Err = "did not answer"
		}},
		{name: "the finalize refused", check: check, kind: kindUpgradeIncomplete, want: 1, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Finalized, u.Finalize, u.FinalizeErr = false, nil, "conflict: nothing to raise"
		}},
		{name: "an upgrade run without its record", check: check, kind: kindUpgradeIncomplete, want: 1, inject: func(b *builder) {
			b.withUpgrade()
			b.upgrade = nil
		}},
		{name: "the version not raised", check: check, kind: kindUpgradeVersion, want: 1, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Status.ClusterVersion = 1
			for i := range u.Status.Members {
				u.Status.Members[i].Supports = 1
			}
			u.Status.Supported = 1
		}},
		{name: "a member behind the version", check: check, kind: kindUpgradeVersion, want: 2, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Status.Members[2].Supports = 1
			u.Status.Supported = 1
		}},
		{name: "no final status", check: check, kind: kindUpgradeVersion, want: 1, inject: func(b *builder) {
			u := b.withUpgrade()
			u.Status, u.StatusErr = nil, "no node answered"
		}},
	})
}

// A run that is not an upgrade passes the check with a note.
func TestUpgradeCheckNotUpgrade(t *testing.T) {
	ch := findCheck(t, Analyze(base().input()), "upgrade")
	if !ch.OK() || len(ch.Notes) != 1 || !strings.Contains(ch.Notes[0], "not an upgrade run") {
		t.Errorf("ok %v, notes %q", ch.OK(), ch.Notes)
	}
}
