package raftgroup

import (
	"errors"
	"reflect"
	"testing"
)

// TestApplyCredentials: a credential is added under its id, refused when
// its id or name is taken, incomplete or past the cap (changing
// nothing); a revocation removes it once; the registry survives a
// snapshot and a command's encoding.
func TestApplyCredentials(t *testing.T) {
	m := initialised(1)
	key := func(b byte) (k [CredentialKeyLen]byte) {
		k[0] = b
		return k
	}
	alice := Credential{ID: 7, Name: "alice", Role: "worker", StoredKey: key(1), ServerKey: key(2), CreatedMs: 1000}
	steps := []struct {
		name    string
		c       Credential
		changed bool
	}{
		{"alice", alice, true},
		{"her id again", Credential{ID: 7, Name: "bob", Role: "reader", StoredKey: key(3), ServerKey: key(4)}, false},
		{"her name again", Credential{ID: 8, Name: "alice", Role: "reader", StoredKey: key(3), ServerKey: key(4)}, false},
		{"id 0", Credential{ID: 0, Name: "zero", Role: "reader", StoredKey: key(3), ServerKey: key(4)}, false},
		{"no keys", Credential{ID: 9, Name: "keyless", Role: "reader"}, false},
		{"no role", Credential{ID: 9, Name: "roleless", StoredKey: key(3), ServerKey: key(4)}, false},
		{"bob", Credential{ID: 8, Name: "bob", Role: "reader", StoredKey: key(3), ServerKey: key(4)}, true},
	}
	for _, s := range steps {
		before := m.Clone()
		r, changed := applyCredentialPut(&m, s.c)
		if changed != s.changed || (r.err == nil) != s.changed {
			t.Fatalf("%s: err %v, changed %v; want changed %v", s.name, r.err, changed, s.changed)
		}
		if !changed {
			if !errors.Is(r.err, ErrInvalid) {
				t.Fatalf("%s: %v; want ErrInvalid", s.name, r.err)
			}
			if !reflect.DeepEqual(m, before) {
				t.Fatalf("%s: a refused put changed the state", s.name)
			}
		}
		if err := m.check(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if m.Credentials[7] != alice {
		t.Fatalf("alice: %+v", m.Credentials[7])
	}

	b, err := encodeSnapshot(&m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(b)
	if err != nil || !reflect.DeepEqual(got.Credentials, m.Credentials) {
		t.Fatalf("snapshot: %+v, %v; want %+v", got.Credentials, err, m.Credentials)
	}
	cb, err := encodeCommand(&command{Op: opCredentialPut, CredentialPut: ptr(credentialRecord(alice))})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := decodeCommand(cb); err != nil || Credential(*c.CredentialPut) != alice {
		t.Fatalf("command: %+v, %v", c.CredentialPut, err)
	}

	if r, changed := applyCommand(&m, &command{Op: opCredentialRevoke, CredentialRevoke: 7}); !changed || !r.found || r.err != nil {
		t.Fatalf("revoke alice: %+v, %v", r, changed)
	}
	if r, changed := applyCommand(&m, &command{Op: opCredentialRevoke, CredentialRevoke: 7}); changed || r.found {
		t.Fatalf("revoke alice again: %+v, %v; want nothing found", r, changed)
	}
	if _, ok := m.Credentials[7]; ok || len(m.Credentials) != 1 {
		t.Fatalf("after the revocation: %+v", m.Credentials)
	}
	// Past the cap.
	for i := range MaxCredentials - 1 {
		id := uint64(100 + i)
		m.Credentials[id] = Credential{ID: id, Name: "c" + string(rune('a'+i%26)) + string(rune(i)), Role: "reader", StoredKey: key(1), ServerKey: key(1)}
	}
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
	if r, changed := applyCredentialPut(&m, Credential{ID: 5, Name: "one-more", Role: "reader", StoredKey: key(1), ServerKey: key(1)}); changed || !errors.Is(r.err, ErrInvalid) {
		t.Fatalf("past the cap: %v, %v", r.err, changed)
	}
}
