package tools_test

import (
	"strings"
	"testing"

	"computerd/core"
	"computerd/tools"
)

// A model reading an exec whose output computerd truncated is told so:
// the end it sees is not the command's.
func TestExecResultTruncated(t *testing.T) {
	for _, tt := range []struct {
		name      string
		truncated bool
	}{{"whole", false}, {"truncated", true}} {
		t.Run(tt.name, func(t *testing.T) {
			res := tools.ExecResult(core.Exec{ID: "x1", State: core.ExecExited, StdoutBytes: 100, OutputTruncated: tt.truncated}, "y\n")
			if got := strings.Contains(res.Text, "output truncated"); got != tt.truncated {
				t.Fatalf("%q: says truncated %v, want %v", res.Text, got, tt.truncated)
			}
		})
	}
}

// An exec that ended short of its writes landing is an error for the
// model, even when the command's status was 0; a plain exit 0 is not.
func TestExecResultUnfinished(t *testing.T) {
	for _, tt := range []struct {
		state   core.ExecState
		code    int
		isError bool
		says    string
	}{
		{core.ExecExited, 0, false, "exit 0"},
		{core.ExecExited, 2, true, "exit 2"},
		{core.ExecInterrupted, 0, true, "interrupted"},
		{core.ExecFailed, 0, true, "failed: commit"},
		{core.ExecPending, 0, true, "wait to reach the home"},
	} {
		t.Run(string(tt.state), func(t *testing.T) {
			rec := core.Exec{ID: "x1", State: tt.state, ExitCode: tt.code}
			if tt.state == core.ExecFailed {
				rec.Error = "commit: no space left on device"
			}
			res := tools.ExecResult(rec, "")
			if res.IsError != tt.isError || !strings.Contains(res.Text, tt.says) {
				t.Fatalf("%s exit %d: error %v %q, want error %v saying %q", tt.state, tt.code, res.IsError, res.Text, tt.isError, tt.says)
			}
		})
	}
}
