package integration

import (
	"strings"
	"testing"

	agentcmd "computerd/agentctl/command"
	"computerd/computerd/api"
)

// A command the sandbox does not have exits 127, and agentctl names it,
// and nothing of the container.
func TestExecCommandNotFound(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	_, stderr, err := e.run(nil, "exec", "w", "--", "no-such-cmd", "x")
	if code := agentcmd.ExitStatus(err); code != 127 {
		t.Fatalf("exec of a missing command: %v, want status 127", err)
	}
	if !strings.Contains(stderr, "no-such-cmd: command not found in the sandbox") || strings.Contains(stderr, "warm-") || strings.Contains(stderr, "cannot start container") {
		t.Fatalf("stderr %q", stderr)
	}
}
