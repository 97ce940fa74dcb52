package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"computerd/core"
)

// maxExecEntries bounds one execs call.
const maxExecEntries = 100

// extra is what the MCP server serves beyond the agent's nine: a harness
// manages its workspace with these (an agent's task never needs them).
var extra = []Tool{
	{
		Name: "fork",
		Description: "Make a new workspace that is a copy of this one (at its newest revision, or at rev). " +
			"It copies no bytes and takes milliseconds; the two then change apart. " +
			"Work in the copy by passing its name as the workspace argument of later calls.",
		Schema: schema(`{"name": {"type": "string", "description": "the new workspace's name"},
			"rev": {"type": "integer", "minimum": 0, "description": "revision to copy (default the newest)"}}`, "name"),
		Mutates: true,
		run:     forkTool,
	},
	{
		Name: "restore",
		Description: "Bring back a path (or, without path, the whole tree) as it was at revision rev, as one new revision. " +
			"Nothing is lost: the revisions in between stay readable (see log and diff).",
		Schema: schema(`{"rev": {"type": "integer", "minimum": 1, "description": "the revision to restore from"},
			"path": {"type": "string", "description": "file or directory to restore (default the whole tree)"}}`, "rev"),
		Mutates: true,
		run:     restoreTool,
	},
	{
		Name: "execs",
		Description: "List the commands run in this workspace (the exec journal), newest first: id, state, exit code, " +
			"duration, the revision their writes became, and the command line. Give an id to exec_show for its output, or to exec_wait to wait for a running one.",
		Schema: schema(`{"limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "how many (default 20)"}}`),
		run:    execsTool,
	},
	{
		Name: "exec_show",
		Description: "Show one command of the exec journal by id: the command, how it ended, its revision and its output (kept for a day), " +
			"from byte offset on if given. It answers at once; a command still running is shown so far (exec_wait waits for more).",
		Schema: schema(`{"id": {"type": "string", "description": "the exec's id, from exec or execs"},
			"offset": {"type": "integer", "minimum": 0, "description": "bytes of output to leave out (default 0)"}}`, "id"),
		run: execShowTool,
	},
}

func forkTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Name string
		Rev  int64
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	ws, err := s.Client.Fork(ctx, s.Workspace, a.Name, a.Rev)
	if err != nil {
		return Result{}, err
	}
	at := "its newest revision"
	if a.Rev > 0 {
		at = fmt.Sprintf("revision %d", a.Rev)
	}
	return Result{Text: fmt.Sprintf("forked %s at %s into %s (whose history starts at its own revision %d); pass workspace %q to work there",
		s.Workspace, at, ws.Name, ws.Head, ws.Name)}, nil
}

func restoreTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Rev  int64
		Path string
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	rev, err := s.Client.Restore(ctx, s.Workspace, a.Rev, a.Path)
	if err != nil {
		return Result{}, err
	}
	what := a.Path
	if what == "" {
		what = "the whole tree"
	}
	return Result{Text: fmt.Sprintf("restored %s from revision %d: revision %d", what, a.Rev, rev.Rev), Rev: rev.Rev}, nil
}

func execsTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct{ Limit int }
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.Limit <= 0 || a.Limit > maxExecEntries {
		a.Limit = 20
	}
	list, err := s.Client.Execs(ctx, s.Workspace, a.Limit)
	if err != nil {
		return Result{}, err
	}
	var b strings.Builder
	for _, e := range list {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", e.ID, execStatus(e), commandLine(e.Argv))
	}
	if len(list) == 0 {
		b.WriteString("(no commands yet)")
	}
	return Result{Text: b.String()}, nil
}

// execStatus is one journal entry's state in a few words.
func execStatus(e core.Exec) string {
	var b strings.Builder
	switch {
	case e.State == core.ExecExited:
		fmt.Fprintf(&b, "exit %d", e.ExitCode)
	case e.Ended.IsZero():
		b.WriteString(string(e.State))
	default:
		fmt.Fprintf(&b, "%s (exit %d)", e.State, e.ExitCode)
	}
	fmt.Fprintf(&b, " %s", e.Duration().Round(time.Millisecond))
	if e.Rev != 0 {
		fmt.Fprintf(&b, " rev %d", e.Rev)
	}
	return b.String()
}

// commandLine shows argv as the model wrote it: exec's own sh -c shows
// only its command.
func commandLine(argv []string) string {
	if len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" {
		return argv[2]
	}
	return strings.Join(argv, " ")
}

// showWait bounds how long exec_show reads a running command's output:
// what is stored arrives at once, so this is a moment, not a wait.
const showWait = 500 * time.Millisecond

func execShowTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		ID     string
		Offset int64
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.ID == "" {
		return Result{}, &argsError{"exec_show: id is required"}
	}
	if a.Offset < 0 {
		return Result{}, &argsError{"exec_show: offset must not be negative"}
	}
	rec, err := s.Client.ExecRecord(ctx, s.Workspace, a.ID)
	if err != nil {
		return Result{}, err
	}
	head := fmt.Sprintf("exec %s: %s\ncommand: %s\nstarted %s from revision %d\n", rec.ID, execStatus(rec), commandLine(rec.Argv),
		rec.Started.UTC().Format(time.RFC3339), rec.BaseRev)
	wait := time.Duration(-1) // an ended exec's stored output, whole
	if rec.Ended.IsZero() {
		wait = showWait
	}
	out := &Clipper{Max: MaxResult - 640}
	w, err := s.Client.FollowExecFor(ctx, s.Workspace, a.ID, a.Offset, wait, outputTo(c, out))
	if err != nil {
		return Result{}, err
	}
	// The command's failure is what the call shows, not the call's own.
	res := watchResult(w, out.String(), a.Offset, -1)
	res.Text, res.IsError, res.Code = head+res.Text, false, ""
	return res, nil
}
