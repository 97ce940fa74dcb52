// Package command implements the computerd command line, so tests and
// benchmarks can run it in-process.
package command

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/urfave/cli/v2"

	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/clihelp"
	"computerd/internal/version"
)

// DefaultDataDir is where the store lives unless --data says otherwise:
// /var/lib/computerd for root, else $XDG_DATA_HOME/computerd (or
// ~/.local/share/computerd).
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/computerd"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "computerd")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "computerd")
	}
	return filepath.Join(home, ".local", "share", "computerd")
}

// Run runs the computerd command line with args (args[0] is the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	app := &cli.App{
		Name:                  "computerd",
		Usage:                 "durable workspaces for agents",
		Version:               version.String(),
		Writer:                stdout,
		ErrWriter:             stderr,
		EnableBashCompletion:  true,
		Commands:              commands(),
		CustomAppHelpTemplate: clihelp.AppTemplate(appExamples),
		OnUsageError:          usageError,
	}
	return app.RunContext(ctx, args)
}

// commands are computerd's commands, each with its example and its
// one-line usage errors.
func commands() []*cli.Command {
	cmds := []*cli.Command{serveCommand(), tokenCommand(), tenantCommand(), storeCommand()}
	clihelp.SetExamples(cmds, examples)
	clihelp.Walk(cmds, func(_ string, c *cli.Command) { c.OnUsageError = usageError })
	return cmds
}

var (
	dataFlag   = &cli.StringFlag{Name: "data", Usage: "data directory", Value: DefaultDataDir(), EnvVars: []string{"COMPUTERD_DATA"}}
	tenantFlag = &cli.StringFlag{Name: "tenant", Usage: "tenant owning the workspaces", Value: "local"}
	jsonFlag   = &cli.BoolFlag{Name: "json", Usage: "machine-readable output"}
	revFlag    = &cli.Int64Flag{Name: "rev", Usage: "revision (default: head)"}
)

// openStore opens the store named by --data for one command.
func openStore(c *cli.Context, shared bool) (*fsstore.Store, error) {
	s := fsstore.New(c.String("data"))
	s.Shared = shared
	s.Owner = "computerd " + c.Command.FullName()
	if err := s.Open(c.Context); err != nil {
		return nil, err
	}
	return s, nil
}

// withStore runs fn with the store open, closing it afterwards. The store
// takes the data directory's lock, so a command that writes is refused
// while computerd serve (or another such command) holds it.
func withStore(fn func(c *cli.Context, s *fsstore.Store) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		s, err := openStore(c, false)
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(c, s)
	}
}

// withSharedStore is withStore for commands that only read, or write only
// tokens and tenants' settings: their store opens beside a running
// computerd serve (see fsstore.Store.Shared), reading through SQLite
// transactions that see whole commits. A data directory that holds no
// store is refused, not given an empty one (hasStore).
func withSharedStore(fn func(c *cli.Context, s *fsstore.Store) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := hasStore(c, ""); err != nil {
			return err
		}
		return withNewSharedStore(fn)(c)
	}
}

// withNewSharedStore is withSharedStore that makes the store if --data
// has none.
func withNewSharedStore(fn func(c *cli.Context, s *fsstore.Store) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		s, err := openStore(c, true)
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(c, s)
	}
}

// storeFile is the database a data directory holds once a store was
// made there (fsstore.Store.Open).
const storeFile = "store.db"

// hasStore refuses a --data that holds no store: a token or a tenant's
// quota written there would reach no computerd serve (the usual slip:
// computerd serve on one directory, computerd token create on the
// default one), and a read would show an empty store. hint ends the
// message.
func hasStore(c *cli.Context, hint string) error {
	dir := c.String("data")
	_, err := os.Stat(filepath.Join(dir, storeFile))
	if err == nil {
		return nil
	}
	where := "--data or COMPUTERD_DATA"
	if !c.IsSet("data") {
		where = "the default data directory"
	}
	return fmt.Errorf("no computerd store in %s (%s): pass --data DIR naming the data directory "+
		"computerd serve uses (its log says data=DIR)%s", dir, where, hint)
}

// workspaceArg resolves the workspace named by argument i.
func workspaceArg(c *cli.Context, s *fsstore.Store, i int) (core.Workspace, error) {
	name := c.Args().Get(i)
	if name == "" {
		return core.Workspace{}, fmt.Errorf("missing workspace argument")
	}
	return s.Workspace(c.Context, c.String("tenant"), name)
}

func revArg(c *cli.Context, i int) (int64, error) {
	v := c.Args().Get(i)
	r, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("revision %q: not a number", v)
	}
	return r, nil
}

// output prints v as JSON with --json, else runs the human form.
func output(c *cli.Context, v any, human func(w io.Writer)) error {
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(c.App.Writer)
	return nil
}
