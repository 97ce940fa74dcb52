package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"computerd/core"
	"computerd/wire"
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
			"duration, the revision their writes became, and the command line. Give an id to exec_show for its output.",
		Schema: schema(`{"limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "how many (default 20)"}}`),
		run:    execsTool,
	},
	{
		Name: "exec_show",
		Description: "Show one command of the exec journal by id: how it ended, its revision and its output (kept for a day). " +
			"A command still running answers its state at once, or with wait its output until it ends.",
		Schema: schema(`{"id": {"type": "string", "description": "the exec's id, from exec or execs"},
			"wait": {"type": "boolean", "description": "if it still runs, follow its output until it ends (default false)"}}`, "id"),
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

func execShowTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		ID   string
		Wait bool
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.ID == "" {
		return Result{}, &argsError{"exec_show: id is required"}
	}
	rec, err := s.Client.ExecRecord(ctx, s.Workspace, a.ID)
	if err != nil {
		return Result{}, err
	}
	head := fmt.Sprintf("exec %s: %s\ncommand: %s\nstarted %s from revision %d\n", rec.ID, execStatus(rec), commandLine(rec.Argv),
		rec.Started.UTC().Format(time.RFC3339), rec.BaseRev)
	if rec.Ended.IsZero() && !a.Wait {
		return Result{Text: head + "(still running: call again with wait to follow its output)", ExecID: rec.ID}, nil
	}
	var out strings.Builder
	rec, err = s.Client.FollowExec(ctx, s.Workspace, a.ID, func(ev wire.ExecEvent) error {
		if ev.Type != "output" {
			return nil
		}
		data := ev.Bytes()
		if c.Output != nil {
			c.Output(ev.Stream, data)
		}
		if out.Len() < MaxResult*8 {
			out.Write(data)
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	// The command's failure is what the call shows, not the call's own.
	res := ExecResult(rec, out.String())
	res.Text, res.IsError, res.Code = head+res.Text, false, ""
	return res, nil
}
