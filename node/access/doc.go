// Package access owns who may do what on a node with a cluster secret:
// the client credentials, each with a role, kept in the metadata group
// (raftgroup.PutCredential) and read from the copy the node refreshes
// after each change of the group; the proof of a token over HTTPS and
// the keys the QUIC server checks a hello against; and the guard that
// lets each client request through only if its principal's role allows
// its operation. The holder of the cluster token (derived from the
// secret) is the admin: the bootstrap, which creates the credentials.
//
// Revoking a credential takes effect on each node as it applies the
// metadata group's entry (milliseconds after the commit): the guard
// looks the credential up on every request, so a connection opened
// before the revocation is refused from its next request on.
//
// access imports raftgroup, task and wire; it must not reach into the
// node. A node without a secret checks nothing (Config.Enabled).
package access
