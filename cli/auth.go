package cli

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// `skuldd ctl auth`: the client credentials, kept cluster-wide.

func ctlAuthCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "auth",
		Usage: "client credentials, each with a role (admin, producer, worker, reader): create, list, revoke (the cluster token's holder, or an admin credential)",
		Subcommands: []*ucli.Command{
			{
				Name: "create",
				Usage: "make a credential and print its token, once (the token is made here and never sent: the cluster keeps only hashes of it); " +
					"roles: admin (everything), producer (enqueue and read), worker (claim and act on its claims, join shards, read), reader (read and metrics)",
				ArgsUsage: "NAME",
				Flags:     []ucli.Flag{&ucli.StringFlag{Name: "role", Required: true, Usage: "admin, producer, worker or reader"}},
				Action:    ctlActionArgs(1, ctlAuthCreate),
			},
			{
				Name:   "list",
				Usage:  "list the credentials: name, role, id, when made (never a token)",
				Action: ctlAction(ctlAuthList),
			},
			{
				Name:      "revoke",
				Usage:     "revoke a credential, by name: every node refuses it from its next request on, within a second",
				ArgsUsage: "NAME",
				Action:    ctlActionArgs(1, ctlAuthRevoke),
			},
		},
	}
}

// authCreated is what ctl auth create prints: the credential and its
// token, which nothing shows again.
type authCreated struct {
	wire.CredentialView
	Token string `json:"token"`
}

func ctlAuthCreate(e *ctlEnv) error {
	tok, id, keys, err := wire.NewCredentialToken()
	if err != nil {
		return err
	}
	v, err := e.cl.AuthCreate(e.ctx, &wire.AuthCreateRequest{
		ID: id, Name: e.c.Args().First(), Role: e.c.String("role"), StoredKey: keys.Stored[:], ServerKey: keys.Server[:],
	})
	if err != nil {
		return err
	}
	return e.out.Encode(&authCreated{CredentialView: *v, Token: wire.FormatToken(tok)})
}

func ctlAuthList(e *ctlEnv) error {
	resp, err := e.cl.AuthList(e.ctx, &wire.AuthListRequest{})
	if err != nil {
		return err
	}
	for i := range resp.Credentials {
		if err := e.out.Encode(&resp.Credentials[i]); err != nil {
			return err
		}
	}
	return nil
}

func ctlAuthRevoke(e *ctlEnv) error {
	resp, err := e.cl.AuthRevoke(e.ctx, &wire.AuthRevokeRequest{Name: e.c.Args().First()})
	if err != nil {
		return err
	}
	return e.out.Encode(&resp.Revoked)
}
