package wire

import (
	"context"
	"errors"
)

// The client credentials' API (node/access serves it; admin only).

// AuthCreateRequest adds a credential. Its creator made the token and
// sends only the keys a node keeps (NewCredentialToken): the token never
// crosses the network.
type AuthCreateRequest struct {
	ID        uint64 `cbor:"1,keyasint" json:"id,string"`
	Name      string `cbor:"2,keyasint" json:"name"`
	Role      string `cbor:"3,keyasint" json:"role"`
	StoredKey []byte `cbor:"4,keyasint" json:"stored_key"`
	ServerKey []byte `cbor:"5,keyasint" json:"server_key"`
}

// CredentialView is a credential as listed: never its keys.
type CredentialView struct {
	ID   uint64 `cbor:"1,keyasint" json:"id,string"`
	Name string `cbor:"2,keyasint" json:"name"`
	Role string `cbor:"3,keyasint" json:"role"`
	// CreatedAt is when it was made, Unix ms.
	CreatedAt int64 `cbor:"4,keyasint,omitempty" json:"created_at,omitempty"`
}

// AuthListRequest lists the credentials.
type AuthListRequest struct{}

// AuthListResponse lists the credentials, by name.
type AuthListResponse struct {
	Credentials []CredentialView `cbor:"1,keyasint" json:"credentials"`
}

// AuthRevokeRequest revokes one credential, by id or by name.
type AuthRevokeRequest struct {
	ID   uint64 `cbor:"1,keyasint,omitempty" json:"id,omitempty,string"`
	Name string `cbor:"2,keyasint,omitempty" json:"name,omitempty"`
}

// AuthRevokeResponse says which credential a revocation removed.
type AuthRevokeResponse struct {
	Revoked CredentialView `cbor:"1,keyasint" json:"revoked"`
}

// AuthService manages the client credentials. A node's client API
// implements it besides Service (ServiceHandler and package httpapi
// serve it when the Service they are given does).
type AuthService interface {
	AuthCreate(ctx context.Context, req *AuthCreateRequest) (*CredentialView, error)
	AuthList(ctx context.Context, req *AuthListRequest) (*AuthListResponse, error)
	AuthRevoke(ctx context.Context, req *AuthRevokeRequest) (*AuthRevokeResponse, error)
}

// AuthCreate adds a credential.
func (cl *Client) AuthCreate(ctx context.Context, req *AuthCreateRequest) (*CredentialView, error) {
	return invoke[CredentialView](ctx, cl, OpAuthCreate, req)
}

// AuthList lists the credentials.
func (cl *Client) AuthList(ctx context.Context, req *AuthListRequest) (*AuthListResponse, error) {
	return invoke[AuthListResponse](ctx, cl, OpAuthList, req)
}

// AuthRevoke revokes a credential.
func (cl *Client) AuthRevoke(ctx context.Context, req *AuthRevokeRequest) (*AuthRevokeResponse, error) {
	return invoke[AuthRevokeResponse](ctx, cl, OpAuthRevoke, req)
}

// Principal is who a client request comes from: the holder of the
// cluster token (Credential 0; on a node without a secret, anyone), or of
// a credential.
type Principal struct {
	Credential uint64
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p: the transports set it on each
// client request once the client proved who it is.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries; ok is false when none
// was set (a request from inside the node, or a node without a secret).
func PrincipalFrom(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// ErrForbidden: the request's credential does not allow the operation.
var ErrForbidden = errors.New("forbidden")

// ErrUnauthenticated: the request proved no credential the node holds
// (HTTP 401).
var ErrUnauthenticated = errors.New("unauthenticated")

// authDispatch serves an AuthService op; handled is false for other ops.
func authDispatch(ctx context.Context, svc Service, req *Request) (resp any, handled bool, err error) {
	var fn func() (any, error)
	as, ok := svc.(AuthService)
	switch req.Op {
	case OpAuthCreate:
		fn = func() (any, error) { return call(ctx, req, as.AuthCreate) }
	case OpAuthList:
		fn = func() (any, error) { return call(ctx, req, as.AuthList) }
	case OpAuthRevoke:
		fn = func() (any, error) { return call(ctx, req, as.AuthRevoke) }
	default:
		return nil, false, nil
	}
	if !ok {
		return nil, true, Errorf(CodeUnknownOp, "op %s: this node serves no credentials", req.Op)
	}
	resp, err = fn()
	return resp, true, err
}
