package command

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
)

func runOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Run(context.Background(), append([]string{"agentctl"}, args...), IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return out.String() + errb.String(), err
}

// Every command and subcommand answers --help without a server.
func TestHelpEveryCommand(t *testing.T) {
	var paths [][]string
	for _, c := range commands() {
		if len(c.Subcommands) == 0 {
			paths = append(paths, []string{c.Name})
		}
		for _, s := range c.Subcommands {
			paths = append(paths, []string{c.Name, s.Name})
		}
	}
	if len(paths) < 20 {
		t.Fatalf("only %d commands", len(paths))
	}
	for _, p := range paths {
		out, err := runOut(t, append(p, "--help")...)
		if err != nil || !strings.Contains(out, "USAGE") || !strings.Contains(out, "--json") {
			t.Errorf("agentctl %s --help: %v\n%s", strings.Join(p, " "), err, out)
		}
	}
}

func TestFlagsFirst(t *testing.T) {
	cmds := commands()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"agentctl", "edit", "w", "p", "--old", "a", "--new", "b", "--all"},
			[]string{"agentctl", "edit", "--old", "a", "--new", "b", "--all", "--", "w", "p"}},
		{[]string{"agentctl", "--server", "u", "ws", "fork", "a", "b", "--rev=3"},
			[]string{"agentctl", "--server", "u", "ws", "fork", "--rev=3", "--", "a", "b"}},
		{[]string{"agentctl", "grep", "-n", "w", "-x-", "--", "-v"},
			[]string{"agentctl", "grep", "-n", "-x-", "--", "w", "--", "-v"}},
		{[]string{"agentctl", "ws", "ls"}, []string{"agentctl", "ws", "ls"}},
	} {
		if got := flagsFirst(cmds, tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCompletionScript(t *testing.T) {
	out, err := runOut(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "complete -o default -F _agentctl agentctl") {
		t.Fatalf("completion bash: %v\n%s", err, out)
	}
	if _, err := runOut(t, "completion", "fish"); err == nil {
		t.Fatal("completion fish: no error")
	}
}

func TestUsageErrors(t *testing.T) {
	out, err := runOut(t, "read", "only-one-arg")
	if err == nil || !strings.Contains(err.Error(), "usage: agentctl read WS PATH") {
		t.Fatalf("read with one arg: %v %s", err, out)
	}
	if ExitStatus(err) != 1 || ExitStatus(nil) != 0 || ExitStatus(&ExitError{Code: 137}) != 137 {
		t.Fatal("ExitStatus")
	}
}

// With --json a failure is one JSON object on stdout, wherever --json
// stands; without it, a message on stderr.
func TestMainReportsErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		wantStdout string
		wantStderr string
	}{
		{"json after the command", []string{"read", "w", "--json"},
			`{"code":"invalid","error":"usage: agentctl read WS PATH"}` + "\n", ""},
		{"json before the command", []string{"--json", "read", "w"},
			`{"code":"invalid","error":"usage: agentctl read WS PATH"}` + "\n", ""},
		{"human", []string{"read", "w"}, "", "agentctl: usage: agentctl read WS PATH\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			status := Main(context.Background(), append([]string{"agentctl"}, tc.args...), IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
			if status != 1 {
				t.Errorf("status %d, want 1", status)
			}
			if got := out.String(); got != tc.wantStdout {
				t.Errorf("stdout %q, want %q", got, tc.wantStdout)
			}
			if got := errb.String(); got != tc.wantStderr {
				t.Errorf("stderr %q, want %q", got, tc.wantStderr)
			}
		})
	}
}
