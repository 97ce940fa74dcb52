// Package command implements agentctl's command line on top of
// package client, so tests drive exactly the code users run.
package command

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"computerd/client"
	"computerd/core"
	"computerd/internal/clihelp"
	"computerd/internal/version"
	"computerd/wire"
)

// DefaultServer is where agentctl looks for computerd unless told otherwise.
const DefaultServer = "http://127.0.0.1:7777"

// IO is what a command reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ExitError carries a specific exit status (a command's, for exec).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Run runs agentctl with args (args[0] is the program name). It returns
// the error to print (nil on success); ExitStatus maps it to a status.
func Run(ctx context.Context, args []string, stdio IO) error {
	_, err := run(ctx, args, stdio)
	return err
}

// Main runs agentctl as the program does: it reports a failure the way
// the caller asked and returns the exit status. With --json the failure
// is one JSON object on stdout, where --json output goes:
// {"code": CODE, "error": MESSAGE} (plus "paths" for a conflict), CODE
// from docs/API.md's table; without it, "agentctl: MESSAGE" on stderr.
// An *ExitError (exec's status, grep's no match) prints nothing.
func Main(ctx context.Context, args []string, stdio IO) int {
	asJSON, err := run(ctx, args, stdio)
	var ee *ExitError
	switch {
	case err == nil, errors.As(err, &ee):
	case asJSON:
		json.NewEncoder(stdio.Stdout).Encode(errorBody(err))
	default:
		fmt.Fprintln(stdio.Stderr, "agentctl:", err)
	}
	return ExitStatus(err)
}

// runState is what a run learns while it parses: whether --json was
// given, and the API client the global flags make.
type runState struct {
	json   bool
	client *client.Client
	args   []string // as given (status tells where a setting came from)
}

type runStateKey struct{}

func run(ctx context.Context, args []string, stdio IO) (asJSON bool, err error) {
	cmds := commands()
	explain(cmds)
	if len(args) > 1 && args[len(args)-1] == completeFlag {
		return false, complete(ctx, cmds, args[1:len(args)-1], stdio.Stdout)
	}
	st := &runState{json: jsonArg(args), args: args}
	app := &cli.App{
		Name:                  "agentctl",
		Usage:                 "drive computerd workspaces: files, revisions, exec, agent runs, MCP",
		Version:               version.String(),
		Reader:                stdio.Stdin,
		Writer:                stdio.Stdout,
		ErrWriter:             stdio.Stderr,
		EnableBashCompletion:  true,
		CustomAppHelpTemplate: clihelp.AppTemplate(appExamples),
		OnUsageError:          onUsageError,
		Flags:                 appFlags(),
		Before: func(c *cli.Context) (err error) {
			st.client, err = newClient(c)
			return err
		},
		Commands:       cmds,
		ExitErrHandler: func(*cli.Context, error) {}, // errors go back to the caller
	}
	err = app.RunContext(context.WithValue(ctx, runStateKey{}, st), flagsFirst(cmds, args))
	var ue *client.UnreachableError
	if errors.As(err, &ue) {
		from := "it is agentctl's default; --server URL or COMPUTER_URL names another"
		if src := serverFrom(args); src != "" {
			from = "it came from " + src
		}
		err = fmt.Errorf("%w (%s)", err, from)
	}
	return st.json, err
}

// appFlags are agentctl's global flags: before the command (--json also after it).
func appFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "computerd URL", Value: DefaultServer, EnvVars: []string{"COMPUTER_URL"}},
		&cli.StringFlag{Name: "token-file", Usage: "a file holding the bearer token (default: $" + wire.TokenEnv + ")", EnvVars: []string{"COMPUTER_TOKEN_FILE"}},
		&cli.StringFlag{Name: "ca", Usage: "the certificate authorities to trust for an https server (PEM; default: the system's)", EnvVars: []string{"COMPUTER_CA"}},
		&cli.StringFlag{Name: "token", Hidden: true}, // refused: see wire.ErrTokenOnCommandLine
		jsonFlag,
	}
}

// jsonArg guesses --json from the raw arguments, for a failure before
// the command's flags are parsed (the parse itself, say).
func jsonArg(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// errorBody is a failure as --json reports it. A server's error keeps its
// code; a local one is classified by the same table, a connection that
// failed is unavailable and a missing local file not_found.
func errorBody(err error) *wire.Error {
	body := wire.ErrorOf(err)
	var we *wire.Error
	var oe *net.OpError
	switch {
	case body.Code != wire.CodeInternal || errors.As(err, &we):
	case errors.As(err, &oe):
		body.Code = wire.CodeUnavailable
	case errors.Is(err, fs.ErrNotExist):
		body.Code = wire.CodeNotFound
	}
	return body
}

// usageError is a command given the wrong arguments.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return core.ErrInvalidArgument }

// ExitStatus is the process exit status for Run's error.
func ExitStatus(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

var (
	jsonFlag = &cli.BoolFlag{Name: "json", Usage: "machine-readable output"}
	revFlag  = &cli.Int64Flag{Name: "rev", Aliases: []string{"r"}, Usage: "revision (default: head)"}
)

// jsonOn reports whether --json was given, before the command (a global
// flag) or after it: a command's own flag shadows the global one in
// c.Bool, so each level is asked.
func jsonOn(c *cli.Context) bool {
	for _, x := range c.Lineage() {
		if x.Bool("json") {
			return true
		}
	}
	return false
}

// cmd builds a command that takes --json and exactly the given arguments.
func cmd(name, usage, args string, minArgs, maxArgs int, action cli.ActionFunc, flags ...cli.Flag) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: args,
		Flags: append(flags, jsonFlag),
		Action: func(c *cli.Context) error {
			if st, ok := c.Context.Value(runStateKey{}).(*runState); ok {
				st.json = jsonOn(c)
			}
			if c.NArg() < minArgs || (maxArgs >= 0 && c.NArg() > maxArgs) {
				return &usageError{fmt.Sprintf("usage: %s %s", clihelp.CommandPath(c), args)}
			}
			return action(c)
		},
	}
}

func commands() []*cli.Command {
	return append(append(append(append(fileCommands(), withUndelivered(execCommands())...), mountCommands()...), agentCommands()...), mcpCommands()...)
}

func fileCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name: "ws", Usage: "create, list, remove and fork workspaces",
			Subcommands: []*cli.Command{
				cmd("create", "make an empty workspace", "NAME", 1, 1, wsCreate),
				cmd("ls", "list workspaces", "", 0, 0, wsList),
				cmd("rm", "remove a workspace and its history (asks first at a terminal)", "WS", 1, 1, wsRemove,
					&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "remove without asking (needed where there is no terminal to ask on)"}),
				cmd("fork", "make NEW a copy of WS (metadata only)", "WS NEW", 2, 2, wsFork, revFlag),
			},
		},
		cmd("attach", "upload a directory, tarball or git work tree as one revision", "WS SRC", 2, 2, attach,
			&cli.StringFlag{Name: "into", Usage: "place SRC under this directory of the workspace"},
			&cli.BoolFlag{Name: "merge", Usage: "keep workspace files that SRC does not have (default: the tree becomes SRC)"},
			&cli.BoolFlag{Name: "no-git", Usage: "take a git work tree's directory as is (default: git's tracked and unignored files, no .git)"},
			&cli.BoolFlag{Name: "progress", Usage: "show a progress bar even when stderr is not a terminal"}),
		cmd("export", "write a tar archive of the workspace to stdout", "WS", 1, 1, export, revFlag,
			&cli.StringFlag{Name: "path", Usage: "export only this subtree"},
			&cli.BoolFlag{Name: "gzip", Aliases: []string{"z"}, Usage: "compress"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to this file instead of stdout"}),
		cmd("read", "print a file", "WS PATH", 2, 2, read, revFlag,
			&cli.Int64Flag{Name: "offset", Usage: "first line to print (1-based)"},
			&cli.Int64Flag{Name: "limit", Usage: "number of lines to print"}),
		cmd("write", "replace a file with stdin (one revision)", "WS PATH", 2, 2, write,
			&cli.StringFlag{Name: "mode", Usage: "permission bits, octal (default 644 for a new file)"},
			&cli.Int64Flag{Name: "base", Usage: "fail with a conflict if PATH changed after this revision"}),
		cmd("edit", "replace a unique string in a file (one revision)", "WS PATH", 2, 2, edit,
			&cli.StringFlag{Name: "old", Usage: "text to replace (must match exactly once unless --all)", Required: true},
			&cli.StringFlag{Name: "new", Usage: "replacement text"},
			&cli.BoolFlag{Name: "all", Usage: "replace every match"}),
		cmd("stat", "describe a path", "WS PATH", 2, 2, stat, revFlag),
		cmd("ls", "list a directory", "WS [PATH]", 1, 2, list, revFlag,
			&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "mode, size, time"},
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"R"}, Usage: "the whole subtree"}),
		cmd("find", "list paths matching a glob (on the name, or on the path below PATH if it has a '/'; ** spans directories)", "WS [PATTERN [PATH]]", 1, 3, find, revFlag,
			&cli.StringFlag{Name: "name", Usage: "the glob, as a flag: then the argument after WS is PATH"},
			&cli.StringFlag{Name: "type", Usage: "f (file), d (directory) or l (symlink)"}),
		cmd("grep", "search file contents with a regular expression", "WS PATTERN [PATH]", 2, 3, grep, revFlag,
			&cli.BoolFlag{Name: "ignore-case", Aliases: []string{"i"}, Usage: "ignore case"},
			&cli.BoolFlag{Name: "line-number", Aliases: []string{"n"}, Usage: "print line numbers"},
			&cli.IntFlag{Name: "context", Aliases: []string{"C"}, Usage: "lines of context around matches"},
			&cli.StringFlag{Name: "glob", Usage: "only files matching this glob"},
			&cli.IntFlag{Name: "max", Usage: "stop after this many matches"}),
		cmd("rm", "remove files or directories (one revision)", "WS PATH...", 2, -1, remove,
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "remove directories and their contents"}),
		cmd("mkdir", "make directories (one revision)", "WS PATH...", 2, -1, mkdir,
			&cli.BoolFlag{Name: "parents", Aliases: []string{"p"}, Usage: "make missing parents; no error if it exists"}),
		cmd("mv", "rename a file or directory (one revision)", "WS SRC DST", 3, 3, move,
			&cli.BoolFlag{Name: "no-clobber", Aliases: []string{"n"}, Usage: "fail if DST exists"}),
		cmd("log", "list revisions, newest first", "WS", 1, 1, logCmd,
			&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Usage: "at most this many"}),
		cmd("diff", "show changes between revisions (default: the last one)", "WS [R1 [R2]]", 1, 3, diff,
			&cli.BoolFlag{Name: "stat", Usage: "a summary per file"}),
		cmd("completion", "print a bash or zsh completion script (commands, flags, workspace names): source <(agentctl completion bash)", "bash|zsh", 1, 1, completion),
		statusCommand(),
		cmd("restore", "bring back PATH (or everything) as it was at --rev (one revision)", "WS [PATH]", 1, 2, restore,
			&cli.Int64Flag{Name: "rev", Aliases: []string{"r"}, Usage: "revision to restore from", Required: true}),
	}
}

// newClient makes the API client of the global flags: the token from
// --token-file or COMPUTER_TOKEN (never from the command line), the
// server's certificate checked against --ca or the system's roots.
func newClient(c *cli.Context) (*client.Client, error) {
	if c.IsSet("token") {
		return nil, &usageError{wire.ErrTokenOnCommandLine.Error()}
	}
	token, err := wire.ReadToken(c.String("token-file"))
	if err != nil {
		return nil, err
	}
	tr, err := wire.NewTransport(c.String("ca"))
	if err != nil {
		return nil, err
	}
	server, err := serverURL(c.String("server"))
	if err != nil {
		return nil, err
	}
	cl := client.New(server, token)
	cl.HTTP.Transport = tr
	return cl, nil
}

// serverFrom says where the server's URL came from in args and the
// environment: "--server", "COMPUTER_URL", or "" (the default).
func serverFrom(args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "server" && strings.HasPrefix(a, "-") {
			return "--server"
		}
	}
	if _, ok := os.LookupEnv("COMPUTER_URL"); ok {
		return "COMPUTER_URL"
	}
	return ""
}

// serverURL checks --server (COMPUTER_URL): an http or https URL that
// names a host. Without its scheme, 127.0.0.1:7777 would read as a path
// (or localhost:7777 as a URL of scheme "localhost").
func serverURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return s, nil
	}
	like := "http://127.0.0.1:7777"
	if !strings.Contains(s, "://") && s != "" {
		like = "http://" + s
	}
	return "", &usageError{fmt.Sprintf("server %q (--server or COMPUTER_URL): want an http:// or https:// URL, such as %s", s, like)}
}

// clientOf is the API client the global flags made.
func clientOf(c *cli.Context) *client.Client {
	return stateOf(c).client
}

// stateOf is what the run learnt while it parsed.
func stateOf(c *cli.Context) *runState { return c.Context.Value(runStateKey{}).(*runState) }

// output prints v as JSON with --json, else the human form.
func output(c *cli.Context, v any, human func(w io.Writer)) error {
	if jsonOn(c) {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(c.App.Writer)
	return nil
}

// revision reports a committed revision.
func revision(c *cli.Context, rev core.Revision) error {
	return output(c, rev, func(w io.Writer) {
		if rev.Rev == 0 {
			fmt.Fprintln(w, "nothing changed")
			return
		}
		fmt.Fprintf(w, "revision %d\n", rev.Rev)
	})
}

func wsCreate(c *cli.Context) error {
	ws, err := clientOf(c).CreateWorkspace(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return output(c, ws, func(w io.Writer) { fmt.Fprintf(w, "created %s\n", ws.Name) })
}

func wsList(c *cli.Context) error {
	list, err := clientOf(c).Workspaces(c.Context)
	if err != nil {
		return err
	}
	names := make(map[int64]string, len(list))
	for _, ws := range list {
		names[ws.ID] = ws.Name
	}
	return output(c, list, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tHEAD\tCREATED\tFORKED FROM")
		for _, ws := range list {
			from := ""
			if ws.BaseID != 0 {
				// WS@REV, as ws fork --rev takes them; a removed origin
				// has no name left.
				origin, ok := names[ws.BaseID]
				if !ok {
					origin = "(removed)"
				}
				from = fmt.Sprintf("%s@%d", origin, ws.BaseRev)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", ws.Name, ws.Head, ws.Created.Format(time.RFC3339), from)
		}
		tw.Flush()
	})
}

// wsRemove removes a workspace and all its history, which nothing
// brings back: at a terminal it asks first; elsewhere (a script, an
// agent's tool call) only --yes removes it.
func wsRemove(c *cli.Context) error {
	name := c.Args().First()
	cl := clientOf(c)
	if !c.Bool("yes") {
		ws, err := cl.Workspace(c.Context, name)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("workspace %s and all its history (revisions 1 to %d)", name, ws.Head)
		if !isTerminal(c.App.Reader) {
			return &usageError{fmt.Sprintf("ws rm removes %s for good: add --yes to remove it (there is no terminal here to ask on)", what)}
		}
		if !confirm(c.App.Reader, c.App.ErrWriter, "remove "+what+"?") {
			return fmt.Errorf("ws rm: %s kept", name)
		}
	}
	if err := cl.DeleteWorkspace(c.Context, name); err != nil {
		return err
	}
	return output(c, map[string]string{"removed": name}, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", name) })
}

func wsFork(c *cli.Context) error {
	ws, err := clientOf(c).Fork(c.Context, c.Args().Get(0), c.Args().Get(1), c.Int64("rev"))
	if err != nil {
		return err
	}
	return output(c, ws, func(w io.Writer) { fmt.Fprintf(w, "forked %s from %s\n", ws.Name, c.Args().Get(0)) })
}

// maxJSONRead bounds the file read --json puts in one JSON string.
const maxJSONRead = 64 << 20

func read(c *cli.Context) error {
	body, err := clientOf(c).Read(c.Context, c.Args().Get(0), c.Args().Get(1),
		client.ReadOptions{Rev: c.Int64("rev"), Line: c.Int64("offset"), Lines: c.Int64("limit")})
	if err != nil {
		return err
	}
	defer body.Close()
	if !jsonOn(c) {
		_, err = io.Copy(c.App.Writer, body)
		return err
	}
	data, err := io.ReadAll(io.LimitReader(body, maxJSONRead+1))
	if err != nil {
		return err
	}
	if len(data) > maxJSONRead {
		return fmt.Errorf("read --json: over %d bytes; read without --json to stream it", maxJSONRead)
	}
	out := map[string]any{"path": c.Args().Get(1)}
	if utf8.Valid(data) {
		out["content"] = string(data)
	} else {
		out["content_base64"] = data
	}
	return output(c, out, nil)
}

func write(c *cli.Context) error {
	opt := client.WriteOptions{Base: c.Int64("base")}
	if m := c.String("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			return fmt.Errorf("--mode %q: want octal permission bits such as 644", m)
		}
		opt.Mode = uint32(v)
	}
	rev, err := clientOf(c).Write(c.Context, c.Args().Get(0), c.Args().Get(1), c.App.Reader, opt)
	if err != nil {
		return err
	}
	return revision(c, rev)
}

func edit(c *cli.Context) error {
	res, err := clientOf(c).Edit(c.Context, c.Args().Get(0), wire.Edit{
		Path: c.Args().Get(1), Old: c.String("old"), New: c.String("new"), All: c.Bool("all"),
	})
	if err != nil {
		return err
	}
	return output(c, res, func(w io.Writer) {
		fmt.Fprintf(w, "replaced %d, revision %d\n", res.Replacements, res.Revision.Rev)
	})
}

func stat(c *cli.Context) error {
	st, err := clientOf(c).Stat(c.Context, c.Args().Get(0), c.Args().Get(1), c.Int64("rev"))
	if err != nil {
		return err
	}
	return output(c, st, func(w io.Writer) {
		fmt.Fprintf(w, "%s\n  mode %s  size %d  inode %d  links %d  uid %d  gid %d\n  modified %s\n",
			displayName(st.Path), st.Mode, st.Size, st.Ino, st.Nlink, st.UID, st.GID, st.Mtime.Format(time.RFC3339Nano))
		if st.Target != "" {
			fmt.Fprintf(w, "  -> %s\n", st.Target)
		}
	})
}

func displayName(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// list prints a listing as the server streams it (with --json, as one
// array once it is whole).
func list(c *cli.Context) error {
	recursive := c.Bool("recursive")
	cl, ws, p := clientOf(c), c.Args().Get(0), c.Args().Get(1)
	if jsonOn(c) {
		ents, err := cl.List(c.Context, ws, p, c.Int64("rev"), recursive)
		if err != nil {
			return err
		}
		return output(c, ents, nil)
	}
	root := strings.Trim(p, "/")
	w := bufio.NewWriter(c.App.Writer)
	defer w.Flush()
	return cl.ListEach(c.Context, ws, p, c.Int64("rev"), recursive, func(e core.Stat) error {
		name := e.Name
		if recursive {
			name = strings.TrimPrefix(strings.TrimPrefix(e.Path, root), "/")
		}
		switch {
		case e.IsDir():
			name += "/"
		case e.Mode&fs.ModeSymlink != 0 && c.Bool("long"):
			name += " -> " + e.Target
		}
		var err error
		if c.Bool("long") {
			_, err = fmt.Fprintf(w, "%s %10d %s %s\n", e.Mode, e.Size, e.Mtime.Format("2006-01-02 15:04"), name)
		} else {
			_, err = fmt.Fprintln(w, name)
		}
		return err
	})
}

// find prints the paths found as the server streams them (with --json, as
// one array once it is whole).
// find takes its glob as grep takes its pattern, after WS (or as --name,
// and then the argument after WS is the directory).
func find(c *cli.Context) error {
	opt := client.FindOptions{Name: c.Args().Get(1), Path: c.Args().Get(2), Type: c.String("type"), Rev: c.Int64("rev")}
	if c.IsSet("name") {
		if c.NArg() > 2 {
			return &usageError{"usage: agentctl find WS [PATTERN [PATH]] (or WS [PATH] --name PATTERN)"}
		}
		opt.Name, opt.Path = c.String("name"), c.Args().Get(1)
	}
	cl, ws := clientOf(c), c.Args().Get(0)
	if jsonOn(c) {
		paths, err := cl.Find(c.Context, ws, opt)
		if err != nil {
			return err
		}
		return output(c, paths, nil)
	}
	w := bufio.NewWriter(c.App.Writer)
	defer w.Flush()
	return cl.FindEach(c.Context, ws, opt, func(p string) error {
		_, err := fmt.Fprintln(w, p)
		return err
	})
}

func grep(c *cli.Context) error {
	opt := client.GrepOptions{
		Pattern: c.Args().Get(1), Path: c.Args().Get(2), Glob: c.String("glob"),
		IgnoreCase: c.Bool("ignore-case"), Context: c.Int("context"), Max: c.Int("max"), Rev: c.Int64("rev"),
	}
	asJSON, numbers := jsonOn(c), c.Bool("line-number")
	enc := json.NewEncoder(c.App.Writer)
	matches := 0
	err := clientOf(c).Grep(c.Context, c.Args().Get(0), opt, func(m wire.Match) error {
		if !m.Context && !m.Break {
			matches++
		}
		if asJSON {
			return enc.Encode(m)
		}
		sep := ":"
		if m.Context {
			sep = "-"
		}
		switch {
		case m.Break:
			_, err := fmt.Fprintln(c.App.Writer, "--")
			return err
		case numbers:
			_, err := fmt.Fprintf(c.App.Writer, "%s%s%d%s%s\n", m.Path, sep, m.Line, sep, m.Text)
			return err
		default:
			_, err := fmt.Fprintf(c.App.Writer, "%s%s%s\n", m.Path, sep, m.Text)
			return err
		}
	})
	if err != nil {
		return err
	}
	if matches == 0 {
		return &ExitError{Code: 1} // like grep: no match is status 1
	}
	return nil
}

func remove(c *cli.Context) error {
	cl := clientOf(c)
	ws := c.Args().First()
	var ops []core.Op
	for _, p := range c.Args().Tail() {
		if c.Bool("recursive") {
			// delete_all ignores a missing path; rm -r does not.
			if _, err := cl.Stat(c.Context, ws, p, 0); err != nil {
				return err
			}
			ops = append(ops, core.Op{Kind: core.OpDeleteAll, Path: p})
		} else {
			ops = append(ops, core.Op{Kind: core.OpDelete, Path: p})
		}
	}
	rev, err := cl.Ops(c.Context, ws, wire.Ops{Ops: ops})
	if err != nil {
		return err
	}
	return revision(c, rev)
}

func mkdir(c *cli.Context) error {
	cl := clientOf(c)
	ws := c.Args().First()
	var ops []core.Op
	seen := map[string]bool{}
	for _, p := range c.Args().Tail() {
		clean, err := core.CleanPath(p)
		if err != nil {
			return err
		}
		dirs := []string{clean}
		if c.Bool("parents") {
			dirs = dirs[:0]
			for d := clean; d != "" && d != "."; d = path.Dir(d) {
				dirs = append([]string{d}, dirs...)
			}
		}
		for _, d := range dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if c.Bool("parents") {
				st, err := cl.Stat(c.Context, ws, d, 0)
				if err == nil && st.IsDir() {
					continue
				}
				if err != nil && !errors.Is(err, core.ErrNotFound) {
					return err
				}
			}
			ops = append(ops, core.Op{Kind: core.OpMkdir, Path: d, Mode: 0o755})
		}
	}
	if len(ops) == 0 {
		return revision(c, core.Revision{})
	}
	rev, err := cl.Ops(c.Context, ws, wire.Ops{Ops: ops})
	if err != nil {
		return err
	}
	return revision(c, rev)
}

func move(c *cli.Context) error {
	op := core.Op{Kind: core.OpRename, From: c.Args().Get(1), Path: c.Args().Get(2), NoReplace: c.Bool("no-clobber")}
	rev, err := clientOf(c).Ops(c.Context, c.Args().Get(0), wire.Ops{Ops: []core.Op{op}})
	if err != nil {
		return err
	}
	return revision(c, rev)
}

func logCmd(c *cli.Context) error {
	revs, err := clientOf(c).Log(c.Context, c.Args().First(), c.Int("limit"))
	if err != nil {
		return err
	}
	return output(c, revs, func(w io.Writer) {
		for _, r := range revs {
			line := fmt.Sprintf("%4d  %s  %-7s %-10s %3d changes", r.Rev, r.Time.Format("2006-01-02 15:04:05"), r.Source, r.Tenant, r.Changes)
			if r.ExecID != "" {
				line += "  exec " + r.ExecID
			}
			if r.Message != "" {
				line += "  " + r.Message
			}
			fmt.Fprintln(w, line)
		}
	})
}

func diff(c *cli.Context) error {
	var revs [2]int64
	for i := range revs {
		if v := c.Args().Get(i + 1); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("revision %q: want a positive number", v)
			}
			revs[i] = n
		}
	}
	from, to := revs[0], revs[1]
	if from > 0 && to == 0 {
		// One revision: what changed from it to the head.
		ws, err := clientOf(c).Workspace(c.Context, c.Args().First())
		if err != nil {
			return err
		}
		to = ws.Head
	}
	cl := clientOf(c)
	if c.Bool("stat") || jsonOn(c) {
		files, err := cl.DiffStat(c.Context, c.Args().First(), from, to)
		if err != nil {
			return err
		}
		return output(c, files, func(w io.Writer) { core.WriteStat(w, files) })
	}
	body, err := cl.Diff(c.Context, c.Args().First(), from, to)
	if err != nil {
		return err
	}
	defer body.Close()
	_, err = io.Copy(c.App.Writer, body)
	return err
}

func restore(c *cli.Context) error {
	rev, err := clientOf(c).Restore(c.Context, c.Args().Get(0), c.Int64("rev"), c.Args().Get(1))
	if err != nil {
		return err
	}
	return revision(c, rev)
}
