package raftgroup

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/internal/version"
)

// TestApplyVersions: a raise only goes up; a removal is refused below
// version.MemberRemoval and while a cohort names the member, changing
// nothing, and forgets the member for good once allowed (it cannot
// register again; both survive a snapshot).
func TestApplyVersions(t *testing.T) {
	m := with(initialised(2), func(m *Meta) {
		m.Members = map[uint64]Member{1: {ID: 1, Addr: "a:1"}, 2: {ID: 2, Addr: "b:1"}, 3: {ID: 3, Addr: "c:1"}}
		m.Partitions[0] = PartitionInfo{Epoch: 1, Cohort: []uint64{1, 2}, Leader: 1}
	})
	refused := func(name string, c *command, want error) {
		t.Helper()
		before := m.Clone()
		r, changed := applyCommand(&m, c)
		if changed || r.err == nil || !errors.Is(r.err, want) {
			t.Fatalf("%s: err %v, changed %v; want %v", name, r.err, changed, want)
		}
		if !reflect.DeepEqual(m, before) {
			t.Fatalf("%s: a refused command changed the state", name)
		}
	}
	var notYet *version.NotYetError
	before := m.Clone()
	r, _ := applyCommand(&m, &command{Op: opRemoveMember, Remove: 3})
	if !errors.As(r.err, &notYet) || notYet.Cluster != version.Base || !reflect.DeepEqual(m, before) {
		t.Fatalf("removal at Base: %v", r.err)
	}
	r, _ = applyCommand(&m, &command{Op: opRetire, Retire: &retireRecord{ID: 2, On: true}})
	if !errors.As(r.err, &notYet) || !reflect.DeepEqual(m, before) {
		t.Fatalf("retiring at Base: %v", r.err)
	}
	refused("raise to Base", &command{Op: opRaise, ClusterVersion: uint32(version.Base)}, ErrInvalid)
	refused("raise to 0", &command{Op: opRaise}, ErrInvalid)
	if r, changed := applyCommand(&m, &command{Op: opRaise, ClusterVersion: uint32(version.Removal)}); r.err != nil || !changed || m.Version() != version.Removal {
		t.Fatalf("raise: %v %v, now %d", r.err, changed, m.Version())
	}
	refused("raise to the same", &command{Op: opRaise, ClusterVersion: uint32(version.Removal)}, ErrInvalid)
	if r, changed := applyCommand(&m, &command{Op: opRetire, Retire: &retireRecord{ID: 2, On: true}}); r.err != nil || !changed || !r.found || !m.Retiring[2] {
		t.Fatalf("retire 2: %+v %v", r, changed)
	}
	if r, changed := applyCommand(&m, &command{Op: opRetire, Retire: &retireRecord{ID: 2, On: true}}); r.err != nil || changed || !r.found {
		t.Fatalf("retire 2 again: %+v %v", r, changed)
	}
	if r, changed := applyCommand(&m, &command{Op: opRetire, Retire: &retireRecord{ID: 9, On: true}}); r.err != nil || changed || r.found {
		t.Fatalf("retire a stranger: %+v %v", r, changed)
	}
	refused("remove a cohort member", &command{Op: opRemoveMember, Remove: 2}, ErrInvalid)
	if r, changed := applyCommand(&m, &command{Op: opRemoveMember, Remove: 3}); r.err != nil || !changed || !r.found {
		t.Fatalf("remove 3: %+v %v", r, changed)
	}
	if _, ok := m.Members[3]; ok || !m.Removed[3] {
		t.Fatalf("member 3 still registered, or not removed: %v", m.Removed)
	}
	refused("register a removed node again", memberCmd(3, "c:2"), ErrMemberRemoved)
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
	b, err := encodeSnapshot(&m)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeSnapshot(b); err != nil || !reflect.DeepEqual(got.Removed, m.Removed) || !reflect.DeepEqual(got.Retiring, m.Retiring) || got.ClusterVersion != m.ClusterVersion {
		t.Fatalf("snapshot round trip: %v, %v", got.Removed, err)
	}
	if r, changed := applyCommand(&m, &command{Op: opRemoveMember, Remove: 3}); r.err != nil || changed || r.found {
		t.Fatalf("remove 3 again: %+v %v", r, changed)
	}
}

// TestSnapshotVersionField: at Base a snapshot carries no version field,
// so a build before versions (whose decoder refuses unknown keys) reads
// it; above Base it carries the version, which survives the round trip.
func TestSnapshotVersionField(t *testing.T) {
	for _, v := range []uint32{0, uint32(version.Removal)} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			m := with(initialised(1), func(m *Meta) { m.ClusterVersion = v })
			b, err := encodeSnapshot(&m)
			if err != nil {
				t.Fatal(err)
			}
			var keys map[int]cbor.RawMessage
			if err := cbor.Unmarshal(b[1:], &keys); err != nil {
				t.Fatal(err)
			}
			if _, has := keys[9]; has != (v != 0) {
				t.Fatalf("version %d: snapshot keys %v", v, keys)
			}
			got, err := decodeSnapshot(b)
			if err != nil || got.ClusterVersion != v {
				t.Fatalf("decoded %d, %v", got.ClusterVersion, err)
			}
		})
	}
}

// TestFoundingVersion: a cluster founded by a group starts at its
// FoundingVersion (this build's Max by default); one founded at Base
// writes an init a build before versions reads (no version field). Three
// voters agree, and a removal proposed at Base is refused before it is
// proposed.
func TestFoundingVersion(t *testing.T) {
	for _, v := range []version.V{version.Base, version.Max} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			c := newCluster(t, []uint64{1, 2, 3}, func(cfg *Config) {
				if v == version.Base {
					cfg.FoundingVersion = version.Base
				}
			})
			ctx := testCtx(t)
			g := c.groups[c.leader()]
			if _, err := g.Init(ctx, ClusterConfig{ClusterID: "v", Partitions: 2, Replicas: 3, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
			c.converged(g.Meta())
			if got := g.Meta().Version(); got != v {
				t.Fatalf("founded at %d, want %d", got, v)
			}
			if v == version.Base {
				if g.Meta().ClusterVersion != 0 {
					t.Fatalf("Base recorded as %d", g.Meta().ClusterVersion)
				}
				if err := g.PutMember(ctx, Member{ID: 9, Addr: "x:1"}); err != nil {
					t.Fatal(err)
				}
				var notYet *version.NotYetError
				if _, err := g.RemoveMember(ctx, 9); !errors.As(err, &notYet) {
					t.Fatalf("removal at Base: %v", err)
				}
				if err := g.Raise(ctx, version.Removal); err != nil {
					t.Fatal(err)
				}
				if found, err := g.RemoveMember(ctx, 9); err != nil || !found {
					t.Fatalf("removal after the raise: %v %v", found, err)
				}
				c.converged(g.Meta())
			}
		})
	}
}
