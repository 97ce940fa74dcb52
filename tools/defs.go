package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// Limits on what one call may ask for.
const (
	maxReadLines  = 2000
	maxGrepLines  = 500
	maxFindPaths  = 1000
	maxLogEntries = 100
	// DefaultExecTimeout applies when a model gives exec no timeout.
	DefaultExecTimeout = 10 * time.Minute
	// DefaultExecWait is how long exec and exec_wait wait for a command
	// to end before answering that it still runs (Set.ExecWait): well
	// under the 60 s a harness commonly allows a tool call.
	DefaultExecWait = 30 * time.Second
	// MaxExecWait bounds the wait a call may ask for.
	MaxExecWait = time.Hour
)

// all is the tool set, in the order a model sees it.
var all = []Tool{
	{
		Name: "read",
		Description: "Read a text file of the workspace. Lines come numbered (\"N\\t\" before each). " +
			"For a large file give offset (first line, from 1) and limit (number of lines); at most 2000 lines per call.",
		Schema: schema(`{"path": {"type": "string", "description": "file path relative to the workspace root"},
			"offset": {"type": "integer", "minimum": 1, "description": "first line to read (default 1)"},
			"limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "lines to read (default 2000)"}}`, "path"),
		run: readTool,
	},
	{
		Name:        "write",
		Description: "Create a file, or replace a file's whole contents. Missing parent directories are created. One revision.",
		Schema: schema(`{"path": {"type": "string", "description": "file path relative to the workspace root"},
			"content": {"type": "string", "description": "the file's new contents"}}`, "path", "content"),
		Mutates: true,
		Keyed:   true,
		run:     writeTool,
	},
	{
		Name: "edit",
		Description: "Replace text in a file: old must occur exactly once (give more surrounding lines to make it unique), " +
			"or set all to replace every occurrence. One revision.",
		Schema: schema(`{"path": {"type": "string"}, "old": {"type": "string", "description": "exact text to replace"},
			"new": {"type": "string", "description": "replacement text"},
			"all": {"type": "boolean", "description": "replace every occurrence (default false)"}}`, "path", "old", "new"),
		Mutates: true,
		Keyed:   true,
		run:     editTool,
	},
	{
		Name:        "ls",
		Description: "List a directory of the workspace: one entry per line, directories end with /, with sizes.",
		Schema:      schema(`{"path": {"type": "string", "description": "directory (default the root)"}}`),
		run:         lsTool,
	},
	{
		Name: "find",
		Description: "Find paths by name: name is a glob on the base name (\"*.go\"), or on the path when it has a slash " +
			"(\"cmd/**/main.go\"). At most 1000 paths.",
		Schema: schema(`{"name": {"type": "string", "description": "glob"}, "path": {"type": "string", "description": "where to look (default the root)"},
			"type": {"type": "string", "enum": ["f", "d", "l"], "description": "only files, directories or symlinks"}}`),
		run: findTool,
	},
	{
		Name:        "grep",
		Description: "Search file contents with a regular expression (RE2 syntax). Answers path:line:text, at most 500 lines.",
		Schema: schema(`{"pattern": {"type": "string"}, "path": {"type": "string", "description": "where to look (default the root)"},
			"glob": {"type": "string", "description": "only files whose name matches, e.g. *.go"},
			"ignore_case": {"type": "boolean"}, "context": {"type": "integer", "minimum": 0, "maximum": 10, "description": "lines of context around each match"}}`, "pattern"),
		run: grepTool,
	},
	{
		Name: "exec",
		Description: "Run a shell command (sh -c) in a fresh sandbox whose /workspace is the workspace; the working directory is /workspace " +
			"(or cwd beneath it). Its writes become one revision. No network. Answers the exit code and the output (long output keeps its head and tail). " +
			"A command still running after wait seconds (default {wait}) goes on: the answer then holds its output so far, its exec id and an offset; " +
			"call exec_wait with them to wait for more.",
		Schema: schema(`{"command": {"type": "string", "description": "the command line"},
			"timeout": {"type": "string", "description": "a duration such as 30s or 5m (default 10m): the command is killed after it"},
			"cwd": {"type": "string", "description": "directory relative to /workspace"},
			"wait": {"type": "number", "minimum": 0, "maximum": 3600, "description": "seconds to wait for the command to end before answering (default {wait})"}}`, "command"),
		Mutates: true,
		Keyed:   true,
		run:     execTool,
	},
	{
		Name: "exec_wait",
		Description: "Wait for a command that exec answered as still running: its output after offset (the offset the last answer gave), " +
			"until it ends or wait seconds pass (default {wait}). Answers as exec does: how it ended and its revision, or that it still runs and the offset to go on from.",
		Schema: schema(`{"id": {"type": "string", "description": "the exec id the answer gave"},
			"offset": {"type": "integer", "minimum": 0, "description": "bytes of output already read: the offset the last answer gave (default 0, all of it)"},
			"wait": {"type": "number", "minimum": 0, "maximum": 3600, "description": "seconds to wait for the command to end before answering (default {wait})"}}`, "id"),
		run: execWaitTool,
	},
	{
		Name:        "log",
		Description: "List the workspace's revisions, newest first: number, source (api, exec, ...), time and message.",
		Schema:      schema(`{"limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "how many (default 20)"}}`),
		run:         logTool,
	},
	{
		Name:        "diff",
		Description: "Show what changed between two revisions as a unified diff (or a per-file summary with stat). to defaults to the newest.",
		Schema: schema(`{"from": {"type": "integer", "minimum": 1}, "to": {"type": "integer", "minimum": 0, "description": "default the newest revision"},
			"stat": {"type": "boolean", "description": "per-file line counts only"}}`, "from"),
		run: diffTool,
	},
}

// schema builds a JSON Schema object from its properties and required names.
func schema(props string, required ...string) json.RawMessage {
	var p map[string]any
	if err := json.Unmarshal([]byte(props), &p); err != nil {
		panic("tools: bad schema: " + err.Error())
	}
	s := map[string]any{"type": "object", "properties": p, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	b, _ := json.Marshal(s)
	return b
}

func readTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Path          string
		Offset, Limit int64
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.Offset <= 0 {
		a.Offset = 1
	}
	if a.Limit <= 0 || a.Limit > maxReadLines {
		a.Limit = maxReadLines
	}
	r, err := s.Client.Read(ctx, s.Workspace, a.Path, client.ReadOptions{Line: a.Offset, Lines: a.Limit})
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	// The answer stops before a line that would take it over MaxResult,
	// saying where to read on: clipped in the middle, a model would see
	// neither a whole last line nor where the rest begins.
	var b strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxResult)
	n := a.Offset
	for sc.Scan() {
		row := fmt.Sprintf("%d\t%s\n", n, sc.Text())
		if b.Len()+len(row) > MaxResult-128 && n > a.Offset {
			fmt.Fprintf(&b, "[stopped before line %d to keep the answer short; read on with offset %d]\n", n, n)
			return Result{Text: b.String()}, nil
		}
		b.WriteString(row)
		n++
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(&b, "[stopped at line %d: %v]\n", n, err)
	}
	if n == a.Offset {
		return Result{Text: fmt.Sprintf("(no lines from line %d)", a.Offset)}, nil
	}
	return Result{Text: b.String()}, nil
}

func writeTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct{ Path, Content string }
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	rev, err := s.Client.Write(ctx, s.Workspace, a.Path, strings.NewReader(a.Content), client.WriteOptions{Key: c.Key})
	if err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("wrote %s (%d bytes): revision %d", a.Path, len(a.Content), rev.Rev), Rev: rev.Rev}, nil
}

func editTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Path, Old, New string
		All            bool
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	res, err := s.Client.Edit(ctx, s.Workspace, wire.Edit{Path: a.Path, Old: a.Old, New: a.New, All: a.All, Key: c.Key})
	if err != nil {
		return Result{}, err
	}
	if res.Replayed {
		return Result{Text: fmt.Sprintf("edited %s already (a retry of the same call): revision %d", a.Path, res.Revision.Rev), Rev: res.Revision.Rev}, nil
	}
	return Result{Text: fmt.Sprintf("edited %s (%d replacements): revision %d", a.Path, res.Replacements, res.Revision.Rev), Rev: res.Revision.Rev}, nil
}

func lsTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct{ Path string }
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	ents, err := s.Client.List(ctx, s.Workspace, a.Path, core.Head, false)
	if err != nil {
		return Result{}, err
	}
	var b strings.Builder
	for _, e := range ents {
		switch {
		case e.IsDir():
			fmt.Fprintf(&b, "%s/\n", e.Name)
		case e.Target != "":
			fmt.Fprintf(&b, "%s -> %s\n", e.Name, e.Target)
		default:
			fmt.Fprintf(&b, "%s\t%d\n", e.Name, e.Size)
		}
	}
	if len(ents) == 0 {
		b.WriteString("(empty)")
	}
	return Result{Text: b.String()}, nil
}

func findTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct{ Name, Path, Type string }
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	// The paths stream in; only the first maxFindPaths are kept.
	var paths []string
	more := 0
	err := s.Client.FindEach(ctx, s.Workspace, client.FindOptions{Name: a.Name, Path: a.Path, Type: a.Type}, func(p string) error {
		if len(paths) < maxFindPaths {
			paths = append(paths, p)
		} else {
			more++
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	text := strings.Join(paths, "\n")
	if more > 0 {
		text += fmt.Sprintf("\n[... %d more; narrow the search]", more)
	}
	if len(paths) == 0 {
		text = "(nothing found)"
	}
	return Result{Text: text}, nil
}

func grepTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Pattern, Path, Glob string
		IgnoreCase          bool `json:"ignore_case"`
		Context             int
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	var b strings.Builder
	lines, cut := 0, false
	// One match more than is shown tells a cut answer from one that
	// happens to fill the limit.
	err := s.Client.Grep(ctx, s.Workspace, client.GrepOptions{Pattern: a.Pattern, Path: a.Path, Glob: a.Glob,
		IgnoreCase: a.IgnoreCase, Context: min(max(a.Context, 0), 10), Max: maxGrepLines + 1}, func(m wire.Match) error {
		if lines >= maxGrepLines {
			cut = true
			return nil
		}
		lines++
		switch {
		case m.Break:
			b.WriteString("--\n")
		case m.Context:
			fmt.Fprintf(&b, "%s-%d-%s\n", m.Path, m.Line, m.Text)
		default:
			fmt.Fprintf(&b, "%s:%d:%s\n", m.Path, m.Line, m.Text)
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if lines == 0 {
		return Result{Text: "(no matches)"}, nil
	}
	if cut {
		b.WriteString("[stopped at 500 lines; narrow the search]\n")
	}
	return Result{Text: b.String()}, nil
}

func execTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		Command, Timeout, Cwd string
		Wait                  *float64
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return Result{}, &argsError{"exec: empty command"}
	}
	wait, err := s.waitArg(a.Wait)
	if err != nil {
		return Result{}, err
	}
	if a.Timeout == "" {
		a.Timeout = DefaultExecTimeout.String()
	}
	// All the output streams through, so a long one keeps its true end
	// (where the error usually is).
	out := &Clipper{Max: MaxResult - 320}
	w, err := s.Client.ExecFor(ctx, s.Workspace, wire.ExecRequest{Argv: []string{"sh", "-c", a.Command}, Cwd: a.Cwd, Timeout: a.Timeout, Key: c.Key},
		wait, outputTo(c, out))
	if err != nil {
		return Result{}, err
	}
	return watchResult(w, out.String(), 0, wait), nil
}

func execWaitTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		ID     string
		Offset int64
		Wait   *float64
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.ID == "" {
		return Result{}, &argsError{"exec_wait: id is required"}
	}
	if a.Offset < 0 {
		return Result{}, &argsError{"exec_wait: offset must not be negative"}
	}
	wait, err := s.waitArg(a.Wait)
	if err != nil {
		return Result{}, err
	}
	out := &Clipper{Max: MaxResult - 320}
	w, err := s.Client.FollowExecFor(ctx, s.Workspace, a.ID, a.Offset, wait, outputTo(c, out))
	if err != nil {
		return Result{}, err
	}
	return watchResult(w, out.String(), a.Offset, wait), nil
}

// waitArg is a call's wait in seconds as a duration: the set's default
// when the call gives none.
func (s *Set) waitArg(secs *float64) (time.Duration, error) {
	if secs == nil {
		return s.execWait(), nil
	}
	if *secs < 0 || *secs > MaxExecWait.Seconds() {
		return 0, &argsError{fmt.Sprintf("wait %v: want 0 to %v seconds", *secs, MaxExecWait.Seconds())}
	}
	return time.Duration(*secs * float64(time.Second)), nil
}

// outputTo passes an exec's output to the call's Output, if any, and
// to out.
func outputTo(c Call, out *Clipper) func(wire.ExecEvent) error {
	return func(ev wire.ExecEvent) error {
		if ev.Type != "output" {
			return nil
		}
		data := ev.Bytes()
		if c.Output != nil {
			c.Output(ev.Stream, data)
		}
		out.Write(data)
		return nil
	}
}

// watchResult is what a model reads of a wait of wait (negative: not
// said) on an exec whose output it read from byte from: how it ended, or
// that it runs on and where to go on from.
func watchResult(w client.ExecWatch, output string, from int64, wait time.Duration) Result {
	if w.Done {
		res := ExecResult(w.Exec, output)
		res.Offset = w.Offset
		if from > 0 {
			res.Text = fmt.Sprintf("[output from byte %d]\n", from) + res.Text
		}
		return res
	}
	after := ""
	if wait >= 0 {
		after = " after " + wait.Round(time.Millisecond).String()
	}
	status := fmt.Sprintf("still running%s as exec %s (%d bytes of output so far); it goes on: wait for it with exec_wait {\"id\": %q, \"offset\": %d}",
		after, w.ID, w.Offset, w.ID, w.Offset)
	text := Clip(output, MaxResult-320)
	if from > 0 {
		text = fmt.Sprintf("[output from byte %d]\n", from) + text
	}
	return Result{Text: text + "\n[" + status + "]", ExecID: w.ID, Running: true, Offset: w.Offset}
}

// ExecResult is what a model reads of a finished exec: its output and how
// it ended. A resumed run rebuilds it from the journal's record.
func ExecResult(rec core.Exec, output string) Result {
	code := rec.ExitCode
	res := Result{ExecID: rec.ID, ExitCode: &code, Rev: rec.Rev}
	var status string
	switch {
	case rec.TimedOut:
		status = fmt.Sprintf("timed out after %s (killed)", rec.Duration().Round(time.Millisecond))
	case rec.Signal != "":
		status = fmt.Sprintf("killed by %s (exit %d)", rec.Signal, code)
	case rec.State == core.ExecFailed:
		status = "failed: " + rec.Error
	case rec.State == core.ExecInterrupted:
		status = "interrupted: computerd stopped while it ran, so its status is unknown"
	case rec.State == core.ExecPending:
		status = fmt.Sprintf("exit %d; its writes wait to reach the home (not in the workspace yet)", code)
	default:
		status = fmt.Sprintf("exit %d", code)
	}
	switch {
	case rec.Unfinished():
		res.IsError, res.Code = true, string(rec.State)
	case code != 0 || rec.TimedOut:
		res.IsError, res.Code = true, "exit"
	}
	if rec.Rev != 0 {
		status += fmt.Sprintf("; its writes are revision %d", rec.Rev)
	}
	if len(rec.Conflict) > 0 {
		status += fmt.Sprintf("; conflict with changes made meanwhile on %s, its version kept in workspace %s", strings.Join(rec.Conflict, ", "), rec.KeptAs)
	}
	if rec.OutputTruncated {
		// The output's end (where the error usually is) is not what the
		// model read: say so, and how much there was.
		status += fmt.Sprintf("; output truncated by computerd's cap, of %d bytes written only the start is shown", rec.StdoutBytes+rec.StderrBytes)
	}
	res.Text = Clip(output, MaxResult-256) + "\n[" + status + "]"
	return res
}

func logTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct{ Limit int }
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	switch {
	case a.Limit <= 0:
		a.Limit = 20
	case a.Limit > maxLogEntries:
		a.Limit = maxLogEntries // as read clamps its lines: more asked for, the most given
	}
	revs, err := s.Client.Log(ctx, s.Workspace, a.Limit)
	if err != nil {
		return Result{}, err
	}
	var b strings.Builder
	for _, r := range revs {
		fmt.Fprintf(&b, "%d\t%s\t%s\t%d changes", r.Rev, r.Source, r.Time.UTC().Format(time.RFC3339), r.Changes)
		if r.Message != "" {
			fmt.Fprintf(&b, "\t%s", r.Message)
		}
		b.WriteByte('\n')
	}
	return Result{Text: b.String()}, nil
}

func diffTool(ctx context.Context, s *Set, c Call) (Result, error) {
	var a struct {
		From, To int64
		Stat     bool
	}
	if err := decode(c.Args, &a); err != nil {
		return Result{}, err
	}
	if a.Stat {
		files, err := s.Client.DiffStat(ctx, s.Workspace, a.From, a.To)
		if err != nil {
			return Result{}, err
		}
		var b strings.Builder
		core.WriteStat(&b, files)
		return Result{Text: b.String()}, nil
	}
	r, err := s.Client.Diff(ctx, s.Workspace, a.From, a.To)
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	// The whole diff streams through, so a long one keeps its true end.
	text := &Clipper{Max: MaxResult - 64}
	if _, err := io.Copy(text, r); err != nil {
		return Result{}, err
	}
	if text.Len() == 0 {
		return Result{Text: "(no changes)"}, nil
	}
	return Result{Text: text.String()}, nil
}
