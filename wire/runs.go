package wire

import "computerd/core"

// CreateRun is the body of POST /v1/workspaces/{ws}/runs: a new agent run
// driven by the caller (Driver, a random id the caller keeps) on a lease
// it renews (Lease, a Go duration; none if empty). BaseURL is the model
// server's address, recorded so a resume reaches it again: never a key.
type CreateRun struct {
	Task     string         `json:"task"`
	Provider string         `json:"provider,omitempty"`
	Model    string         `json:"model,omitempty"`
	BaseURL  string         `json:"base_url,omitempty"`
	Skill    string         `json:"skill,omitempty"`
	Limits   core.RunLimits `json:"limits,omitzero"`
	Driver   string         `json:"driver"`
	Lease    string         `json:"lease,omitempty"`
}

// ClaimRun is the body of POST /v1/runs/{id}/claim: the caller drives the
// run from now on (a resume), on its lease, and the old driver's next
// step is refused. Provider, Model and BaseURL, when set, replace the
// recorded ones (the resume was told to use another model).
type ClaimRun struct {
	Driver   string `json:"driver"`
	Lease    string `json:"lease,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	BaseURL  string `json:"base_url,omitempty"`
}

// RenewRun is the body of POST /v1/runs/{id}/renew: the driver is alive,
// its lease starts again.
type RenewRun struct {
	Driver string `json:"driver"`
}

// StepRecord is the body of POST /v1/runs/{id}/steps (a step begins) and
// of PUT /v1/runs/{id}/steps/{seq} (it ends, with its result).
type StepRecord struct {
	Driver string    `json:"driver"`
	Step   core.Step `json:"step"`
}

// EndRun is the body of POST /v1/runs/{id}/end.
type EndRun struct {
	Driver string        `json:"driver"`
	State  core.RunState `json:"state"`
	Error  string        `json:"error,omitempty"`
}

// RunDetail answers GET /v1/runs/{id}: the run and its steps.
type RunDetail struct {
	Run   core.Run    `json:"run"`
	Steps []core.Step `json:"steps"`
}

// AddMemory is the body of POST /v1/memories.
type AddMemory struct {
	Text string `json:"text"`
}
