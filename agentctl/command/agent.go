package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/agentctl/agent"
	"computerd/agentctl/model"
	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// Defaults of the agent's flags.
const (
	DefaultProvider    = "openai"
	DefaultOpenAIModel = "gpt-4o-mini"
	DefaultClaudeModel = "claude-sonnet-4-5"
	DefaultMaxSteps    = 50
)

// modelFlags choose and reach the model; run, resume and skill run take
// them. A resume goes on with what the run recorded unless told otherwise.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "provider", Usage: "openai (any OpenAI-compatible Chat Completions server) or anthropic (resume: the run's)", Value: DefaultProvider, EnvVars: []string{"AGENT_PROVIDER"}},
		&cli.StringFlag{Name: "base-url", Usage: "the model server's API root (default: $OPENAI_BASE_URL or $ANTHROPIC_BASE_URL, else the provider's own; resume: the run's)"},
		&cli.StringFlag{Name: "model", Usage: "model name (default " + DefaultOpenAIModel + " or " + DefaultClaudeModel + "; resume: the run's)", EnvVars: []string{"AGENT_MODEL"}},
		&cli.BoolFlag{Name: "no-stream", Usage: "ask for whole answers instead of streaming them"},
		&cli.StringFlag{Name: "prices", Usage: "override model prices, USD per million tokens: MODEL=IN/OUT[,MODEL=IN/OUT...]"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the report at the end"},
		&cli.DurationFlag{Name: "lease", Usage: "how long the run is held without a renewal (agentctl renews it every quarter of this); a run whose agentctl died reads as interrupted after it", Value: agent.DefaultLease},
		&cli.DurationFlag{Name: "exec-wait", Usage: "how long exec waits for a command before telling the model it still runs (the model may ask otherwise)", Value: agent.DefaultExecWait},
	}
}

func runFlags() []cli.Flag {
	return append(modelFlags(),
		&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "leave the run going in the background and print its id (follow it with agent attach)"},
		&cli.IntFlag{Name: "max-steps", Usage: "model turns at most", Value: DefaultMaxSteps},
		&cli.Int64Flag{Name: "max-tokens", Usage: "input plus output tokens at most, over the run (0: no limit)"},
		&cli.Float64Flag{Name: "max-cost", Usage: "USD at most, over the run (0: no limit)"},
		&cli.DurationFlag{Name: "timeout", Usage: "end the run after this long (0: no limit)"},
	)
}

func agentCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name: "agent", Usage: "run a model over the workspace's file tools and exec, as durable runs",
			Subcommands: []*cli.Command{
				cmd("run", "run TASK on the workspace: the model reads, edits and runs commands until it is done", "WS TASK", 2, 2, agentRun, runFlags()...),
				cmd("ls", "list a workspace's runs", "WS", 1, 1, agentList,
					&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Usage: "at most this many"}),
				cmd("show", "show a run and its steps (--report: the Markdown report)", "RUN", 1, 1, agentShow,
					&cli.BoolFlag{Name: "report", Usage: "print the run's report, fit for a pull request"}),
				cmd("attach", "follow a run from any point, in order, until it ends", "RUN", 1, 1, agentAttach,
					&cli.IntFlag{Name: "from", Usage: "show steps after this one (default: all)"}),
				cmd("resume", "go on with a run whose agentctl died: finished steps are replayed, none re-run", "RUN", 1, 1, agentResume, modelFlags()...),
				cmd("cancel", "stop a run", "RUN", 1, 1, agentCancel),
			},
		},
		{
			Name: "memory", Usage: "facts every new run is told, without a tool call",
			Subcommands: []*cli.Command{
				cmd("add", "keep a fact", "TEXT", 1, 1, memoryAdd),
				cmd("ls", "list facts", "", 0, 0, memoryList),
				cmd("rm", "forget a fact", "ID", 1, 1, memoryRemove),
			},
		},
		{
			Name: "skill", Usage: "named procedures, saved once and run again",
			Subcommands: []*cli.Command{
				cmd("save", "save a skill from a file (--file, - for stdin) or from a finished run's steps (--from-run)", "NAME", 1, 1, skillSave,
					&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "the procedure, in words for the model"},
					&cli.StringFlag{Name: "from-run", Usage: "make the procedure from this run's task and the commands it ran"},
					&cli.StringFlag{Name: "description", Usage: "one line on what it is for"}),
				cmd("ls", "list skills", "", 0, 0, skillList),
				cmd("show", "print a skill", "NAME", 1, 1, skillShow),
				cmd("rm", "remove a skill", "NAME", 1, 1, skillRemove),
				cmd("run", "run a skill on the workspace as a new run", "WS NAME", 2, 2, skillRun, runFlags()...),
			},
		},
	}
}

// modelChoice is the model a run talks to: the provider, the model's
// name and the server's base URL ("" for the provider's own).
type modelChoice struct {
	provider, model, baseURL string
}

// chooseModel resolves the model from the flags and the environment or,
// for a resume (rec not nil), from what the run recorded, which the
// flags override. A choice with neither a key nor a base URL could reach
// nothing, and is refused with a hint before anything is made.
func chooseModel(c *cli.Context, rec *core.Run) (modelChoice, string, error) {
	m := modelChoice{provider: c.String("provider"), model: c.String("model"), baseURL: c.String("base-url")}
	if rec != nil {
		if !c.IsSet("provider") && rec.Provider != "" {
			m.provider = rec.Provider
		}
		if !c.IsSet("model") && rec.Model != "" {
			m.model = rec.Model
		}
		if !c.IsSet("base-url") {
			m.baseURL = rec.BaseURL
		}
	}
	var keyEnv, urlEnv, def, hint string
	switch m.provider {
	case "openai":
		keyEnv, urlEnv, def, hint = "OPENAI_API_KEY", "OPENAI_BASE_URL", DefaultOpenAIModel,
			"for OpenAI's API, or --base-url for an OpenAI-compatible server that needs none (Ollama: --base-url http://127.0.0.1:11434/v1)"
	case "anthropic":
		keyEnv, urlEnv, def, hint = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", DefaultClaudeModel,
			"for Anthropic's API, or --base-url for a compatible server that needs none"
	default:
		return m, "", &usageError{fmt.Sprintf("--provider %q: want openai or anthropic", m.provider)}
	}
	if m.baseURL == "" {
		m.baseURL = os.Getenv(urlEnv)
	}
	if m.model == "" {
		m.model = def
	}
	key := os.Getenv(keyEnv)
	if key == "" && m.baseURL == "" {
		return m, "", &usageError{fmt.Sprintf("no model to reach: set %s %s", keyEnv, hint)}
	}
	return m, key, nil
}

// provider builds the model client. The key is read from the
// environment and goes nowhere but the model server.
func provider(c *cli.Context, m modelChoice, key string) model.Provider {
	cfg := model.Config{BaseURL: m.baseURL, APIKey: key, NoStream: c.Bool("no-stream")}
	if m.provider == "anthropic" {
		return model.NewAnthropic(cfg)
	}
	return model.NewOpenAI(cfg)
}

// recordedURL is a base URL as a run records it: without user
// information, which may hold a credential.
func recordedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = nil
	return p.String()
}

// driver builds a run's driver for model m and the printer of its events.
func driver(c *cli.Context, m modelChoice, key string) (*agent.Driver, *eventPrinter, error) {
	prices, err := model.ParsePrices(c.String("prices"))
	if err != nil {
		return nil, nil, &usageError{"--prices: " + err.Error()}
	}
	pr := &eventPrinter{w: c.App.Writer, errw: c.App.ErrWriter, json: jsonOn(c), quiet: c.Bool("quiet")}
	d := &agent.Driver{Client: clientOf(c), Provider: provider(c, m, key), Events: pr.print, Lease: c.Duration("lease"), ExecWait: c.Duration("exec-wait"),
		Cost: func(name string, u model.Usage) float64 { cost, _ := model.Cost(name, u, prices); return cost }}
	return d, pr, nil
}

func agentRun(c *cli.Context) error {
	return startRun(c, c.Args().Get(0), c.Args().Get(1), "")
}

func skillRun(c *cli.Context) error {
	sk, err := clientOf(c).Skill(c.Context, c.Args().Get(1))
	if err != nil {
		return err
	}
	task := sk.Description
	if task == "" {
		task = "follow the skill " + sk.Name
	}
	return startRun(c, c.Args().Get(0), task, sk.Name)
}

// startRun records a new run and drives it here, or in a process of its
// own with --detach.
func startRun(c *cli.Context, ws, task, skill string) error {
	m, key, err := chooseModel(c, nil)
	if err != nil {
		return err
	}
	d, pr, err := driver(c, m, key)
	if err != nil {
		return err
	}
	req := wire.CreateRun{Task: task, Provider: m.provider, Model: m.model, BaseURL: recordedURL(m.baseURL), Skill: skill,
		Limits: core.RunLimits{MaxSteps: c.Int("max-steps"), MaxTokens: c.Int64("max-tokens"), MaxCost: c.Float64("max-cost")}}
	if t := c.Duration("timeout"); t > 0 {
		req.Limits.Timeout = t.String()
	}
	run, err := d.Start(c.Context, ws, req)
	if err != nil {
		return err
	}
	if c.Bool("detach") {
		return detach(c, run)
	}
	return drive(c, d, pr, run.ID)
}

// agentResume goes on with a run: with the provider, model and server it
// recorded, unless the flags name others (which the run then records).
func agentResume(c *cli.Context) error {
	id := c.Args().First()
	detail, err := clientOf(c).Run(c.Context, id)
	if err != nil {
		return err
	}
	if detail.Run.State.Final() {
		return fmt.Errorf("run %s is %s; only a running or interrupted run goes on: %w", id, detail.Run.State, core.ErrInvalidArgument)
	}
	m, key, err := chooseModel(c, &detail.Run)
	if err != nil {
		return err
	}
	d, pr, err := driver(c, m, key)
	if err != nil {
		return err
	}
	if c.IsSet("provider") {
		d.Claim.Provider = m.provider
	}
	if c.IsSet("model") {
		d.Claim.Model = m.model
	}
	if c.IsSet("base-url") {
		d.Claim.BaseURL = recordedURL(m.baseURL)
	}
	return drive(c, d, pr, id)
}

// drive takes the run forward until it ends, then prints its report. An
// interrupt stops this process and leaves the run to a resume; twice, it
// stops at once.
func drive(c *cli.Context, d *agent.Driver, pr *eventPrinter, id string) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	run, err := d.Drive(ctx, id)
	if err != nil && ctx.Err() != nil && c.Context.Err() == nil {
		fmt.Fprintf(c.App.ErrWriter, "agentctl: stopped; the run goes on with: agentctl agent resume %s\n", id)
		return err
	}
	if run.State == core.RunInterrupted && !pr.json {
		fmt.Fprintf(c.App.ErrWriter, "agentctl: run %s is interrupted (%s); it goes on with: agentctl agent resume %s\n", id, run.Error, id)
	}
	if err != nil {
		return err
	}
	if pr.json {
		return nil
	}
	if run.State == core.RunInterrupted {
		return &ExitError{Code: 1}
	}
	report, rerr := agent.Report(context.WithoutCancel(ctx), d.Client, run.ID)
	if rerr != nil {
		return rerr
	}
	fmt.Fprint(c.App.Writer, "\n"+report)
	if run.State != core.RunDone {
		return &ExitError{Code: 1}
	}
	return nil
}

// detach starts `agentctl agent resume RUN` in a session of its own, its
// output in a log file, and prints the run's id. The model key and the
// bearer token reach the child through its environment, never its
// arguments.
func detach(c *cli.Context, run core.Run) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"--server", c.String("server")}
	if ca := c.String("ca"); ca != "" {
		args = append(args, "--ca", ca)
	}
	// The run records its provider, model and base URL: the resume goes on
	// with them.
	args = append(args, "agent", "resume", "--quiet", "--lease", c.Duration("lease").String(), "--exec-wait", c.Duration("exec-wait").String())
	if v := c.String("prices"); v != "" {
		args = append(args, "--prices", v)
	}
	if c.Bool("no-stream") {
		args = append(args, "--no-stream")
	}
	args = append(args, run.ID)
	logPath := filepath.Join(stateDir(), "runs", run.ID+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), wire.TokenEnv+"="+clientOf(c).Token)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	cmd.Process.Release()
	return output(c, map[string]any{"run": run.ID, "pid": cmd.Process.Pid, "log": logPath}, func(w io.Writer) {
		fmt.Fprintf(w, "run %s goes on in the background (log %s)\nfollow it: agentctl agent attach %s\n", run.ID, logPath, run.ID)
	})
}

// stateDir is where agentctl keeps its own files: $XDG_STATE_HOME/agentctl.
func stateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "agentctl")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "agentctl")
	}
	return filepath.Join(os.TempDir(), "agentctl")
}

func agentList(c *cli.Context) error {
	runs, err := clientOf(c).Runs(c.Context, c.Args().First(), c.Int("limit"))
	if err != nil {
		return err
	}
	return output(c, runs, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tSTATE\tSTEPS\tTOKENS\tCOST\tSTARTED\tTASK")
		var interrupted []string
		for _, r := range runs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t$%.4f\t%s\t%s\n", r.ID, r.State, r.Steps, r.InputTokens+r.OutputTokens, r.Cost,
				r.Created.Format(time.RFC3339), agent.OneLine(r.Task, 60))
			if r.State == core.RunInterrupted {
				interrupted = append(interrupted, r.ID)
			}
		}
		tw.Flush()
		for _, id := range interrupted {
			fmt.Fprintf(w, "%s is interrupted; it goes on with: agentctl agent resume %s (or stops with agentctl agent cancel %s)\n", id, id, id)
		}
	})
}

func agentShow(c *cli.Context) error {
	cl := clientOf(c)
	if c.Bool("report") {
		report, err := agent.Report(c.Context, cl, c.Args().First())
		if err != nil {
			return err
		}
		return output(c, map[string]string{"report": report}, func(w io.Writer) { fmt.Fprint(w, report) })
	}
	detail, err := cl.Run(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return output(c, detail, func(w io.Writer) {
		r := detail.Run
		fmt.Fprintf(w, "run %s on %s: %s\n", r.ID, r.WSName, r.State)
		if r.Error != "" {
			fmt.Fprintf(w, "  %s\n", r.Error)
		}
		if r.State == core.RunInterrupted {
			fmt.Fprintf(w, "  it goes on with: agentctl agent resume %s\n", r.ID)
		}
		server := r.BaseURL
		if server == "" {
			server = "the provider's own server"
		}
		fmt.Fprintf(w, "task: %s\nmodel: %s %s at %s\nsteps: %d, tokens: %d in + %d out, cost $%.4f\n\n", r.Task, r.Provider, r.Model, server,
			r.Steps, r.InputTokens, r.OutputTokens, r.Cost)
		for _, st := range detail.Steps {
			fmt.Fprintln(w, stepLine(st))
		}
	})
}

// stepLine is one step as `agent show` lists it.
func stepLine(st core.Step) string {
	state := ""
	if st.State != core.StepDone {
		state = " (in flight)"
	}
	switch st.Kind {
	case core.StepModel:
		calls := make([]string, len(st.Calls))
		for i, call := range st.Calls {
			calls[i] = call.Name
		}
		return fmt.Sprintf("%3d model%s: %s [%d+%d tokens, $%.4f] %s", st.Seq, state, agent.OneLine(st.Text, 80),
			st.InputTokens, st.OutputTokens, st.Cost, strings.Join(calls, " "))
	}
	res := agent.OneLine(st.Text, 80)
	switch {
	case st.ExitCode != nil:
		res = fmt.Sprintf("exit %d", *st.ExitCode)
	case agent.StepRunning(st):
		res = "still running as exec " + st.ExecID
	case st.IsError:
		res = "error (" + st.Code + "): " + res
	}
	return fmt.Sprintf("%3d %s%s %s -> %s", st.Seq, st.Tool, state, argSummary(st.Tool, st.Args), res)
}

// agentAttach follows a run: each step as it begins and ends, and the
// output of a command while it runs, in order, until the run ends.
func agentAttach(c *cli.Context) error {
	cl := clientOf(c)
	id := c.Args().First()
	detail, err := cl.Run(c.Context, id)
	if err != nil {
		return err
	}
	pr := &eventPrinter{w: c.App.Writer, errw: c.App.ErrWriter, json: jsonOn(c)}
	err = cl.FollowRun(c.Context, id, c.Int("from"), true, func(st core.Step) error {
		for _, ev := range stepEvents(st) {
			pr.print(ev)
		}
		if st.Kind == core.StepTool && (st.Tool == "exec" || st.Tool == "exec_wait") && st.State != core.StepDone {
			return followStepExec(c.Context, cl, detail.Run.WSName, st, pr)
		}
		return nil
	})
	if err != nil {
		return err
	}
	detail, err = cl.Run(c.Context, id)
	if err != nil {
		return err
	}
	r := detail.Run
	pr.print(agent.Event{Type: agent.EventEnd, Run: r.ID, State: r.State, Text: r.Error, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Cost: r.Cost})
	if r.State == core.RunInterrupted && !pr.json {
		fmt.Fprintf(c.App.ErrWriter, "it goes on with: agentctl agent resume %s\n", r.ID)
	}
	return nil
}

// stepEvents are the events a recorded step stands for.
func stepEvents(st core.Step) []agent.Event {
	switch {
	case st.Kind == core.StepModel && st.State == core.StepDone:
		return []agent.Event{{Type: agent.EventModel, Run: st.Run, Seq: st.Seq, Text: st.Text, InputTokens: st.InputTokens, OutputTokens: st.OutputTokens, Cost: st.Cost}}
	case st.Kind == core.StepTool && st.State != core.StepDone:
		return []agent.Event{{Type: agent.EventToolCall, Run: st.Run, Seq: st.Seq, Tool: st.Tool, Args: st.Args}}
	case st.Kind == core.StepTool:
		return []agent.Event{{Type: agent.EventToolResult, Run: st.Run, Seq: st.Seq, Tool: st.Tool, Args: st.Args, Text: st.Text,
			IsError: st.IsError, Code: st.Code, ExitCode: st.ExitCode, Rev: st.Rev, ExecID: st.ExecID, Running: agent.StepRunning(st)}}
	}
	return nil
}

// followStepExec shows the output of the exec a tool step runs (found in
// the journal by the step's idempotency key) or waits for (exec_wait's
// id, from its offset), until it ends.
func followStepExec(ctx context.Context, cl *client.Client, ws string, st core.Step, pr *eventPrinter) error {
	show := func(ev wire.ExecEvent) error {
		if ev.Type == "output" {
			pr.print(agent.Event{Type: agent.EventOutput, Run: st.Run, Seq: st.Seq, Stream: ev.Stream, Text: string(ev.Bytes())})
		}
		return nil
	}
	if st.Tool == "exec_wait" {
		var a struct {
			ID     string `json:"id"`
			Offset int64  `json:"offset"`
		}
		if json.Unmarshal(st.Args, &a) != nil || a.ID == "" || a.Offset < 0 {
			return nil
		}
		_, err := cl.FollowExecFor(ctx, ws, a.ID, a.Offset, -1, show)
		return err
	}
	for {
		e, found, err := stepExec(ctx, cl, ws, st)
		if err != nil {
			return err
		}
		if found {
			_, err := cl.FollowExec(ctx, ws, e.ID, show)
			return err
		}
		// Not started yet, or its driver died before it began: stop
		// looking once the step has moved on.
		detail, err := cl.Run(ctx, st.Run)
		if err != nil {
			return err
		}
		if len(detail.Steps) >= st.Seq && detail.Steps[st.Seq-1].State == core.StepDone || detail.Run.State != core.RunRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// agentCancel marks the run cancelled and kills the commands it left
// running, if any, so that the run ends now rather than when they do. A
// run no driver takes forward (interrupted) is cancelled at once.
func agentCancel(c *cli.Context) error {
	cl := clientOf(c)
	id := c.Args().First()
	before, err := cl.Run(c.Context, id)
	if err != nil {
		return err
	}
	run, err := cl.CancelRun(c.Context, id)
	if err != nil {
		return err
	}
	var killed []string
	if !before.Run.State.Final() {
		if killed, err = killRunExecs(c.Context, cl, run); err != nil {
			return err
		}
	}
	return output(c, map[string]any{"run": run, "killed_execs": killed}, func(w io.Writer) {
		switch {
		case before.Run.State.Final():
			fmt.Fprintf(w, "run %s had ended: %s\n", run.ID, run.State)
		case run.State.Final():
			fmt.Fprintf(w, "run %s: cancelled\n", run.ID)
		default:
			fmt.Fprintf(w, "run %s: cancel asked; it stops before its next step\n", run.ID)
		}
		if len(killed) > 0 {
			fmt.Fprintf(w, "killed its commands still running: exec %s\n", strings.Join(killed, ", "))
		}
	})
}

// killRunExecs kills the execs of run's steps that still run (found in
// the exec journal by the steps' idempotency keys: an exec answered as
// still running goes on past its step), and returns their ids.
func killRunExecs(ctx context.Context, cl *client.Client, run core.Run) ([]string, error) {
	execs, err := cl.Execs(ctx, run.WSName, 100)
	if err != nil {
		return nil, err
	}
	var killed []string
	for _, e := range execs {
		if e.State != core.ExecRunning || !strings.HasPrefix(e.Key, run.ID+"/") {
			continue
		}
		if err := cl.KillExec(ctx, run.WSName, e.ID); err != nil && !errors.Is(err, core.ErrInvalidArgument) {
			return killed, err // (invalid: it ended meanwhile)
		}
		killed = append(killed, e.ID)
	}
	return killed, nil
}

// stepExec finds the exec a run's tool step started, by the step's
// idempotency key, among workspace ws's latest execs.
func stepExec(ctx context.Context, cl *client.Client, ws string, st core.Step) (core.Exec, bool, error) {
	execs, err := cl.Execs(ctx, ws, 20)
	if err != nil {
		return core.Exec{}, false, err
	}
	key := agent.StepKey(st.Run, st.Seq)
	for _, e := range execs {
		if e.Key == key {
			return e, true, nil
		}
	}
	return core.Exec{}, false, nil
}

func memoryAdd(c *cli.Context) error {
	m, err := clientOf(c).AddMemory(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return output(c, m, func(w io.Writer) { fmt.Fprintf(w, "memory %d kept\n", m.ID) })
}

func memoryList(c *cli.Context) error {
	ms, err := clientOf(c).Memories(c.Context)
	if err != nil {
		return err
	}
	return output(c, ms, func(w io.Writer) {
		for _, m := range ms {
			fmt.Fprintf(w, "%d\t%s\n", m.ID, m.Text)
		}
	})
}

func memoryRemove(c *cli.Context) error {
	id, err := strconv.ParseInt(c.Args().First(), 10, 64)
	if err != nil {
		return &usageError{"memory rm: ID is a number (see agentctl memory ls)"}
	}
	if err := clientOf(c).DeleteMemory(c.Context, id); err != nil {
		return err
	}
	return output(c, map[string]int64{"removed": id}, func(w io.Writer) { fmt.Fprintf(w, "memory %d forgotten\n", id) })
}

func skillSave(c *cli.Context) error {
	cl := clientOf(c)
	sk := core.Skill{Name: c.Args().First(), Description: c.String("description")}
	switch file, run := c.String("file"), c.String("from-run"); {
	case file != "" && run != "":
		return &usageError{"skill save: give --file or --from-run, not both"}
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(c.App.Reader, 1<<20))
		if err != nil {
			return err
		}
		sk.Body = string(b)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		sk.Body = string(b)
	case run != "":
		detail, err := cl.Run(c.Context, run)
		if err != nil {
			return err
		}
		if sk.Description == "" {
			sk.Description = detail.Run.Task
		}
		sk.Body = agent.SkillFromRun(detail)
	default:
		return &usageError{"skill save: give --file FILE (- for stdin) or --from-run RUN"}
	}
	saved, err := cl.SaveSkill(c.Context, sk)
	if err != nil {
		return err
	}
	return output(c, saved, func(w io.Writer) { fmt.Fprintf(w, "skill %s saved\n", saved.Name) })
}

func skillList(c *cli.Context) error {
	sks, err := clientOf(c).Skills(c.Context)
	if err != nil {
		return err
	}
	return output(c, sks, func(w io.Writer) {
		for _, sk := range sks {
			fmt.Fprintf(w, "%s\t%s\n", sk.Name, sk.Description)
		}
	})
}

func skillShow(c *cli.Context) error {
	sk, err := clientOf(c).Skill(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return output(c, sk, func(w io.Writer) {
		if sk.Description != "" {
			fmt.Fprintf(w, "# %s\n%s\n\n", sk.Name, sk.Description)
		}
		fmt.Fprintln(w, strings.TrimRight(sk.Body, "\n"))
	})
}

func skillRemove(c *cli.Context) error {
	name := c.Args().First()
	if err := clientOf(c).DeleteSkill(c.Context, name); err != nil {
		return err
	}
	return output(c, map[string]string{"removed": name}, func(w io.Writer) { fmt.Fprintf(w, "skill %s removed\n", name) })
}

// eventPrinter shows a run's events: for people, the model's text as it
// streams, each tool call and every line of command output in order; with
// --json, one event per line.
type eventPrinter struct {
	w, errw io.Writer
	json    bool
	quiet   bool
	midLine bool // the model's streamed text has not ended its line
	// streamed and called: the last step whose text streamed here, and
	// whose tool call was shown: a step seen only when it ended (replayed,
	// or attached to late) is shown whole.
	streamed, called int
	output           int // the last step whose command output was shown
}

func (p *eventPrinter) print(ev agent.Event) {
	if p.json {
		b, _ := json.Marshal(ev)
		p.w.Write(append(b, '\n'))
		return
	}
	if p.quiet {
		return
	}
	endLine := func() {
		if p.midLine {
			fmt.Fprintln(p.w)
			p.midLine = false
		}
	}
	mark := ""
	if ev.Replayed {
		mark = " (from the journal)"
	}
	switch ev.Type {
	case agent.EventStart:
		fmt.Fprintf(p.w, "run %s: %s\n", ev.Run, ev.Text)
	case agent.EventModelDelta:
		fmt.Fprint(p.w, ev.Text)
		p.midLine, p.streamed = !strings.HasSuffix(ev.Text, "\n"), ev.Seq
	case agent.EventRetry:
		endLine()
		fmt.Fprintf(p.errw, "model: %s\n", ev.Text)
	case agent.EventModel:
		if ev.Seq != p.streamed && ev.Text != "" {
			endLine()
			fmt.Fprintf(p.w, "%s%s\n", ev.Text, mark)
		}
		endLine()
		fmt.Fprintf(p.errw, "  [step %d: %d+%d tokens, $%.4f]\n", ev.Seq, ev.InputTokens, ev.OutputTokens, ev.Cost)
	case agent.EventToolCall:
		endLine()
		fmt.Fprintf(p.w, "▸ %s %s\n", ev.Tool, argSummary(ev.Tool, ev.Args))
		p.called = ev.Seq
	case agent.EventOutput:
		p.output = ev.Seq
		w := p.w
		if ev.Stream == "stderr" {
			w = p.errw
		}
		fmt.Fprint(w, ev.Text)
	case agent.EventToolResult:
		endLine()
		if ev.Seq != p.called {
			fmt.Fprintf(p.w, "▸ %s %s%s\n", ev.Tool, argSummary(ev.Tool, ev.Args), mark)
		}
		if (ev.Tool == "exec" || ev.Tool == "exec_wait") && ev.Seq != p.output {
			// Its output was not seen as it ran: the journal's copy.
			fmt.Fprintln(p.w, strings.TrimRight(ev.Text, "\n"))
		}
		switch {
		case ev.Running:
			fmt.Fprintf(p.w, "  still running as exec %s\n", ev.ExecID)
		case ev.ExitCode != nil:
			fmt.Fprintf(p.w, "  exit %d", *ev.ExitCode)
			if ev.Rev != 0 {
				fmt.Fprintf(p.w, ", revision %d", ev.Rev)
			}
			fmt.Fprintln(p.w)
		case ev.IsError:
			fmt.Fprintf(p.w, "  error (%s): %s\n", ev.Code, agent.OneLine(ev.Text, 200))
		default:
			fmt.Fprintf(p.w, "  %s\n", agent.OneLine(ev.Text, 120))
		}
	case agent.EventEnd:
		endLine()
		fmt.Fprintf(p.w, "run %s %s", ev.Run, ev.State)
		if ev.Text != "" {
			fmt.Fprintf(p.w, ": %s", ev.Text)
		}
		fmt.Fprintf(p.w, " (%d+%d tokens, $%.4f)\n", ev.InputTokens, ev.OutputTokens, ev.Cost)
	}
}

// argSummary is a tool call's arguments in a few words: exec's command,
// otherwise the path or pattern.
func argSummary(tool string, args json.RawMessage) string {
	var a map[string]any
	if json.Unmarshal(args, &a) != nil {
		return string(args)
	}
	for _, k := range []string{"command", "path", "pattern", "name", "from"} {
		if v, ok := a[k]; ok {
			return agent.OneLine(fmt.Sprint(v), 120)
		}
	}
	return ""
}
