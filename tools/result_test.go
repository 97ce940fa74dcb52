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
