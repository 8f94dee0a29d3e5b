package raftgroup

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Client credentials: each names a role, kept in the metadata group so
// that every node checks the same ones, and a revocation reaches every
// node as soon as it applies the entry. The group holds no secret: a
// credential's keys are hashes of its token (StoredKey, ServerKey), from
// which the token cannot be recovered; the token is shown once, to its
// creator (package node/access says how the keys are made and checked).

const (
	// MaxCredentials caps the credentials a cluster holds.
	MaxCredentials = 1024
	// maxCredentialNameBytes bounds a credential's name.
	maxCredentialNameBytes = 128
	// CredentialKeyLen is the length of a credential's keys (SHA-256).
	CredentialKeyLen = 32
)

// Credential is one client credential.
type Credential struct {
	// ID names the credential in its token and in every proof; never 0
	// (0 stands for the cluster token).
	ID uint64
	// Name is the operator's name for it, unique in the cluster.
	Name string
	// Role is what it may do (node/access).
	Role string
	// StoredKey is the SHA-256 of the client key a holder proves;
	// ServerKey is what the node proves back to the holder.
	StoredKey, ServerKey [CredentialKeyLen]byte
	// CreatedMs is when it was made (the creator's clock; shown only).
	CreatedMs int64
}

func (c Credential) validate() error {
	switch {
	case c.ID == 0:
		return fmt.Errorf("%w: credential id 0 (the cluster token's)", ErrInvalid)
	case c.Name == "" || len(c.Name) > maxCredentialNameBytes:
		return fmt.Errorf("%w: credential name of %d bytes: want 1..%d", ErrInvalid, len(c.Name), maxCredentialNameBytes)
	case c.Role == "":
		return fmt.Errorf("%w: credential %s without a role", ErrInvalid, c.Name)
	case c.StoredKey == [CredentialKeyLen]byte{} || c.ServerKey == [CredentialKeyLen]byte{}:
		return fmt.Errorf("%w: credential %s without keys", ErrInvalid, c.Name)
	}
	return nil
}

// PutCredential adds c cluster-wide. An id or a name already taken is
// refused (ErrInvalid), as is the MaxCredentials-th and first.
func (g *Group) PutCredential(ctx context.Context, c Credential) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("raftgroup: put credential: %w", err)
	}
	rec := credentialRecord(c)
	r, err := g.propose(ctx, command{Op: opCredentialPut, CredentialPut: &rec})
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("raftgroup: %w", r.err)
	}
	return nil
}

// RevokeCredential removes credential id cluster-wide; found reports
// whether it existed.
func (g *Group) RevokeCredential(ctx context.Context, id uint64) (found bool, err error) {
	r, err := g.propose(ctx, command{Op: opCredentialRevoke, CredentialRevoke: id})
	if err != nil {
		return false, err
	}
	return r.found, r.err
}

func applyCredentialPut(m *Meta, c Credential) (result, bool) {
	if err := c.validate(); err != nil {
		return result{err: fmt.Errorf("put credential: %w", err)}, false
	}
	if _, taken := m.Credentials[c.ID]; taken {
		return result{err: fmt.Errorf("put credential %s: %w: id %016x is taken", c.Name, ErrInvalid, c.ID)}, false
	}
	for _, o := range m.Credentials {
		if o.Name == c.Name {
			return result{err: fmt.Errorf("put credential: %w: a credential named %s exists (id %016x)", ErrInvalid, c.Name, o.ID)}, false
		}
	}
	if len(m.Credentials) >= MaxCredentials {
		return result{err: fmt.Errorf("put credential %s: %w: %d credentials exist already", c.Name, ErrInvalid, MaxCredentials)}, false
	}
	if m.Credentials == nil {
		m.Credentials = make(map[uint64]Credential)
	}
	m.Credentials[c.ID] = c
	return result{}, true
}

func applyCredentialRevoke(m *Meta, id uint64) (result, bool) {
	if _, ok := m.Credentials[id]; !ok {
		return result{}, false
	}
	delete(m.Credentials, id)
	return result{found: true}, true
}

// checkCredentials checks the registry's invariants: at most
// MaxCredentials, each valid and under its own id, names unique.
func checkCredentials(cs map[uint64]Credential) error {
	if len(cs) > MaxCredentials {
		return fmt.Errorf("%d credentials, limit %d", len(cs), MaxCredentials)
	}
	names := make(map[string]bool, len(cs))
	for id, c := range cs {
		if err := c.validate(); err != nil {
			return err
		}
		if c.ID != id {
			return fmt.Errorf("credential %s kept under id %016x, not its own %016x", c.Name, id, c.ID)
		}
		if names[c.Name] {
			return fmt.Errorf("credential name %s twice", c.Name)
		}
		names[c.Name] = true
	}
	return nil
}

// credentialRecord is a Credential in the log and in snapshots.
type credentialRecord struct {
	ID        uint64                 `cbor:"1,keyasint"`
	Name      string                 `cbor:"2,keyasint"`
	Role      string                 `cbor:"3,keyasint"`
	StoredKey [CredentialKeyLen]byte `cbor:"4,keyasint"`
	ServerKey [CredentialKeyLen]byte `cbor:"5,keyasint"`
	CreatedMs int64                  `cbor:"6,keyasint,omitempty"`
}

// credentialRecords returns cs sorted by id, so equal states encode to
// equal bytes.
func credentialRecords(cs map[uint64]Credential) []credentialRecord {
	out := make([]credentialRecord, 0, len(cs))
	for _, id := range slices.Sorted(maps.Keys(cs)) {
		out = append(out, credentialRecord(cs[id]))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
