package command

import (
	"fmt"
	"io"
	"strconv"

	"github.com/urfave/cli/v2"

	"computerd/core"
	"computerd/fsstore"
)

// tenantCommand shows what tenants store and sets their own quotas; it
// works beside a running computerd serve, which reads a tenant's quota
// at every check.
func tenantCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenant",
		Usage: "show tenants' usage, set a tenant's own quotas",
		Subcommands: []*cli.Command{
			{
				Name: "ls", Usage: "list tenants: bytes stored (workspace content, and records: journal, output logs, runs, memories, skills), workspaces, and their own quotas (default: serve's --quota-bytes and --max-workspaces)",
				Flags: []cli.Flag{dataFlag, jsonFlag},
				Action: withSharedStore(func(c *cli.Context, s *fsstore.Store) error {
					ts, err := s.Tenants(c.Context)
					if err != nil {
						return err
					}
					type row struct {
						Tenant  string               `json:"tenant"`
						Usage   fsstore.Usage        `json:"usage"`
						Setting fsstore.QuotaSetting `json:"setting"`
					}
					rows := make([]row, 0, len(ts))
					for _, t := range ts {
						rows = append(rows, row{t.Name, t.Usage, t.Setting})
					}
					return output(c, rows, func(w io.Writer) {
						fmt.Fprintf(w, "%-20s %12s %12s %12s %10s %10s\n", "TENANT", "BYTES", "RECORDS", "QUOTA", "WORKSPACES", "MAX")
						for _, r := range rows {
							fmt.Fprintf(w, "%-20s %12d %12d %12s %10d %10s\n", r.Tenant, r.Usage.Bytes, r.Usage.Records, settingText(r.Setting.MaxBytes, core.FormatSize),
								r.Usage.Workspaces, settingText(r.Setting.MaxWorkspaces, func(n int64) string { return strconv.FormatInt(n, 10) }))
						}
					})
				}),
			},
			{
				Name: "set", Usage: "give TENANT quotas of its own (each flag: a value, 0 for no limit, or default)", ArgsUsage: "TENANT",
				Flags: []cli.Flag{dataFlag,
					&cli.StringFlag{Name: "quota-bytes", Usage: "bytes it may store (suffixes K, M, G, T)"},
					&cli.StringFlag{Name: "max-workspaces", Usage: "live workspaces it may have"}},
				Action: withSharedStore(func(c *cli.Context, s *fsstore.Store) error {
					if c.NArg() != 1 {
						return fmt.Errorf("usage: computerd tenant set [--quota-bytes SIZE|default] [--max-workspaces N|default] TENANT")
					}
					tenant := c.Args().First()
					set, err := s.QuotaSetting(c.Context, tenant) // flags not given keep their value
					if err != nil {
						return err
					}
					if c.IsSet("quota-bytes") {
						if set.MaxBytes, err = settingArg(c.String("quota-bytes"), core.ParseSize); err != nil {
							return fmt.Errorf("--quota-bytes: %w", err)
						}
					}
					if c.IsSet("max-workspaces") {
						if set.MaxWorkspaces, err = settingArg(c.String("max-workspaces"), func(s string) (int64, error) {
							n, err := strconv.ParseInt(s, 10, 64)
							if err != nil || n < 0 {
								return 0, fmt.Errorf("%q: want a count, 0 for no limit: %w", s, core.ErrInvalidArgument)
							}
							return n, nil
						}); err != nil {
							return fmt.Errorf("--max-workspaces: %w", err)
						}
					}
					return s.SetQuota(c.Context, tenant, set)
				}),
			},
		},
	}
}

// settingArg reads a quota flag: "default" (nil), or a value parse reads.
func settingArg(v string, parse func(string) (int64, error)) (*int64, error) {
	if v == "default" {
		return nil, nil
	}
	n, err := parse(v)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// settingText shows a tenant's own quota: "default", "none" (no limit), or the value.
func settingText(v *int64, format func(int64) string) string {
	switch {
	case v == nil:
		return "default"
	case *v == 0:
		return "none"
	}
	return format(*v)
}
