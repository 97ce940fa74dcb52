package command

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/fsstore"
)

// tokenCommand manages bearer tokens in the data directory. Tokens are
// known only to the computerd serving the directory they were made in,
// so a directory without a store is refused, not given a new one (unless
// token create --init asks for it): the token would be of no use.
func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "manage API bearer tokens",
		Subcommands: []*cli.Command{
			{
				Name: "create", Usage: "make a token for TENANT and print it (shown only once)", ArgsUsage: "TENANT",
				Flags: []cli.Flag{dataFlag, jsonFlag,
					&cli.StringSliceFlag{Name: "scope", Usage: "grant more than the tenant's workspaces (repeatable or comma-separated): " +
						strings.Join(fsstore.Scopes, ", ") + " (" + fsstore.ScopeMount + ": host mounts under serve's --mount-root)"},
					&cli.BoolFlag{Name: "init", Usage: "make the store in --data if it has none (before computerd serve first runs there)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("usage: computerd token create [--scope S] [--init] TENANT")
					}
					if !c.Bool("init") {
						if err := hasStore(c, "; or add --init to make a new store there (before computerd serve first runs on it)"); err != nil {
							return err
						}
					}
					return withNewSharedStore(tokenCreate)(c)
				},
			},
			{
				Name: "ls", Usage: "list tokens (ids, tenants, scopes; secrets are not stored)",
				Flags: []cli.Flag{dataFlag, jsonFlag},
				Action: withSharedStore(func(c *cli.Context, s *fsstore.Store) error {
					toks, err := s.Tokens(c.Context)
					if err != nil {
						return err
					}
					return output(c, toks, func(w io.Writer) {
						for _, t := range toks {
							state := "active"
							if t.Revoked {
								state = "revoked"
							}
							scopes := strings.Join(t.Scopes, ",")
							if scopes == "" {
								scopes = "-"
							}
							fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Tenant, scopes, t.Created.Format(time.RFC3339), state)
						}
					})
				}),
			},
			{
				Name: "revoke", Usage: "revoke the token with ID", ArgsUsage: "ID",
				Flags: []cli.Flag{dataFlag},
				Action: withSharedStore(func(c *cli.Context, s *fsstore.Store) error {
					if c.NArg() != 1 {
						return fmt.Errorf("usage: computerd token revoke ID (computerd token ls shows the ids)")
					}
					return s.RevokeToken(c.Context, c.Args().First())
				}),
			},
		},
	}
}

func tokenCreate(c *cli.Context, s *fsstore.Store) error {
	var scopes []string
	for _, sc := range c.StringSlice("scope") {
		scopes = append(scopes, strings.Split(sc, ",")...)
	}
	secret, tok, err := s.CreateToken(c.Context, c.Args().First(), scopes...)
	if err != nil {
		return err
	}
	return output(c, map[string]any{"token": secret, "id": tok.ID, "tenant": tok.Tenant, "scopes": tok.Scopes, "created": tok.Created},
		func(w io.Writer) { fmt.Fprintln(w, secret) })
}
