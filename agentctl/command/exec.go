package command

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/core"
	"computerd/wire"
)

func execCommands() []*cli.Command {
	return []*cli.Command{
		cmd("exec", "run a command in a fresh sandbox on the workspace; its writes become one revision", "WS [-- ARGV...]", 1, -1, execCmd,
			&cli.StringFlag{Name: "shell", Aliases: []string{"c"}, Usage: "run this command line with sh -c instead of ARGV"},
			&cli.DurationFlag{Name: "timeout", Aliases: []string{"t"}, Usage: "kill the command after this long (default: the server's, 10m)"},
			&cli.StringFlag{Name: "cwd", Usage: "working directory, relative to /workspace"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "K=V added to the sandbox's clean environment (repeatable)"},
			&cli.BoolFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "send agentctl's stdin to the command"},
			&cli.StringFlag{Name: "key", Aliases: []string{"k"}, Usage: "idempotency key: a retry returns the recorded result instead of running again"},
			&cli.StringFlag{Name: "memory", Usage: "memory limit, e.g. 512M or 2G"},
			&cli.Int64Flag{Name: "pids", Usage: "process limit"},
			&cli.Float64Flag{Name: "cpus", Usage: "CPU limit in cores"}),
		cmd("execs", "list a workspace's execs (the journal)", "WS", 1, 1, execsCmd,
			&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Usage: "at most this many"}),
		cmd("exec-log", "print an exec's output and result again (or follow it while it runs)", "WS ID", 2, 2, execLogCmd),
		cmd("kill", "kill a running exec", "WS ID", 2, 2, killCmd),
	}
}

// parseSize reads sizes like 512M, 2G, 1048576 (empty: none given).
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := core.ParseSize(s)
	if err == nil && n == 0 {
		err = fmt.Errorf("size %q: want more than 0", s)
	}
	return n, err
}

func execCmd(c *cli.Context) error {
	args := c.Args().Slice()
	ws, argv := args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if sh := c.String("shell"); sh != "" {
		if len(argv) > 0 {
			return fmt.Errorf("exec: give either --shell or ARGV, not both")
		}
		argv = []string{"sh", "-c", sh}
	}
	if len(argv) == 0 {
		return fmt.Errorf("usage: agentctl exec WS -- ARGV... (or --shell \"CMD\")")
	}
	req := wire.ExecRequest{Argv: argv, Cwd: c.String("cwd"), Key: c.String("key"), Pids: c.Int64("pids"), CPUs: c.Float64("cpus")}
	if d := c.Duration("timeout"); d > 0 {
		req.Timeout = d.String()
	}
	var err error
	if req.Memory, err = parseSize(c.String("memory")); err != nil {
		return err
	}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: want K=V", kv)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	if c.Bool("stdin") {
		if req.Stdin, err = io.ReadAll(c.App.Reader); err != nil {
			return err
		}
	}
	asJSON := jsonOn(c)
	enc := json.NewEncoder(c.App.Writer)
	rec, err := clientOf(c).Exec(c.Context, ws, req, func(ev wire.ExecEvent) error {
		return printEvent(c, enc, asJSON, ev)
	})
	if err != nil {
		return err
	}
	return execResult(c, rec)
}

// printEvent shows one event: the bytes on stdout/stderr, or a JSON line.
func printEvent(c *cli.Context, enc *json.Encoder, asJSON bool, ev wire.ExecEvent) error {
	if asJSON {
		return enc.Encode(ev)
	}
	if ev.Type == "truncated" {
		_, err := io.WriteString(c.App.ErrWriter, ev.Data)
		return err
	}
	if ev.Type != "output" {
		return nil
	}
	w := c.App.Writer
	if ev.Stream == "stderr" {
		w = c.App.ErrWriter
	}
	_, err := w.Write(ev.Bytes())
	return err
}

// execResult reports how an exec ended and turns it into agentctl's exit
// status: the command's, or 128+signal.
func execResult(c *cli.Context, rec core.Exec) error {
	if !jsonOn(c) {
		var notes []string
		if rec.Rev > 0 {
			notes = append(notes, fmt.Sprintf("revision %d", rec.Rev))
		}
		if len(rec.Conflict) > 0 {
			notes = append(notes, fmt.Sprintf("conflict on %s: the exec's version is kept as workspace %s", strings.Join(rec.Conflict, ", "), rec.KeptAs))
		}
		if rec.TimedOut {
			notes = append(notes, "timed out")
		}
		if rec.Signal != "" {
			notes = append(notes, "killed by "+rec.Signal)
		}
		switch rec.State {
		case core.ExecInterrupted:
			notes = append(notes, "interrupted: computerd stopped while the command ran, so its status is unknown (what it wrote until then is kept)")
		case core.ExecPending:
			notes = append(notes, "its writes wait to reach the home; `agentctl execs "+rec.WSName+"` shows when they land")
		}
		if rec.Error != "" {
			notes = append(notes, rec.Error)
		}
		if len(notes) > 0 {
			fmt.Fprintf(c.App.ErrWriter, "agentctl: exec %s: %s\n", rec.ID, strings.Join(notes, "; "))
		}
	}
	if rec.ExitCode != 0 {
		return &ExitError{Code: rec.ExitCode}
	}
	if rec.Unfinished() {
		return &ExitError{Code: ExitUnfinished}
	}
	return nil
}

// ExitUnfinished is agentctl exec's status for an exec that ended short
// of its writes being in the workspace (core.Exec.Unfinished) while the
// command's own status was 0 or unknown: interrupted, its commit failed,
// or its writes wait to reach the home.
const ExitUnfinished = 125

func execsCmd(c *cli.Context) error {
	list, err := clientOf(c).Execs(c.Context, c.Args().First(), c.Int("limit"))
	if err != nil {
		return err
	}
	views := make([]execView, len(list))
	for i, e := range list {
		views[i] = viewExec(e)
	}
	return output(c, views, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTARTED\tDURATION\tSTATE\tEXIT\tREV\tCOMMAND")
		for _, e := range views {
			rev, exit := "-", "-"
			if e.Rev > 0 {
				rev = fmt.Sprint(e.Rev)
			}
			if e.ExitCode != nil {
				exit = fmt.Sprint(*e.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Started.Format("15:04:05"), e.Duration().Round(time.Millisecond),
				e.State, exit, rev, commandLine(e.Argv))
		}
		tw.Flush()
	})
}

// execView is a journal record as agentctl shows it: an exec that has
// not ended has no exit code yet (the record's 0 is no status).
type execView struct {
	core.Exec
	ExitCode *int `json:"exit_code,omitempty"`
}

func viewExec(e core.Exec) execView {
	v := execView{Exec: e}
	if !e.Ended.IsZero() {
		v.ExitCode = &e.ExitCode
	}
	return v
}

func commandLine(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func execLogCmd(c *cli.Context) error {
	asJSON := jsonOn(c)
	enc := json.NewEncoder(c.App.Writer)
	rec, err := clientOf(c).FollowExec(c.Context, c.Args().Get(0), c.Args().Get(1), func(ev wire.ExecEvent) error {
		return printEvent(c, enc, asJSON, ev)
	})
	if err != nil {
		return err
	}
	return execResult(c, rec)
}

func killCmd(c *cli.Context) error {
	if err := clientOf(c).KillExec(c.Context, c.Args().Get(0), c.Args().Get(1)); err != nil {
		return err
	}
	return output(c, map[string]string{"killed": c.Args().Get(1)}, func(w io.Writer) { fmt.Fprintln(w, "killed", c.Args().Get(1)) })
}
