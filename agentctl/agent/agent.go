// Package agent is agentctl's model loop: it drives a model over exactly
// the tools of package tools, and keeps every step in computerd's journal
// of runs, recorded before it starts and when it ends. A run resumed after
// its client died replays the finished steps from the journal instead of
// taking them again; a tool call in flight at the crash is asked again with
// the same idempotency key, so computerd answers the recorded result (or
// attaches to the command still running) and nothing runs twice; a model
// call in flight is asked again. The model's key stays in this process.
//
// A driver holds its run on a lease it renews (each step it records, and
// a renewal every quarter of the lease between), so a run whose driver
// died reads as interrupted once the lease runs out. A driver that stops
// short of the end (a signal, or a model it cannot reach after its
// retries) says so itself: the run is interrupted, and a resume goes on.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"computerd/agentctl/model"
	"computerd/client"
	"computerd/core"
	"computerd/tools"
	"computerd/wire"
)

// Driver takes a run's steps.
type Driver struct {
	Client   *client.Client
	Provider model.Provider
	// Cost prices one model answer in USD (nil: 0).
	Cost func(modelName string, u model.Usage) float64
	// Events receives what happens, in order (nil: nothing).
	Events func(Event)
	// MaxAnswerTokens caps each model answer (0: the provider's default).
	MaxAnswerTokens int64
	// Lease is how long the driver's claim on its run lasts without a
	// renewal (0: DefaultLease); it renews it every quarter of that.
	Lease time.Duration
	// ExecWait is how long exec and exec_wait wait for a command before
	// answering the model that it still runs (0: DefaultExecWait).
	ExecWait time.Duration
	// Claim is what Drive's claim records besides the driver and its
	// lease: the provider, model and base URL the run goes on with, where
	// they differ from the recorded ones (empty: the recorded ones).
	Claim wire.ClaimRun
	// id is this driver's id in the journal, new for each Drive.
	id string
}

// Defaults of a Driver.
const (
	// DefaultLease: a run whose driver died reads as interrupted within
	// a minute.
	DefaultLease = time.Minute
	// DefaultExecWait lets most builds and test runs answer in one call,
	// while a command that hangs is heard of long before its timeout.
	DefaultExecWait = 2 * time.Minute
)

func (d *Driver) lease() time.Duration {
	if d.Lease > 0 {
		return d.Lease
	}
	return DefaultLease
}

// Event is one thing that happened in a run, as the terminal shows it and
// --json prints it.
type Event struct {
	Type string `json:"type"` // see the Event* constants
	Run  string `json:"run"`
	Seq  int    `json:"seq,omitempty"`
	// Text: a model's text (delta or whole answer), a tool result, a
	// command's output, or a message.
	Text     string          `json:"text,omitempty"`
	Tool     string          `json:"tool,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Stream   string          `json:"stream,omitempty"`
	IsError  bool            `json:"is_error,omitempty"`
	Code     string          `json:"code,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Rev      int64           `json:"rev,omitempty"`
	// Replayed: a step finished before this driver took the run, shown
	// from the journal.
	Replayed     bool          `json:"replayed,omitempty"`
	InputTokens  int64         `json:"input_tokens,omitempty"`
	OutputTokens int64         `json:"output_tokens,omitempty"`
	Cost         float64       `json:"cost,omitempty"`
	State        core.RunState `json:"state,omitempty"`
	// ExecID is the exec a tool step ran or waited for, Running that it
	// still ran when the step ended.
	ExecID  string `json:"exec_id,omitempty"`
	Running bool   `json:"running,omitempty"`
}

// Event types.
const (
	EventStart      = "start"       // the driver took the run
	EventModelDelta = "model_delta" // a piece of the answer as it streams
	EventRetry      = "model_retry" // the model call is asked again (Text: why)
	EventModel      = "model"       // a model turn ended (Text: its answer)
	EventToolCall   = "tool_call"   // a tool call begins
	EventOutput     = "output"      // a line (or piece) of a command's output
	EventToolResult = "tool_result" // a tool call ended
	EventEnd        = "end"         // the run ended (State)
)

func (d *Driver) emit(ev Event) {
	if d.Events != nil {
		d.Events(ev)
	}
}

// Start records a new run of task on ws; Drive takes it forward.
func (d *Driver) Start(ctx context.Context, ws string, req wire.CreateRun) (core.Run, error) {
	if req.Driver == "" {
		req.Driver = newDriverID()
	}
	if req.Lease == "" {
		req.Lease = d.lease().String()
	}
	return d.Client.CreateRun(ctx, ws, req)
}

func newDriverID() string { return "d" + strings.TrimPrefix(core.NewRunID(), "r") }

// context is what a run's first model step was given: recorded as that
// step's arguments, so a resumed run asks the model exactly what the first
// driver asked, whatever memories or skills changed since.
type context0 struct {
	System string `json:"system"`
	Prompt string `json:"prompt"`
}

// Drive takes run id forward until it ends: it claims the run (so a driver
// that is still alive elsewhere stops at its next step), replays what the
// journal holds, and goes on from there. It returns the run as it ended.
func (d *Driver) Drive(ctx context.Context, id string) (core.Run, error) {
	d.id = newDriverID()
	claim := d.Claim
	claim.Driver, claim.Lease = d.id, d.lease().String()
	run, err := d.Client.ClaimRunWith(ctx, id, claim)
	if err != nil {
		return run, err
	}
	stop := d.renew(ctx, id)
	defer stop()
	detail, err := d.Client.Run(ctx, id)
	if err != nil {
		return run, err
	}
	d.emit(Event{Type: EventStart, Run: id, Text: run.Task})
	wait := d.ExecWait
	if wait <= 0 {
		wait = DefaultExecWait
	}
	set := &tools.Set{Client: d.Client, Workspace: run.WSName, ExecWait: wait}
	c := &conversation{d: d, run: run, set: set}
	if err := c.replay(ctx, detail.Steps); err != nil {
		return d.end(ctx, c, err)
	}
	for {
		if err := c.step(ctx); err != nil {
			return d.end(ctx, c, err)
		}
	}
}

// renew renews the driver's lease on run id every quarter of the lease
// until stop is called (or ctx ends); stop returns once it has stopped.
// A renewal that fails is left to the next: a driver taken over learns
// it at its next step.
func (d *Driver) renew(ctx context.Context, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d.lease() / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.Client.RenewRun(ctx, id, d.id)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// errEnd ends a run in a final state, or interrupted.
type errEnd struct {
	state core.RunState
	msg   string
}

func (e *errEnd) Error() string { return fmt.Sprintf("run %s: %s", e.state, e.msg) }

// end records how the run ended (or that this driver stopped short of
// its end), unless another driver took it over. A failure that is not
// the run's own (computerd out of reach, a quota, a full disk) leaves it
// interrupted: a resume goes on once it is mended.
func (d *Driver) end(ctx context.Context, c *conversation, err error) (core.Run, error) {
	state, msg := core.RunInterrupted, ""
	var ee *errEnd
	switch {
	case errors.As(err, &ee):
		state, msg, err = ee.state, ee.msg, nil
	case errors.Is(err, core.ErrConflict):
		// Resumed elsewhere: the new driver owns the run now.
		return c.run, fmt.Errorf("run %s was taken over by another agentctl: %w", c.run.ID, err)
	case ctx.Err() != nil:
		// This process is stopping (a signal): the run is interrupted,
		// for a resume. Said at once, rather than when the lease runs out.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if run, endErr := d.Client.EndRun(ictx, c.run.ID, d.id, core.RunInterrupted, "agentctl was stopped"); endErr == nil {
			c.run = run
		}
		return c.run, ctx.Err()
	default:
		msg = err.Error()
	}
	run, endErr := d.Client.EndRun(context.WithoutCancel(ctx), c.run.ID, d.id, state, msg)
	if endErr != nil {
		return c.run, errors.Join(err, endErr)
	}
	d.emit(Event{Type: EventEnd, Run: run.ID, State: run.State, Text: run.Error,
		InputTokens: run.InputTokens, OutputTokens: run.OutputTokens, Cost: run.Cost})
	return run, err
}

// conversation is a run's messages so far and where its journal stands.
type conversation struct {
	d       *Driver
	run     core.Run
	set     *tools.Set
	system  string
	msgs    []model.Message
	next    int             // the next step's number
	pending []core.ToolCall // calls of the last model turn not yet answered
	done    bool            // the last model turn asked for no tools
}

// replay rebuilds the conversation from the journal, and finishes any
// step that was in flight when the last driver stopped.
func (c *conversation) replay(ctx context.Context, steps []core.Step) error {
	c.next = 1
	for _, st := range steps {
		c.next = st.Seq + 1
		switch st.Kind {
		case core.StepModel:
			if st.Seq == 1 {
				if err := c.begin(st.Args); err != nil {
					return err
				}
			}
			if st.State != core.StepDone {
				// A model call in flight is asked again.
				return c.model(ctx, st.Seq)
			}
			c.d.emit(Event{Type: EventModel, Run: c.run.ID, Seq: st.Seq, Text: st.Text, Replayed: true,
				InputTokens: st.InputTokens, OutputTokens: st.OutputTokens, Cost: st.Cost})
			c.answered(st)
		case core.StepTool:
			call := core.ToolCall{ID: st.CallID, Name: st.Tool, Args: st.Args}
			if st.State != core.StepDone {
				// A tool call in flight is asked again with its key:
				// computerd answers the recorded result or attaches.
				return c.tool(ctx, st.Seq, call)
			}
			c.d.emit(Event{Type: EventToolResult, Run: c.run.ID, Seq: st.Seq, Tool: st.Tool, Args: st.Args, Text: st.Text,
				IsError: st.IsError, Code: st.Code, ExitCode: st.ExitCode, Rev: st.Rev, ExecID: st.ExecID, Running: StepRunning(st), Replayed: true})
			c.toolAnswered(call, st.Text, st.IsError)
		}
	}
	return nil
}

// begin starts the conversation from the context step 1 recorded.
func (c *conversation) begin(args json.RawMessage) error {
	var c0 context0
	if err := json.Unmarshal(args, &c0); err != nil {
		return &errEnd{state: core.RunFailed, msg: fmt.Sprintf("step 1 has no context: %v", err)}
	}
	c.system, c.msgs = c0.System, []model.Message{{Role: model.RoleUser, Text: c0.Prompt}}
	return nil
}

// answered adds a finished model turn to the conversation.
func (c *conversation) answered(st core.Step) {
	msg := model.Message{Role: model.RoleAssistant, Text: st.Text}
	for _, call := range st.Calls {
		msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: call.ID, Name: call.Name, Args: call.Args})
	}
	c.msgs = append(c.msgs, msg)
	c.pending = append([]core.ToolCall(nil), st.Calls...)
	c.done = len(st.Calls) == 0
}

// toolAnswered adds a tool's result to the conversation.
func (c *conversation) toolAnswered(call core.ToolCall, text string, isError bool) {
	c.msgs = append(c.msgs, model.Message{Role: model.RoleTool, ToolCallID: call.ID, Text: text, IsError: isError})
	for i, p := range c.pending {
		if p.ID == call.ID {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			break
		}
	}
}

// step takes the run's next step: a pending tool call, or a model turn.
func (c *conversation) step(ctx context.Context) error {
	if len(c.pending) > 0 {
		return c.tool(ctx, c.next, c.pending[0])
	}
	if c.done {
		return &errEnd{state: core.RunDone}
	}
	if err := c.checkLimits(ctx); err != nil {
		return err
	}
	return c.model(ctx, c.next)
}

// checkLimits ends the run when it was cancelled or hit a limit.
func (c *conversation) checkLimits(ctx context.Context) error {
	detail, err := c.d.Client.Run(ctx, c.run.ID)
	if err != nil {
		return err
	}
	run := detail.Run
	if run.Driver != c.d.id {
		return fmt.Errorf("run %s: %w", run.ID, core.ErrConflict)
	}
	c.run = run
	l := run.Limits
	models := 0
	for _, st := range detail.Steps {
		if st.Kind == core.StepModel {
			models++
		}
	}
	switch {
	case run.Cancel:
		return &errEnd{state: core.RunCancelled, msg: "cancelled"}
	case l.MaxSteps > 0 && models >= l.MaxSteps:
		return &errEnd{state: core.RunLimited, msg: fmt.Sprintf("reached --max-steps %d", l.MaxSteps)}
	case l.MaxTokens > 0 && run.InputTokens+run.OutputTokens >= l.MaxTokens:
		return &errEnd{state: core.RunLimited, msg: fmt.Sprintf("reached --max-tokens %d (used %d)", l.MaxTokens, run.InputTokens+run.OutputTokens)}
	case l.MaxCost > 0 && run.Cost >= l.MaxCost:
		return &errEnd{state: core.RunLimited, msg: fmt.Sprintf("reached --max-cost $%.4f (spent $%.4f)", l.MaxCost, run.Cost)}
	}
	if l.Timeout != "" {
		if d, err := time.ParseDuration(l.Timeout); err == nil && time.Since(run.Created) > d {
			return &errEnd{state: core.RunLimited, msg: fmt.Sprintf("reached --timeout %s", l.Timeout)}
		}
	}
	return nil
}

// model takes model step seq: recorded, asked, recorded again.
func (c *conversation) model(ctx context.Context, seq int) error {
	st := core.Step{Run: c.run.ID, Seq: seq, Kind: core.StepModel}
	if seq == 1 && c.msgs == nil {
		c0, err := c.firstContext(ctx)
		if err != nil {
			return err
		}
		st.Args, _ = json.Marshal(c0)
	}
	rec, err := c.d.Client.BeginStep(ctx, c.d.id, st)
	if err != nil {
		return err
	}
	if seq == 1 {
		// The recorded context is the one (asked again after a crash, it
		// is the first driver's).
		if err := c.begin(rec.Args); err != nil {
			return err
		}
	}
	req := model.Request{Model: c.run.Model, System: c.system, Messages: c.msgs, Tools: modelTools(c.set), MaxTokens: c.d.MaxAnswerTokens}
	resp, err := c.d.Provider.Complete(ctx, req, func(ev model.Event) {
		switch {
		case ev.Text != "":
			c.d.emit(Event{Type: EventModelDelta, Run: c.run.ID, Seq: seq, Text: ev.Text})
		case ev.Retry != nil:
			c.d.emit(Event{Type: EventRetry, Run: c.run.ID, Seq: seq, Text: fmt.Sprintf("%v; asking again in %v", ev.Retry, ev.RetryIn.Round(time.Millisecond))})
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The model cannot answer (after its retries): the run is
		// interrupted with this step in flight, so that a resume (with
		// the model server back, or another one) asks it again.
		return &errEnd{state: core.RunInterrupted, msg: "model: " + err.Error()}
	}
	st.Text = resp.Message.Text
	for _, call := range resp.Message.ToolCalls {
		args := call.Args
		if !json.Valid(args) {
			// Kept as a JSON string, so the journal can hold it; the tool
			// refuses it as arguments all the same.
			args, _ = json.Marshal(string(call.Args))
		}
		st.Calls = append(st.Calls, core.ToolCall{ID: call.ID, Name: call.Name, Args: args})
	}
	st.InputTokens, st.OutputTokens = resp.Usage.InputTokens, resp.Usage.OutputTokens
	if c.d.Cost != nil {
		st.Cost = c.d.Cost(c.run.Model, resp.Usage)
	}
	rec, err = c.d.Client.EndStep(ctx, c.d.id, st)
	if err != nil {
		return err
	}
	c.d.emit(Event{Type: EventModel, Run: c.run.ID, Seq: seq, Text: rec.Text, InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens, Cost: rec.Cost})
	c.answered(rec)
	c.next = seq + 1
	return nil
}

// firstContext builds what the model is first told: the system prompt,
// the tenant's memories, the skill the run follows, and the task.
func (c *conversation) firstContext(ctx context.Context) (context0, error) {
	c0 := context0{System: systemPrompt}
	var b strings.Builder
	mems, err := c.d.Client.Memories(ctx)
	if err != nil {
		return c0, err
	}
	if len(mems) > 0 {
		b.WriteString("Facts to keep in mind (saved by the user):\n")
		for _, m := range mems {
			fmt.Fprintf(&b, "- %s\n", m.Text)
		}
		b.WriteString("\n")
	}
	if c.run.Skill != "" {
		sk, err := c.d.Client.Skill(ctx, c.run.Skill)
		if err != nil {
			return c0, err
		}
		fmt.Fprintf(&b, "Follow this procedure (skill %q):\n%s\n\n", sk.Name, sk.Body)
	}
	fmt.Fprintf(&b, "Task: %s", c.run.Task)
	c0.Prompt = b.String()
	return c0, nil
}

// tool takes tool step seq: recorded, run with the step's idempotency key,
// recorded again.
func (c *conversation) tool(ctx context.Context, seq int, call core.ToolCall) error {
	st := core.Step{Run: c.run.ID, Seq: seq, Kind: core.StepTool, Tool: call.Name, CallID: call.ID, Args: call.Args}
	if _, err := c.d.Client.BeginStep(ctx, c.d.id, st); err != nil {
		return err
	}
	c.d.emit(Event{Type: EventToolCall, Run: c.run.ID, Seq: seq, Tool: call.Name, Args: st.Args})
	res, err := c.set.Call(ctx, call.Name, tools.Call{Args: call.Args, Key: StepKey(c.run.ID, seq),
		Output: func(stream string, data []byte) {
			c.d.emit(Event{Type: EventOutput, Run: c.run.ID, Seq: seq, Stream: stream, Text: string(data)})
		}})
	if err != nil {
		return err
	}
	st.Text, st.IsError, st.Code, st.ExecID, st.ExitCode, st.Rev = res.Text, res.IsError, res.Code, res.ExecID, res.ExitCode, res.Rev
	if _, err := c.d.Client.EndStep(ctx, c.d.id, st); err != nil {
		return err
	}
	c.d.emit(Event{Type: EventToolResult, Run: c.run.ID, Seq: seq, Tool: call.Name, Text: res.Text,
		IsError: res.IsError, Code: res.Code, ExitCode: res.ExitCode, Rev: res.Rev, ExecID: res.ExecID, Running: res.Running})
	c.toolAnswered(call, res.Text, res.IsError)
	c.next = seq + 1
	return nil
}

// StepRunning reports whether tool step st left its command running:
// it names an exec and no exit code, and is no error.
func StepRunning(st core.Step) bool {
	return st.Kind == core.StepTool && st.State == core.StepDone && st.ExecID != "" && st.ExitCode == nil && !st.IsError
}

// StepKey is the idempotency key of a run's step: the same on every
// resume, so computerd never runs that step's command or mutation twice.
func StepKey(run string, seq int) string { return fmt.Sprintf("%s/%d", run, seq) }

func modelTools(s *tools.Set) []model.Tool {
	ts := s.Tools()
	out := make([]model.Tool, len(ts))
	for i, t := range ts {
		out[i] = model.Tool{Name: t.Name, Description: t.Description, Schema: t.Schema}
	}
	return out
}

const systemPrompt = `You are a coding agent working in a durable workspace: a revisioned file tree kept by computerd.
Use the tools to read, search and change files, and exec to run commands (a fresh sandbox each time, the workspace at /workspace, no network).
A command still running when exec answers goes on; exec_wait waits for more of it.
Every change you make is a revision, so nothing is lost; keep changes focused on the task.
Work step by step: look before you change, run the tests or build after changing, read errors carefully.
When the task is done, answer with a short summary of what you changed and why, and call no tool.`
