package access

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/raftgroup"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// Role is what a credential may do.
type Role string

// The roles.
const (
	// Admin may do everything, as the cluster token's holder does.
	Admin Role = "admin"
	// Producer enqueues and reads.
	Producer Role = "producer"
	// Worker claims, acts on its claims (renew, update, complete, fail,
	// snooze, cancel under its claim), joins worker shards, and reads.
	Worker Role = "worker"
	// Reader reads: tasks, queues, the cluster, the metrics, the status
	// page.
	Reader Role = "reader"
)

// Roles lists the roles, most powerful first.
var Roles = []Role{Admin, Producer, Worker, Reader}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	if r := Role(s); slices.Contains(Roles, r) {
		return r, nil
	}
	return "", fmt.Errorf("%w: role %q: want one of %v", task.ErrInvalid, s, Roles)
}

// readOps are the operations every role may do.
var readOps = []wire.Op{
	wire.OpPing, wire.OpGet, wire.OpList, wire.OpCount, wire.OpQueues, wire.OpCluster, wire.OpQueueGet,
	wire.OpGroup, wire.OpHints, wire.OpScheduleList, wire.OpShardMembers,
}

// roleOps is each role's operations but the admin's (all). An operation
// not listed is the admin's alone: a new one is refused to the other
// roles until it is added here.
var roleOps = map[Role][]wire.Op{
	Reader:   readOps,
	Producer: append(slices.Clone(readOps), wire.OpEnqueue),
	Worker: append(slices.Clone(readOps), wire.OpClaim, wire.OpRenew, wire.OpUpdate, wire.OpComplete, wire.OpFail,
		wire.OpSnooze, wire.OpCancel, wire.OpShardJoin, wire.OpShardRenew, wire.OpShardLeave),
}

// Allows reports whether role r may do op with request req: a worker
// cancels only under a claim (its own task), not any task.
func (r Role) Allows(op wire.Op, req any) bool {
	if r == Admin {
		return true
	}
	if !slices.Contains(roleOps[r], op) {
		return false
	}
	if c, ok := req.(*wire.CancelRequest); ok && r == Worker && c.Claim == nil {
		return false
	}
	return true
}

// ops lists what role r may do, for a refusal's message.
func (r Role) ops() []string {
	var out []string
	for _, op := range roleOps[r] {
		out = append(out, op.String())
	}
	return out
}

// metaWriteTimeout bounds a credential's write to the metadata group: a
// group without a majority does not hold an admin's command until the
// client's deadline.
const metaWriteTimeout = 5 * time.Second

// Group is what the registry needs of the metadata group.
type Group interface {
	PutCredential(ctx context.Context, c raftgroup.Credential) error
	RevokeCredential(ctx context.Context, id uint64) (bool, error)
}

// Config configures a Registry.
type Config struct {
	// Enabled: the node has a cluster secret, and checks every client
	// request. Without, everything is allowed (the node is on loopback,
	// or --insecure).
	Enabled bool
	// ClusterToken is the token derived from the secret: the admin's.
	ClusterToken []byte
	// Group holds the credentials.
	Group Group
	// Now is the wall clock in Unix ms (a credential's creation time).
	Now func() int64
	// Ready reports whether the node serves (its copy of the metadata
	// group loaded); nil: always. Before, a credential it does not know
	// is put off (wire.ErrUnavailable), not refused.
	Ready func() bool
	Log   *slog.Logger
}

// Registry is the credentials as this node applies them. Safe for
// concurrent use.
type Registry struct {
	cfg Config
	cur atomic.Pointer[map[uint64]raftgroup.Credential]
}

// New returns a registry, empty until Refresh.
func New(cfg Config) *Registry { return &Registry{cfg: cfg} }

// Enabled reports whether requests are checked.
func (r *Registry) Enabled() bool { return r.cfg.Enabled }

// Refresh takes the credentials of the metadata group's applied state
// (the node calls it after every change; m is not modified afterwards).
func (r *Registry) Refresh(m map[uint64]raftgroup.Credential) { r.cur.Store(&m) }

func (r *Registry) get(id uint64) (raftgroup.Credential, bool) {
	if m := r.cur.Load(); m != nil {
		c, ok := (*m)[id]
		return c, ok
	}
	return raftgroup.Credential{}, false
}

// Keys returns the keys of credential id: the QUIC server's lookup for a
// hello (wire.ServerConfig.Credentials). While the node starts, before
// its copy of the metadata group is loaded, a credential it does not
// know may be one it will: that is wire.ErrUnavailable, which puts the
// client off rather than telling it its token is wrong.
func (r *Registry) Keys(id uint64) (wire.CredentialKeys, error) {
	c, ok := r.get(id)
	switch {
	case ok:
		return wire.CredentialKeys{Stored: c.StoredKey, Server: c.ServerKey}, nil
	case r.cfg.Ready != nil && !r.cfg.Ready():
		return wire.CredentialKeys{}, fmt.Errorf("%w: the node is starting: it does not know credential %016x yet", wire.ErrUnavailable, id)
	}
	return wire.CredentialKeys{}, fmt.Errorf("no credential %016x on this node (revoked, or made a moment ago and not yet known here)", id)
}

// Authenticate returns the principal that token (its text, as a client
// sends it over HTTPS) proves: the cluster token's holder, or a
// credential the node holds. Anything else is wire.ErrUnauthenticated.
func (r *Registry) Authenticate(token string) (wire.Principal, error) {
	tok, err := wire.ParseToken(token)
	if err != nil {
		return wire.Principal{}, fmt.Errorf("%w: %v", wire.ErrUnauthenticated, err)
	}
	if id, ok := wire.CredentialID(tok); ok {
		keys, err := r.Keys(id)
		switch {
		case errors.Is(err, wire.ErrUnavailable):
			return wire.Principal{}, err
		case err != nil:
			return wire.Principal{}, fmt.Errorf("%w: %v", wire.ErrUnauthenticated, err)
		case !wire.CheckCredential(tok, keys):
			return wire.Principal{}, fmt.Errorf("%w: the token does not prove credential %016x", wire.ErrUnauthenticated, id)
		}
		return wire.Principal{Credential: id}, nil
	}
	if r.cfg.ClusterToken == nil || subtle.ConstantTimeCompare(tok, r.cfg.ClusterToken) != 1 {
		return wire.Principal{}, fmt.Errorf("%w: the token is not the cluster's (skuldd ctl token prints it)", wire.ErrUnauthenticated)
	}
	return wire.Principal{}, nil
}

// IsAdmin reports whether p may do everything (the cluster token, or a
// credential with the admin role); always, on a node that checks nothing.
func (r *Registry) IsAdmin(p wire.Principal) bool {
	if !r.cfg.Enabled || p.Credential == 0 {
		return true
	}
	c, ok := r.get(p.Credential)
	return ok && Role(c.Role) == Admin
}

// Authorize returns nil if the principal ctx carries may do op with req,
// else why not (wire.ErrForbidden, or wire.ErrUnauthenticated for a
// credential revoked since its connection proved it, or a request that
// proved nothing).
func (r *Registry) Authorize(ctx context.Context, op wire.Op, req any) error {
	if !r.cfg.Enabled {
		return nil
	}
	p, ok := wire.PrincipalFrom(ctx)
	if !ok {
		return fmt.Errorf("%w: %s: the request proved no token", wire.ErrUnauthenticated, op)
	}
	if p.Credential == 0 {
		return nil
	}
	c, ok := r.get(p.Credential)
	if !ok {
		return fmt.Errorf("%w: credential %016x was revoked", wire.ErrUnauthenticated, p.Credential)
	}
	role := Role(c.Role)
	if !role.Allows(op, req) {
		if op == wire.OpCancel && role == Worker {
			return fmt.Errorf("%w: credential %s (role %s) cancels only under its claim", wire.ErrForbidden, c.Name, role)
		}
		return fmt.Errorf("%w: credential %s (role %s) may not %s; it may %v", wire.ErrForbidden, c.Name, role, op, role.ops())
	}
	return nil
}

// Create adds a credential, made by the client (which keeps its token).
func (r *Registry) Create(ctx context.Context, req *wire.AuthCreateRequest) (*wire.CredentialView, error) {
	role, err := ParseRole(req.Role)
	if err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, fmt.Errorf("%w: a credential needs a name", task.ErrInvalid)
	}
	c := raftgroup.Credential{ID: req.ID, Name: req.Name, Role: string(role), CreatedMs: r.cfg.Now()}
	if len(req.StoredKey) != len(c.StoredKey) || len(req.ServerKey) != len(c.ServerKey) {
		return nil, fmt.Errorf("%w: a credential's keys are %d bytes", task.ErrInvalid, len(c.StoredKey))
	}
	copy(c.StoredKey[:], req.StoredKey)
	copy(c.ServerKey[:], req.ServerKey)
	ctx, cancel := context.WithTimeout(ctx, metaWriteTimeout)
	defer cancel()
	if err := r.cfg.Group.PutCredential(ctx, c); err != nil {
		return nil, metaErr("create credential "+req.Name, err)
	}
	r.cfg.Log.Info("credential created", "credential", req.Name, "id", fmt.Sprintf("%016x", req.ID), "role", role)
	return view(c), nil
}

// List lists the credentials as this node's copy of the metadata group
// holds them, by name.
func (r *Registry) List() *wire.AuthListResponse {
	out := &wire.AuthListResponse{Credentials: []wire.CredentialView{}}
	if m := r.cur.Load(); m != nil {
		for _, c := range *m {
			out.Credentials = append(out.Credentials, *view(c))
		}
	}
	slices.SortFunc(out.Credentials, func(a, b wire.CredentialView) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Revoke removes a credential, named by id or by name.
func (r *Registry) Revoke(ctx context.Context, req *wire.AuthRevokeRequest) (*wire.AuthRevokeResponse, error) {
	var c raftgroup.Credential
	found := false
	if m := r.cur.Load(); m != nil {
		for _, o := range *m {
			if (req.ID != 0 && o.ID == req.ID) || (req.ID == 0 && req.Name != "" && o.Name == req.Name) {
				c, found = o, true
			}
		}
	}
	switch {
	case req.ID == 0 && req.Name == "":
		return nil, fmt.Errorf("%w: revoke: name a credential (id or name)", task.ErrInvalid)
	case !found:
		return nil, fmt.Errorf("%w: no credential %s", task.ErrNotFound, cmp.Or(req.Name, fmt.Sprintf("%016x", req.ID)))
	}
	ctx, cancel := context.WithTimeout(ctx, metaWriteTimeout)
	defer cancel()
	if _, err := r.cfg.Group.RevokeCredential(ctx, c.ID); err != nil {
		return nil, metaErr("revoke credential "+c.Name, err)
	}
	r.cfg.Log.Info("credential revoked", "credential", c.Name, "id", fmt.Sprintf("%016x", c.ID), "role", c.Role)
	return &wire.AuthRevokeResponse{Revoked: *view(c)}, nil
}

// metaErr is a metadata write's error as a client sees it: a refusal is
// invalid; anything else may or may not have committed, and is safe to
// send again (a repeated create says the name is taken).
func metaErr(what string, err error) error {
	if errors.Is(err, raftgroup.ErrInvalid) {
		// The group's refusal says why after its own prefixes.
		msg := err.Error()
		if i := strings.LastIndex(msg, raftgroup.ErrInvalid.Error()+": "); i >= 0 {
			msg = msg[i+len(raftgroup.ErrInvalid.Error())+2:]
		}
		return fmt.Errorf("%w: %s: %s", task.ErrInvalid, what, msg)
	}
	return fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, what, err)
}

func view(c raftgroup.Credential) *wire.CredentialView {
	return &wire.CredentialView{ID: c.ID, Name: c.Name, Role: c.Role, CreatedAt: c.CreatedMs}
}
