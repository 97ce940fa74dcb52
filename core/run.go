package core

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"
)

// RunState is where an agent run is in its life.
type RunState string

// Run states. RunRunning and RunInterrupted are not final: a resume takes
// an interrupted run forward.
const (
	RunRunning RunState = "running" // a driver takes its steps
	// RunInterrupted: no driver takes its steps. Its driver stopped (a
	// signal, or the model could not be reached after its retries) and
	// said so, or it renewed its lease no more (it died).
	RunInterrupted RunState = "interrupted"
	RunDone        RunState = "done"      // the model ended the task
	RunFailed      RunState = "failed"    // a step failed in a way the run cannot go on from
	RunCancelled   RunState = "cancelled" // cancelled by a user
	RunLimited     RunState = "limited"   // stopped at one of its limits (steps, tokens, cost, time)
)

// Final reports whether a run in state s takes no more steps.
func (s RunState) Final() bool { return s != RunRunning && s != RunInterrupted && s != "" }

// RunLimits bound one agent run; zero means no limit.
type RunLimits struct {
	MaxSteps  int     `json:"max_steps,omitempty"`  // model turns
	MaxTokens int64   `json:"max_tokens,omitempty"` // input plus output, over the run
	MaxCost   float64 `json:"max_cost,omitempty"`   // USD, over the run
	Timeout   string  `json:"timeout,omitempty"`    // a Go duration, from the run's creation
}

// Run is one agent task: a sequence of steps (model turns and tool calls)
// that computerd records as the client that drives the model takes them.
type Run struct {
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	WS       int64  `json:"ws"`
	WSName   string `json:"workspace"`
	Task     string `json:"task"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	// BaseURL is the model server's API root ("" for the provider's
	// own), so that a resume reaches the same server. Never a key.
	BaseURL string    `json:"base_url,omitempty"`
	Skill   string    `json:"skill,omitempty"` // the skill the run follows, if any
	Limits  RunLimits `json:"limits,omitzero"`
	State   RunState  `json:"state"`
	Error   string    `json:"error,omitempty"`
	Created time.Time `json:"created"`
	Ended   time.Time `json:"ended,omitzero"`
	// BaseRev is the workspace's head when the run began, so its report
	// can diff the run's whole change.
	BaseRev int64 `json:"base_rev"`
	// Driver names the client taking the run's steps; a resume takes the
	// run over with a new one, and the old driver's next step is refused.
	Driver string `json:"driver,omitempty"`
	// Lease is how long the driver's claim lasts without a renewal (a Go
	// duration; "" for none), Renewed when it was last renewed: a running
	// run whose lease ran out reads as interrupted.
	Lease        string    `json:"lease,omitempty"`
	Renewed      time.Time `json:"renewed,omitzero"`
	Cancel       bool      `json:"cancel,omitempty"` // a cancel was asked for
	Steps        int       `json:"steps"`            // steps recorded so far
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	Cost         float64   `json:"cost"`
}

// NewRunID returns a fresh run id.
func NewRunID() string { return "r" + randomHex(8) }

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// StepKind says what a step of a run is.
type StepKind string

// Step kinds.
const (
	StepModel StepKind = "model" // one model turn: a request and its answer
	StepTool  StepKind = "tool"  // one tool call the model asked for
)

// StepState is where a step is: recorded before it starts, and when it ends.
type StepState string

// Step states.
const (
	StepStarted StepState = "started"
	StepDone    StepState = "done"
)

// ToolCall is one call a model asked for.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Step is one model turn or tool call of a run, numbered from 1 in the
// order the run took them.
type Step struct {
	Run   string    `json:"run"`
	Seq   int       `json:"seq"`
	Kind  StepKind  `json:"kind"`
	State StepState `json:"state"`
	// A tool step: the tool, the model's call id and the arguments.
	Tool   string          `json:"tool,omitempty"`
	CallID string          `json:"call_id,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	// Text is a model step's answer, or a tool step's result.
	Text string `json:"text,omitempty"`
	// Calls are the tool calls a model step's answer asked for.
	Calls []ToolCall `json:"calls,omitempty"`
	// IsError marks a tool result that is an error, Code its kind.
	IsError bool   `json:"is_error,omitempty"`
	Code    string `json:"code,omitempty"`
	// An exec step: its journal id and exit code; any step that committed:
	// the revision.
	ExecID   string `json:"exec_id,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Rev      int64  `json:"rev,omitempty"`
	// A model step's usage and its cost in USD.
	InputTokens  int64     `json:"input_tokens,omitempty"`
	OutputTokens int64     `json:"output_tokens,omitempty"`
	Cost         float64   `json:"cost,omitempty"`
	Started      time.Time `json:"started"`
	Ended        time.Time `json:"ended,omitzero"`
}

// Memory is one fact a tenant keeps for every new run's context.
type Memory struct {
	ID      int64     `json:"id"`
	Text    string    `json:"text"`
	Created time.Time `json:"created"`
}

// Skill is a named procedure a tenant saved once and runs again.
type Skill struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Body        string    `json:"body"` // the procedure, in words for the model
	Updated     time.Time `json:"updated"`
}
