package access

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// adminOnly are the client ops no role but the admin's may do. Every
// client op is either here or in a role's list (TestEveryOpDecided): a
// new op is a decision, not an accident.
var adminOnly = []wire.Op{
	wire.OpRequeue, wire.OpLeave, wire.OpGC, wire.OpQueueSet, wire.OpDelete, wire.OpRequeueDead, wire.OpPurgeDead,
	wire.OpGroupCancel, wire.OpScheduleSet, wire.OpScheduleDelete, wire.OpAuthCreate, wire.OpAuthList, wire.OpAuthRevoke,
	wire.OpUpgrade, wire.OpRemoveNode, wire.OpDecommission,
}

// clientOps are the ops of the client protocol (below the peer ops).
func clientOps() []wire.Op {
	var ops []wire.Op
	for op := wire.Op(1); op < wire.OpRaft; op++ {
		if !strings.HasPrefix(op.String(), "op_") { // op_N: no such op
			ops = append(ops, op)
		}
	}
	return ops
}

func TestEveryOpDecided(t *testing.T) {
	ops := clientOps()
	if len(ops) < 35 {
		t.Fatalf("%d client ops found; the op table has more", len(ops))
	}
	for _, op := range ops {
		some := false
		for _, r := range []Role{Producer, Worker, Reader} {
			some = some || slices.Contains(roleOps[r], op)
		}
		if some == slices.Contains(adminOnly, op) {
			t.Errorf("op %s: in a role's list %v, admin-only %v: want exactly one", op, some, !some)
		}
		if !Admin.Allows(op, nil) {
			t.Errorf("the admin may not %s", op)
		}
	}
}

// TestRoles: each role's operations as the issue names them.
func TestRoles(t *testing.T) {
	claim := uint32(0)
	cases := []struct {
		role Role
		op   wire.Op
		req  any
		want bool
	}{
		{Reader, wire.OpGet, nil, true},
		{Reader, wire.OpList, nil, true},
		{Reader, wire.OpEnqueue, nil, false},
		{Reader, wire.OpClaim, nil, false},
		{Producer, wire.OpEnqueue, nil, true},
		{Producer, wire.OpCount, nil, true},
		{Producer, wire.OpClaim, nil, false},
		{Producer, wire.OpCancel, &wire.CancelRequest{}, false},
		{Worker, wire.OpClaim, nil, true},
		{Worker, wire.OpComplete, nil, true},
		{Worker, wire.OpShardJoin, nil, true},
		{Worker, wire.OpEnqueue, nil, false},
		{Worker, wire.OpCancel, &wire.CancelRequest{Claim: &claim}, true},
		{Worker, wire.OpCancel, &wire.CancelRequest{}, false},
		{Worker, wire.OpGC, nil, false},
		{Worker, wire.OpLeave, nil, false},
		{Admin, wire.OpLeave, nil, true},
		{Admin, wire.OpAuthCreate, nil, true},
	}
	for _, c := range cases {
		if got := c.role.Allows(c.op, c.req); got != c.want {
			t.Errorf("%s %s %+v: %v, want %v", c.role, c.op, c.req, got, c.want)
		}
	}
	if _, err := ParseRole("root"); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("ParseRole(root): %v", err)
	}
}

type fakeGroup struct {
	m map[uint64]raftgroup.Credential
}

func (g *fakeGroup) PutCredential(_ context.Context, c raftgroup.Credential) error {
	for _, o := range g.m {
		if o.Name == c.Name {
			return raftgroup.ErrInvalid
		}
	}
	g.m[c.ID] = c
	return nil
}

func (g *fakeGroup) RevokeCredential(_ context.Context, id uint64) (bool, error) {
	_, ok := g.m[id]
	delete(g.m, id)
	return ok, nil
}

// TestAuthorize: the cluster token's holder may do everything; a
// credential what its role allows, until it is revoked; a request with
// no principal nothing; a node without a secret checks nothing. Tokens
// over HTTPS authenticate as the same principals.
func TestAuthorize(t *testing.T) {
	keys, err := wire.DeriveKeys([]byte("0123456789abcdef0123"))
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGroup{m: map[uint64]raftgroup.Credential{}}
	r := New(Config{Enabled: true, ClusterToken: keys.ClientToken, Group: g, Now: func() int64 { return 1 }, Log: testkit.Logger(t)})
	ctx := context.Background()
	admin := wire.WithPrincipal(ctx, wire.Principal{})

	tok, id, ck, err := wire.NewCredentialToken()
	if err != nil {
		t.Fatal(err)
	}
	create := &wire.AuthCreateRequest{ID: id, Name: "w", Role: "worker", StoredKey: ck.Stored[:], ServerKey: ck.Server[:]}
	if _, err := r.Guard(nil, nil).(wire.AuthService).AuthCreate(wire.WithPrincipal(ctx, wire.Principal{Credential: id}), create); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("a create by a credential the node does not hold: %v", err)
	}
	if _, err := r.Create(admin, &wire.AuthCreateRequest{ID: id, Role: "worker", StoredKey: ck.Stored[:], ServerKey: ck.Server[:]}); !errors.Is(err, task.ErrInvalid) || !strings.Contains(err.Error(), "needs a name") {
		t.Fatalf("a create without a name: %v; want invalid, saying so", err)
	}
	if _, err := r.Create(admin, create); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(admin, create); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("the same name again: %v; want invalid", err)
	}
	r.Refresh(g.m)
	worker := wire.WithPrincipal(ctx, wire.Principal{Credential: id})
	for _, c := range []struct {
		ctx  context.Context
		op   wire.Op
		want error
	}{
		{admin, wire.OpGC, nil},
		{worker, wire.OpClaim, nil},
		{worker, wire.OpGC, wire.ErrForbidden},
		{worker, wire.OpAuthList, wire.ErrForbidden},
		{ctx, wire.OpGet, wire.ErrUnauthenticated},
	} {
		if err := r.Authorize(c.ctx, c.op, nil); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: %v; want %v", c.op, err, c.want)
		}
	}
	for tokText, want := range map[string]uint64{wire.FormatToken(tok): id, wire.FormatToken(keys.ClientToken): 0} {
		if p, err := r.Authenticate(tokText); err != nil || p.Credential != want {
			t.Errorf("Authenticate(%s...): %+v, %v; want credential %d", tokText[:8], p, err, want)
		}
	}
	other, _, _, _ := wire.NewCredentialToken()
	for _, bad := range []string{"", "nonsense", wire.FormatToken(other), wire.FormatToken(make([]byte, 32))} {
		if _, err := r.Authenticate(bad); !errors.Is(err, wire.ErrUnauthenticated) {
			t.Errorf("Authenticate(%q): %v; want unauthenticated", bad, err)
		}
	}
	if got := r.List().Credentials; len(got) != 1 || got[0].Name != "w" || got[0].Role != "worker" {
		t.Fatalf("List: %+v", got)
	}

	if _, err := r.Revoke(admin, &wire.AuthRevokeRequest{Name: "nobody"}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("revoke of nobody: %v", err)
	}
	if v, err := r.Revoke(admin, &wire.AuthRevokeRequest{Name: "w"}); err != nil || v.Revoked.ID != id {
		t.Fatalf("revoke: %+v, %v", v, err)
	}
	r.Refresh(g.m)
	if err := r.Authorize(worker, wire.OpClaim, nil); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("a revoked credential's request: %v; want unauthenticated", err)
	}
	if _, err := r.Authenticate(wire.FormatToken(tok)); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("a revoked credential's token: %v", err)
	}

	// While the node starts (its copy of the metadata not loaded), a
	// credential it does not know is put off, not refused: the fault
	// suite saw restarted nodes answer 401 to valid credentials.
	ready := false
	starting := New(Config{Enabled: true, ClusterToken: keys.ClientToken, Group: g, Now: func() int64 { return 1 }, Ready: func() bool { return ready }, Log: testkit.Logger(t)})
	if _, err := starting.Keys(id); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("Keys while starting: %v; want unavailable", err)
	}
	if _, err := starting.Authenticate(wire.FormatToken(tok)); !errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("Authenticate while starting: %v; want unavailable", err)
	}
	if p, err := starting.Authenticate(wire.FormatToken(keys.ClientToken)); err != nil || p.Credential != 0 {
		t.Fatalf("the cluster token while starting: %+v, %v", p, err)
	}
	ready = true
	if _, err := starting.Authenticate(wire.FormatToken(tok)); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("Authenticate once ready: %v; want unauthenticated", err)
	}

	open := New(Config{Log: testkit.Logger(t)})
	if err := open.Authorize(ctx, wire.OpLeave, nil); err != nil || !open.IsAdmin(wire.Principal{Credential: 5}) {
		t.Fatalf("a node without a secret checked: %v", err)
	}
}
