package core

import (
	"time"
)

// ExecState is where an exec is in its life, as the journal records it.
type ExecState string

// Exec states.
const (
	ExecRunning     ExecState = "running"     // started, not ended
	ExecExited      ExecState = "exited"      // the command exited by itself (any status)
	ExecKilled      ExecState = "killed"      // ended by a signal (a kill request, OOM, ...)
	ExecTimeout     ExecState = "timeout"     // killed at its deadline
	ExecInterrupted ExecState = "interrupted" // computerd died while it ran
	ExecFailed      ExecState = "failed"      // could not start, or its result could not be committed
	ExecPending     ExecState = "pending"     // ended; its changes wait to reach the home (executor)
)

// Exec is the journal record of one command run in a sandbox.
type Exec struct {
	ID       string    `json:"id"`
	Tenant   string    `json:"tenant"`
	WS       int64     `json:"ws"`
	WSName   string    `json:"workspace"`
	Key      string    `json:"key,omitempty"` // idempotency key
	Argv     []string  `json:"argv"`
	Cwd      string    `json:"cwd,omitempty"`
	EnvNames []string  `json:"env_names,omitempty"` // names only: values may be secrets
	BaseRev  int64     `json:"base_rev"`
	State    ExecState `json:"state"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	// ExitCode is the command's status; with Signal set it is 128+signal.
	ExitCode    int    `json:"exit_code"`
	Signal      string `json:"signal,omitempty"`
	TimedOut    bool   `json:"timed_out,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	// OutputTruncated: the output log reached the runner's per-exec cap;
	// the byte counts above still count everything the command wrote.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// OutputKept is the size of its output log on disk, which counts
	// against the tenant's quota until the log expires (then 0).
	OutputKept int64    `json:"output_kept,omitempty"`
	Rev        int64    `json:"rev,omitempty"`      // the revision holding its changes (0: none)
	Conflict   []string `json:"conflict,omitempty"` // paths that changed meanwhile
	KeptAs     string   `json:"kept_as,omitempty"`  // workspace holding its version after a conflict
	Draft      int64    `json:"draft,omitempty"`    // the draft holding its writes while it runs
	Error      string   `json:"error,omitempty"`
	Executor   string   `json:"executor,omitempty"` // where it ran, when not here
	// On an executor: the home revision the command started from (of the
	// home's workspace HomeWS), and the state it ended in while its changes
	// wait to reach the home (State is then pending).
	HomeBase     int64     `json:"home_base,omitempty"`
	HomeWS       int64     `json:"home_ws,omitempty"`
	PendingState ExecState `json:"pending_state,omitempty"`
}

// Unfinished reports whether the exec ended short of its writes being
// in the workspace: interrupted (computerd stopped while it ran), failed
// (it could not start, or its writes could not be committed) or pending
// (they wait to reach the home). Clients report it as a failure even
// when the command's own status was 0.
func (e Exec) Unfinished() bool {
	return e.State == ExecInterrupted || e.State == ExecFailed || e.State == ExecPending
}

// Duration is how long the exec ran (until now if it still runs).
func (e Exec) Duration() time.Duration {
	if e.Ended.IsZero() {
		return time.Since(e.Started)
	}
	return e.Ended.Sub(e.Started)
}

// NewExecID returns a fresh exec id.
func NewExecID() string { return "x" + randomHex(8) }

// Limits bounds an exec's resources. A zero field means "use the
// default": the sandbox manager's limits, then its defaults.
type Limits struct {
	Memory int64   // bytes of memory (RAM; no swap)
	Pids   int64   // processes and threads
	CPUs   float64 // CPU time in cores (CFS quota)
	Tmp    int64   // bytes of the tmpfs at /tmp (charged to Memory too)
}

// Or fills l's zero fields from d.
func (l Limits) Or(d Limits) Limits {
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Tmp == 0 {
		l.Tmp = d.Tmp
	}
	return l
}
